"""AOTInductor: the whole model (TorchRec + fbgemm ops) compiled once per model, parity, and a fresh
process that loads the package after ``import fbgemm_gpu``."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from one_user import one_user
from raw_contract_check import SETTINGS, probabilities_agree
from raw_rows import criteo_rows, taobao_rows

from recpipe.export.api import export
from recpipe.export.loaders import load_backend

pytestmark = pytest.mark.slow

# One fresh process per model: it loads the package after ``import fbgemm_gpu`` and scores rows, then loads it
# twice more and measures what each load leaves mapped from deleted files (test_aoti_loads_in_a_fresh_process
# and test_aoti_weights_are_not_left_mapped_by_each_load read its results; one process, not two: each import of
# torch, fbgemm_gpu and recpipe is ~4 s of CPU).
FRESH = textwrap.dedent(
    """
    import gc, json, os, sys
    import numpy as np
    import pyarrow.parquet as pq
    from recpipe.export.loaders import load_backend   # imports fbgemm_gpu before loading the package

    def deleted_mapped_bytes():
        # a loaded library is never unloaded: aoti_load_package's extracted files stay mapped once deleted
        spans = {}
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split(maxsplit=5)
                if len(fields) == 6 and fields[5].rstrip().endswith("(deleted)"):
                    start, end = (int(x, 16) for x in fields[0].split("-"))
                    spans[fields[5]] = spans.get(fields[5], 0) + end - start
        return sum(spans.values())

    def extracted_folders_left():
        # the folders the package was extracted to that still exist, named by the files this process maps
        with open("/proc/self/maps") as maps:
            paths = [line.split()[5] for line in maps if len(line.split()) == 6 and "/aotinductor_" in line]
        return sorted({p[: p.index("/", p.index("/aotinductor_") + 1)] for p in paths if os.path.exists(p)})

    scorer = load_backend(sys.argv[1])
    left = extracted_folders_left()  # the model loaded and alive: a kill now would leave these on the disk
    np.save(sys.argv[3], scorer.predict_raw(pq.read_table(sys.argv[2])))
    del scorer
    gc.collect()
    held = [deleted_mapped_bytes()]
    for _ in range(2):  # two more loads, each dropped at once
        load_backend(sys.argv[1])
        gc.collect()
        held.append(deleted_mapped_bytes())
    print(json.dumps({"held": held, "left": left}))
    """
)


# WideAndDeep is DeepFM's dense module without the FM term (recpipe/models/wide_and_deep/): DeepFM's compile
# covers its code, and each model's AOTI compile is 25-45 s of the suite.
@pytest.fixture(scope="module", params=["din", "dlrm", "deepfm"])
def aoti_export(request, tmp_path_factory):
    trained = request.getfixturevalue(request.param)
    out = tmp_path_factory.mktemp(f"{request.param}_aoti")
    return trained, export(trained.model, trained.spec, trained.cfg, ["aoti"], out, trained.held_out)


def test_aoti_passes_parity(aoti_export):
    trained, result = aoti_export
    r = result.backends["aoti"]
    assert r.status == "ok"
    assert r.parity.passed and r.parity.rows >= 1000 and r.parity.batch_sizes == [1, 7, 512]
    assert r.parity.max_abs_logit_diff <= trained.cfg.export.max_abs_logit_diff
    assert round(r.parity.auc_backend, 4) == round(r.parity.auc_eager, 4)


def test_aoti_other_batch_sizes(aoti_export):
    trained, result = aoti_export
    scorer = load_backend(result.backends["aoti"].folder)
    for n in (2, 65):
        rows = trained.clean.slice(40, n)
        assert np.abs(scorer.predict_raw(rows) - trained.eager_logits(rows)).max() <= 1e-4


@pytest.fixture(scope="module")
def fresh_process(aoti_export, tmp_path_factory) -> dict:
    """:data:`FRESH` run on the model's package: its 50 rows, their scores and the deleted bytes it held."""
    import json

    import pyarrow.parquet as pq

    trained, result = aoti_export
    tmp = tmp_path_factory.mktemp(f"{trained.name}_fresh")
    rows = trained.clean.slice(0, 50).drop_columns([trained.spec.label])
    pq.write_table(rows, tmp / "rows.parquet")
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            FRESH,
            result.backends["aoti"].folder,
            str(tmp / "rows.parquet"),
            str(tmp / "out.npy"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"rows": rows, "scores": np.load(tmp / "out.npy"), **out}


def test_aoti_loads_in_a_fresh_process(aoti_export, fresh_process):
    trained, _ = aoti_export
    want = trained.eager_logits(fresh_process["rows"])
    assert np.abs(fresh_process["scores"] - want).max() <= 1e-4


