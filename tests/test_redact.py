"""Credentials in URIs never reach a log, the run summary, an MLflow param or tag."""

from __future__ import annotations

import pytest

from recpipe.pipeline.summary import RunSummary
from recpipe.redact import redact

SECRET = "s3://AKIAEXAMPLE:wJalrXUtnFEMI@bucket/data/part-0.parquet"


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (SECRET, "s3://***@bucket/data/part-0.parquet"),
        ("error reading 's3://k:s@b/x' (403)", "error reading 's3://***@b/x' (403)"),
        ("https://user@host/p and gs://a:b@c/d", "https://***@host/p and gs://***@c/d"),
        ("odps://p/tables/t?access_key=abc&part=1", "odps://p/tables/t?access_key=***&part=1"),
        ("http://h/x?token=t0k;sig=1", "http://h/x?token=***;sig=1"),
        ("s3://bucket/data/a@b.parquet", "s3://bucket/data/a@b.parquet"),  # an @ in the path is no user
        ("/local/data and synthetic:taobao?rows=10", "/local/data and synthetic:taobao?rows=10"),
    ],
)
def test_redact(text, want):
    assert redact(text) == want


def test_summary_redacts_the_source_and_the_failure():
    s = RunSummary(
        None, "FAILED", "sqlite:///x.db", data_source=SECRET, failure_reason=f"cannot read {SECRET}"
    )
    text = s.format()
    assert "wJalrXUtnFEMI" not in text and "AKIAEXAMPLE" not in text
    assert "s3://***@bucket/data/part-0.parquet" in text
