"""The raw-value contract through every scorer: generated raw rows (hypothesis; the Criteo rows for DLRM, the
Taobao rows for MultiTowerDIN) as a typed Arrow table, a pandas DataFrame and JSON records give identical
probabilities (<= 1e-6) through each export backend (jit, onnx, rtp) and the registered pyfunc class, and
those agree with the eager model within the export's parity tolerance. AOTI: tests/export/test_aoti.py
runs the same check on its (slow to compile) export."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from raw_contract_check import SETTINGS, probabilities_agree
from raw_rows import criteo_rows, taobao_rows

from recpipe.export.loaders import load_backend


@SETTINGS
@given(data=criteo_rows())
def test_criteo_rows_through_every_dlrm_backend(dlrm_export, data) -> None:
    trained, result = dlrm_export
    probabilities_agree(trained, result.out_dir, *data)


@SETTINGS
@given(data=taobao_rows())
def test_taobao_rows_through_every_din_backend(din_export, data) -> None:
    trained, result = din_export
    probabilities_agree(trained, result.out_dir, *data)


def test_the_trt_backend_is_not_among_them_here(dlrm_export) -> None:
    """TensorRT needs a CUDA GPU: skipped at export on this machine, so not checked above."""
    _, result = dlrm_export
    assert result.backends["trt"].status == "skipped"
    with pytest.raises(Exception, match="skipped"):
        load_backend(Path(result.out_dir) / "trt")
