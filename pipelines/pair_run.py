"""``recpipe run --config RETRIEVER --ranker-config RANKER``: the pair pipeline (``pipelines/pair_pipeline.py``) on
this machine with ``kfp.local``, as ``recpipe run`` runs one model (``pipelines/local_run.py``).

Without data, both datasets are generated from one world (``synthetic:retrieval``: the retriever's positives,
then the ranker's impressions with ``ranking=1``; the same seed, users and items, so the same catalogue
``_items.parquet``), and the retriever's catalogue placeholder points at the generated one. The ranker's item
columns are checked against that catalogue before the pipeline starts (the pipeline checks again in its own
step, for a cluster run).
"""

from __future__ import annotations

import time
import warnings
from datetime import datetime
from pathlib import Path
from typing import Any

from pipelines.local_run import DEFAULT_PROCESSES, DEFAULT_RETRIEVAL_ROWS, _generate_retrieval, _quiet
from recpipe.config import ParameterError
from recpipe.config.catalogue import RETRIEVAL_MODELS
from recpipe.data.synthetic.retrieval import ITEMS_FILE
from recpipe.pipeline.params import (
    check_data_fits,
    check_data_source,
    resolve_config,
    resolve_tracking_uri,
    runs_folder,
)
from recpipe.pipeline.summary import PairSummary, summarize

# The generated world's size for ``rows`` rows: the retriever's own defaults (one user per 20 rows, one item per
# 50), given explicitly so that the ranker's impressions are drawn in the same world.
ROWS_PER_USER = 20
ROWS_PER_ITEM = 50


def run_pair_local(
    runs_dir: str | Path | None = None,
    config: str = "configs/dssm_retrieval_small.yaml",
    ranker_config: str = "configs/deepfm_retrieval_ranker_small.yaml",
    data_source: str | None = None,
    ranker_data_source: str | None = None,
    rows: int | None = None,
    gpus_per_worker: int | None = None,
    backends: str | None = None,
    auto_promote: bool = True,
    overrides: dict[str, Any] | None = None,
    ranker_overrides: dict[str, Any] | None = None,
    verbose: bool = False,
    tracking_uri: str | None = None,
) -> PairSummary:
    """Run the pair pipeline locally and return its summary (also when a step failed).

    Args:
        runs_dir: as :func:`pipelines.local_run.run_local`.
        config: the retrieval model's config (``dssm``, ``dssm_v2``).
        ranker_config: the ranking model's config.
        data_source, ranker_data_source: each model's data, both or neither (default: generated, one world).
        rows: generated rows of each dataset (default 200,000).
        gpus_per_worker: the ranker's training processes (default 2; the retriever trains in one).
        backends: the ranker's export backends (default its config's; the retriever's are its config's).
        auto_promote: promote the pair when both gates passed.
        overrides, ranker_overrides: dotted config overrides of the retriever and of the ranker.
        verbose: stream each step's full log.
        tracking_uri: the MLflow store (as ``recpipe run``).

    Raises:
        ParameterError: a config of the wrong kind, one data source without the other, data that does not fit
            its config, or a ranker reading item columns the retriever's catalogue lacks (named).
    """
    from kfp import local

    from pipelines.pair_pipeline import pair_pipeline
    from recpipe.pipeline.pair import check_catalogue

    warnings.filterwarnings("ignore", message=".*have no effect in the current local runner.*")
    t0 = time.time()
    overrides, ranker_overrides = dict(overrides or {}), dict(ranker_overrides or {})
    retriever = resolve_config(config, overrides=overrides)
    ranker = resolve_config(ranker_config, overrides=ranker_overrides)
    if retriever.model.type not in RETRIEVAL_MODELS:
        raise ParameterError(
            "config", f"a pair's first model must be a retrieval model, got {retriever.model.type!r}"
        )
    if ranker.model.type in RETRIEVAL_MODELS:
        raise ParameterError("ranker_config", f"must be a ranking model, got {ranker.model.type!r}")
    if bool(data_source) != bool(ranker_data_source):
        raise ParameterError(
            "ranker_data" if data_source else "data",
            "give both models' data (--data and --ranker-data) or neither (both generated from one world)",
        )
    for cfg, source in ((retriever, data_source), (ranker, ranker_data_source)):
        if source:
            check_data_source(source)
            check_data_fits(cfg, source)
    if data_source:  # nothing generated: the catalogue the config names is checked before anything starts
        check_catalogue(retriever, ranker)
    runs = runs_folder(runs_dir).resolve()
    run_dir = runs / datetime.now().strftime("%Y%m%d-%H%M%S")
    run_dir.mkdir(parents=True, exist_ok=True)
    oracle_recall: dict[int, float] = {}
    if not data_source:
        data_source, ranker_data_source, oracle_recall, catalogue = _generate_world(
            retriever, rows or DEFAULT_RETRIEVAL_ROWS, run_dir / "data"
        )
        if catalogue is not None:
            overrides = {
                f"data.params.{catalogue}": str(run_dir / "data" / "retrieval" / ITEMS_FILE),
                **overrides,
            }
            retriever = resolve_config(config, overrides=overrides)
        check_catalogue(retriever, ranker)
    uri = resolve_tracking_uri(tracking_uri, None, default_dir=runs, runs=runs_dir)
    args: dict[str, Any] = {
        "retriever_config": str(Path(config).resolve()),
        "ranker_config": str(Path(ranker_config).resolve()),
        "retriever_data": data_source,
        "ranker_data": ranker_data_source,
        "retriever_gpus_per_worker": 1,
        "ranker_workers": 1,
        "ranker_gpus_per_worker": DEFAULT_PROCESSES if gpus_per_worker is None else gpus_per_worker,
        "accelerator_type": "",
        "ranker_backends": backends or "",
        "mlflow_uri": uri,
        "auto_promote": auto_promote,
        "retriever_overrides": {"train.keep_last_checkpoints": 1, **overrides},
        "ranker_overrides": {"train.keep_last_checkpoints": 1, **ranker_overrides},
        "launcher": "local",
    }
    local.init(
        runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(run_dir / "kfp"), raise_on_error=True
    )
    error: str | None = None
    try:
        if verbose:
            pair_pipeline(**args)
        else:
            with _quiet(run_dir / "pipeline.log"):
                pair_pipeline(**args)
    except Exception as err:  # noqa: BLE001 - a failed step is reported in the summary
        error = f"{type(err).__name__}: {err}"
    seconds = time.time() - t0
    summaries = [
        summarize(uri, since=t0, data_source=source, run_dir=run_dir, seconds=seconds, error=error,
                  model=cfg.registered_model_name)
        for cfg, source in ((retriever, data_source), (ranker, ranker_data_source))
    ]  # fmt: skip
    summaries[0].oracle_recall = oracle_recall
    return PairSummary(summaries[0], summaries[1], seconds)


def _generate_world(retriever: Any, rows: int, out: Path) -> tuple[str, str, dict[int, float], str | None]:
    """Both datasets of one generated world: the retriever's rows (``out/retrieval``, with its catalogue) and
    the ranker's impressions (``out/ranking``). Returns both folders, the oracle's recall@K and the catalogue's
    placeholder (as :func:`pipelines.local_run._generate_retrieval`)."""
    from recpipe.data.synthetic import generate

    users, items = max(10, rows // ROWS_PER_USER), max(10, rows // ROWS_PER_ITEM)
    source, catalogue, oracle = _generate_retrieval(
        retriever, rows, out / "retrieval", users=users, items=items
    )
    generate("retrieval", rows, out / "ranking", users=users, items=items, ranking=True)
    return source, str(out / "ranking"), oracle, catalogue
