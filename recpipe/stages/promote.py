"""promote: move alias ``champion`` to a version whose gate passed (or, forced, with a reason), roll it
back to the previous champion, or list a model's versions."""

from __future__ import annotations

from typing import Any

from recpipe.runlog import NULL_LOG, RunLog, failing
from recpipe.tracking import PromotionResult


def run(
    model: str,
    version: int | str | None,
    tracking_uri: str,
    force: bool = False,
    reason: str | None = None,
    rollback: bool = False,
    log: RunLog = NULL_LOG,
) -> PromotionResult:
    """Make ``version`` the ``champion`` of ``model`` (``rollback=True``: the previous champion).

    Args:
        model (str): registered model name.
        version (int | str | None): the version to promote; ignored with ``rollback``.
        tracking_uri (str): MLflow tracking/registry URI.
        force (bool): promote although the version's gate did not pass; needs ``reason``.
        reason (str | None): why (recorded in the registry history, required with ``force``).
        rollback (bool): point ``champion`` back at the version that was champion before.
        log (RunLog): the pipeline's run, tagged ``promotion`` with the outcome.

    Raises:
        recpipe.tracking.PromotionRefused: the version's gate did not pass and ``force`` is off.
        ValueError: no such version, ``force`` without ``reason``, nothing to roll back to.
    """
    from recpipe import tracking

    with failing(log, "promote"):
        if rollback:
            result = tracking.rollback(tracking_uri, model, reason=reason)
        else:
            if version is None:
                raise ValueError("promote needs a version (or rollback=True)")
            result = tracking.promote(tracking_uri, model, version, force=force, reason=reason)
        log.set_tags({"promotion": result.outcome()})
    return result


def list_versions(model: str, tracking_uri: str) -> list[dict[str, Any]]:
    """Every version of ``model``, oldest first: version, aliases, metrics, gate result, run id."""
    from recpipe import tracking

    return [
        {k: v[k] for k in ("version", "aliases", "metrics", "gate_passed", "run_id", "status", "source")}
        for v in tracking.list_models(tracking_uri, model)
    ]


def lineage(model: str, tracking_uri: str, version: int | str | None = None) -> dict[str, Any]:
    """The chain from ``version`` (default: the champion, else the latest) back to its root, newest first
    (:func:`recpipe.tracking.lineage`): each version's aliases, run, parent, partitions added, AUC and gate."""
    from recpipe import tracking

    return tracking.lineage(tracking_uri, model, version)
