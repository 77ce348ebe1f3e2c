"""Submit the training pipeline to a Kubeflow Pipelines endpoint with ``kfp.Client``: one run, or a
recurring run (a cron schedule) whose runs each train on the partitions of their scheduled day."""

import os
import re
import tempfile
from pathlib import Path
from typing import Any

from pipelines.training_pipeline import PIPELINE_NAME, compile_pipeline, training_pipeline
from recpipe.pipeline.params import (
    DAILY_PARTITIONS,
    INIT_FROM_CHAMPION_IF_ANY,
    expand_partition_template,
    is_partition_template,
)

ENV_TOKEN = "KFP_TOKEN"
DAILY_RUN_NAME = "recpipe-daily"


def check_arguments(arguments: dict[str, Any]) -> None:
    """Refuse names the pipeline does not have before anything is sent (KFP would reject them later,
    with a less direct message)."""
    known = set(training_pipeline.component_spec.inputs or {})
    unknown = sorted(set(arguments) - known)
    if unknown:
        raise ValueError(f"unknown pipeline parameter(s) {unknown}; the pipeline takes {sorted(known)}")


def run_url(host: str, run_id: str) -> str:
    """The KFP UI page of a run (the UI is served by the same endpoint as the API)."""
    return f"{host.rstrip('/')}/#/runs/details/{run_id}"


def _client(host: str, token: str | None, namespace: str | None) -> Any:
    import kfp

    return kfp.Client(
        host=host,
        existing_token=token or os.environ.get(ENV_TOKEN) or None,
        namespace=namespace or "kubeflow",
    )


def submit(
    host: str,
    arguments: dict[str, Any] | None = None,
    experiment: str = "recpipe",
    run_name: str | None = None,
    namespace: str | None = None,
    token: str | None = None,
) -> dict[str, str]:
    """Compile and submit one run; returns ``{"run_id", "url"}``.

    Args:
        host (str): KFP API endpoint, e.g. ``http://localhost:8080`` (a port-forward of ml-pipeline-ui).
        arguments (dict | None): pipeline parameters (see ``training_pipeline``).
        experiment (str): KFP experiment, created if missing.
        run_name (str | None): display name of the run.
        namespace (str | None): Kubeflow profile namespace (multi-user installs).
        token (str | None): bearer token; default env ``KFP_TOKEN`` (e.g. ``kubectl create token …``).
    """
    arguments = dict(arguments or {})
    check_arguments(arguments)
    client = _client(host, token, namespace)
    with tempfile.TemporaryDirectory() as tmp:
        package = compile_pipeline(Path(tmp) / f"{PIPELINE_NAME}.yaml")
        result = client.create_run_from_pipeline_package(
            str(package),
            arguments=arguments,
            run_name=run_name,
            experiment_name=experiment,
            namespace=namespace,
            enable_caching=False,
        )
    return {"run_id": result.run_id, "url": run_url(host, result.run_id)}


# KFP's cron (github.com/robfig/cron) has 6 fields, seconds first: "0 3 * * *" given as is would mean
# second 0 of minute 3 of every hour. The crontab form (5 fields) gets second 0 here.
CRON_FIELDS = (
    ("second", 0, 59),
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day of month", 1, 31),
    ("month", 1, 12),
    ("day of week", 0, 6),
)
CRON_NAMES = {
    "month": {m: i + 1 for i, m in enumerate("JAN FEB MAR APR MAY JUN JUL AUG SEP OCT NOV DEC".split())},
    "day of week": {d: i for i, d in enumerate("SUN MON TUE WED THU FRI SAT".split())},
}
CRON_DESCRIPTORS = {
    "@yearly": "0 0 0 1 1 *",
    "@annually": "0 0 0 1 1 *",
    "@monthly": "0 0 0 1 * *",
    "@weekly": "0 0 0 * * 0",
    "@daily": "0 0 0 * * *",
    "@midnight": "0 0 0 * * *",
    "@hourly": "0 0 * * * *",
}
# Selectors that name no day and still move with time (the newest partitions when the run reads them).
_MOVING_SELECTOR = re.compile(r"^(latest|last:\d+)$")


def kfp_cron(expression: str) -> str:
    """The 6-field cron KFP schedules with (second minute hour day-of-month month day-of-week) for
    ``expression``: the crontab form (5 fields, ``"0 3 * * *"``) gets second 0, KFP's own 6 fields and
    ``@daily`` / ``@hourly`` / ``@weekly`` / ``@monthly`` / ``@yearly`` are accepted; times are the
    scheduler's (UTC on a default install).

    Args:
        expression (str): e.g. ``"0 3 * * *"`` (03:00 every day) or ``"0 0 3 * * 1-5"``.

    Raises:
        ValueError: not 5 or 6 fields, or a field out of its range, naming the field; a ``CRON_TZ=`` /
            ``TZ=`` prefix (robfig/cron v3's), which KFP's scheduler does not read.

    Example::

        >>> kfp_cron("0 3 * * *")
        '0 0 3 * * *'
    """
    text = expression.strip()
    if re.match(r"(CRON_)?TZ=", text):
        raise ValueError(
            f"cron {expression!r}: KFP's cron takes no time zone; its recurring runs fire in the time zone of "
            "KFP's scheduledworkflow controller (CRON_SCHEDULE_TIMEZONE, set by cronScheduleTimezone in "
            "pipeline-install-config; UTC by default): give the time in that zone, without the TZ= prefix"
        )
    if text.lower() in CRON_DESCRIPTORS:
        return CRON_DESCRIPTORS[text.lower()]
    fields = text.split()
    if len(fields) == 5:
        fields = ["0", *fields]
    elif len(fields) != 6:
        raise ValueError(
            f"cron {expression!r} has {len(fields)} fields; give 5 (minute hour day-of-month month "
            "day-of-week, e.g. '0 3 * * *') or KFP's 6 (second first, e.g. '0 0 3 * * *')"
        )
    for field, (name, lo, hi) in zip(fields, CRON_FIELDS, strict=True):
        problem = _cron_field_problem(field, name, lo, hi)
        if problem:
            raise ValueError(f"cron {expression!r}: {name} field {field!r}: {problem}")
    return " ".join(fields)


