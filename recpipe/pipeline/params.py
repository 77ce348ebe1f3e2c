"""The pipeline's parameters, checked before any data moves: each bad one fails with its name."""

from __future__ import annotations

from collections.abc import Mapping
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
        raise ParameterError("data_source", f"{source!r} is not readable: {err}") from None


def check_data_fits(cfg: RecpipeConfig, source: str) -> None:
    """Fail fast when ``source``'s schema lacks columns ``cfg`` reads (every problem listed), before
    any row is ingested.

    Args:
        cfg (RecpipeConfig): the resolved config.
        source (str): the data source (already readable: :func:`check_data_source`).
    """
    from recpipe.features.build import build_feature_spec
    from recpipe.features.fits import SchemaMismatch, check_source

    try:
        check_source(build_feature_spec(cfg), source, cfg.csv_options())
    except SchemaMismatch as err:
        raise ParameterError("data_source", str(err)) from None


def synthetic_source_for(cfg: RecpipeConfig, rows: int) -> str:
    """The ``synthetic:`` source whose columns fit ``cfg`` (Taobao for a Taobao-schema config, Criteo for a
    Criteo-schema one), with ``rows`` rows.

    Args:
        cfg (RecpipeConfig): the resolved config.
        rows (int): rows to generate.

    Raises:
        ParameterError: no synthetic kind has the config's columns (give a data source).
    """
    from recpipe.data.sources import SYNTHETIC_OPTIONS
    from recpipe.features.build import build_feature_spec
    from recpipe.features.fits import schema_problems, source_schema

    spec = build_feature_spec(cfg)
    misses = {}
    for kind in SYNTHETIC_OPTIONS:
        problems = schema_problems(spec, source_schema(f"synthetic:{kind}?rows=10"))
        if not problems:
            return f"synthetic:{kind}?rows={int(rows)}"
        misses[kind] = problems[0]
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
    values: dict[str, Any] = dict(overrides or {})
    values.update(gate_overrides(min_auc, max_auc_drop, max_logloss_rise))
    try:
        cfg = load_config(config_path, values)
    except ConfigError as err:
        raise ParameterError("config", str(err)) from None
    if backends is not None and (not isinstance(backends, str) or backends.strip()):
        try:
            cfg.export.backends = parse_backends(backends)  # type: ignore[assignment]
        except ValueError as err:
            raise ParameterError("backends", str(err)) from None
    return cfg


def write_config(cfg: RecpipeConfig, path: str | Path) -> Path:
    """The resolved config as YAML: what every later step reads."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False, allow_unicode=True))
    return path


def resolve_tracking_uri(
    mlflow_uri: str | None, cfg_uri: str | None, default_dir: str | Path = "runs", in_cluster: bool = False
) -> str:
    """``mlflow_uri`` > ``MLFLOW_TRACKING_URI`` > ``tracking.uri`` of the config > ``sqlite:///<default_dir>/mlflow.db``.

    ``in_cluster``: the steps run in pods, where the last fallback would vanish with the pod, so it is
    refused.
    """
    import os

    from recpipe.tracking import tracking_uri

    if mlflow_uri and mlflow_uri.strip():
        return mlflow_uri.strip()
    if in_cluster and not os.environ.get("MLFLOW_TRACKING_URI") and not cfg_uri:
        raise ParameterError(
            "mlflow_uri",
            "is empty and neither MLFLOW_TRACKING_URI nor tracking.uri is set (a pod has no local store)",
        )
    return tracking_uri(cfg_uri, default_dir)
