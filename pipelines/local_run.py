"""``recpipe run``: the training pipeline on this machine with ``kfp.local``.

Every step runs ``python -m kfp.dsl.executor_main``: with this interpreter (``runner="subprocess"``, the
default), or in the step's image (``runner="containers"``: kfp.local's DockerRunner,
``pipelines/containers.py``); training starts torchrun CPU processes (gloo). MLflow is the embedded sqlite
store ``<runs>/mlflow.db`` shared by all local runs, so a second run is gated against the champion the first
one promoted. Kubernetes settings (GPUs, secrets,
node selectors) are ignored by kfp.local; credentials come from the environment.
"""

import os
import re
import shutil
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from recpipe.config import ParameterError, RecpipeConfig, gate_overrides
from recpipe.config.catalogue import LOCAL_RUN_BACKENDS, RETRIEVAL_MODELS
from recpipe.data.synthetic.retrieval import ITEMS_FILE
from recpipe.pipeline import RunSummary, summarize
from recpipe.pipeline.params import (
    check_data_fits,
    check_data_source,
    expand_partition_template,
    resolve_config,
    resolve_tracking_uri,
    runs_folder,
    synthetic_source_for,
)

DEFAULT_CONFIG = "configs/din_taobao_small.yaml"
# Sized for < 10 minutes end to end on 2 cores (see the README's measured timings).
DEFAULT_ROWS = 1_000_000
DEFAULT_PROCESSES = 2
# A retrieval config's generated rows (synthetic:retrieval, one catalogue item per 50 rows): its trainer reads
# every row into memory, one process.
DEFAULT_RETRIEVAL_ROWS = 200_000
RUNNERS = ("subprocess", "containers")


