"""The export backends: :data:`recpipe.config.catalogue.EXPORT_BACKENDS` (the one list of them, with
everything that differs per backend) made callable.

Builders and scorers are named by ``"module:attribute"`` strings in the catalogue and imported only when a
backend is built or loaded (loading an ``rtp`` folder never imports torchrec or fbgemm); this module
imports no torch.

Adding a backend: a module with its writer and its :class:`~recpipe.export.scorer.Scorer`, a builder in
:mod:`recpipe.export.builders`, and one entry in the catalogue.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recpipe.config.catalogue import (
    DEFAULT_BACKENDS,
    EXPORT_BACKENDS,
    SERVING_PREFERENCE,
    BackendEntry,
    parse_backends,
)
from recpipe.config.catalogue import check_backend_names as check_names
from recpipe.config.root import resolve

__all__ = ["BACKENDS", "DEFAULT_BACKENDS", "SERVING_PREFERENCE", "Backend", "check_names", "parse_backends"]


@dataclass(frozen=True)
class Backend:
    """One export backend: its catalogue entry, resolved on use.

    Example::

        BACKENDS["rtp"].full_model                    # False: raw rows in, FG inside
        BACKENDS["trt"].unavailable_reason()          # 'requires a CUDA GPU with TensorRT ...' on a CPU
        BACKENDS["jit"].load(folder, manifest)        # a JitScorer
    """

    name: str
    entry: BackendEntry

    @property
    def full_model(self) -> bool:
        return self.entry.full_model

    @property
    def default(self) -> bool:
        return self.entry.default

    # ctx, manifest and the scorer are typed Any: naming their classes here would import torch.
    def build(self, ctx: Any, folder: Path) -> tuple[list[str], dict, dict]:
        """Write the backend's files into ``folder`` from an
        :class:`~recpipe.export.builders.ExportContext`; returns ``(files, input signature, manifest extra)``."""
        return resolve(self.entry.builder)(ctx, folder)

    def load(self, folder: str | Path, manifest: Any) -> Any:
        """The :class:`~recpipe.export.scorer.Scorer` of an exported folder whose
        :class:`~recpipe.export.manifest.Manifest` was read (and verified) already."""
        return resolve(self.entry.scorer)(folder, manifest)

    def unavailable_reason(self) -> str | None:
        """Why this backend cannot be built here, or None."""
        return resolve(self.entry.unavailable)() if self.entry.unavailable else None


BACKENDS: dict[str, Backend] = {name: Backend(name, entry) for name, entry in EXPORT_BACKENDS.items()}
