"""Export: JIT, AOTInductor, ONNX, RTP (safetensors + fg.json + dense program) and TensorRT, each
checked for parity with the eager model, plus loaders that verify every file's sha256 first.

Public API::

    export(model, spec, cfg, backends, out_dir, parity_data) -> ExportResult
    export_checkpoint(ckpt_dir, backends, out_dir, data_uri) -> ExportResult
    load_backend(folder) -> Scorer            # .predict_batch(dense, values, lengths) / .predict_raw(rows)
    RtpModel(folder)                           # the torchrec-free reference server

Every name is imported on first use: ``recpipe.config`` reads :mod:`recpipe.export.backends` without
importing torch, and ``import recpipe.export.rtp`` in a serving process stays free of torchrec and fbgemm.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from recpipe.export.api import BackendResult, ExportResult, export
    from recpipe.export.backends import BACKENDS
    from recpipe.export.checkpoint import export_checkpoint
    from recpipe.export.loaders import load_backend
    from recpipe.export.manifest import ArtifactError, ExportError, Manifest, ParityReport, read_manifest
    from recpipe.export.rtp import RtpModel
    from recpipe.export.scorer import Scorer
    from recpipe.export.split import SpecMismatchError

_LAZY = {
    "BACKENDS": "recpipe.export.backends",
    "load_backend": "recpipe.export.loaders",
    "ArtifactError": "recpipe.export.manifest",
    "ExportError": "recpipe.export.manifest",
    "Manifest": "recpipe.export.manifest",
    "ParityReport": "recpipe.export.manifest",
    "read_manifest": "recpipe.export.manifest",
    "Scorer": "recpipe.export.scorer",
    "export": "recpipe.export.api",
    "ExportResult": "recpipe.export.api",
    "BackendResult": "recpipe.export.api",
    "export_checkpoint": "recpipe.export.checkpoint",
    "SpecMismatchError": "recpipe.export.split",
    "RtpModel": "recpipe.export.rtp",
}

__all__ = [
    "BACKENDS",
    "ArtifactError",
    "BackendResult",
    "ExportError",
    "ExportResult",
    "Manifest",
    "ParityReport",
    "RtpModel",
    "Scorer",
    "SpecMismatchError",
    "export",
    "export_checkpoint",
    "load_backend",
    "read_manifest",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'recpipe.export' has no attribute {name!r}")