def run_local(
    runs_dir: str | Path | None = None,
    config: str = DEFAULT_CONFIG,
    data_source: str | None = None,
    rows: int | None = None,
    workers: int = 1,
    gpus_per_worker: int | None = None,
    backends: str | None = None,
    min_auc: float | str | None = None,
    max_auc_drop: float | str | None = None,
    max_logloss_rise: float | str | None = None,
    auto_promote: bool = True,
    overrides: dict[str, Any] | None = None,
    model_name: str = "",
    verbose: bool = False,
    tracking_uri: str | None = None,
    runner: str = "subprocess",
    partitions: str = "",
    init_from: str = "",
) -> RunSummary:
    """Run the whole pipeline locally and return its summary (also when a step failed).

    Args:
        runs_dir: holds ``mlflow.db``, ``mlartifacts/`` and one folder per run (``<runs>/<time>/kfp``);
            default ``RECPIPE_RUNS``, else ``runs``.
        config: recpipe config.
        data_source: any source ``ingest`` reads, checked against the config's columns first; default
            the config's ``data.train`` (with its ``data.eval`` kept as the eval split), else generated data
            of the config's kind (``synthetic:taobao`` or ``synthetic:criteo``, else
            ``synthetic:config`` for the config's own columns; ``rows`` rows). A retrieval config (``dssm``,
            ``dssm_v2``) gets ``synthetic:retrieval`` rows generated into ``<run>/data`` first, with their
            catalogue ``<run>/data/_items.parquet`` as its negative sampler's item table where the config's
            ``input_path`` is a placeholder it leaves unset (``"{ITEMS}"``).
        rows: generated rows (default 1,000,000; a retrieval config's 200,000).

    Raises:
        ParameterError: the data source is unreadable or lacks the config's columns, or no generated data
            fits the config.
        workers, gpus_per_worker: as on a cluster; here ``workers × gpus_per_worker`` CPU processes (a retrieval
            config: one).
        backends: export backends (default :data:`~recpipe.config.catalogue.LOCAL_RUN_BACKENDS`, ``jit,onnx,rtp``;
            a retrieval config's :data:`~recpipe.config.catalogue.RETRIEVAL_BACKENDS`).
        min_auc, max_auc_drop, max_logloss_rise: gate thresholds (default: the config's ``eval.gate``).
        auto_promote: promote a version that passed the gate to ``champion``.
        overrides: dotted config overrides, e.g. ``{"train.max_steps": 50}``.
        model_name: registered model name (default: the config's).
        verbose: stream each step's full log (otherwise only kfp.local's task lines).
        tracking_uri: the MLflow store, as in every command: ``tracking_uri`` > ``runs_dir`` > env
            ``MLFLOW_TRACKING_URI`` > ``<runs>/mlflow.db``.
        runner: ``subprocess`` (every step a process of this interpreter) or ``containers`` (every step in
            its image; the runs folder, MLflow store included, is mounted into each container).
        partitions: ``data.partitions`` (the pipeline parameter; "" keeps the config's). A local run has
            no scheduled time, so a ``{date}`` template is refused: give the partitions themselves.
        init_from: ``train.init_from`` (the pipeline parameter; "" keeps the config's), e.g.
            ``champion-if-any``.
    """
    import warnings

    from kfp import local

    from pipelines.training_pipeline import local_training_pipeline as training_pipeline

    # kfp.local notes that our images are not plain Python images and that Kubernetes settings are
    # ignored here; both are expected for a local run.
    warnings.filterwarnings("ignore", message=".*non-Python base image.*")
    warnings.filterwarnings("ignore", message=".*have no effect in the current local runner.*")

    if runner not in RUNNERS:
        raise ParameterError("runner", f"must be one of {', '.join(RUNNERS)}, got {runner!r}")
    t0 = time.time()
    # Before kfp.local starts anything: generated data of the config's kind, or the given data checked
    # against the config's columns (a mismatch failed only in train, minutes later).
    cfg = resolve_config(config, overrides=overrides)
    expand_partition_template(partitions, None)  # no scheduled time here: a {date} template is refused now
    if not data_source and cfg.data.train:  # the config's own input (its data.eval is kept by ingest)
        from recpipe.stages.ingest import configured_sources

        data_source = configured_sources(cfg.data, None, os.environ)[0]
    retrieval = cfg.model.type in RETRIEVAL_MODELS
    if data_source:
        check_data_source(data_source)
        check_data_fits(cfg, data_source)
        source = data_source
    elif not retrieval:
        source = synthetic_source_for(cfg, rows or DEFAULT_ROWS, config_path=Path(config).resolve())
    runs = runs_folder(runs_dir).resolve()
    run_dir = runs / datetime.now().strftime("%Y%m%d-%H%M%S")
    run_dir.mkdir(parents=True, exist_ok=True)
    oracle_recall: dict[int, float] = {}
    if retrieval:
        # Two towers train in one process on their own defaults (recpipe.config.catalogue.RETRIEVAL_BACKENDS).
        gpus_per_worker = 1 if gpus_per_worker is None else gpus_per_worker
        if not data_source:
            source, catalogue, oracle_recall = _generate_retrieval(
                cfg, rows or DEFAULT_RETRIEVAL_ROWS, run_dir / "data"
            )
            if catalogue is not None:
                overrides = {
                    f"data.params.{catalogue}": str(run_dir / "data" / ITEMS_FILE),
                    **(overrides or {}),
                }
    uri = resolve_tracking_uri(tracking_uri, None, default_dir=runs, runs=runs_dir)
    config_path = Path(config).resolve()
    if runner == "containers":
        # Only the runs folder is mounted: the steps read this very config from there.
        _check_inside_runs(runs, source, uri)
        config_path = Path(shutil.copy(config_path, run_dir / config_path.name))
        if source.startswith("synthetic:config"):  # generated in a container: from the copy it sees
            source = synthetic_source_for(cfg, rows or DEFAULT_ROWS, config_path=config_path)
    args: dict[str, Any] = {
        "config": str(config_path),
        "data_source": source,
        "workers": workers,
        "gpus_per_worker": DEFAULT_PROCESSES if gpus_per_worker is None else gpus_per_worker,
        "accelerator_type": "",
        "backends": backends or ("" if retrieval else ",".join(LOCAL_RUN_BACKENDS)),
        "mlflow_uri": uri,
        "model_name": model_name,
        "auto_promote": auto_promote,
        # One checkpoint is enough here (each is the size of the embedding tables plus optimizer state).
        "config_overrides": {"train.keep_last_checkpoints": 1, **(overrides or {})},
        # Every step on this machine: train runs torchrun here, never a PyTorchJob.
        "launcher": "local",
        "partitions": partitions,
        "init_from": init_from,
    }
    # Only the thresholds that are set reach the pipeline: its parameters are strings, empty keeps the
    # config's (a float's str() reads back as the same float).
    for name, value in gate_overrides(min_auc, max_auc_drop, max_logloss_rise).items():
        args[name] = str(value)
    if runner == "containers":
        return _run_in_containers(training_pipeline, args, runs, run_dir, uri, source, verbose, t0)
    local.init(
        runner=local.SubprocessRunner(use_venv=False),
        pipeline_root=str(run_dir / "kfp"),
        raise_on_error=True,
    )
    error: str | None = None
    try:
        if verbose:
            training_pipeline(**args)
        else:
            with _quiet(run_dir / "pipeline.log"):
                training_pipeline(**args)
    except Exception as err:  # noqa: BLE001 - a failed step is reported in the summary
        error = f"{type(err).__name__}: {err}"
    summary = summarize(
        uri,
        since=t0,
        data_source=source,
        run_dir=run_dir,
        seconds=time.time() - t0,
        error=error,
    )
    summary.oracle_recall = oracle_recall
    return summary


def _generate_retrieval(
    cfg: RecpipeConfig, rows: int, out: Path, users: int | None = None, items: int | None = None
) -> tuple[str, str | None, dict[int, float]]:
    """``synthetic:retrieval`` rows and their catalogue (``out/_items.parquet``) generated into ``out`` before the
    pipeline starts: the catalogue is not a split that ingest passes on, so the steps read it from there.

    Returns:
        ``(the rows' folder as the data source, the placeholder of the negative sampler's ``input_path`` that
        names the catalogue, or None, the oracle's recall@K over the rows)``: a config whose ``input_path`` is
        exactly one unset placeholder (``"{ITEMS}"``, as ``configs/dssm_retrieval_small.yaml``) gets it pointed
        at the generated catalogue; a config that names its own item table keeps it. ``users`` and ``items``
        fix the world's size (default: by ``rows``), so that a ranker's impressions can share it.
    """
    from recpipe.data.synthetic import generate

    oracle = generate("retrieval", rows, out, users=users, items=items).oracle_recall or {}
    sampler = cfg.data.negative_sampler
    placeholder = re.fullmatch(r"\{([A-Za-z_][A-Za-z0-9_]*)\}", sampler.input_path) if sampler else None
    if placeholder is None or (cfg.data.params or {}).get(placeholder.group(1)):
        return str(out), None, oracle
    return str(out), placeholder.group(1), oracle


