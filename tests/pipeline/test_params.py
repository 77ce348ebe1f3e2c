"""The daily loop's run parameters: partition templates filled from the scheduled time, the pipeline
parameters as config overrides, and ``init_from`` checked and resolved against a real sqlite registry."""

import pytest

from recpipe import tracking
from recpipe.config import ParameterError
from recpipe.pipeline.params import (
    expand_partition_template,
    parse_schedule_time,
    resolve_init_from,
    run_overrides,
)


@pytest.mark.parametrize(
    ("template", "when", "partitions"),
    [
        ("dt={date}", "2026-01-08T03:00:00Z", "dt=20260108"),
        ("dt={date-1}", "2026-01-08T03:00:00Z", "dt=20260107"),  # the daily default: the day that ended
        ("dt={date-1}", "2026-03-01T00:00:00Z", "dt=20260228"),  # across a month end
        ("dt={date-1}", "2024-03-01T00:30:00Z", "dt=20240229"),  # a leap year
        ("dt={date-1}", "2026-01-01T03:00:00Z", "dt=20251231"),  # across a year end
        ("dt={date-7}..{date-1}", "2026-01-08T03:00:00Z", "dt=20260101..20260107"),  # a rolling week
        ("dt={date-0}", "2026-01-08T03:00:00Z", "dt=20260108"),
        # KFP sends UTC ("Z"); another offset is turned into UTC first: 23:30 at -02:00 is 01:30 UTC next day.
        ("dt={date}", "2026-01-08T23:30:00-02:00", "dt=20260109"),
        ("dt={date}", "2026-01-08T03:00:00.123456Z", "dt=20260108"),  # a newer kfp.local's fraction
        ("ds={date-1}/hour=03", "2026-01-08T04:00:00Z", "ds=20260107/hour=03"),
    ],
)
def test_expand_partition_template(template, when, partitions):
    assert expand_partition_template(template, when) == partitions


def test_selectors_without_placeholders_need_no_scheduled_time():
    for selector in ("dt=20260107", "latest", "last:7", "dt=20260101..20260107"):
        assert expand_partition_template(selector, None) == selector
        assert expand_partition_template(selector, "2026-01-08T03:00:00Z") == selector


@pytest.mark.parametrize(
    "when",
    [None, "", "  ", "{{$.pipeline_job_schedule_time_utc}}"],  # a backend that leaves it unresolved
)
def test_a_template_without_a_scheduled_time_is_refused(when):
    with pytest.raises(ParameterError) as err:
        expand_partition_template("dt={date-1}", when)
    assert err.value.parameter == "partitions"
    assert "'dt={date-1}' is a template filled from the run's scheduled time, and this run has none" in str(
        err.value
    )


@pytest.mark.parametrize(
    ("template", "when", "parameter", "text"),
    [
        ("dt={day}", "2026-01-08T03:00:00Z", "partitions", "unknown placeholder(s) ['{day}']"),
        ("dt={date+1}", "2026-01-08T03:00:00Z", "partitions", "['{date+1}']"),
        ("dt={date}", "yesterday", "schedule_time", "'yesterday' is not an ISO 8601 time"),
        ("dt={date}", "2026-01-08T03:00:00", "schedule_time", "has no UTC offset"),
    ],
)
def test_bad_templates_and_times_name_the_parameter(template, when, parameter, text):
    with pytest.raises(ParameterError) as err:
        expand_partition_template(template, when)
    assert err.value.parameter == parameter and text in str(err.value)


def test_parse_schedule_time_is_utc():
    when = parse_schedule_time("2026-01-08T05:00:00+02:00")
    assert when.isoformat() == "2026-01-08T03:00:00+00:00"
    assert parse_schedule_time("{{$.pipeline_job_schedule_time_utc}}") is None


def test_run_overrides_thread_the_parameters_as_settings():
    base = {"train.max_steps": 5}
    assert run_overrides(base, "", "") == base  # empty: not set, the config's stays
    assert run_overrides(base, " dt={date-1} ", "champion-if-any") == {
        "train.max_steps": 5,
        "data.partitions": "dt={date-1}",
        "train.init_from": "champion-if-any",
    }
    assert run_overrides({"data.partitions": "latest"}, "latest", None) == {"data.partitions": "latest"}
    with pytest.raises(ParameterError, match="parameter init_from: 'a' disagrees with config_overrides"):
        run_overrides({"train.init_from": "b"}, "", "a")


@pytest.fixture
def registry(tmp_path, monkeypatch):
    """A sqlite store whose model ``m`` has versions 1 and 2, version 2 the champion."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_id = tracking.start_or_resume_run(uri, "e", run_name="r")
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "MLmodel").write_text("flavors: {}\n")
    tracking.log_model_dir(run_id, folder, "model", uri=uri)
    for _ in range(2):
        tracking.register_version(uri, "m", run_id, "model")
    tracking.set_alias(uri, "m", tracking.ALIAS_CHAMPION, 2)
    return uri


def test_init_from_champion_if_any_pins_the_champion_or_starts_from_scratch(registry):
    assert resolve_init_from("champion-if-any", registry, "m") == "models:/m/2"
    # The first day of a daily loop: nothing registered yet, or no champion yet.
    assert resolve_init_from("champion-if-any", registry, "new-model") is None
    tracking.registry.delete_alias(registry, "m", tracking.ALIAS_CHAMPION)
    assert resolve_init_from("champion-if-any", registry, "m") is None
    assert resolve_init_from("", registry, "m") is None and resolve_init_from(None, registry, "m") is None


def test_init_from_uris_must_name_a_registered_version(registry):
    for uri in ("models:/m@champion", "models:/m/1", "models:/m/2"):
        assert resolve_init_from(uri, registry, "other") == uri
    assert resolve_init_from("/workspace/runs/7/checkpoint", registry, "m") == "/workspace/runs/7/checkpoint"
    cases = {
        "models:/m@challenger": "no such registered version",
        "models:/m/3": "no such registered version",
        "models:/nope@champion": "init_from=champion-if-any",  # the first day's hint
        "models:/m": "neither models:/NAME@ALIAS nor models:/NAME/VERSION",
    }
    for value, text in cases.items():
        with pytest.raises(ParameterError) as err:
            resolve_init_from(value, registry, "m")
        assert err.value.parameter == "init_from" and text in str(err.value), value
