"""``load_backend(folder)``: verify an exported folder (sha256 of every file, format version), then load it.

The backend's scorer is imported only when asked for, so loading an ``rtp`` folder never imports
torchrec or fbgemm.
"""

from __future__ import annotations

from pathlib import Path

from recpipe.export.backends import BACKENDS
from recpipe.export.manifest import ArtifactError, read_manifest
from recpipe.export.scorer import Scorer


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
    backend = BACKENDS.get(manifest.backend)
    if backend is None:
        raise ArtifactError(
            f"{folder}: unknown backend {manifest.backend!r} in its manifest; known: {list(BACKENDS)}"
        )
    return backend.load(folder, manifest)
