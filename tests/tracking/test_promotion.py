"""Promotion lifecycle with a real pyfunc model, refusal, forced promotion, rollback, and two
processes promoting at once; against sqlite and (slow) a real MLflow server."""

from __future__ import annotations

import json
import multiprocessing
import threading
import time
from pathlib import Path

import mlflow
import mlflow.pyfunc
import numpy as np
import pytest

from recpipe.config import GateConfig
from recpipe.eval.gate import decide
from recpipe.tracking import (
    LockTimeout,
    PromotionRefused,
    eval_version_tags,
    get_version,
    get_version_by_alias,
    list_models,
    load_pyfunc_model,
    log_pyfunc_model,
    promote,
    promotion_history,
    promotion_lock,
    register_version,
    rollback,
    run_summary,
    set_alias,
    start_or_resume_run,
)

GATE = GateConfig(min_auc=0.6, max_auc_drop=0.005, max_logloss_rise=0.01)


# The smallest real pyfunc (a dot product with weights from a .npy artifact), logged from its code file.
LINEAR_MODEL = Path(__file__).with_name("linear_model.py")


def _register(uri, name, run_id, tmp_path, version_seed, auc, logloss, champion):
    w = np.full(3, float(version_seed))
    np.save(tmp_path / f"w{version_seed}.npy", w)
    model_uri = log_pyfunc_model(
        run_id,
        LINEAR_MODEL,
        {"weights": str(tmp_path / f"w{version_seed}.npy")},
        f"model-{version_seed}",
        pip_requirements=[f"mlflow=={mlflow.__version__}", "numpy"],
    )
    decision = decide({"auc": auc, "logloss": logloss}, champion, GATE)
    tags = eval_version_tags(auc, auc - 0.05, logloss, decision.passed, decision.reasons, "sha256:data")
    return register_version(uri, name, run_id, model_uri, tags), decision


def _champion_output(uri, name):
    model = load_pyfunc_model(uri, f"models:/{name}@champion")
    return float(model.predict(np.ones((1, 3)))[0])


def test_lifecycle(store_uri, unique, tmp_path, monkeypatch):
    name = f"ctr-{unique}"
    run_id = start_or_resume_run(store_uri, f"promo-{unique}")
    v1, d1 = _register(store_uri, name, run_id, tmp_path, 1, auc=0.70, logloss=0.40, champion=None)
    assert d1.passed and run_summary(run_id)["status"] == "RUNNING"
    set_alias(store_uri, name, "challenger", v1)
    r1 = promote(store_uri, name, v1)
    assert (r1.action, r1.version, r1.previous) == ("promote", 1, None)
    assert _champion_output(store_uri, name) == pytest.approx(3.0)

    champ = {"auc": 0.70, "logloss": 0.40}
    v2, d2 = _register(store_uri, name, run_id, tmp_path, 2, auc=0.65, logloss=0.45, champion=champ)
    assert not d2.passed
    with pytest.raises(PromotionRefused) as refused:
        promote(store_uri, name, v2)
    assert refused.value.reasons[0] == "gate_passed is 'false'"
    assert any(r.startswith("FAIL auc_vs_champion: auc 0.650000") for r in refused.value.reasons)
    assert get_version_by_alias(store_uri, name, "champion")["version"] == 1

    v3, d3 = _register(store_uri, name, run_id, tmp_path, 3, auc=0.72, logloss=0.39, champion=champ)
    assert d3.passed and promote(store_uri, name, v3).previous == 1
    assert _champion_output(store_uri, name) == pytest.approx(9.0)
    assert promote(store_uri, name, v3).action == "noop"

    back = rollback(store_uri, name, reason="online CTR dropped")
    assert (back.version, back.previous) == (1, 3)
    assert _champion_output(store_uri, name) == pytest.approx(3.0)

    with pytest.raises(ValueError, match="reason"):
        promote(store_uri, name, v2, force=True)
    forced = promote(store_uri, name, v2, force=True, reason="hotfix: v1 leaks a feature")
    assert forced.forced and forced.previous == 1
    assert get_version(store_uri, name, v2)["tags"]["forced"] == "true"
    assert get_version(store_uri, name, v2)["tags"]["force_reason"] == "hotfix: v1 leaks a feature"
    assert rollback(store_uri, name).version == 1  # chain 1 -> 3 -> (back) 1 -> 2: back to 1

    history = promotion_history(store_uri, name)
    assert [(e["action"], e["version"], e["previous"]) for e in history] == [
        ("promote", 1, None),
        ("refused", 2, 1),
        ("promote", 3, 1),
        ("rollback", 1, 3),
        ("promote", 2, 1),
        ("rollback", 1, 2),
    ]
    assert [e["seq"] for e in history] == list(range(1, 7)) and history[4]["forced"] is True
    assert history[3]["reason"] == "online CTR dropped" and history[0]["actor"]

    listed = list_models(store_uri, name)
    assert [(d["version"], d["gate_passed"], d["aliases"]) for d in listed] == [
        (1, True, ["challenger", "champion"]),
        (2, False, []),
        (3, True, []),
    ]
    assert listed[2]["metrics"]["auc"] == 0.72

    # Serving side: plain MLflow, pointed at the store by the environment only.
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store_uri)
    served = mlflow.pyfunc.load_model(f"models:/{name}@champion")
    assert float(served.predict(np.ones((1, 3)))[0]) == pytest.approx(3.0)


