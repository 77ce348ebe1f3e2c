"""PNG plots of an evaluation: ROC curve, calibration curve, training curves.

Figures are drawn with matplotlib's object API on the Agg canvas, so no GUI backend and no global
``pyplot`` state is touched (safe in pipeline containers and in tests).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter


def _save(fig: Figure, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig)
    fig.savefig(path, format="png", dpi=100, bbox_inches="tight")
    return path


def roc_curve_png(
    roc: Mapping[str, Sequence[float]], path: str | Path, auc: float | None = None, title: str = "ROC"
) -> Path:
    """Plot ``roc["fpr"]`` against ``roc["tpr"]`` (as in ``EvalReport.roc``) with the chance line."""
    fig = Figure(figsize=(5, 5))
    ax = fig.add_subplot()
    label = "model" if auc is None or not math.isfinite(auc) else f"model (AUC {auc:.4f})"
    ax.plot(roc["fpr"], roc["tpr"], lw=2, label=label)
    ax.plot([0, 1], [0, 1], ls="--", color="grey", lw=1, label="chance")
    ax.set(
        xlim=(0, 1), ylim=(0, 1.01), xlabel="false positive rate", ylabel="true positive rate", title=title
    )
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)
    return _save(fig, path)


def calibration_curve_png(
    curve: Mapping[str, Sequence[float]], path: str | Path, title: str = "Calibration"
) -> Path:
    """Plot observed positive rate against mean prediction per bin (as in
    ``EvalReport.calibration_curve``), on log axes when predictions span more than a decade."""
    fig = Figure(figsize=(5, 5))
    ax = fig.add_subplot()
    x, y = list(curve["mean_prediction"]), list(curve["observed_rate"])
    positive = [v for v in x + y if v > 0]
    lo = min(positive) if positive else 1e-3
    hi = max(x + y + [lo * 10])
    ax.plot([lo, hi], [lo, hi], ls="--", color="grey", lw=1, label="perfectly calibrated")
    ax.plot(x, y, marker="o", lw=2, label="model")
    if positive and hi / lo > 10:
        ax.set_xscale("log")
        ax.set_yscale("log")
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_locator(LogLocator(base=10.0, subs=(1.0, 2.0, 5.0)))
            axis.set_major_formatter(FormatStrFormatter("%.3g"))
            axis.set_minor_formatter(NullFormatter())
    ax.set(xlabel="mean predicted probability", ylabel="observed positive rate", title=title)
    ax.legend(loc="upper left")
    ax.grid(alpha=0.3)
    return _save(fig, path)


def training_curves_png(
    history: Sequence[Mapping[str, Any]], path: str | Path, title: str = "Training"
) -> Path:
    """Plot every ``*loss*`` key (left) and ``*auc*`` key (right) against ``step``.

    Args:
        history (Sequence[Mapping]): records like ``{"step": 100, "loss": 0.45, "eval_auc": 0.71}``;
            a key may be missing from some records (e.g. AUC only at evaluation steps).
    """
    if not history:
        raise ValueError("training history is empty")
    keys = sorted({k for rec in history for k in rec if k != "step"})
    fig = Figure(figsize=(10, 4))
    ax_loss, ax_auc = fig.subplots(1, 2)
    for ax, word in ((ax_loss, "loss"), (ax_auc, "auc")):
        for key in (k for k in keys if word in k.lower()):
            pts = [
                (rec["step"], rec[key])
                for rec in history
                if "step" in rec and rec.get(key) is not None and math.isfinite(float(rec[key]))
            ]
            if pts:
                steps, values = zip(*pts)
                ax.plot(steps, values, marker="." if len(pts) < 50 else None, label=key)
        ax.set(xlabel="step", ylabel=word, title=f"{title}: {word}")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    return _save(fig, path)
