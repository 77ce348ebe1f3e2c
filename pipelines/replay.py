"""``recpipe run --days``: the daily loop replayed here, one whole pipeline run per day, oldest first.

Day ``i`` of the selected days is the evaluation day of run ``i``: its pipeline reads the ``window`` days
before it for training and day ``i`` itself as the eval split (``data.partitions``; ingest evaluates on the
newest selected partition), warm-starts from the registry's champion (``init_from: champion-if-any``: that version pinned,
``models:/NAME/V``; the first run, with no champion yet, from scratch), and gates the candidate against
that champion re-scored on day ``i``'s rows. A run the gate rejects leaves the champion where it was, so the
next day warm-starts from the model that last passed. Every run is :func:`pipelines.local_run.run_local`
(kfp.local, the embedded MLflow store of the runs folder), so the registry records the chain
(``recpipe models lineage NAME``) exactly as scheduled cluster runs do.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from recpipe.config import ParameterError
from recpipe.pipeline import RunSummary
from recpipe.pipeline.params import (
    INIT_FROM_CHAMPION_IF_ANY,
    resolve_config,
    resolve_tracking_uri,
    runs_folder,
    synthetic_source_for,
)

REPLAY_DATA = "replay-data"  # generated days, under the runs folder: every run reads the same files


def day_windows(days: list[str], key: str, window: int) -> list[str]:
    """The ``data.partitions`` selector of each run: the ``window`` days before each day from the second on,
    and the day itself (the newest, the eval split).

    Example::

        >>> day_windows(["20260101", "20260102", "20260103"], "dt", 1)
        ['dt=20260101,20260102', 'dt=20260102,20260103']
    """
    if window < 1:
        raise ParameterError(
            "window", f"must be >= 1 (training days before each evaluation day), got {window}"
        )
    if len(days) < 2:
        raise ParameterError("days", f"selects {len(days)} day(s) ({days}); a replay needs two or more")
    return [f"{key}=" + ",".join(days[max(0, i - window) : i + 1]) for i in range(1, len(days))]


def generated_days(cfg: Any, days: int, rows: int, runs: Path, config_path: Path) -> str:
    """Generate ``rows`` rows over ``days`` days of the config's synthetic kind into the runs folder (once:
    the same arguments find the same folder) and return that hive-style folder."""
    from recpipe.data.sources import parse_synthetic
    from recpipe.data.synthetic import generate

    spec = parse_synthetic(synthetic_source_for(cfg, rows, config_path=config_path))
    if spec.kind == "config":
        raise ParameterError(
            "days", "generated days exist for the Taobao and Criteo schemas only; give --data"
        )
    folder = runs / REPLAY_DATA / f"{spec.kind}-{rows}-{days}d-seed{spec.seed}"
    if not (folder / "_meta.json").is_file():
        generate(spec.kind, rows=rows, out=folder, seed=spec.seed, days=days, **spec.options)
    return str(folder)


def replay_days(
    days: str,
    window: int = 1,
    data_source: str | None = None,
    config: str = "configs/din_taobao_small.yaml",
    rows: int | None = None,
    runs_dir: str | Path | None = None,
    model_name: str = "",
    overrides: dict[str, Any] | None = None,
    tracking_uri: str | None = None,
    on_run: Callable[[str, RunSummary], None] | None = None,
    **run_args: Any,
) -> list[RunSummary]:
    """Replay the selected days in order, one pipeline run per evaluation day; stops at a failed run.

    Args:
        days (str): a ``data.partitions`` selector of the data source's days (``dt=20260101..20260114``,
            ``last:7``), or, without a data source, a number ``N``: ``N`` generated days
            (``synthetic:<kind>?days=N``, ``rows`` rows over them, default 300,000).
        window (int): training days before each evaluation day (1: yesterday only, the incremental loop).
        data_source (str | None): a hive-style folder (``dt=YYYYMMDD/``) or ODPS table; default the
            config's ``data.train``, else generated days.
        config, rows, runs_dir, model_name, tracking_uri: as :func:`pipelines.local_run.run_local`.
        overrides (dict | None): config overrides for every run (``data.partitions`` and
            ``train.init_from`` are the replay's).
        on_run (callable | None): called with each run's selector and summary as it ends.
        run_args: the other arguments of :func:`pipelines.local_run.run_local` (``backends``, ``verbose`` …).

    Returns:
        list[RunSummary]: one per run, in day order.
    """
    from pipelines.local_run import run_local
    from recpipe.data.sources import open_source
    from recpipe.stages.ingest import configured_sources

    overrides = dict(overrides or {})
    for owned in ("data.partitions", "train.init_from"):  # the replay's own, per day
        if owned in overrides:
            raise ParameterError("overrides", f"{owned} is set by the replay for each day; leave it out")
    cfg = resolve_config(config, overrides=overrides)
    runs = runs_folder(runs_dir).resolve()
    source = data_source or (configured_sources(cfg.data, None, {})[0] if cfg.data.train else None)
    selector = days
    if source is None:
        if not days.isdigit():
            raise ParameterError(
                "days", f"{days!r}: without a data source give a number of generated days, e.g. --days 3"
            )
        source = generated_days(cfg, int(days), rows or 300_000, runs, Path(config).resolve())
        selector = f"last:{days}"
    parted = open_source(source, cfg.csv_options(), partitions=selector)
    key = parted.keys[0]
    values = list(dict.fromkeys(p.value(key) for p in parted.partitions))  # days, oldest first
    name = model_name.strip() or cfg.registered_model_name
    uri = resolve_tracking_uri(tracking_uri, None, default_dir=runs, runs=runs_dir)
    # the same for every day: the champion's version when there is one (the first day, none yet: scratch)
    every_day = dict(runs_dir=runs, config=config, data_source=source, model_name=name, tracking_uri=uri)
    every_day.update(overrides=overrides, init_from=INIT_FROM_CHAMPION_IF_ANY, **run_args)
    summaries: list[RunSummary] = []
    for sel in day_windows(values, key, window):
        summary = run_local(partitions=sel, **every_day)
        summaries.append(summary)
        if on_run is not None:
            on_run(sel, summary)
        if summary.status != "FINISHED":
            break
    return summaries
