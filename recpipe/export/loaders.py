"""``load_backend(folder)``: verify an exported folder (sha256 of every file, format version), then load it.

The backend's scorer is imported only when asked for, so loading an ``rtp`` folder never imports
torchrec or fbgemm.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from recpipe.export.backends import BACKENDS, SERVING_PREFERENCE
from recpipe.export.layout import backend_folder
from recpipe.export.manifest import ArtifactError, read_manifest

if TYPE_CHECKING:  # the scorers import torch: served_folder's callers (the register step) do without it
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
    # The current version's real folder, named once: a later export switching the pointer cannot mix
    # files of two versions into this load.
    folder = backend_folder(folder)
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


def served_folder(path: str | Path) -> Path:
    """The backend folder that serves an export: ``path`` itself when it is one backend's folder (it holds
    a ``manifest.json``), else the first of :data:`~recpipe.export.backends.SERVING_PREFERENCE` exported
    with status ok under the export folder ``path`` (what the registered model serves).

    Raises:
        FileNotFoundError: no servable backend folder there.
    """
    from recpipe.export.layout import backend_folder

    root = Path(path)
    if (backend_folder(root) / "manifest.json").is_file():  # one backend's folder (``out/rtp`` included)
        return backend_folder(root)
    found = []
    for name in SERVING_PREFERENCE:
        folder = backend_folder(root / name)  # through the export's pointer to its current version
        if (folder / "manifest.json").is_file():
            if read_manifest(folder, verify=False).status == "ok":
                return folder
            found.append(name)
    raise FileNotFoundError(
        f"{root} holds no servable export (looked for {list(SERVING_PREFERENCE)}, not ok: {found}); "
        f"export at least one of {', '.join(SERVING_PREFERENCE)}"
    )
