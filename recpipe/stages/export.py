"""export: a checkpoint to the requested serving backends (jit, aoti, onnx, rtp, trt), each parity-checked
against the eager model on held-out rows; the outcome per backend is recorded on the pipeline's run."""

from __future__ import annotations

from recpipe.config import ParameterError
from recpipe.export.outcome import ExportOutcome
from recpipe.runlog import NULL_LOG, RunLog, failing


def run(
    checkpoint: str,
    backends: str | list[str],
    out_dir: str,
    data_uri: str | None = None,
    log: RunLog = NULL_LOG,
) -> ExportOutcome:
    """Export ``checkpoint`` to ``backends`` under ``out_dir/<backend>`` (a ``manifest.json`` in each, the
    outcome in ``out_dir/export.json``).

    Args:
        checkpoint (str): a training output folder or one ``ckpt-<step>`` in it.
        backends (str | list[str]): ``"jit,aoti,onnx,rtp,trt"``; ``trt`` is skipped without CUDA/TensorRT
            (before the checkpoint is loaded when nothing else is asked).
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
    from recpipe.export.backends import parse_backends

    try:
        names = parse_backends(backends)
    except ValueError as err:
        raise ParameterError("backends", str(err)) from None
    if not data_uri:
        raise ParameterError("data", "export needs held-out rows (--data) for the parity check")
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
