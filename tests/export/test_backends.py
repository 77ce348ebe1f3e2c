"""The backend registry: one list, torch-free to import, every entry resolvable."""

from __future__ import annotations

import subprocess
import sys

import pytest

from recpipe.config import ExportConfig
from recpipe.config.root import resolve
from recpipe.export.backends import BACKENDS, DEFAULT_BACKENDS, SERVING_PREFERENCE, parse_backends


def test_names_defaults_and_serving_order() -> None:
    assert list(BACKENDS) == ["jit", "aoti", "onnx", "rtp", "trt"]
    assert DEFAULT_BACKENDS == ("jit", "aoti", "onnx", "rtp") and ExportConfig().backends == list(
        DEFAULT_BACKENDS
    )
    assert SERVING_PREFERENCE == ("rtp", "onnx", "jit", "aoti")
    assert [n for n, b in BACKENDS.items() if b.full_model] == ["jit", "aoti"]


def test_every_builder_scorer_and_check_resolves() -> None:
    for name, b in BACKENDS.items():
        assert callable(resolve(b.entry.builder)), name
        assert callable(resolve(b.entry.scorer)), name
        assert b.entry.unavailable is None or callable(resolve(b.entry.unavailable)), name


def test_parse_backends() -> None:
    assert parse_backends(" rtp, JIT ,rtp,") == ["rtp", "jit"]
    assert parse_backends(["onnx", "trt"]) == ["onnx", "trt"]
    with pytest.raises(ValueError, match=r"unknown backend\(s\) \['tflite'\]; choose from \['jit'"):
        parse_backends("jit,tflite")
    with pytest.raises(ValueError, match="no backend given"):
        parse_backends(" , ")


def test_config_rejects_an_unknown_backend() -> None:
    with pytest.raises(ValueError, match=r"unknown backend\(s\) \['pmml'\]"):
        ExportConfig(backends=["jit", "pmml"])


def test_registry_and_config_import_without_torch() -> None:
    code = "import sys, recpipe.config, recpipe.export.backends; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
