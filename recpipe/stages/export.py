"""export: a checkpoint to the requested serving backends (jit, aoti, onnx, rtp, trt), each parity-checked
against the eager model on held-out rows; the outcome per backend is recorded on the pipeline's run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from recpipe.config import ParameterError
from recpipe.runlog import NULL_LOG, RunLog, failing


@dataclass
class ExportStageResult:
    out_dir: str
    backends: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(b["status"] in ("ok", "skipped") for b in self.backends.values())

    def summary(self) -> dict[str, Any]:
        """Flat ``{backend: status}`` and ``{backend}_max_abs_logit_diff`` (KFP artifact metadata)."""
        out: dict[str, Any] = {}
        for name, b in self.backends.items():
            out[name] = b["status"]
            if b.get("max_abs_logit_diff") is not None:
                out[f"{name}_max_abs_logit_diff"] = b["max_abs_logit_diff"]
        return out

    def describe(self) -> str:
        """``jit=parity ok: max|dlogit| 3.1e-07 on 1024 rows, trt=skipped (no CUDA)``."""
        return ", ".join(f"{name}={parity_text(b)}" for name, b in self.backends.items())


def parity_text(b: dict[str, Any]) -> str:
    if b["status"] != "ok":
        return f"{b['status']} ({b.get('reason')})"
    rows = f" on {b['parity_rows']} rows" if b.get("parity_rows") else ""
    return f"parity ok: max|dlogit| {b['max_abs_logit_diff']:.2g}{rows}"


def run(
    checkpoint: str,
    backends: str | list[str],
    out_dir: str,
    data_uri: str | None = None,
    log: RunLog = NULL_LOG,
) -> ExportStageResult:
    """Export ``checkpoint`` to ``backends`` under ``out_dir/<backend>`` (a ``manifest.json`` in each).

    Args:
        checkpoint (str): a training output folder or one ``ckpt-<step>`` in it.
        backends (str | list[str]): ``"jit,aoti,onnx,rtp,trt"``; ``trt`` is skipped without CUDA/TensorRT.
        out_dir (str): export folder.
        data_uri (str | None): held-out rows with labels for the parity check (required).
        log (RunLog): records each backend's parity as a tag and its max |Δlogit| as a metric.

    Raises:
        ParameterError: an unknown backend or no parity data.
        recpipe.export.ExportError: a backend failed to build or failed parity (nothing is left in ``out_dir``).
    """
    from recpipe.export.backends import BACKENDS, parse_backends

    try:
        names = parse_backends(backends)
    except ValueError as err:
        raise ParameterError("backends", str(err)) from None
    if not data_uri:
        raise ParameterError("data", "export needs held-out rows (--data) for the parity check")
    # Backends this machine cannot build (trt without CUDA) are skipped before the checkpoint is loaded.
    unusable = {n: reason for n in names if (reason := BACKENDS[n].unavailable_reason())}
    with failing(log, "export"):
        from recpipe.export.checkpoint import export_checkpoint

        out = ExportStageResult(out_dir=str(out_dir))
        for name, reason in unusable.items():
            out.backends[name] = {"status": "skipped", "folder": None, "reason": reason, "seconds": 0.0}
        usable = [n for n in names if n not in unusable]
        result = export_checkpoint(checkpoint, usable, out_dir, data_uri) if usable else None
        for name, b in result.backends.items() if result else ():
            entry: dict[str, Any] = {
                "status": b.status,
                "folder": b.folder,
                "reason": b.reason,
                "seconds": b.seconds,
            }
            if b.parity is not None:
                entry.update(
                    max_abs_logit_diff=float(b.parity.max_abs_logit_diff),
                    auc_backend=float(b.parity.auc_backend),
                    auc_eager=float(b.parity.auc_eager),
                    parity_rows=int(b.parity.rows),
                    passed=bool(b.parity.passed),
                )
            out.backends[name] = entry
        out.backends = {n: out.backends[n] for n in names if n in out.backends}  # in the order asked
        log.set_tags({f"export.{n}.parity": parity_text(b) for n, b in out.backends.items()})
        log.log_metrics(
            {
                f"export.{n}.max_abs_logit_diff": b["max_abs_logit_diff"]
                for n, b in out.backends.items()
                if b.get("max_abs_logit_diff") is not None
            }
        )
    return out