def test_aoti_package_from_another_torch_is_refused(aoti_export, tmp_path):
    import json
    import os
    import shutil

    from recpipe.export.manifest import ArtifactError

    _, result = aoti_export
    folder = tmp_path / "aoti"
    shutil.copytree(result.backends["aoti"].folder, folder, copy_function=os.link)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["versions"]["torch"] = "2.9.0"
    (folder / "manifest.json").unlink()  # a hard link: do not write through to the session's export
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match="compiled with torch 2.9.0, this is torch"):
        load_backend(folder)


def test_aoti_package_with_a_planted_shared_object_is_refused(aoti_export, tmp_path, payload):
    import ctypes
    import os
    import shutil
    import zipfile

    from recpipe.export.manifest import ArtifactError

    _, result = aoti_export
    folder = tmp_path / "aoti"
    shutil.copytree(result.backends["aoti"].folder, folder, copy_function=os.link)
    so = payload.shared_object()
    payload.proven(so, lambda p: ctypes.CDLL(str(p)))  # dlopen runs its constructor
    (folder / "model.pt2").unlink()  # a hard link: do not write through to the session's export
    with zipfile.ZipFile(folder / "model.pt2", "w") as zf:  # the package layout, the .so replaced
        zf.writestr("model/data/aotinductor/model/model.so", so)
    with pytest.raises(ArtifactError, match=r"sha256 of 'model.pt2' is"):
        load_backend(folder)
    assert not payload.marker.exists()


@SETTINGS
@given(data=criteo_rows() | taobao_rows())
def test_aoti_scores_raw_rows_by_the_contract(aoti_export, data):
    """The raw-value contract's property test (tests/export/test_raw_contract_backends.py) on AOTI."""
    trained, result = aoti_export
    rows, types = data
    if set(types) - set(trained.spec.input_columns()):  # the other schema's rows
        return
    probabilities_agree(trained, result.out_dir, rows, types, backends=("aoti",), pyfunc=False)


def test_aoti_scores_a_batch_without_any_history_item(aoti_export):
    """A one-row request without clicks (a fifth of Taobao's rows) made the compiled DIN fail its guard on the
    jagged sizes (Expected Ne(…, 0)); the scorer scores it with an extra one-item row and drops it."""
    trained, result = aoti_export
    rows = trained.held_out.slice(0, 3)
    if "click_50_seq" in rows.column_names:
        rows = rows.set_column(
            rows.schema.get_field_index("click_50_seq"), "click_50_seq", pa.array(["", None, ""])
        )
    scorer = load_backend(Path(result.out_dir) / "aoti")
    want = trained.eager_logits(rows)
    np.testing.assert_allclose(scorer.predict_raw(rows), want, rtol=0, atol=1e-4)
    np.testing.assert_allclose(scorer.predict_raw(rows.slice(0, 1)), want[:1], rtol=0, atol=1e-4)


def test_aoti_scores_one_user_times_candidates_as_the_full_rows(aoti_export):
    """The context form (the user's columns once, FG'd once) through the compiled DIN: the full rows' scores."""
    trained, result = aoti_export
    if trained.name != "din":
        return  # the context form is FG's, the same for every model: the DIN has a user side worth sending once
    context, candidates, full = one_user(trained, 48)
    scorer = load_backend(result.backends["aoti"].folder)
    np.testing.assert_allclose(
        scorer.predict(candidates, context=context), scorer.predict(full), rtol=0, atol=1e-6
    )


def test_aoti_weights_are_not_left_mapped_by_each_load(aoti_export, fresh_process):
    """The weights are a blob beside the compiled library (recpipe/export/dense.py's PACKAGE_CONFIG): each load of
    the package leaves its library mapped from a deleted file until the process exits, and with the weights inside
    the library that was the model's whole size per load (7.1 GB of deleted files in one test process)."""
    import zipfile

    _, result = aoti_export
    folder = Path(result.backends["aoti"].folder)
    with zipfile.ZipFile(folder / "model.pt2") as zf:
        sizes = {info.filename: info.file_size for info in zf.infolist()}
    blobs = [n for n in sizes if n.endswith("_weights.blob")]
    assert blobs, f"no weights blob in the package: {sorted(sizes)}"
    libraries = sum(size for name, size in sizes.items() if name.endswith(".so"))
    held = fresh_process["held"]
    per_load = (held[-1] - held[0]) / (len(held) - 1)
    page_slack = 64 * 4096
    assert per_load <= libraries + page_slack, (held, libraries, sizes[blobs[0]])


def test_a_loaded_package_leaves_no_extracted_folder_on_the_disk(fresh_process):
    """aoti_load_package extracts the package to a temporary folder it deletes only when the loaded model is
    destroyed; a process killed (or exiting without collecting it) left ~43 MB behind per load
    (recpipe.export.aoti.load_package deletes it once loaded)."""
    assert fresh_process["left"] == []
