"""promote: move alias ``champion`` to a version whose gate passed (or, forced, with a reason), roll it
back to the previous champion, or list a model's versions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class PromoteResult:
    model: str
    action: str  # "promote", "rollback" or "noop"
    version: int
    previous: int | None
    forced: bool
    reason: str | None

    def outcome(self) -> str:
        """One line for the pipeline output, e.g. ``promoted: din v3 is champion (was v2)``."""
        was = f"was v{self.previous}" if self.previous else "first champion"
        if self.action == "noop":
            return f"promoted: {self.model} v{self.version} already was champion"
        verb = "rolled back" if self.action == "rollback" else "promoted"
        return f"{verb}: {self.model} v{self.version} is champion ({was})"


def run(
    model: str,
    version: int | str | None,
    tracking_uri: str,
    force: bool = False,
    reason: str | None = None,
    rollback: bool = False,
    run_id: str | None = None,
) -> PromoteResult:
    """Make ``version`` the ``champion`` of ``model`` (``rollback=True``: the previous champion).

    Args:
        model (str): registered model name.
        version (int | str | None): the version to promote; ignored with ``rollback``.
        tracking_uri (str): MLflow tracking/registry URI.
        force (bool): promote although the version's gate did not pass; needs ``reason``.
        reason (str | None): why (recorded in the registry history, required with ``force``).
        rollback (bool): point ``champion`` back at the version that was champion before.
        run_id (str | None): the pipeline's MLflow run, tagged with the promotion.

    Raises:
        recpipe.tracking.PromotionRefused: the version's gate did not pass and ``force`` is off.
        ValueError: no such version, ``force`` without ``reason``, nothing to roll back to.
    """
    from recpipe import tracking
    from recpipe.stages import pipeline_run

    if run_id:
        pipeline_run.resume(run_id, tracking_uri)
    with pipeline_run.failing(run_id, tracking_uri, "promote"):
        if rollback:
            r = tracking.rollback(tracking_uri, model, reason=reason)
        else:
            if version is None:
                raise ValueError("promote needs a version (or rollback=True)")
            r = tracking.promote(tracking_uri, model, version, force=force, reason=reason)
        if run_id:
            result = PromoteResult(r.model, r.action, r.version, r.previous, r.forced, r.reason)
            tracking.set_tags(run_id, {"promotion": result.outcome()}, uri=tracking_uri)
    return PromoteResult(r.model, r.action, r.version, r.previous, r.forced, r.reason)


def list_versions(model: str, tracking_uri: str) -> list[dict[str, Any]]:
    """Every version of ``model``, oldest first: version, aliases, metrics, gate result, run id."""
    from recpipe import tracking

    return [
        {k: v[k] for k in ("version", "aliases", "metrics", "gate_passed", "run_id", "status", "source")}
        for v in tracking.list_models(tracking_uri, model)
    ]
