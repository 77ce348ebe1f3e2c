"""A retrieval model and a ranking model run, gated and promoted together as a pair (issue 30).

Each model keeps its own MLflow run (its own params, metrics and gate, as a single-model run has) and its own
registered model; the pair is recorded on both: each version names its partner (``pair_ranker`` on the
retrieval version, ``pair_retriever`` on the ranking one, ``"<name>/<version>"``), each run its role, partner
and partner's run. Both become ``champion`` together, and only when both gates passed; otherwise neither moves
(both new versions stay ``challenger``) and both runs say which gate failed. Never imports kfp:
``pipelines/pair_pipeline.py`` wires these into the pair pipeline.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from recpipe.config import ParameterError, RecpipeConfig
from recpipe.config.catalogue import RETRIEVAL_MODELS
from recpipe.pipeline.lifecycle import OUTCOME_PROMOTED, OUTCOME_REJECTED, reject

# Version tags naming the partner as "<name>/<version>" (a server refuses a pair the tags do not make).
from recpipe.tracking.registry import TAG_PAIR_RANKER, TAG_PAIR_RETRIEVER

ROLE_RETRIEVER = "retriever"
ROLE_RANKER = "ranker"
# Run tags: the pair's lineage in each model's MLflow run.
RUN_TAG_ROLE = "pair.role"
RUN_TAG_PARTNER = "pair.partner"
RUN_TAG_PARTNER_RUN = "pair.partner_run_id"
RUN_TAG_OUTCOME = "pair.outcome"
OUTCOME_NOT_PROMOTED = "not promoted"


# ------------------------------------------------------------------------------------------- the catalogue
def request_columns(retriever: RecpipeConfig) -> list[str]:
    """The columns a request brings: the retriever's input columns that are not the catalogue's (its item id
    and ``attr_fields``), as the export records them (``user_columns`` of the user tower's manifest)."""
    from recpipe.features.build import build_feature_spec
    from recpipe.features.raw import column_kinds

    sampler = retriever.data.negative_sampler
    item_side = {sampler.item_id_field, *sampler.attr_fields} if sampler else set()
    return [c for c in column_kinds(build_feature_spec(retriever), with_labels=False) if c not in item_side]


def ranker_item_columns(retriever: RecpipeConfig, ranker: RecpipeConfig) -> list[str]:
    """The ranker's input columns a request does not bring: each retrieved item's, read from the catalogue."""
    from recpipe.features.build import build_feature_spec
    from recpipe.features.raw import column_kinds

    user = set(request_columns(retriever))
    return [c for c in column_kinds(build_feature_spec(ranker), with_labels=False) if c not in user]


def check_catalogue(
    retriever: RecpipeConfig, ranker: RecpipeConfig, environ: Mapping[str, str] | None = None
) -> list[str]:
    """Refuse a pair whose ranker reads item columns the retriever's catalogue (its negative sampler's item
    table) lacks: a retrieved candidate would reach the ranker without them. Returns the ranker's item columns.

    Args:
        retriever (RecpipeConfig): the resolved retrieval config (its ``data.params`` name the catalogue).
        ranker (RecpipeConfig): the resolved ranking config.
        environ (Mapping | None): for the catalogue's placeholders ``data.params`` leaves unset (default the
            process environment).

    Raises:
        ParameterError: a config of the wrong kind, an unreadable catalogue, or the columns it lacks (named).
    """
    from recpipe.config.placeholders import resolve
    from recpipe.data.sources import open_source

    if retriever.model.type not in RETRIEVAL_MODELS:
        raise ParameterError(
            "config", f"a pair's first model must be a retrieval model, got {retriever.model.type!r}"
        )
    if ranker.model.type in RETRIEVAL_MODELS:
        raise ParameterError(
            "ranker_config", f"a pair's ranker must be a ranking model, got {ranker.model.type!r}"
        )
    sampler = retriever.data.negative_sampler
    if sampler is None:
        raise ParameterError(
            "config", "the retriever has no data.negative_sampler: a pair needs its catalogue"
        )
    try:
        uri = resolve(
            sampler.input_path, retriever.data.params or {}, os.environ if environ is None else environ
        )
        columns = open_source(uri).schema().names
    except Exception as err:  # noqa: BLE001 - any failure to read the catalogue is a bad parameter
        raise ParameterError("config", f"the retriever's catalogue is not readable: {err}") from None
    if (
        sampler.attr_delimiter is not None
    ):  # graph-learn's id | weight | attrs: the attributes are attr_fields
        columns = [sampler.item_id_field, sampler.weight_field, *sampler.attr_fields]
    needed = ranker_item_columns(retriever, ranker)
    missing = [c for c in needed if c not in columns]
    if missing:
        raise ParameterError(
            "ranker_config",
            f"the ranker {ranker.name!r} reads item column(s) {missing} that the retriever's catalogue "
            f"({uri}, columns {columns}) lacks: a retrieved item would reach the ranker without them",
        )
    return needed


# ----------------------------------------------------------------------------------------- the decision
@dataclass(frozen=True)
class PairMember:
    """One model of a pair as the pipeline registered it.

    Args:
        role (str): :data:`ROLE_RETRIEVER` or :data:`ROLE_RANKER`.
        model (str): registered model name.
        version (int): its new version.
        run_id (str): its MLflow run.
        gate_passed (bool): its gate's decision.
        gate_reasons (list[str]): its gate's reasons.
    """

    role: str
    model: str
    version: int
    run_id: str
    gate_passed: bool
    gate_reasons: list[str] = field(default_factory=list)

    @property
    def ref(self) -> str:
        return f"{self.model}/{self.version}"


@dataclass(frozen=True)
class PairDecision:
    """Whether the pair is promoted, and the outcome both runs record when it is not."""

    promote: bool
    outcome: str


def reasons_list(text: str | list[str]) -> list[str]:
    """Gate reasons passed between steps as one newline-joined string."""
    return [r for r in text.split("\n") if r.strip()] if isinstance(text, str) else list(text)


def decide(
    tracking_uri: str, retriever: PairMember, ranker: PairMember, auto_promote: bool = True
) -> PairDecision:
    """Tag each version and run with its partner and decide: promote only when both gates passed (and
    ``auto_promote``). A model whose gate failed has its run marked rejected (:func:`recpipe.pipeline.reject`)."""
    from recpipe import tracking

    tracking.set_version_tags(tracking_uri, retriever.model, retriever.version, {TAG_PAIR_RANKER: ranker.ref})
    tracking.set_version_tags(tracking_uri, ranker.model, ranker.version, {TAG_PAIR_RETRIEVER: retriever.ref})
    for me, partner in ((retriever, ranker), (ranker, retriever)):
        log = tracking.open_run_log(me.run_id, tracking_uri)
        log.set_tags(
            {RUN_TAG_ROLE: me.role, RUN_TAG_PARTNER: partner.ref, RUN_TAG_PARTNER_RUN: partner.run_id}
        )
        if not me.gate_passed:
            reject(log, me.gate_reasons)
    failed = [m for m in (retriever, ranker) if not m.gate_passed]
    if failed:
        why = "; ".join(f"the {m.role}'s gate failed ({_failures(m.gate_reasons)})" for m in failed)
        return PairDecision(False, f"{OUTCOME_REJECTED}: {OUTCOME_NOT_PROMOTED}: {why}")
    if not auto_promote:
        return PairDecision(
            False, f"registered: {OUTCOME_NOT_PROMOTED} (auto_promote off): {_both(retriever, ranker)}"
        )
    return PairDecision(True, "")


def _failures(reasons: list[str]) -> str:
    failed = [r for r in reasons if r.startswith("FAIL")] or reasons or ["no reason recorded"]
    return "; ".join(r.split(" (champion ")[0] for r in failed)


def _both(retriever: PairMember, ranker: PairMember) -> str:
    return f"{retriever.model} v{retriever.version} + {ranker.model} v{ranker.version}"


def promote(tracking_uri: str, retriever: PairMember, ranker: PairMember) -> str:
    """Make both versions ``champion``; if the second promotion fails, the first is undone (rolled back, or its
    alias removed when it was the first champion), so the two champions stay a pair. Returns the outcome both
    runs record."""
    from recpipe import tracking

    first = tracking.promote(tracking_uri, retriever.model, retriever.version, reason="pair promotion")
    try:
        second = tracking.promote(tracking_uri, ranker.model, ranker.version, reason="pair promotion")
    except Exception:
        if first.action == "promote" and first.previous is not None:
            tracking.rollback(
                tracking_uri, retriever.model, reason=f"the partner {ranker.ref} was not promoted"
            )
        elif first.action == "promote":  # the first champion: no previous one to roll back to
            from recpipe.tracking.registry import delete_alias

            delete_alias(tracking_uri, retriever.model, tracking.ALIAS_CHAMPION)
        raise
    was = ", ".join(
        f"{r.model} {'first champion' if r.previous is None else f'was v{r.previous}'}"
        for r in (first, second)
    )
    outcome = f"{OUTCOME_PROMOTED}: the pair {_both(retriever, ranker)} is champion ({was})"
    record_runs(tracking_uri, (retriever.run_id, ranker.run_id), outcome)
    return outcome


def record_runs(tracking_uri: str, run_ids: tuple[str, ...], outcome: str) -> str:
    """The pair's outcome on each member's run (tag :data:`RUN_TAG_OUTCOME`); returns it."""
    from recpipe import tracking

    for run_id in run_ids:
        tracking.open_run_log(run_id, tracking_uri).set_tags({RUN_TAG_OUTCOME: outcome})
    return outcome
