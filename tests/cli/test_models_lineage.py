"""``recpipe models lineage NAME``: the chain as a table and as JSON, after promotions and rollbacks, with a
deleted parent (shown, exit 0) and a tampered cycle (reported, exit 1); a real sqlite store."""

from __future__ import annotations

import json

import pytest
from chain_days import three_days
from mlflow import MlflowClient

from recpipe import tracking
from recpipe.cli.main import main


@pytest.fixture
def store(monkeypatch, tmp_path):
    for name in ("MLFLOW_TRACKING_URI", "RECPIPE_RUNS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RECPIPE_LOG_DIR", str(tmp_path / "logs"))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    three_days(uri, "ctr", tmp_path)
    for v in (1, 2, 3):
        tracking.promote(uri, "ctr", v)
    return uri


def _rows(out: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines()[2:]]


def test_lineage_table_and_json_follow_the_champion_and_keep_the_parents(store, capsys):
    assert main(["models", "lineage", "ctr", "--tracking-uri", store]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "lineage of ctr from v3, newest first"
    rows = _rows(out)
    assert [(r[0], r[1], r[2], r[3], r[6], r[-1]) for r in rows] == [
        ("3", "challenger,champion", "0.7200", "pass", "v2", "dt=20260105"),
        ("2", "-", "0.7100", "pass", "v1", "dt=20260104"),
        ("1", "-", "0.7000", "pass", "root", "dt=20260101,dt=20260102,dt=20260103"),
    ]
    assert [r[7] for r in rows] == [tracking.get_version(store, "ctr", v)["run_id"] for v in (3, 2, 1)]

    assert main(["promote", "--model", "ctr", "--rollback", "--tracking-uri", store]) == 0
    assert capsys.readouterr().out.strip() == "rolled back: ctr v2 is champion (was v3)"
    assert main(["models", "lineage", "ctr", "--tracking-uri", store]) == 0  # from the champion, now v2
    assert [r[0] for r in _rows(capsys.readouterr().out)] == ["2", "1"]
    assert main(["models", "lineage", "ctr", "--version", "3", "--json", "--tracking-uri", store]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc == json.loads(json.dumps(tracking.lineage(store, "ctr", 3), default=str))
    assert [(e["version"], e["aliases"]) for e in doc["entries"]] == [
        (3, ["challenger"]),
        (2, ["champion"]),
        (1, []),
    ]


def test_a_deleted_parent_is_shown_and_a_cycle_fails(store, capsys):
    MlflowClient(store).delete_model_version("ctr", "2")
    assert main(["models", "lineage", "ctr", "--tracking-uri", store]) == 0
    out = capsys.readouterr().out
    assert _rows(out)[1][:2] == ["2", "(deleted)"] and "ctr v2 no longer exists (deleted)" in out
    assert main(["promote", "--model", "ctr", "--rollback", "--tracking-uri", store]) == 2
    assert "cannot roll back to v2, the previous champion: it no longer exists" in capsys.readouterr().err

    tracking.set_version_tags(store, "ctr", 3, {"parent_version": "3"})
    assert main(["models", "lineage", "ctr", "--tracking-uri", store]) == 1
    assert "cycle: ctr v3 -> ctr v3 again" in capsys.readouterr().err
    assert main(["models", "lineage", "nope", "--tracking-uri", store]) == 2
    assert "no registered model 'nope'" in capsys.readouterr().err
