"""Export a training checkpoint: load it with the trainer's loader, then :func:`recpipe.export.api.export`."""

from __future__ import annotations

import os
from pathlib import Path

from recpipe.config.placeholders import resolve
from recpipe.export.api import export
from recpipe.export.backends import parse_backends
from recpipe.export.outcome import ExportOutcome, skipped_here
from recpipe.export.tables import DEFAULT_MAX_SHARD_BYTES


def export_checkpoint(
    ckpt_dir: str | Path,
    backends: list[str] | str,
    out_dir: str | Path,
    data_uri: str | None = None,
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
) -> ExportOutcome:
    """Export the model of ``ckpt_dir`` (any number of ranks wrote it) with parity on ``data_uri``.

    Args:
        ckpt_dir (str | Path): a ``ckpt-<step>`` folder or a training output folder (its latest).
        backends (list[str] | str): e.g. ``["jit", "aoti", "onnx", "rtp", "trt"]`` or ``"jit,rtp"``.
        out_dir (str | Path): where ``<backend>/`` folders go.
        data_uri (str | None): held-out rows (Parquet/CSV/ODPS URI) with labels, for parity; default: the
            checkpoint config's ``data.eval`` (its ``{NAME}`` placeholders resolved: :mod:`recpipe.config.placeholders`).

    When no backend of ``backends`` can be built here (:func:`~recpipe.export.outcome.skipped_here`), the
    outcome says so and nothing is loaded or written.

    Example::

        export_checkpoint("runs/x/train", "jit,aoti,onnx,rtp,trt", "runs/x/export", "runs/x/data/eval")
    """
    from recpipe.train.checkpoint import load_model_for_inference

    names = parse_backends(backends)  # before the (slow) checkpoint load
    skipped = skipped_here(names)
    if len(skipped) == len(names):
        return ExportOutcome(out_dir=str(out_dir), backends=skipped)
    model, spec, cfg = load_model_for_inference(ckpt_dir)
    if not data_uri and cfg.data.eval:  # the entry point: the environment is read here
        data_uri = resolve(cfg.data.eval, cfg.data.params, os.environ)
    if not data_uri:
        raise ValueError(
            "export needs held-out rows for parity: pass a data URI (the config has no data.eval)"
        )
    return export(model, spec, cfg, names, out_dir, data_uri, max_shard_bytes=max_shard_bytes)
