"""The export stage skips backends this machine cannot build before it loads anything (issue 17: trt was
skipped only after the checkpoint had been loaded, 37 s in)."""

from __future__ import annotations

import time

import pytest

from recpipe.export.backends import BACKENDS
from recpipe.export.outcome import BackendOutcome
from recpipe.stages import export


@pytest.mark.skipif(BACKENDS["trt"].unavailable_reason() is None, reason="TensorRT can run here")
def test_an_unusable_backend_is_skipped_without_loading_the_checkpoint(tmp_path):
    t0 = time.perf_counter()
    r = export.run(str(tmp_path / "no-such-checkpoint"), "trt", str(tmp_path / "out"), data_uri="unused")
    assert time.perf_counter() - t0 < 5
    assert r.ok and r.backends == {
        "trt": BackendOutcome("trt", "skipped", folder=None, reason=BACKENDS["trt"].unavailable_reason())
    }
    assert r.backends["trt"].seconds == 0.0 and not (tmp_path / "out").exists()
    assert r.describe().startswith("trt=skipped")
