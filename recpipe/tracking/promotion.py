"""Promotion and rollback of the ``champion`` alias, with an audit history.

Every change runs under ``promotion_lock`` as one read-decide-write sequence, so two processes
promoting at once are serialized: the last one wins, and the history lists both in the order they
took effect. The history is kept on the registered model as one tag per entry,
``promotion_history.<seq>`` (JSON), because a registered-model tag holds at most 5000 characters on
Postgres/MySQL and a single growing list would not fit. The champion chain used by ``rollback`` is
replayed from it: ``promote`` pushes, ``rollback`` pops. An alias moved outside recpipe (the MLflow
UI) is noticed at the next change and recorded as an ``observed`` entry, so the history always ends
consistent with the alias.
"""

from __future__ import annotations

import getpass
import json
import os
import socket
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from mlflow.exceptions import MlflowException

from recpipe.tracking.lock import LockHandle, promotion_lock
from recpipe.tracking.registry import (
    ALIAS_CHAMPION,
    TAG_GATE_PASSED,
    TAG_GATE_REASONS,
    list_models,
    normalize_version,
    set_alias,
    set_version_tags,
)
from recpipe.tracking.runs import truncate
from recpipe.tracking.uri import _NOT_FOUND, client, error_code

HISTORY_PREFIX = "promotion_history."
MAX_HISTORY_VALUE = 5000
TAG_FORCED = "forced"
TAG_FORCE_REASON = "force_reason"

__all__ = ["PromotionRefused", "PromotionResult", "list_models", "promote", "promotion_history", "rollback"]


class PromotionRefused(RuntimeError):
    """A version may not become champion; ``reasons`` says why (the gate's reasons included)."""

    def __init__(self, model: str, version: int, reasons: list[str]) -> None:
        self.model, self.version, self.reasons = model, version, reasons
        super().__init__(f"{model} version {version} not promoted: " + "; ".join(reasons))


@dataclass(frozen=True)
class PromotionResult:
    """One change of the champion alias (or ``noop`` when the version already was champion)."""

    model: str
    action: str  # "promote", "rollback" or "noop"
    version: int
    previous: int | None
    forced: bool
    reason: str | None
    at: str
    actor: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def outcome(self) -> str:
        """One line for the pipeline output, e.g. ``promoted: din v3 is champion (was v2)``."""
        if self.action == "noop":
            return f"promoted: {self.model} v{self.version} already was champion"
        was = f"was v{self.previous}" if self.previous else "first champion"
        verb = "rolled back" if self.action == "rollback" else "promoted"
        return f"{verb}: {self.model} v{self.version} is champion ({was})"


def _actor() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}:{os.getpid()}"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def promotion_history(uri: str, model: str) -> list[dict[str, Any]]:
    """All history entries of ``model``, oldest first: ``seq``, ``action`` (promote, rollback,
    refused, observed), ``version``, ``previous``, ``at``, ``forced``, ``reason``, ``actor``."""
    try:
        tags = client(uri).get_registered_model(model).tags or {}
    except MlflowException as err:
        if error_code(err) in _NOT_FOUND:
            return []
        raise
    return _parse_history(tags)


def _parse_history(tags: dict[str, str]) -> list[dict[str, Any]]:
    entries = [json.loads(v) for k, v in tags.items() if k.startswith(HISTORY_PREFIX)]
    return sorted(entries, key=lambda e: e["seq"])


def _champion_chain(history: list[dict[str, Any]]) -> list[int]:
    chain: list[int] = []
    for e in history:
        action, v = e["action"], e["version"]
        if action == "rollback" and chain:
            chain.pop()
        if action in ("promote", "rollback", "observed"):
            if v is None:
                chain = []
            elif not chain or chain[-1] != v:
                chain.append(v)
    return chain


def _append(uri: str, model: str, history: list[dict[str, Any]], entry: dict[str, Any]) -> dict[str, Any]:
    entry = {"seq": (history[-1]["seq"] + 1) if history else 1, **entry}
    if entry.get("reason"):
        entry["reason"] = truncate(entry["reason"], MAX_HISTORY_VALUE - 400)
    client(uri).set_registered_model_tag(model, f"{HISTORY_PREFIX}{entry['seq']:06d}", json.dumps(entry))
    history.append(entry)
    return entry


def _reconcile(uri: str, model: str, actor: str) -> tuple[list[dict[str, Any]], int | None]:
    """Read history and champion (one request); record an alias move made outside recpipe."""
    try:
        rm = client(uri).get_registered_model(model)
    except MlflowException as err:
        if error_code(err) in _NOT_FOUND:
            raise ValueError(f"no registered model {model!r} in {uri}") from None
        raise
    history = _parse_history(rm.tags or {})
    champion = (rm.aliases or {}).get(ALIAS_CHAMPION)
    current = None if champion is None else normalize_version(champion)
    chain = _champion_chain(history)
    top = chain[-1] if chain else None
    if current != top:
        _append(
            uri,
            model,
            history,
            {
                "action": "observed",
                "version": current,
                "previous": top,
                "at": _now(),
                "forced": False,
                "reason": "champion alias changed outside recpipe promotion",
                "actor": f"noticed by {actor}",
            },
        )
    return history, current


