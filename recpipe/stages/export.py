"""export: a checkpoint to the requested serving backends (jit, aoti, onnx, rtp, trt), each parity-checked
against the eager model on held-out rows; the outcome per backend is recorded on the pipeline's run.

A retrieval checkpoint (``model.type`` in ``RETRIEVAL_MODELS``) exports its user tower (AOTInductor, the only
backend built for two towers yet), the catalogue's embeddings and its FAISS index
(:func:`recpipe.export.retrieval.export_retrieval_checkpoint`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from recpipe.config import ParameterError
from recpipe.config.catalogue import RETRIEVAL_BACKENDS
from recpipe.export.outcome import ExportOutcome
from recpipe.runlog import NULL_LOG, RunLog, failing

if TYPE_CHECKING:
    from recpipe.export.retrieval import RetrievalExportOutcome


def run(
    checkpoint: str,
    backends: str | list[str] | None,
    out_dir: str,
    data_uri: str | None = None,
    log: RunLog = NULL_LOG,
) -> ExportOutcome | RetrievalExportOutcome:
    """Export ``checkpoint`` to ``backends`` under ``out_dir/<backend>`` (a ``manifest.json`` in each, the
    outcome in ``out_dir/export.json``).

    Args:
        checkpoint (str): a training output folder or one ``ckpt-<step>`` in it.
        backends (str | list[str] | None): ``"jit,aoti,onnx,rtp,trt"``; ``trt`` is skipped without CUDA/TensorRT
            (before the checkpoint is loaded when nothing else is asked). None or empty: the default backends
            (a retrieval model: :data:`~recpipe.config.catalogue.RETRIEVAL_BACKENDS`, and it refuses any other).
        out_dir (str): export folder.
        data_uri (str | None): held-out rows with labels for the parity check (required).
        log (RunLog): records each backend's parity as a tag and its max |Δlogit| as a metric.

    Returns:
        ExportOutcome: every backend's status, folder, reason and parity (``describe()`` is what the
        command line and the pipeline print, ``metadata()`` the KFP artifact's).

    Raises:
        ParameterError: an unknown backend or no parity data.
        recpipe.export.ExportError: a backend failed to build or failed parity (nothing is left in ``out_dir``).
    """
    from recpipe.export.backends import DEFAULT_BACKENDS, parse_backends

    if not data_uri:
        raise ParameterError("data", "export needs held-out rows (--data) for the parity check")
    if _is_retrieval(checkpoint):
        return _run_retrieval(checkpoint, backends, out_dir, data_uri, log)
    try:
        names = parse_backends(backends or list(DEFAULT_BACKENDS))
    except ValueError as err:
        raise ParameterError("backends", str(err)) from None
    with failing(log, "export"):
        from recpipe.export.checkpoint import export_checkpoint

        out = export_checkpoint(checkpoint, names, out_dir, data_uri)
        log.set_tags({f"export.{n}.parity": b.parity_text() for n, b in out.backends.items()})
        log.log_metrics(
            {
                f"export.{n}.max_abs_logit_diff": b.max_abs_logit_diff
                for n, b in out.backends.items()
                if b.max_abs_logit_diff is not None
            }
        )
    return out


def _is_retrieval(checkpoint: str) -> bool:
    """Whether ``checkpoint``'s config is a retrieval model's (a folder that is no checkpoint: no, and the
    ranking export names the problem)."""
    from recpipe.config.catalogue import RETRIEVAL_MODELS
    from recpipe.train.checkpoint import CheckpointError, read_config, resolve_checkpoint

    try:
        return read_config(resolve_checkpoint(checkpoint)).model.type in RETRIEVAL_MODELS
    except CheckpointError:
        return False


def _run_retrieval(
    checkpoint: str, backends: str | list[str] | None, out_dir: str, data_uri: str, log: RunLog
) -> RetrievalExportOutcome:
    from recpipe.export.backends import parse_backends

    names = parse_backends(backends) if backends else list(RETRIEVAL_BACKENDS)
    other = [n for n in names if n not in RETRIEVAL_BACKENDS]
    if other:
        raise ParameterError(
            "backends",
            f"{other}: a retrieval model's user tower is exported to {list(RETRIEVAL_BACKENDS)} only (with its item "
            "embeddings and FAISS index); the other backends are not built for two-tower models yet",
        )
    with failing(log, "export"):
        from recpipe.export.retrieval import export_retrieval_checkpoint

        out = export_retrieval_checkpoint(checkpoint, out_dir, data_uri)
        ann = out.index.get("ann") or {}
        log.set_tags(
            {
                "export.user_tower.parity": "passed",
                "export.faiss_index.ann": ann.get("kind") or "none",
            }
        )
        metrics = {
            "export.user_tower.max_abs_diff": out.user_tower_parity["max_abs_diff"],
            "export.items": out.items,
        }
        if ann.get("kind"):
            metrics["export.faiss_index.ann_recall_vs_exact"] = ann["recall_vs_exact"]
        log.log_metrics(metrics)
    return out