def _check_inside_runs(runs: Path, source: str, uri: str) -> None:
    """The containers see the runs folder only: a local data source or sqlite store elsewhere is refused."""
    local_paths = {"data_source": source, "tracking_uri": uri.removeprefix("sqlite:///")}
    for name, value in local_paths.items():
        path = Path(value)
        if path.is_absolute() or path.exists():
            path = path.resolve()
            if path != runs and runs not in path.parents:
                raise ParameterError(
                    name, f"{value!r} is outside the runs folder {runs}, the only folder the containers see"
                )


def _run_in_containers(
    training_pipeline: Any,
    args: dict[str, Any],
    runs: Path,
    run_dir: Path,
    uri: str,
    source: str,
    verbose: bool,
    t0: float,
) -> RunSummary:
    """The pipeline with kfp.local's DockerRunner: every task a container of its image."""
    from kfp import local

    from pipelines import containers

    label = f"{run_dir.name}-{os.getpid()}"
    error: str | None = None
    run = None
    tasks = _quiet(run_dir / "pipeline.log", echo_all=verbose)
    with containers.engine_api() as engine:
        try:
            run = containers.prepare(engine, label)
            # Made here, not by the engine (which would make it root's and not group-writable).
            (run_dir / "kfp").mkdir(exist_ok=True)
            with containers.shared_runs_folder(runs), tasks:
                local.init(
                    runner=local.DockerRunner(**containers.runner_args(runs, label)),
                    pipeline_root=str(run_dir / "kfp"),
                    raise_on_error=True,
                )
                training_pipeline(**args)
        except Exception as err:  # noqa: BLE001 - a failed step is reported in the summary
            error = f"{type(err).__name__}: {err}"
        if run is not None:
            run.containers = containers.count_containers(label, t0)
    summary = summarize(
        uri, since=t0, data_source=source, run_dir=run_dir, seconds=time.time() - t0, error=error
    )
    if run is not None:
        summary.containers = (run.containers, tasks.tasks, run.engine, run.train_image)
    return summary


class _quiet:
    """Send every step's log to a file and keep kfp.local's task status lines on the terminal.

    kfp.local prints the steps' output and its own log records through ``sys.stdout``, so a filtering
    ``sys.stdout`` is enough.
    """

    KEEP = ("Executing task", "finished with status", "Pipeline ")
    # The train step's progress bar: kfp.local turns each of its frames into a line.
    PROGRESS = re.compile(r"^\s*train:\s+\d+%\|")
    # Without a terminal to redraw on, a frame at most this often (and the last one).
    EVERY_S = 15.0

    def __init__(self, log: Path, echo_all: bool = False) -> None:
        self.log = log
        self.echo_all = echo_all  # --verbose: every line to the terminal as well
        self.tasks = 0  # tasks kfp.local started
        self._mid_line = False  # the console's cursor sits on a progress frame
        self._last_frame = 0.0

    def __enter__(self) -> None:
        import sys

        self._fh = open(self.log, "w", buffering=1)  # noqa: SIM115 - closed in __exit__
        self._stdout = sys.stdout
        print(f"(step logs: {self.log})", file=self._stdout, flush=True)
        sys.stdout = self  # type: ignore[assignment]

    def write(self, text: str) -> int:
        from recpipe.redact import redact

        self._fh.write(redact(text))  # a step may print its data source, credentials included
        self.tasks += sum("Executing task" in line for line in text.splitlines())
        if self.echo_all:
            self._stdout.write(text)
            return len(text)
        for line in text.splitlines():
            if self.PROGRESS.match(line):
                self._frame(line.strip())
            elif any(k in line for k in self.KEEP):
                if self._mid_line:
                    self._stdout.write("\n")
                    self._mid_line = False
                self._stdout.write(line.strip() + "\n")
                self._stdout.flush()
        return len(text)

    def _frame(self, frame: str) -> None:
        """Show training progress live: redrawn in place on a terminal, else a line now and then."""
        if self._stdout.isatty():
            self._stdout.write(frame + "\r")  # the next frame overwrites it
            self._mid_line = True
        elif time.monotonic() - self._last_frame >= self.EVERY_S or "100%|" in frame:
            self._last_frame = time.monotonic()
            self._stdout.write(frame + "\n")
        self._stdout.flush()

    def flush(self) -> None:
        self._fh.flush()

    def isatty(self) -> bool:
        return False

    def __exit__(self, *exc: object) -> None:
        import sys

        sys.stdout = self._stdout
        self._fh.close()
