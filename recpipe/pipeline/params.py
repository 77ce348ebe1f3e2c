"""The pipeline's parameters, checked before any data moves: each bad one fails with its name."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from recpipe.config import ConfigError, ParameterError, RecpipeConfig, gate_overrides, load_config


def check_data_source(source: str) -> None:
    """Fail fast when ``source`` cannot be read: a malformed synthetic spec, an ODPS table without
    credentials in the environment, or a path/URI with no data files."""
    from recpipe.data.sources import check_source

    if not source or not source.strip():
        raise ParameterError(
            "data_source", "is empty; give an odps:// table, a Parquet/CSV URI or synthetic:taobao?rows=N"
        )
    try:
        check_source(source)
    except Exception as err:  # noqa: BLE001 - any failure to reach the source is a bad parameter
        from recpipe.redact import redact

        raise ParameterError("data_source", redact(f"{source!r} is not readable: {err}")) from None


def check_data_fits(cfg: RecpipeConfig, source: str) -> None:
    """Fail fast when ``source``'s schema lacks columns ``cfg`` reads (every problem listed), before
    any row is ingested.

    Args:
        cfg (RecpipeConfig): the resolved config.
        source (str): the data source (already readable: :func:`check_data_source`).
    """
    from recpipe.features.build import build_feature_spec
    from recpipe.features.schema_check import SchemaMismatch, check_source

    try:
        check_source(build_feature_spec(cfg), source, cfg.csv_options(), partitions=cfg.data.partitions)
    except SchemaMismatch as err:
        raise ParameterError("data_source", str(err)) from None


def synthetic_source_for(cfg: RecpipeConfig, rows: int, config_path: str | Path | None = None) -> str:
    """The ``synthetic:`` source whose columns fit ``cfg`` (Taobao for a Taobao-schema config, Criteo for a
    Criteo-schema one, else ``synthetic:config``: rows generated for the config's own columns), with ``rows``
    rows.

    Args:
        cfg (RecpipeConfig): the resolved config.
        rows (int): rows to generate.
        config_path (str | Path | None): the YAML ``synthetic:config`` reads (``path=``); None: ``cfg`` is
            written to ``<tmp>/recpipe-synthetic/<digest>.yaml`` (readable by the steps of this machine).

    Raises:
        ParameterError: no synthetic kind has the config's columns (give a data source).
    """
    from urllib.parse import quote

    from recpipe.data.sources import SYNTHETIC_LAYOUTS
    from recpipe.data.synthetic.config import SyntheticConfigError, plan_columns
    from recpipe.features.build import build_feature_spec
    from recpipe.features.schema_check import schema_problems, source_schema

    spec = build_feature_spec(cfg)
    misses = {}
    for kind, layouts in SYNTHETIC_LAYOUTS.items():
        for layout in layouts:
            problems = schema_problems(spec, source_schema(f"synthetic:{kind}?rows=10{layout}"))
            if not problems:
                return f"synthetic:{kind}?rows={int(rows)}{layout}"
            misses.setdefault(kind, problems[0])
    try:
        plan_columns(cfg)
    except SyntheticConfigError as err:
        misses["config"] = str(err)
    else:
        if config_path is None:
            import tempfile

            config_path = Path(tempfile.gettempdir()) / "recpipe-synthetic" / f"{cfg.digest()[:16]}.yaml"
            write_config(cfg, config_path)
        return f"synthetic:config?path={quote(str(config_path), safe='/')}&rows={int(rows)}"
    tried = "; ".join(f"{kind}: {problem}" for kind, problem in misses.items())
    raise ParameterError(
        "data_source", f"no synthetic data has the config's columns ({tried}); give a data source"
    )


def check_placement(node_selector: Any, tolerations: Any) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """Validate the ``node_selector`` mapping and the ``tolerations`` list (Kubernetes toleration dicts)."""
    from recpipe.launch.pytorchjob import JobResources, Placement, build_pytorchjob

    if node_selector is None:
        node_selector = {}
    if not isinstance(node_selector, Mapping) or not all(isinstance(v, str) for v in node_selector.values()):
        raise ParameterError("node_selector", f"must map label keys to string values, got {node_selector!r}")
    if tolerations is None:
        tolerations = []
    if isinstance(tolerations, Mapping):
        tolerations = [tolerations]
    if not isinstance(tolerations, list) or not all(isinstance(t, Mapping) for t in tolerations):
        raise ParameterError("tolerations", f"must be a list of toleration mappings, got {tolerations!r}")
    placement = Placement(dict(node_selector), [dict(t) for t in tolerations])
    try:  # the manifest builder checks label keys and toleration fields the way the API server would
        build_pytorchjob("check", "default", "image", ["true"], 1, JobResources(), placement)
    except ValueError as err:
        name = "tolerations" if "toleration" in str(err) else "node_selector"
        raise ParameterError(name, str(err)) from None
    return dict(node_selector), [dict(t) for t in tolerations]


def resolve_config(
    config_path: str,
    backends: str | list[str] | None = None,
    min_auc: float | str | None = None,
    max_auc_drop: float | str | None = None,
    max_logloss_rise: float | str | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> RecpipeConfig:
    """Load ``config_path`` with the run's parameters applied: dotted ``overrides`` (``{"train.max_steps":
    50}``), then the gate thresholds that are set (None or "" keeps the config's ``eval.gate``), then the
    export backends (empty: the config's)."""
    from recpipe.export.backends import parse_backends

    if not config_path or not Path(config_path).is_file():
        raise ParameterError("config", f"config file {config_path!r} does not exist")
    thresholds = gate_overrides(min_auc, max_auc_drop, max_logloss_rise)
    try:
        cfg = load_config(config_path, dict(overrides or {}))
    except ConfigError as err:
        raise ParameterError("config", str(err)) from None
    cfg.eval.gate = cfg.eval.gate.model_copy(update=thresholds)
    if backends is not None and (not isinstance(backends, str) or backends.strip()):
        try:
            cfg.export.backends = parse_backends(backends)  # type: ignore[assignment]
        except ValueError as err:
            raise ParameterError("backends", str(err)) from None
    return cfg


PARTITION_DATE_FORMAT = "%Y%m%d"
DAILY_PARTITIONS = "dt={date-2}..{date-1}"
"""A scheduled run's partitions: the two days before its scheduled time (UTC). Ingest evaluates on the newest
selected one, so the run trains on the day before yesterday (warm-started from the champion, which has seen
every day before it) and is gated, with the champion, on yesterday: a day neither model has trained on. The next
run trains on that day. The same loop as ``recpipe run --days`` (window 1)."""
# ``{date}``: the scheduled time's UTC day; ``{date-N}``: N days before it (``{date-1}``: the day that ended).
_DATE_TOKEN = re.compile(r"\{date(?:-(\d+))?\}")
_ANY_TOKEN = re.compile(r"\{[^{}]*\}")
# A KFP placeholder that no runner filled in (KFP 2.15's backend passed ``{{$.pipeline_job_schedule_time_utc}}``
# through as is, kubeflow/pipelines#12616).
_UNRESOLVED = "{{$."


def is_partition_template(partitions: str | None) -> bool:
    """Whether ``partitions`` holds a ``{date}`` / ``{date-N}`` placeholder (a scheduled run's selector)."""
    return partitions is not None and _DATE_TOKEN.search(partitions) is not None


def parse_schedule_time(value: str | None) -> datetime | None:
    """The run's scheduled time in UTC (KFP's ``PIPELINE_JOB_SCHEDULE_TIME_UTC_PLACEHOLDER``, RFC 3339), or
    None when the run has none (empty: ``recpipe run``; or the placeholder left unresolved by the backend).

    Args:
        value (str | None): e.g. ``"2026-01-08T03:00:00Z"``.

    Raises:
        ParameterError: not an ISO time with a UTC offset.
    """
    if value is None or not value.strip() or value.strip().startswith(_UNRESOLVED):
        return None
    try:
        when = datetime.fromisoformat(value.strip())
    except ValueError:
        raise ParameterError(
            "schedule_time", f"{value!r} is not an ISO 8601 time, e.g. 2026-01-08T03:00:00Z"
        ) from None
    if when.tzinfo is None:  # a time without offset could be any zone's: its day is a guess
        raise ParameterError("schedule_time", f"{value!r} has no UTC offset, e.g. 2026-01-08T03:00:00Z")
    return when.astimezone(UTC)


def expand_partition_template(template: str, schedule_time_iso: str | None) -> str:
    """``template`` with ``{date}`` (the scheduled time's UTC day, YYYYMMDD) and ``{date-N}`` (N days
    earlier) filled in; a selector without placeholders comes back unchanged.

    A daily run scheduled shortly after midnight reads the two days that ended (:data:`DAILY_PARTITIONS`,
    ``dt={date-2}..{date-1}``: train on the first, gate on the second); a rolling week: ``dt={date-8}..{date-1}``.

    Args:
        template (str): a partition selector (``data.partitions``), e.g. ``"dt={date-1}"``.
        schedule_time_iso (str | None): the run's scheduled time (:func:`parse_schedule_time`).

    Raises:
        ParameterError: an unknown placeholder, or a template but no scheduled time (a manual run).

    Example::

        >>> expand_partition_template("dt={date-7}..{date-1}", "2026-01-08T03:00:00Z")
        'dt=20260101..20260107'
    """
    unknown = [t for t in _ANY_TOKEN.findall(template) if not _DATE_TOKEN.fullmatch(t)]
    if unknown:
        raise ParameterError(
            "partitions", f"unknown placeholder(s) {unknown} in {template!r}; use {{date}} or {{date-N}}"
        )
    if not is_partition_template(template):
        return template
    when = parse_schedule_time(schedule_time_iso)
    if when is None:
        raise ParameterError(
            "partitions",
            f"{template!r} is a template filled from the run's scheduled time, and this run has none (not a "
            "recurring run: `recpipe pipeline schedule`); give the partitions themselves, e.g. dt=20260107",
        )
    day = when.date()
    return _DATE_TOKEN.sub(
        lambda m: (day - timedelta(days=int(m.group(1) or 0))).strftime(PARTITION_DATE_FORMAT), template
    )


def run_overrides(
    overrides: Mapping[str, Any] | None, partitions: str | None = "", init_from: str | None = ""
) -> dict[str, Any]:
    """``overrides`` with the pipeline parameters ``partitions`` and ``init_from`` added as
    ``data.partitions`` and ``train.init_from`` (empty: not set, the config's stays).

    Raises:
        ParameterError: a parameter and a ``config_overrides`` entry for the same setting disagree.
    """
    out = dict(overrides or {})
    for name, key, value in (
        ("partitions", "data.partitions", partitions),
        ("init_from", "train.init_from", init_from),
    ):
        if value is None or not str(value).strip():
            continue
        value = str(value).strip()
        if out.get(key) not in (None, value):
            raise ParameterError(
                name, f"{value!r} disagrees with config_overrides {key}={out[key]!r}; give one"
            )
        out[key] = value
    return out


INIT_FROM_CHAMPION_IF_ANY = "champion-if-any"
"""``train.init_from`` of a daily run: the registered model's champion, or from scratch while there is none."""


def resolve_init_from(value: str | None, tracking_uri: str, model_name: str) -> str | None:
    """What ``train.init_from`` starts the run from, checked against the registry before any data moves.

    ``champion-if-any`` becomes the champion's version of ``model_name``, pinned (``models:/NAME/7``: the
    version that was champion when the run started), or None (from scratch) while the model has no champion:
    the first run of a daily loop. A ``models:/NAME@ALIAS`` or ``models:/NAME/VERSION`` given literally must
    exist. A checkpoint folder is passed on as is (the train pod may see folders this step does not).

    Args:
        value (str | None): ``train.init_from``; None or "" trains from scratch.
        tracking_uri (str): the MLflow store of the registry.
        model_name (str): the run's registered model (the one ``champion-if-any`` reads).

    Raises:
        ParameterError: a ``models:/`` URI naming no registered version.
    """
    from recpipe import tracking

    if value is None or not value.strip():
        return None
    value = value.strip()
    if value == INIT_FROM_CHAMPION_IF_ANY:
        champion = tracking.get_version_by_alias(tracking_uri, model_name, tracking.ALIAS_CHAMPION)
        return None if champion is None else f"models:/{model_name}/{champion['version']}"
    if not value.startswith("models:/"):
        return value
    parts = tracking.split_model_uri(value)  # ref: the alias, or the version
    if parts is None:
        raise ParameterError("init_from", f"{value!r} is neither models:/NAME@ALIAS nor models:/NAME/VERSION")
    name, at, ref = parts
    found = (
        tracking.get_version_by_alias(tracking_uri, name, ref) is not None
        if at
        else any(str(v["version"]) == ref for v in tracking.list_models(tracking_uri, name))
    )
    if not found:
        hint = (
            f"; the first run of a daily loop has no champion yet: init_from={INIT_FROM_CHAMPION_IF_ANY}"
            if at and ref == tracking.ALIAS_CHAMPION
            else ""
        )
        from recpipe.redact import redact

        store = redact(tracking_uri)
        raise ParameterError("init_from", f"{value!r}: no such registered version in {store}{hint}")
    return value


def write_config(cfg: RecpipeConfig, path: str | Path) -> Path:
    """The resolved config as YAML: what every later step reads."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False, allow_unicode=True))
    return path


ENV_RUNS = "RECPIPE_RUNS"
ENV_TRACKING_URI = "MLFLOW_TRACKING_URI"


class StoreNotFound(FileNotFoundError):
    """A command that reads the registry found no store where it looked (it creates none)."""


def runs_folder(runs: str | Path | None = None) -> Path:
    """The runs folder (run folders, ``mlflow.db``, ``mlartifacts/``): ``runs`` (``--runs``) >
    ``RECPIPE_RUNS`` > ``./runs``.

    Args:
        runs (str | Path | None): the ``--runs`` option.
    """
    import os

    return Path(runs or os.environ.get(ENV_RUNS) or "runs")


def resolve_tracking_uri(
    mlflow_uri: str | None,
    cfg_uri: str | None,
    default_dir: str | Path | None = None,
    in_cluster: bool = False,
    runs: str | Path | None = None,
    must_exist: bool = False,
) -> str:
    """The one MLflow store of every command: ``mlflow_uri`` (``--tracking-uri``) > ``runs`` (``--runs``:
    ``sqlite:///<runs>/mlflow.db``) > ``MLFLOW_TRACKING_URI`` > ``tracking.uri`` of the config >
    ``sqlite:///<default_dir, else RECPIPE_RUNS, else ./runs>/mlflow.db``.

    Args:
        mlflow_uri (str | None): the ``--tracking-uri`` option or pipeline parameter.
        cfg_uri (str | None): ``tracking.uri`` of the config.
        default_dir (str | Path | None): the runs folder of the last fallback (default :func:`runs_folder`).
        in_cluster (bool): the steps run in pods, where the last fallback would vanish with the pod, so it
            is refused.
        runs (str | Path | None): the ``--runs`` option.
        must_exist (bool): a command that reads the registry: a local store that does not exist is an
            error naming where it looked (:class:`StoreNotFound`), never created empty.
    """
    import os

    from recpipe.tracking.uri import DB_FILE, local_store_path

    if mlflow_uri and mlflow_uri.strip():
        uri, why = mlflow_uri.strip(), "--tracking-uri"
    elif runs:
        uri, why = f"sqlite:///{Path(runs).resolve() / DB_FILE}", "--runs"
    elif os.environ.get(ENV_TRACKING_URI) or cfg_uri:
        uri = os.environ.get(ENV_TRACKING_URI) or str(cfg_uri)
        why = ENV_TRACKING_URI if os.environ.get(ENV_TRACKING_URI) else "tracking.uri of the config"
    else:
        if in_cluster:
            raise ParameterError(
                "mlflow_uri",
                "is empty and neither MLFLOW_TRACKING_URI nor tracking.uri is set (a pod has no local store)",
            )
        folder = runs_folder(default_dir)
        uri = f"sqlite:///{folder.resolve() / DB_FILE}"
        why = (
            ENV_RUNS if not default_dir and os.environ.get(ENV_RUNS) else f"the default runs folder {folder}"
        )
    path = local_store_path(uri)
    if must_exist and path is not None and not path.exists():
        raise StoreNotFound(
            f"no MLflow store at {path} (from {why}); point --runs / {ENV_RUNS} at the folder `recpipe run` "
            f"used, or --tracking-uri / {ENV_TRACKING_URI} at the store"
        )
    if path is not None and uri.startswith("sqlite:"):
        path.parent.mkdir(parents=True, exist_ok=True)  # sqlite creates the file of a store being written
    return uri