def test_rollback_without_previous_and_external_alias_moves(sqlite_uri, tmp_path):
    name = "ctr"
    run_id = start_or_resume_run(sqlite_uri, "promo")
    v1, _ = _register(sqlite_uri, name, run_id, tmp_path, 1, auc=0.70, logloss=0.40, champion=None)
    v2, _ = _register(sqlite_uri, name, run_id, tmp_path, 2, auc=0.71, logloss=0.40, champion=None)
    with pytest.raises(ValueError, match="no previous champion"):
        rollback(sqlite_uri, name)
    promote(sqlite_uri, name, v1)
    set_alias(sqlite_uri, name, "champion", v2)  # someone used the MLflow UI
    assert rollback(sqlite_uri, name).version == 1
    assert [(e["action"], e["version"], e["previous"]) for e in promotion_history(sqlite_uri, name)] == [
        ("promote", 1, None),
        ("observed", 2, 1),
        ("rollback", 1, 2),
    ]
    with pytest.raises(ValueError, match="no version 9"):
        promote(sqlite_uri, name, 9)
    with pytest.raises(ValueError, match="no registered model 'nope'"):
        rollback(sqlite_uri, "nope")


@pytest.mark.parametrize("lease", [False, True], ids=["file-lock", "registry-lease"])
def test_lock_excludes_and_times_out(sqlite_uri, lease):
    holding = threading.Event()
    release = threading.Event()

    def hold():
        with promotion_lock(sqlite_uri, "m", force_registry_lease=lease):
            holding.set()
            release.wait(10)

    t = threading.Thread(target=hold)
    t.start()
    try:
        assert holding.wait(10)
        with pytest.raises(LockTimeout):
            with promotion_lock(sqlite_uri, "m", timeout_s=0.3, force_registry_lease=lease):
                pass
        with promotion_lock(sqlite_uri, "other-model", timeout_s=1, force_registry_lease=lease):
            pass  # locks are per model
    finally:
        release.set()
        t.join()
    with promotion_lock(sqlite_uri, "m", timeout_s=1, force_registry_lease=lease) as h:
        assert h.verify()


def test_stale_registry_lease_is_broken(sqlite_uri):
    from recpipe.tracking.lock import LOCK_SUFFIX, TAG_LOCK_OWNER
    from recpipe.tracking.uri import client

    client(sqlite_uri).create_registered_model("m" + LOCK_SUFFIX, tags={TAG_LOCK_OWNER: "dead-host:1:x"})
    t = time.monotonic()
    with promotion_lock(sqlite_uri, "m", timeout_s=5, lease_ttl_s=0.5, force_registry_lease=True) as h:
        assert h.verify() and time.monotonic() - t >= 0.5
    with pytest.raises(Exception, match="m.promotion-lock"):
        client(sqlite_uri).get_registered_model("m" + LOCK_SUFFIX)  # released


def test_a_lease_deleted_while_the_create_fails_is_taken_on_the_next_try(sqlite_uri, monkeypatch):
    """MLflow's store looks the existing model up after a create's failed insert; when the holder deletes its
    lease in between, the create answers RESOURCE_DOES_NOT_EXIST (seen with two processes through a server).
    That is a lost race, not an error: the next try takes the lease."""
    from mlflow.store.model_registry.sqlalchemy_store import SqlAlchemyStore

    from recpipe.tracking.lock import LOCK_SUFFIX, TAG_LOCK_OWNER
    from recpipe.tracking.uri import client

    name = "m" + LOCK_SUFFIX
    client(sqlite_uri).create_registered_model(name, tags={TAG_LOCK_OWNER: "other-host:1:x"})
    real = SqlAlchemyStore.get_registered_model
    raced = []

    def holder_releases_first(self, model_name):  # noqa: ANN001, ANN202
        if model_name == name and not raced:
            raced.append(model_name)
            self.delete_registered_model(model_name)  # the holder ends its promotion at this moment
        return real(self, model_name)

    monkeypatch.setattr(SqlAlchemyStore, "get_registered_model", holder_releases_first)
    with promotion_lock(sqlite_uri, "m", timeout_s=5, force_registry_lease=True) as h:
        assert raced and h.verify()


@pytest.mark.slow
def test_two_processes_promote_at_once(store_uri, unique, tmp_path):
    from promotion_worker import promote_then_hold_lock

    name = f"race-{unique}"
    run_id = start_or_resume_run(store_uri, f"race-{unique}")
    versions = []
    for seed in (1, 2):
        (tmp_path / f"m{seed}").mkdir()
        (tmp_path / f"m{seed}" / "w.txt").write_text(str(seed))
        from recpipe.tracking import log_model_dir

        log_model_dir(run_id, tmp_path / f"m{seed}", f"m{seed}")
        tags = eval_version_tags(0.7, 0.6, 0.4, True, ["PASS"], "d")
        versions.append(register_version(store_uri, name, run_id, f"m{seed}", tags))
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    outs = [tmp_path / f"out{v}.json" for v in versions]
    procs = [
        ctx.Process(target=promote_then_hold_lock, args=(store_uri, name, v, barrier, str(o)))
        for v, o in zip(versions, outs)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    results = [json.loads(o.read_text()) for o in outs]

    history = promotion_history(store_uri, name)
    assert [e["action"] for e in history] == ["promote", "promote"]
    first, second = history
    champion = get_version_by_alias(store_uri, name, "champion")["version"]
    # Serialized: the second saw the first as champion, and the last one is the champion.
    assert {first["version"], second["version"]} == set(versions)
    assert first["previous"] is None and second["previous"] == first["version"]
    assert champion == second["version"]
    assert sorted(r["promotion"]["previous"] is None for r in results) == [False, True]
    # The raw lock never had two holders.
    (a0, a1), (b0, b1) = sorted(r["held"] for r in results)
    assert a1 <= b0, f"lock held concurrently: {results}"
