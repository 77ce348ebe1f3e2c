"""ExportOutcome: what export.json records, read back the same (also as the code before it wrote it)."""

from __future__ import annotations

import json

from recpipe.export.backends import BACKENDS
from recpipe.export.layout import POINTER
from recpipe.export.manifest import ParityReport
from recpipe.export.outcome import BackendOutcome, ExportOutcome, read_outcome, skipped_here

PARITY = ParityReport(1028, [1, 7, 512], [0, 1, 100], 3.1e-07, 1e-4, 0.71, 0.71, True, 0.2)

# export.json as the export code before ExportOutcome wrote it (asdict of its ExportResult + the pointer).
OLD = {
    "out_dir": "runs/x/export",
    "backends": {
        "jit": {"backend": "jit", "status": "ok", "folder": "runs/x/export/versions/v1/jit", "reason": None,
                "parity": {**PARITY.__dict__}, "seconds": 1.5},
        "trt": {"backend": "trt", "status": "skipped", "folder": "runs/x/export/versions/v1/trt",
                "reason": "requires a CUDA GPU", "parity": None, "seconds": 0.0},
    },
    "version": "v1",
    "previous": None,
}  # fmt: skip


def test_an_export_json_written_before_reads_back_and_writes_the_same_keys(tmp_path):
    (tmp_path / POINTER).write_text(json.dumps(OLD))
    outcome = read_outcome(tmp_path)
    assert outcome.version == "v1" and outcome.backends["jit"].parity == PARITY
    assert outcome.backends["trt"] == BackendOutcome(
        "trt", "skipped", OLD["backends"]["trt"]["folder"], "requires a CUDA GPU"
    )
    assert outcome.to_dict() == {k: v for k, v in OLD.items() if v is not None}
    assert read_outcome(tmp_path / "nothing") is None


def test_what_the_stage_and_the_pipeline_print():
    outcome = ExportOutcome(
        "out",
        {"jit": BackendOutcome("jit", "ok", "out/jit", parity=PARITY, seconds=1.5),
         "trt": BackendOutcome("trt", "skipped", reason="no CUDA")},
    )  # fmt: skip
    assert outcome.ok
    assert outcome.describe() == "jit=parity ok: max|dlogit| 3.1e-07 on 1028 rows, trt=skipped (no CUDA)"
    assert outcome.metadata() == {"jit": "ok", "jit_max_abs_logit_diff": 3.1e-07, "trt": "skipped"}
    assert outcome.summary().splitlines() == [
        "jit: ok max|dlogit|=3.1e-07 auc=0.7100 (eager 0.7100) rows=1028 1.5s",
        "trt: skipped (no CUDA)",
    ]
    assert not ExportOutcome("out", {"onnx": BackendOutcome("onnx", "failed", reason="x")}).ok


def test_skipped_here_asks_each_backend_once():
    skipped = skipped_here(list(BACKENDS))
    assert set(skipped) == {n for n, b in BACKENDS.items() if b.unavailable_reason()}
    assert all(b.status == "skipped" and b.reason and b.folder is None for b in skipped.values())
