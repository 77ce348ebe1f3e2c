"""What a pipeline run did, read back from its MLflow run and the registry (``recpipe run`` prints it)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recpipe.redact import redact

ROW_COUNTS = ("rows_read", "rows_used", "rows_skipped", "truncated_histories")
# The most drifting features the summary names (of the evaluate step's drift.* metrics).
DRIFT_SHOWN = 3


@dataclass
class RunSummary:
    """What a pipeline run did, read back from its MLflow run and the registry."""

    run_id: str | None
    status: str
    tracking_uri: str
    model_name: str | None = None
    outcome: str | None = None
    failure_reason: str | None = None
    seconds: float = 0.0
    data_source: str | None = None
    auc: float | None = None
    gauc: float | None = None
    logloss: float | None = None
    oracle_auc: float | None = None
    task_auc: dict[str, float] = field(default_factory=dict)  # a multi-task model's AUC per label column
    recall: dict[int, float] = field(
        default_factory=dict
    )  # a retrieval model's recall@K over its catalogue, by K
    # The generator's oracle recall@K over all the rows it wrote (``recpipe run`` on generated retrieval data).
    oracle_recall: dict[int, float] = field(default_factory=dict)
    gate_passed: bool | None = None
    gate_reasons: list[str] = field(default_factory=list)
    champion_source: str | None = None
    # The eval split's drift against the training split (the evaluate step's drift.* metrics): the largest
    # PSI, and the features with the largest PSI and new-id rate, largest first.
    psi_max: float | None = None
    drift_psi: list[tuple[str, float]] = field(default_factory=list)
    drift_new_ids: list[tuple[str, float]] = field(default_factory=list)
    backends: dict[str, str] = field(default_factory=dict)
    registered_version: int | None = None
    versions: list[dict[str, Any]] = field(default_factory=list)
    run_dir: str | None = None
    # Per pass ("train"): rows_read, rows_used, rows_skipped, truncated_histories (MLflow metrics).
    rows: dict[str, dict[str, int]] = field(default_factory=dict)
    # ``--runner containers``: (containers the engine started, tasks kfp.local ran, engine, train's image).
    containers: tuple[int, int, str, str] | None = None

    def format(self) -> str:
        """The summary ``recpipe run`` prints."""

        def f(v: float | None) -> str:
            return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.4f}"

        mins, secs = divmod(int(round(self.seconds)), 60)
        lines = [f"recpipe run: {self.status} in {mins}m{secs:02d}s  (MLflow run {self.run_id})"]
        if self.data_source:
            lines.append(f"  data          {redact(self.data_source)}")
        for name, r in self.rows.items():
            lines.append(
                f"  rows {name:<8} read {r.get('rows_read', 0):,}, used {r.get('rows_used', 0):,}, "
                f"skipped {r.get('rows_skipped', 0):,}, truncated histories {r.get('truncated_histories', 0):,}"
            )
        if self.auc is not None:
            ratio = f"  = {self.auc / self.oracle_auc:.1%} of oracle" if self.oracle_auc else ""
            lines.append(f"  AUC           {f(self.auc)} vs oracle {f(self.oracle_auc)}{ratio}")
            lines.append(f"  GAUC/logloss  {f(self.gauc)} / {f(self.logloss)}")
            if self.task_auc:
                lines.append("  AUC per task  " + ", ".join(f"{t} {f(v)}" for t, v in self.task_auc.items()))
        if self.recall:
            oracle = {
                k: f" (oracle {f(self.oracle_recall[k])})" for k in self.recall if k in self.oracle_recall
            }
            lines.append(
                "  recall        "
                + ", ".join(f"@{k} {f(v)}{oracle.get(k, '')}" for k, v in sorted(self.recall.items()))
            )
        if self.gate_passed is not None:
            lines.append(
                f"  gate          {'PASSED' if self.gate_passed else 'FAILED'} (champion: {self.champion_source})"
            )
            # The champion's provenance is on the line above; each reason repeats it.
            lines += [f"                {r.split(' (champion ')[0]}" for r in self.gate_reasons]
        if self.psi_max is not None or self.drift_new_ids:
            psi = ", ".join(f"{k} {v:.4f}" for k, v in self.drift_psi)
            line = f"  drift         psi max {f(self.psi_max)}" + (f" ({psi})" if psi else "")
            if self.drift_new_ids:
                line += "; new ids " + ", ".join(f"{k} {v:.1%}" for k, v in self.drift_new_ids)
            lines.append(line)
        if self.backends:
            lines.append("  exported      " + ", ".join(f"{b} ({p})" for b, p in self.backends.items()))
        if self.registered_version is not None:
            lines.append(f"  registered    {self.model_name} v{self.registered_version}")
        for v in self.versions:
            aliases = ",".join(v["aliases"]) or "-"
            lines.append(
                f"                v{v['version']:<3} {aliases:<20} {_headline(v)}  gate {v['gate_passed']}"
            )
        if self.outcome:
            lines.append(f"  outcome       {self.outcome}")
        if self.failure_reason:
            reason = redact(self.failure_reason).strip().splitlines()
            if len(reason) > 6:  # a traceback: its first line and the error at its end
                reason = [
                    *reason[:1],
                    "  ...",
                    *reason[-3:],
                    "  (whole reason: the MLflow run's tag failure_reason)",
                ]
            lines.append(f"  failed        {reason[0]}")
            lines += [f"                {r}" for r in reason[1:]]
        if self.containers:
            started, tasks, engine, train_image = self.containers
            lines.append(
                f"  containers    {started}/{tasks} steps, each in its image ({engine}; train in {train_image})"
            )
        if self.run_dir:
            log = Path(self.run_dir) / "pipeline.log"
            lines.append(
                f"  run folder    {self.run_dir}" + (f"  (step logs: {log.name})" if log.is_file() else "")
            )
        lines.append(f"  MLflow UI     mlflow ui --backend-store-uri {self.tracking_uri} --port 5000")
        return "\n".join(lines)


def find_run(
    tracking_uri: str, since: float, experiment: str | None = None, model: str | None = None
) -> str | None:
    """The newest MLflow run started at or after ``since`` (seconds since the epoch); with ``model``, the newest
    whose ``registered_model`` tag is ``model`` (a pair run has one run per model)."""
    from recpipe.tracking.uri import client

    c = client(tracking_uri)
    exps = [c.get_experiment_by_name(experiment)] if experiment else c.search_experiments()
    ids = [e.experiment_id for e in exps if e is not None]
    if not ids:
        return None
    runs = c.search_runs(
        ids,
        filter_string=f"attributes.start_time >= {int(since * 1000)}"
        + (f" and tags.registered_model = '{model}'" if model else ""),
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    return runs[0].info.run_id if runs else None


def summarize(
    tracking_uri: str,
    run_id: str | None = None,
    since: float | None = None,
    data_source: str | None = None,
    run_dir: str | Path | None = None,
    seconds: float = 0.0,
    error: str | None = None,
    model: str | None = None,
) -> RunSummary:
    """Read a pipeline run back from MLflow (``run_id``, or the newest started after ``since``, of ``model``
    if given)."""
    from recpipe import tracking

    if run_id is None and since is not None:
        run_id = find_run(tracking_uri, since, model=model)
    s = RunSummary(run_id, "FAILED" if error else "UNKNOWN", tracking_uri, seconds=seconds, data_source=data_source,
                   run_dir=None if run_dir is None else str(run_dir))  # fmt: skip
    if run_id is None:
        s.failure_reason = error or "no MLflow run was created (the first step failed)"
        return s
    info = tracking.run_summary(run_id, uri=tracking_uri)
    tags, metrics = info["tags"], info["metrics"]
    s.status = "FAILED" if error and info["status"] != "FAILED" else info["status"]
    s.failure_reason = tags.get("failure_reason") or error
    s.outcome = tags.get("pipeline.summary")
    s.model_name = tags.get("registered_model")
    s.auc, s.gauc, s.logloss = metrics.get("eval.auc"), metrics.get("eval.gauc"), metrics.get("eval.logloss")
    s.oracle_auc = metrics.get("eval.oracle_auc", metrics.get("data.oracle_auc"))
    s.task_auc = {
        k.split(".")[1]: v
        for k, v in metrics.items()
        if k.startswith("eval.") and k.count(".") == 2 and k.endswith(".auc")
    }
    s.recall = {
        int(k.removeprefix("eval.recall_at_")): v
        for k, v in metrics.items()
        if k.startswith("eval.recall_at_") and k.removeprefix("eval.recall_at_").isdigit()
    }
    for name in ("train", "eval"):
        counts = {k: int(metrics[f"{name}.{k}"]) for k in ROW_COUNTS if f"{name}.{k}" in metrics}
        if counts:
            s.rows[name] = counts
    if "gate.passed" in tags:
        s.gate_passed = tags["gate.passed"] == "true"
        s.gate_reasons = [r for r in tags.get("gate.reasons", "").split("\n") if r]
        s.champion_source = tags.get("gate.champion_source")
    s.psi_max = metrics.get("drift.psi_max")
    s.drift_psi = _largest(metrics, "drift.psi.")
    s.drift_new_ids = [kv for kv in _largest(metrics, "drift.new_id_rate.") if kv[1] > 0]
    for key, value in sorted(tags.items()):
        if key.startswith("export.") and key.endswith(".parity"):
            s.backends[key.split(".")[1]] = value
    if tags.get("registered.version"):
        s.registered_version = int(tags["registered.version"])
    if s.model_name:
        s.versions = tracking.list_models(tracking_uri, s.model_name)
    return s


# A model's summary lines that a pair run shows once (the outcome: the pair's; the folder and the store: shared).
_PAIR_LINES = ("  outcome ", "  run folder ", "  MLflow UI ")


@dataclass
class PairSummary:
    """What a pair run did: each model's run (:class:`RunSummary`) and the pair's outcome."""

    retriever: RunSummary
    ranker: RunSummary
    seconds: float = 0.0

    @property
    def status(self) -> str:
        both = {self.retriever.status, self.ranker.status}
        return "FINISHED" if both == {"FINISHED"} else "FAILED"

    @property
    def outcome(self) -> str | None:
        """The pair's outcome (both runs record the same)."""
        return self.retriever.outcome or self.ranker.outcome

    def format(self) -> str:
        """The summary ``recpipe run --ranker-config`` prints: each model's, then the pair's outcome."""
        mins, secs = divmod(int(round(self.seconds)), 60)
        lines = [f"recpipe run (retriever + ranker): {self.status} in {mins}m{secs:02d}s"]
        for role, s in (("retriever", self.retriever), ("ranker", self.ranker)):
            lines.append(f"  {role:<13} {s.model_name or '?'}  ({s.status}, MLflow run {s.run_id})")
            # Each model's own lines; the outcome, run folder and UI are the pair's, shown once below.
            lines += ["  " + line for line in s.format().splitlines()[1:] if not line.startswith(_PAIR_LINES)]
        versions = [
            f"{s.model_name} v{s.registered_version}"
            for s in (self.retriever, self.ranker)
            if s.registered_version
        ]
        if versions:
            lines.append(f"  pair          {' + '.join(versions)}")
        lines.append(f"  outcome       {self.outcome or 'none (the run failed)'}")
        lines += [line for line in self.retriever.format().splitlines() if line.startswith(_PAIR_LINES[1:])]
        return "\n".join(lines)


def _headline(version: dict[str, Any]) -> str:
    """A registered version's headline metric: its AUC, or a retrieval version's recall at its gate's K (a tag)."""
    tags = version.get("tags") or {}
    k = tags.get("gate_k")
    if k and f"recall_at_{k}" in tags:
        return f"recall@{k} {float(tags[f'recall_at_{k}']):.4f}"
    auc = version["metrics"].get("auc")
    return f"auc {'n/a' if auc is None or math.isnan(auc) else f'{auc:.4f}'}"


def _largest(metrics: dict[str, float], prefix: str) -> list[tuple[str, float]]:
    """The :data:`DRIFT_SHOWN` metrics named ``<prefix><feature>`` with the largest values, as (feature, value)."""
    found = [(k.removeprefix(prefix), float(v)) for k, v in metrics.items() if k.startswith(prefix)]
    return sorted(found, key=lambda kv: (-kv[1], kv[0]))[:DRIFT_SHOWN]