def _cron_field_problem(field: str, name: str, lo: int, hi: int) -> str | None:
    """What is wrong with one cron field (a comma list of ``*``, ``?``, ``N``, ``N-M``, each with an
    optional ``/step``), or None."""
    names = CRON_NAMES.get(name, {})

    def value(text: str) -> int | None:
        if text.upper() in names:
            return names[text.upper()]
        return int(text) if text.isdigit() else None

    for item in field.split(","):
        base, slash, step = item.partition("/")
        if slash and not (step.isdigit() and int(step) >= 1):
            return f"step {step!r} must be a whole number >= 1"
        if base == "*" or (base == "?" and name in ("day of month", "day of week")):
            continue
        first, dash, last = base.partition("-")
        bounds = [value(first), value(last) if dash else value(first)]
        if None in bounds:
            allowed = f"{lo}-{hi}" + (f" or {', '.join(names)}" if names else "")
            return f"{item!r} is not *, a value ({allowed}), a range N-M or a step"
        a, b = bounds
        if not (lo <= a <= hi and lo <= b <= hi):  # type: ignore[operator]
            return f"{item!r} is outside {lo}-{hi}"
        if a > b:  # type: ignore[operator]
            return f"range {item!r} runs backwards"
    return None


def recurring_run_url(host: str, recurring_run_id: str) -> str:
    """The KFP UI page of a recurring run."""
    return f"{host.rstrip('/')}/#/recurringrun/details/{recurring_run_id}"


def check_schedule_partitions(partitions: str) -> None:
    """Refuse a recurring run's partitions that would read the same data every day: a fixed selector
    (neither a ``{date}`` template nor ``latest`` / ``last:N``); empty keeps the config's ``data.partitions``."""
    if partitions:
        expand_partition_template(partitions, "2000-01-01T00:00:00Z")  # placeholders known
    if partitions and not is_partition_template(partitions) and not _MOVING_SELECTOR.match(partitions):
        raise ValueError(
            f"partitions {partitions!r} name the same data for every run of the schedule; use a template "
            f"filled from each run's scheduled day, e.g. {DAILY_PARTITIONS!r} (or latest, last:N)"
        )


def schedule(
    host: str,
    cron: str,
    partitions: str = DAILY_PARTITIONS,
    init_from: str = INIT_FROM_CHAMPION_IF_ANY,
    arguments: dict[str, Any] | None = None,
    experiment: str = "recpipe",
    name: str = DAILY_RUN_NAME,
    namespace: str | None = None,
    token: str | None = None,
    catchup: bool = False,
) -> dict[str, str]:
    """Create a KFP recurring run of the pipeline; each run fills ``{date}`` in ``partitions`` from its
    own scheduled time. Returns ``{"recurring_run_id", "cron", "url"}``.

    Every check runs before the endpoint is contacted. Runs never overlap (``max_concurrency=1``: each
    starts from the champion the previous one left).

    Args:
        host (str): KFP API endpoint, e.g. ``http://localhost:8080``.
        cron (str): when (:func:`kfp_cron`: 5-field crontab or KFP's 6 fields), e.g. ``"0 3 * * *"``.
        partitions (str): the pipeline's ``partitions``: ``dt={date-2}..{date-1}`` (default: train on the
            day before yesterday, gate on yesterday, UTC), ``dt={date-8}..{date-1}`` (a rolling week), ``last:2``.
        init_from (str): the pipeline's ``init_from`` (default ``champion-if-any``: yesterday's champion,
            from scratch on the first day).
        arguments (dict | None): other pipeline parameters (see ``training_pipeline``).
        experiment (str): KFP experiment, created if missing.
        name (str): the recurring run's display name.
        namespace (str | None): Kubeflow profile namespace (multi-user installs).
        token (str | None): bearer token; default env ``KFP_TOKEN``.
        catchup (bool): after a pause, start one run per missed time (each on its own day) instead of
            only the latest.

    Raises:
        ValueError: a bad cron, unknown parameter, fixed partitions, or parameters given twice.
    """
    arguments = dict(arguments or {})
    for key, value in (("partitions", partitions), ("init_from", init_from)):
        if key in arguments and arguments[key] != value:
            raise ValueError(f"{key} given twice ({value!r} and --param {key}={arguments[key]!r}); give one")
        arguments[key] = value
    check_arguments(arguments)
    check_schedule_partitions(partitions)
    kfp_expression = kfp_cron(cron)
    client = _client(host, token, namespace)
    experiment_id = client.create_experiment(experiment, namespace=namespace).experiment_id
    with tempfile.TemporaryDirectory() as tmp:
        package = compile_pipeline(Path(tmp) / f"{PIPELINE_NAME}.yaml")
        job = client.create_recurring_run(
            experiment_id=experiment_id,
            job_name=name,
            cron_expression=kfp_expression,
            max_concurrency=1,
            no_catchup=not catchup,
            params=arguments,
            pipeline_package_path=str(package),
            enable_caching=False,
        )
    rid = job.recurring_run_id
    return {"recurring_run_id": rid, "cron": kfp_expression, "url": recurring_run_url(host, rid)}
