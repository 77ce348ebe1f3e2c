"""register: log the served model (an MLflow pyfunc over the export, FG inside) and register it as a new
version with alias ``challenger``; the evaluation and gate go on the version as tags. A retrieval model's report
and export are registered by :mod:`recpipe.stages.register_retrieval` (the sealed export folder, no pyfunc yet)."""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from recpipe.runlog import NULL_LOG, RunLog, failing

MODEL_ARTIFACT = "model"
SERVING_PINS = ("torch", "numpy", "pyarrow", "pandas", "safetensors", "onnxruntime", "pyyaml", "pydantic")


@dataclass
class RegisterResult:
    model_name: str
    version: int
    model_uri: str
    serving_backend: str
    aliases: list[str] = field(default_factory=list)
    run_id: str = ""

    def outcome(self) -> str:
        return f"registered: {self.model_name} v{self.version} ({self.serving_backend}) as {','.join(self.aliases)}"


def _pins() -> list[str]:
    import recpipe

    pins = [f"recpipe=={recpipe.__version__}"]
    for dist in SERVING_PINS:
        try:
            pins.append(f"{dist}=={metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            continue
    return pins


def run(
    exported_dir: str,
    report_path: str,
    model_name: str,
    tracking_uri: str,
    data_digest: str | None = None,
    experiment: str = "recpipe",
    log: RunLog = NULL_LOG,
    example_data: str | None = None,
) -> RegisterResult:
    """Register the export in ``exported_dir`` as a new version of ``model_name`` with alias ``challenger``.

    Args:
        exported_dir (str): folder written by ``export`` (``<backend>/`` folders with manifests).
        report_path (str): report JSON written by ``evaluate`` (candidate metrics and gate decision).
        model_name (str): registered model name (created if missing).
        tracking_uri (str): MLflow tracking/registry URI.
        data_digest (str | None): digest of the eval data (default: the report's, if any).
        experiment (str): experiment of a new run (when ``log`` records nothing).
        log (RunLog): the pipeline's run, which logs the model (default: a new run in ``experiment``).
        example_data (str | None): rows whose first two (feature columns only) become the version's
            ``input_example``; the input columns (every feature column, optional: ``metadata.raw_columns``)
            come from ``fg.json``.

    Version tags: ``auc``, ``gauc``, ``logloss``, ``gate_passed``, ``gate_reasons`` (JSON list),
    ``data_digest``, ``serving_backend``, ``backends``, ``parity.<backend>``, ``champion_source``, and the
    chain read from the run's tags (:func:`recpipe.tracking.chain_tags`): ``parent_version``,
    ``parent_model``, ``partitions`` (cumulative), ``partition_digests``, ``partitions_added``,
    ``eval_partitions``, ``partitions_count``, ``partitions_digest``.
    """
    from recpipe import tracking
    from recpipe.eval.evaluation import read_report
    from recpipe.export.layout import POINTER
    from recpipe.export.loaders import served_folder
    from recpipe.export.outcome import read_outcome
    from recpipe.features.spec import FeatureSpec
    from recpipe.tracking.pyfunc import ARTIFACT, CODE_PATH, model_signature, raw_columns

    if log.run_id is None:  # the model is logged to a run: a run of its own
        run_id = tracking.start_or_resume_run(tracking_uri, experiment, run_name=f"register-{model_name}")
        log = tracking.MlflowRunLog(run_id, tracking_uri)
    run_id = log.run_id
    with failing(log, "register"):
        report = read_report(report_path)
        if report.get("kind") == "retrieval":  # the two towers' export: recpipe.stages.register_retrieval
            from recpipe.stages.register_retrieval import RETRIEVAL_SERVING, register_retrieval

            version, model_uri = register_retrieval(
                exported_dir, dict(report), model_name, tracking_uri, data_digest, log, MODEL_ARTIFACT
            )
            aliases = tracking.get_version(tracking_uri, model_name, version)["aliases"]
            return RegisterResult(model_name, version, model_uri, RETRIEVAL_SERVING, aliases, run_id)
        cand, gate = report["candidate"], report["gate"]
        served = served_folder(exported_dir)  # the served backend's folder (rtp, else onnx, jit, aoti)
        backend = served.name
        outcome = read_outcome(exported_dir)
        exports = outcome.backends if outcome else {}
        spec = FeatureSpec.load(served / "fg.json")
        model_uri = tracking.log_pyfunc_model(  # models from code: no pickle; sealed by a manifest
            run_id,
            CODE_PATH,
            {ARTIFACT: str(served)},
            MODEL_ARTIFACT,
            pip_requirements=_pins(),
            signature=model_signature(spec.output_columns()),
            input_example=_example(example_data, spec),
            metadata={"raw_columns": raw_columns(spec)},
            uri=tracking_uri,
        )
        manifests = Path(exported_dir) / POINTER
        if manifests.is_file():
            log.log_artifact(manifests, "export")
        tags = tracking.eval_version_tags(
            auc=cand.get("auc"),
            gauc=cand.get("gauc"),
            logloss=cand.get("logloss"),
            gate_passed=bool(gate["passed"]),
            gate_reasons=gate["reasons"],
            data_digest=data_digest or report.get("data_digest") or "unknown",
            tasks=cand.get("tasks"),
        )
        tags.update(
            {
                "serving_backend": backend,
                "backends": ",".join(exports),
                "champion_source": gate.get("champion_source", "none"),
                **{f"parity.{n}": b.parity_text() for n, b in exports.items()},
                **{f"exported.{n}": b.folder or "" for n, b in exports.items()},
            }
        )
        tags.update(tracking.chain_tags(tracking_uri, model_name, log.tags(), run_id))
        version = tracking.register_version(tracking_uri, model_name, run_id, model_uri, tags=tags)
        tracking.set_alias(tracking_uri, model_name, tracking.ALIAS_CHALLENGER, version)
        log.set_tags(
            {"registered.model": model_name, "registered.version": version, "registered.model_uri": model_uri}
        )
        aliases = tracking.get_version(tracking_uri, model_name, version)["aliases"]
    return RegisterResult(model_name, version, model_uri, backend, aliases, run_id)


def _example(data: str | None, spec: Any) -> Any:
    """The first two rows of ``data``, feature columns only, as the pandas DataFrame a client sends."""
    if not data:
        return None
    import pyarrow as pa

    from recpipe.data.sharding import Shard
    from recpipe.data.sources import open_source
    from recpipe.features.raw import column_kinds

    batch = next(iter(open_source(data).iter_batches(Shard(0, 1), batch_rows=2))).batch
    columns = [c for c in column_kinds(spec, with_labels=False) if c in batch.schema.names]
    rows = pa.Table.from_batches([batch.select(columns).slice(0, 2)])
    # A DECIMAL column (ODPS, Hive) as a JSON client sends it, a number (MLflow writes the example as JSON).
    # A whole DECIMAL too large for int64 goes as its digits, which FG reads as the same id.
    for i, column in enumerate(rows.schema):
        if pa.types.is_decimal(column.type):
            values = rows.column(i)
            try:
                values = values.cast(pa.int64() if column.type.scale == 0 else pa.float64())
            except pa.ArrowInvalid:
                values = values.cast(pa.string())
            rows = rows.set_column(i, column.name, values)
    return rows.to_pandas()
