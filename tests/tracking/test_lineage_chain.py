"""The chain in the registry: each version's parent and cumulative partitions from its run's tags, the walk
back to the root (deleted parents and tampered cycles reported), long lists kept in the run's artifact, and
rollback moving the champion without touching the chain; against a real sqlite store."""

from __future__ import annotations

import json

import pytest
from chain_days import digest_of, register_day, three_days
from mlflow import MlflowClient

from recpipe.tracking import chain_tags, get_version, lineage, promote, rollback, set_version_tags
from recpipe.tracking.lineage_chain import IN_ARTIFACT, ChainRecord, read_record
from recpipe.tracking.registry import MAX_VERSION_TAG_VALUE

DAYS = ["dt=20260101", "dt=20260102", "dt=20260103", "dt=20260104", "dt=20260105"]


def _walk(chain):
    return [
        (e["version"], e["parent"] and e["parent"]["version"], e["partitions_added"])
        for e in chain["entries"]
    ]


def test_each_version_records_its_parent_and_cumulative_partitions(sqlite_uri, tmp_path):
    v1, v2, v3 = three_days(sqlite_uri, "ctr", tmp_path)
    t1, t3 = get_version(sqlite_uri, "ctr", v1)["tags"], get_version(sqlite_uri, "ctr", v3)["tags"]
    assert (
        "parent_version" not in t1
        and t1["partitions"] == ",".join(DAYS[:3])
        and t1["partitions_count"] == "3"
    )
    assert (t3["parent_model"], t3["parent_version"], t3["init_from"]) == ("ctr", "2", "models:/ctr@champion")
    assert t3["parent_run_id"] == get_version(sqlite_uri, "ctr", v2)["run_id"]
    assert t3["partitions"] == ",".join(DAYS) and t3["partitions_count"] == "5"
    assert (t3["partitions_added"], t3["eval_partitions"]) == ("dt=20260105", "dt=20260106")
    assert json.loads(t3["partition_digests"]) == {p: digest_of(p) for p in DAYS}
    want = ChainRecord(DAYS, {p: digest_of(p) for p in DAYS}, ["dt=20260105"], ["dt=20260106"])
    assert t3["partitions_digest"] == want.digest() and read_record(sqlite_uri, t3, None) == want

    chain = lineage(sqlite_uri, "ctr")  # no champion yet: from the latest version
    assert chain["version"] == 3 and chain["end"] == "root" and chain["problem"] is None
    assert _walk(chain) == [(3, 2, ["dt=20260105"]), (2, 1, ["dt=20260104"]), (1, None, DAYS[:3])]
    assert [e["aliases"] for e in chain["entries"]] == [["challenger"], [], []]
    assert [e["auc"] for e in chain["entries"]] == [0.72, 0.71, 0.7]
    assert [(e["partitions_count"], e["gate_passed"]) for e in chain["entries"]] == [
        (5, True),
        (4, True),
        (3, True),
    ]
    assert _walk(lineage(sqlite_uri, "ctr", version=2)) == _walk(chain)[1:]


def test_a_partition_read_again_with_another_digest_is_listed_as_rewritten(sqlite_uri, tmp_path):
    v1 = register_day(sqlite_uri, "ctr", tmp_path, DAYS[:2], DAYS[2:3])
    again = {DAYS[1]: digest_of(DAYS[1], "late rows"), DAYS[2]: digest_of(DAYS[2])}
    v2 = register_day(sqlite_uri, "ctr", tmp_path, DAYS[1:3], DAYS[3:4], parent=v1, digests=again)
    tags = get_version(sqlite_uri, "ctr", v2)["tags"]
    assert tags["partitions_added"] == DAYS[2] and tags["partitions_rewritten"] == DAYS[1]
    assert json.loads(tags["partition_digests"])[DAYS[1]] == digest_of(DAYS[1], "late rows")


def test_rollback_after_three_daily_promotions_walks_back_and_keeps_the_chain(sqlite_uri, tmp_path):
    versions = three_days(sqlite_uri, "ctr", tmp_path)
    for v in versions:
        promote(sqlite_uri, "ctr", v)
    before = lineage(sqlite_uri, "ctr")
    assert before["version"] == 3 and before["entries"][0]["aliases"] == ["challenger", "champion"]
    assert (rollback(sqlite_uri, "ctr").version, rollback(sqlite_uri, "ctr").version) == (2, 1)
    assert lineage(sqlite_uri, "ctr")["version"] == 1  # the default start follows the champion
    after = lineage(sqlite_uri, "ctr", version=3)
    assert (
        _walk(after)
        == _walk(before)
        == [(3, 2, ["dt=20260105"]), (2, 1, ["dt=20260104"]), (1, None, DAYS[:3])]
    )
    assert [e["aliases"] for e in after["entries"]] == [["challenger"], [], ["champion"]]
    with pytest.raises(ValueError, match="no previous champion"):
        rollback(sqlite_uri, "ctr")


