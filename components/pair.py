"""The pair's own steps (``pipelines/pair_pipeline.py``): the catalogue check before training, the partners'
tags and the decision, the promotion of both, and the end of both runs."""

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Artifact, Input

from components.image import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def check_pair(retriever_config: Input[Artifact], ranker_config: Input[Artifact]) -> str:
    """Refuse a pair whose ranker reads item columns the retriever's catalogue lacks (before any training);
    returns the ranker's item columns, comma-separated."""
    from recpipe.fastexit import ends_fast

    with ends_fast():  # the step's process ends without finalization once its outputs are written
        from recpipe.config import load_config
        from recpipe.pipeline import pair

        return ",".join(
            pair.check_catalogue(load_config(retriever_config.path), load_config(ranker_config.path))
        )


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def pair_decision(
    tracking_uri: str,
    retriever_model: str,
    retriever_version: int,
    retriever_run_id: str,
    retriever_gate_passed: bool,
    retriever_gate_reasons: str,
    ranker_model: str,
    ranker_version: int,
    ranker_run_id: str,
    ranker_gate_passed: bool,
    ranker_gate_reasons: str,
    auto_promote: bool,
) -> NamedTuple("PairOutputs", [("promote", bool), ("outcome", str)]):
    """Tag each version with its partner (``pair_ranker`` / ``pair_retriever``: ``"<name>/<version>"``) and
    each run with its role and partner; decide: promote only when both gates passed (and ``auto_promote``).
    Returns the decision and, when it is no, the outcome (which gate failed)."""
    from recpipe.fastexit import ends_fast

    with ends_fast():  # the step's process ends without finalization once its outputs are written
        from recpipe.pipeline import pair

        retriever = pair.PairMember(
            pair.ROLE_RETRIEVER, retriever_model, retriever_version, retriever_run_id, retriever_gate_passed,
            pair.reasons_list(retriever_gate_reasons),
        )  # fmt: skip
        ranker = pair.PairMember(
            pair.ROLE_RANKER, ranker_model, ranker_version, ranker_run_id, ranker_gate_passed,
            pair.reasons_list(ranker_gate_reasons),
        )  # fmt: skip
        d = pair.decide(tracking_uri, retriever, ranker, auto_promote)
        return (d.promote, d.outcome)


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def promote_pair(
    tracking_uri: str,
    retriever_model: str,
    retriever_version: int,
    retriever_run_id: str,
    ranker_model: str,
    ranker_version: int,
    ranker_run_id: str,
) -> str:
    """Point both models' ``champion`` at the new versions together (both gates passed); returns the outcome."""
    from recpipe.fastexit import ends_fast

    with ends_fast():  # the step's process ends without finalization once its outputs are written
        from recpipe.pipeline import pair

        return pair.promote(
            tracking_uri,
            pair.PairMember(pair.ROLE_RETRIEVER, retriever_model, retriever_version, retriever_run_id, True),
            pair.PairMember(pair.ROLE_RANKER, ranker_model, ranker_version, ranker_run_id, True),
        )


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def hold_pair(tracking_uri: str, retriever_run_id: str, ranker_run_id: str, outcome: str) -> str:
    """Record on both runs that the pair was not promoted (``outcome`` says why); returns it."""
    from recpipe.fastexit import ends_fast

    with ends_fast():  # the step's process ends without finalization once its outputs are written
        from recpipe.pipeline import pair

        return pair.record_runs(tracking_uri, (retriever_run_id, ranker_run_id), outcome)


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def finish_pair(tracking_uri: str, retriever_run_id: str, ranker_run_id: str, outcome: str) -> str:
    """End both MLflow runs as FINISHED with the pair's outcome; the outcome is the pipeline's output."""
    from recpipe.fastexit import ends_fast

    with ends_fast():  # the step's process ends without finalization once its outputs are written
        from recpipe.pipeline import finish
        from recpipe.tracking import open_run_log

        for run_id in (retriever_run_id, ranker_run_id):
            finish(open_run_log(run_id, tracking_uri), outcome)
        return outcome