def _require_lock(handle: LockHandle) -> None:
    if not handle.verify():
        raise RuntimeError(f"lost the promotion lock ({handle.where}); nothing was changed")


def _version_tags(uri: str, model: str, version: int) -> dict[str, str]:
    try:
        return dict(client(uri).get_model_version(model, str(version)).tags or {})
    except MlflowException as err:
        if error_code(err) in _NOT_FOUND:
            raise ValueError(f"registered model {model!r} has no version {version}") from None
        raise


def promote(
    uri: str,
    model: str,
    version: int | str,
    force: bool = False,
    reason: str | None = None,
    actor: str | None = None,
    lock_timeout_s: float = 300.0,
) -> PromotionResult:
    """Make ``version`` the ``champion`` of ``model``.

    A version whose gate did not pass (version tag ``gate_passed`` is not ``"true"``, including a
    version that was never gated) is refused with ``PromotionRefused`` unless ``force=True`` with a
    ``reason``; a forced promotion is tagged ``forced=true`` and ``force_reason`` on the version.
    Refusals are recorded in the history too.
    """
    v = normalize_version(version)
    if force and not (reason and reason.strip()):
        raise ValueError("force=True needs a reason (it is recorded on the version and in the history)")
    who = actor or _actor()
    with promotion_lock(uri, model, timeout_s=lock_timeout_s) as handle:
        tags = _version_tags(uri, model, v)
        history, current = _reconcile(uri, model, who)
        gate = tags.get(TAG_GATE_PASSED)
        if gate != "true" and not force:
            why = [
                f"gate_passed is {gate!r}"
                if gate is not None
                else "version was never gated (no gate_passed tag)"
            ]
            try:
                why += list(json.loads(tags.get(TAG_GATE_REASONS, "[]")))
            except ValueError:
                why.append(tags[TAG_GATE_REASONS])
            _require_lock(handle)
            _append(
                uri,
                model,
                history,
                {"action": "refused", "version": v, "previous": current, "at": _now(), "forced": False,
                 "reason": "; ".join(why), "actor": who},
            )  # fmt: skip
            raise PromotionRefused(model, v, why)
        if current == v:
            return PromotionResult(model, "noop", v, current, False, reason, _now(), who)
        _require_lock(handle)
        set_alias(uri, model, ALIAS_CHAMPION, v)
        if force:
            set_version_tags(uri, model, v, {TAG_FORCED: "true", TAG_FORCE_REASON: reason})
        entry = _append(
            uri,
            model,
            history,
            {"action": "promote", "version": v, "previous": current, "at": _now(), "forced": bool(force),
             "reason": reason, "actor": who},
        )  # fmt: skip
    return PromotionResult(model, "promote", v, current, bool(force), reason, entry["at"], who)


def rollback(
    uri: str, model: str, reason: str | None = None, actor: str | None = None, lock_timeout_s: float = 300.0
) -> PromotionResult:
    """Point ``champion`` back at the version that was champion before the current one.

    Repeated rollbacks walk further back along the chain of promotions. It changes the alias only: the
    versions' lineage tags (``parent_version``, ``partitions``) stay as registered. With no champion, no
    earlier champion, or an earlier champion since deleted it raises ``ValueError`` and changes nothing.
    """
    who = actor or _actor()
    with promotion_lock(uri, model, timeout_s=lock_timeout_s) as handle:
        history, current = _reconcile(uri, model, who)
        chain = _champion_chain(history)
        if current is None:
            raise ValueError(
                f"{model} has no champion (the alias is unset, or its version was deleted): no previous "
                "champion to roll back to; promote a version with --version N"
            )
        if len(chain) < 2:
            raise ValueError(
                f"{model}: no previous champion to roll back to (champion {current}, chain {chain})"
            )
        target = chain[-2]
        try:
            _version_tags(uri, model, target)
        except ValueError:
            raise ValueError(
                f"{model}: cannot roll back to v{target}, the previous champion: it no longer exists "
                f"(deleted); champion stays v{current}; promote a version with --version N"
            ) from None
        _require_lock(handle)
        set_alias(uri, model, ALIAS_CHAMPION, target)
        entry = _append(
            uri,
            model,
            history,
            {"action": "rollback", "version": target, "previous": current, "at": _now(), "forced": False,
             "reason": reason, "actor": who},
        )  # fmt: skip
    return PromotionResult(model, "rollback", target, current, False, reason, entry["at"], who)