def test_a_deleted_parent_is_shown_and_rollback_to_a_deleted_champion_refused(sqlite_uri, tmp_path):
    v1, v2, v3 = three_days(sqlite_uri, "ctr", tmp_path)
    for v in (v1, v2, v3):
        promote(sqlite_uri, "ctr", v)
    v2_run = get_version(sqlite_uri, "ctr", v2)["run_id"]
    MlflowClient(sqlite_uri).delete_model_version("ctr", str(v2))
    chain = lineage(sqlite_uri, "ctr")
    assert chain["end"] == "deleted" and "ctr v2 no longer exists" in chain["problem"]
    assert chain["entries"][1] == {"model": "ctr", "version": 2, "run_id": v2_run, "deleted": True}
    with pytest.raises(
        ValueError, match="cannot roll back to v2, the previous champion: it no longer exists"
    ):
        rollback(sqlite_uri, "ctr")
    assert lineage(sqlite_uri, "ctr")["version"] == 3  # nothing changed
    # A day warm-started from the deleted version: registered, its chain marked incomplete.
    tags = chain_tags(sqlite_uri, "ctr", {"data_partitions": "dt=20260106", "init_from_version": "2"}, v2_run)
    assert tags["chain_incomplete"] == "parent ctr v2 not found (deleted?): its partitions are not counted"
    assert (tags["partitions"], tags["parent_version"]) == ("dt=20260106", "2")
    MlflowClient(sqlite_uri).delete_model_version("ctr", str(v3))  # the champion itself
    with pytest.raises(ValueError, match="has no champion"):
        rollback(sqlite_uri, "ctr")


def test_a_cycle_in_tampered_tags_is_reported(sqlite_uri, tmp_path):
    three_days(sqlite_uri, "ctr", tmp_path)
    set_version_tags(sqlite_uri, "ctr", 1, {"parent_version": "3"})
    chain = lineage(sqlite_uri, "ctr")
    assert chain["end"] == "cycle" and [e["version"] for e in chain["entries"]] == [3, 2, 1]
    assert (
        chain["problem"] == "cycle: ctr v3 -> ctr v2 -> ctr v1 -> ctr v3 again (parent tags tampered with?)"
    )


def test_long_partition_lists_go_to_the_run_artifact_with_count_and_digest_in_tags(sqlite_uri, tmp_path):
    days = [f"dt={y}{m:02d}{d:02d}" for y in (2023, 2024) for m in range(1, 13) for d in range(1, 29)][:420]
    # Digests for 60 of them (~85 characters each): over the version tag's 5000, within the run tag's 8000.
    digests = {p: digest_of(p) for p in days[:60]}
    v1 = register_day(sqlite_uri, "ctr", tmp_path, days, ["dt=20250101"], digests=digests)
    t1 = get_version(sqlite_uri, "ctr", v1)["tags"]
    assert len(",".join(days)) > MAX_VERSION_TAG_VALUE
    assert t1["partitions"] == t1["partition_digests"] == t1["partitions_added"] == IN_ARTIFACT
    assert (t1["eval_partitions"], t1["partitions_count"]) == ("dt=20250101", "420")
    v2 = register_day(sqlite_uri, "ctr", tmp_path, ["dt=20250101"], ["dt=20250102"], parent=v1)
    t2 = get_version(sqlite_uri, "ctr", v2)["tags"]  # the parent's 420 read back from its artifact
    assert t2["partitions_count"] == "421" and t2["partitions_added"] == "dt=20250101"
    record = read_record(sqlite_uri, t2, get_version(sqlite_uri, "ctr", v2)["run_id"])
    assert record.partitions == sorted([*days, "dt=20250101"]) and len(record.partition_digests) == 61
    assert _walk(lineage(sqlite_uri, "ctr")) == [(2, 1, ["dt=20250101"]), (1, None, days)]
    set_version_tags(sqlite_uri, "ctr", v1, {"partitions_digest": "sha256:0"})
    with pytest.raises(ValueError, match="do not match the version's partitions_digest"):
        lineage(sqlite_uri, "ctr")


def test_a_parent_of_another_model_and_a_checkpoint_start(sqlite_uri, tmp_path):
    base = register_day(sqlite_uri, "base", tmp_path, DAYS[:2], DAYS[2:3])
    v1 = register_day(sqlite_uri, "ctr", tmp_path, DAYS[2:3], DAYS[3:4], parent=base, parent_model="base")
    chain = lineage(sqlite_uri, "ctr")
    assert [(e["model"], e["version"]) for e in chain["entries"]] == [("ctr", v1), ("base", base)]
    assert get_version(sqlite_uri, "ctr", v1)["tags"]["partitions"] == ",".join(DAYS[:3])
    from_folder = chain_tags(sqlite_uri, "ctr", {"init_from": "/ckpt/run-7", "data_partitions": DAYS[4]}, "r")
    assert "parent_version" not in from_folder and from_folder["init_from"] == "/ckpt/run-7"
    unresolved = chain_tags(sqlite_uri, "ctr", {"init_from": "models:/ctr@champion"}, "r")
    assert (
        unresolved["chain_incomplete"]
        == "warm-started from models:/ctr@champion with no init_from_version tag"
    )


@pytest.mark.parametrize(
    ("run_tags", "message"),
    [
        ({"data_partitions": "dt=1", "data_partition_digests": "dt=1:abc"}, "is not JSON"),
        ({"data_partitions": "dt=1", "data_partition_digests": '["abc"]'}, "must be a JSON object"),
        ({"data_partitions": "dt=1", "data_partition_digests": '{"dt=2": "x"}'}, r"did not train on .*dt=2"),
        ({"data_partitions": "dt=1,...[truncated 9000 chars, sha256 0123abcd4567]"}, "was truncated"),
    ],
)
def test_bad_run_tags_are_refused(sqlite_uri, run_tags, message):
    with pytest.raises(ValueError, match=message):
        chain_tags(sqlite_uri, "ctr", run_tags, "r")
