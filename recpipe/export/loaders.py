"""``load_backend(folder)``: verify an exported folder (sha256 of every file, format version), then load it.

Backends are imported only when asked for, so loading an ``rtp`` folder never imports torchrec or
fbgemm.
"""

from __future__ import annotations

from pathlib import Path

from recpipe.export.manifest import ArtifactError, read_manifest
from recpipe.export.scorer import Scorer

BACKENDS = ("jit", "aoti", "onnx", "rtp", "trt")


def load_backend(folder: str | Path) -> Scorer:
    """The :class:`~recpipe.export.scorer.Scorer` of an exported backend folder.

    Raises:
        ArtifactError: no manifest, a newer major format version, a file whose sha256 differs from the
            manifest (named), or a backend that was skipped at export.

    Example::

        scorer = load_backend("runs/x/export/aoti")
        scorer.predict_batch(dense, values, lengths)      # (B,) logits
        load_backend("runs/x/export/rtp").predict_raw(df)  # raw rows in
    """
    manifest = read_manifest(folder, verify=True)
    if manifest.status != "ok":
        raise ArtifactError(
            f"{folder}: backend {manifest.backend!r} was {manifest.status} at export: {manifest.reason}"
        )
    backend = manifest.backend
    if backend == "rtp":
        from recpipe.export.rtp import RtpModel

        return RtpModel(folder, manifest)
    if backend == "onnx":
        from recpipe.export.onnx import OnnxScorer

        return OnnxScorer(folder, manifest)
    if backend == "jit":
        from recpipe.export.jit import JitScorer

        return JitScorer(folder, manifest)
    if backend == "aoti":
        from recpipe.export.aoti import AotiScorer

        return AotiScorer(folder, manifest)
    if backend == "trt":
        from recpipe.export.trt import TrtScorer

        return TrtScorer(folder, manifest)
    raise ArtifactError(f"{folder}: unknown backend {backend!r} in its manifest; known: {list(BACKENDS)}")
