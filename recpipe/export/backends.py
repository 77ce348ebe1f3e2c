"""The export backends: the one list of them, with everything that differs per backend.

``recpipe.config`` validates ``export.backends`` against :data:`BACKENDS`, so this module imports
neither torch nor any other recpipe module: builders and scorers are named by ``"module:attribute"``
and imported only when a backend is built or loaded (loading an ``rtp`` folder never imports
torchrec or fbgemm).

Adding a backend: a module with its writer and its :class:`~recpipe.export.scorer.Scorer`, a builder
in :mod:`recpipe.export.builders`, and one entry here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Backend:
    """One export backend.

    Args:
        builder (str): ``"module:function"``, ``(ctx: ExportContext, folder) -> (files, inputs, extra)``
            writes the backend's files into ``folder``.
        scorer (str): ``"module:Class"``, ``Class(folder, manifest)`` loads a verified folder as a
            :class:`~recpipe.export.scorer.Scorer`.
        full_model (bool): the folder holds the whole model and scores FG tensors (``predict_batch``);
            otherwise it holds tables plus the dense program and scores raw rows (``predict_raw``).
        default (bool): exported when the config does not list backends.
        serving_rank (int | None): preference of the registered pyfunc (0 first); None: never served.
        unavailable (str | None): ``"module:function"`` returning why the backend cannot be built on
            this machine (it is then recorded as skipped), or None when it always can.

    Example::

        BACKENDS["rtp"].full_model                    # False: raw rows in, FG inside
        BACKENDS["trt"].unavailable_reason()          # 'requires a CUDA GPU with TensorRT ...' on a CPU
        BACKENDS["jit"].load(folder, manifest)        # a JitScorer
    """

    builder: str
    scorer: str
    full_model: bool
    default: bool = True
    serving_rank: int | None = None
    unavailable: str | None = None

    # ctx, manifest and the scorer are typed Any: naming their classes here would import torch (and
    # make recpipe.config, which reads BACKENDS, part of an import circle through the export modules).
    def build(self, ctx: Any, folder: Path) -> tuple[list[str], dict, dict]:
        """Write the backend's files into ``folder`` from an
        :class:`~recpipe.export.builders.ExportContext`; returns ``(files, input signature, manifest extra)``."""
        return _resolve(self.builder)(ctx, folder)

    def load(self, folder: str | Path, manifest: Any) -> Any:
        """The :class:`~recpipe.export.scorer.Scorer` of an exported folder whose
        :class:`~recpipe.export.manifest.Manifest` was read (and verified) already."""
        return _resolve(self.scorer)(folder, manifest)

    def unavailable_reason(self) -> str | None:
        """Why this backend cannot be built here, or None."""
        return _resolve(self.unavailable)() if self.unavailable else None


def _resolve(path: str) -> Callable[..., Any]:
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


# Serving ranks: every served backend scores raw rows with FG inside; RTP and ONNX need neither
# torchrec nor fbgemm at serving time, so they come first. TensorRT needs a GPU at serving time.
BACKENDS: dict[str, Backend] = {
    "jit": Backend(
        builder="recpipe.export.builders:build_jit",
        scorer="recpipe.export.jit:JitScorer",
        full_model=True,
        serving_rank=2,
    ),
    "aoti": Backend(
        builder="recpipe.export.builders:build_aoti",
        scorer="recpipe.export.aoti:AotiScorer",
        full_model=True,
        serving_rank=3,
    ),
    "onnx": Backend(
        builder="recpipe.export.builders:build_onnx",
        scorer="recpipe.export.onnx:OnnxScorer",
        full_model=False,
        serving_rank=1,
    ),
    "rtp": Backend(
        builder="recpipe.export.builders:build_rtp",
        scorer="recpipe.export.rtp:RtpModel",
        full_model=False,
        serving_rank=0,
    ),
    "trt": Backend(
        builder="recpipe.export.builders:build_trt",
        scorer="recpipe.export.trt:TrtScorer",
        full_model=False,
        default=False,
        unavailable="recpipe.export.trt:trt_unavailable_reason",
    ),
}

DEFAULT_BACKENDS: tuple[str, ...] = tuple(name for name, b in BACKENDS.items() if b.default)
SERVING_PREFERENCE: tuple[str, ...] = tuple(
    sorted(
        (name for name, b in BACKENDS.items() if b.serving_rank is not None),
        key=lambda name: BACKENDS[name].serving_rank,  # type: ignore[arg-type, return-value]
    )
)


def check_names(names: Sequence[str]) -> None:
    """Raise ``ValueError`` naming every entry of ``names`` that is not a backend."""
    unknown = [b for b in names if b not in BACKENDS]
    if unknown:
        raise ValueError(f"unknown backend(s) {unknown}; choose from {list(BACKENDS)}")


def parse_backends(backends: str | Sequence[str]) -> list[str]:
    """``"jit, ONNX"`` or ``["jit", "onnx"]`` → ``["jit", "onnx"]`` (stripped, lower-cased, first
    occurrence kept): the one parser of a backend list, for the config, the CLI and the pipeline.

    Raises:
        ValueError: an unknown backend, or none at all.

    Example::

        parse_backends("rtp,jit,rtp")    # ['rtp', 'jit']
        parse_backends("jit,tflite")     # ValueError: unknown backend(s) ['tflite']; choose from [...]
    """
    items = backends.split(",") if isinstance(backends, str) else backends
    names = [str(b).strip().lower() for b in items if str(b).strip()]
    if not names:
        raise ValueError(f"no backend given; choose from {list(BACKENDS)}")
    check_names(names)
    return list(dict.fromkeys(names))
