"""RtpModel: raw Taobao rows → FG → table lookup → dense program, in a fresh process that never
imports torchrec or fbgemm, with parity to the eager model."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pyarrow.parquet as pq

from recpipe.export.parity import build_parity_set

SERVER = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import pyarrow.parquet as pq
    from recpipe.export.rtp import RtpModel

    rtp = RtpModel(sys.argv[1])
    logits = rtp.predict_raw(pq.read_table(sys.argv[2]))
    np.save(sys.argv[3], logits)
    print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in ("torchrec", "fbgemm_gpu"))))
    assert "torchrec" not in sys.modules and "fbgemm_gpu" not in sys.modules
    """
)


def test_rtp_model_scores_raw_rows_without_torchrec(din_export, tmp_path):
    trained, result = din_export
    # Held-out rows plus histories of 0, 1 and 100 items and a row with every feature missing.
    rows = build_parity_set(trained.held_out, trained.spec).table.slice(0, 600)
    rows = rows.drop_columns([trained.spec.label])
    pq.write_table(rows, tmp_path / "rows.parquet")
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            SERVER,
            result.backends["rtp"].folder,
            str(tmp_path / "rows.parquet"),
            str(tmp_path / "logits.npy"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []
    served = np.load(tmp_path / "logits.npy")
    eager = trained.eager_logits(rows)
    assert served.shape == (600,) and served.dtype == np.float32
    assert np.abs(served - eager).max() <= trained.cfg.export.max_abs_logit_diff


def test_rtp_lookup_keeps_histories_jagged(din_export):
    trained, result = din_export
    from recpipe.export.rtp import RtpModel
    from recpipe.features.fg import FeatureGenerator

    rtp = RtpModel(result.backends["rtp"].folder)
    rows = build_parity_set(trained.held_out, trained.spec).table.slice(0, 3)  # histories of 0, 1, 100 items
    out = FeatureGenerator(trained.spec, with_labels=False)(rows)
    inputs = rtp.lookup(*_kjt(out), batch_size=3)
    assert inputs["seq__offsets"].tolist() == [0, 0, 1, 101]
    assert inputs["seq__values"].shape == (101, 48)  # never padded to 3 x 100
    assert inputs["seq__query"].shape == (3, 48) and inputs["user_id"].shape == (3, 16)


def _kjt(out):
    import torch

    values = np.concatenate(out.values)
    lengths = np.concatenate(out.lengths)
    return torch.from_numpy(values), torch.from_numpy(lengths)
