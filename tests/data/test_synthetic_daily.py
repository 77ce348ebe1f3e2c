"""Synthetic data with time (recpipe/data/synthetic/daily.py): hive day folders, ads born and retiring,
interest drift, per-day oracle AUC, prefix determinism, and a frozen model's visible decay."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from recpipe.auc import binary_auc
from recpipe.cli.main import main
from recpipe.data.sources import open_source, parse_synthetic
from recpipe.data.synthetic import daily, daily_oracle_auc, generate, taobao


def _read_days(folder: Path) -> pa.Table:
    return ds.dataset(folder, partitioning="hive").to_table()


@pytest.fixture(scope="module")
def ten_days(tmp_path_factory: pytest.TempPathFactory) -> dict[str, pa.Table]:
    """10 days of 20k rows of both kinds, dense catalogues (each ad and value seen often in a day)."""
    out = tmp_path_factory.mktemp("days")
    generate("taobao", 200_000, out / "taobao", seed=0, days=10, users=1000, ads=300)
    generate("criteo", 200_000, out / "criteo", seed=0, days=10, max_vocab=5000)
    return {kind: _read_days(out / kind) for kind in ("taobao", "criteo")}


def test_days_are_hive_folders_that_round_trip(tmp_path: Path) -> None:
    r = generate("taobao", 3_002, tmp_path, seed=1, days=3, start=20261231, chunk_rows=600)
    names = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.parquet"))
    assert names == [
        f"dt={d}/part-0000{c}.parquet" for d in ("20261231", "20270101", "20270102") for c in (0, 1)
    ]
    assert "dt" not in pq.read_schema(tmp_path / "dt=20261231" / "part-00000.parquet").names
    table = _read_days(tmp_path)
    days, counts = np.unique(table.column("dt").to_numpy(), return_counts=True)
    assert days.tolist() == [20261231, 20270101, 20270102] and counts.tolist() == [1001, 1001, 1000]
    stamps, dts = table.column("time_stamp").to_numpy(), table.column("dt").to_numpy()
    for dt in days:
        midnight = daily.day_start_seconds(str(dt))
        assert midnight <= stamps[dts == dt].min() and stamps[dts == dt].max() < midnight + 86_400
    meta = json.loads(Path(r.meta).read_text())
    assert meta["files"][0] == "dt=20261231/part-00000.parquet"
    assert meta["params"]["days"] == 3 and meta["params"]["start"] == "20261231"
    assert {d: v["rows"] for d, v in meta["days"].items()} == {
        "20261231": 1001,
        "20270101": 1001,
        "20270102": 1000,
    }
    assert meta["days"] == {
        d: {
            "rows": v["rows"],
            "positive_rate": pytest.approx(
                table.filter(pc.equal(table["dt"], int(d)))["clk"].to_numpy().mean()
            ),
            "oracle_auc": pytest.approx(daily_oracle_auc(table)[d], abs=1e-6),
        }
        for d, v in meta["days"].items()
    }
    # A flat run into the same folder removes the day folders' files (a recursive read never mixes them).
    generate("taobao", 100, tmp_path, seed=1)
    assert sorted(p.name for p in tmp_path.rglob("*.parquet")) == ["part-00000.parquet"]


def test_daily_oracle_auc_is_each_days_auc_of_the_true_probability(ten_days: dict[str, pa.Table]) -> None:
    for kind, label in (("taobao", "clk"), ("criteo", "label")):
        table = ten_days[kind]
        by_day = daily_oracle_auc(table)
        assert list(by_day) == daily.day_dates(10)
        dts = table.column("dt").to_numpy()
        first = dts == 20260101
        y, p = table.column(label).to_numpy(), table.column("true_prob").to_numpy()
        assert by_day["20260101"] == binary_auc(y[first], p[first])
        assert all(0.72 < auc < 0.84 for auc in by_day.values()), by_day
    with pytest.raises(ValueError, match="no column 'dt'"):
        daily_oracle_auc(ten_days["taobao"].drop(["dt"]))


def test_ads_are_born_and_retire_and_interests_drift() -> None:
    dates = daily.day_dates(10)
    cat = taobao.build_catalogue(0, 20_000, users=1000, ads=300)
    timeline = daily.TaobaoTimeline(cat, 0, dates)
    per_day = round(300 / daily.AD_LIFE_DAYS)
    assert timeline.cat.ad_id.size == 300 + 9 * per_day
    assert np.unique(timeline.cat.ad_id).size == timeline.cat.ad_id.size  # every born ad is a new id
    alive = [(timeline.birth <= d) & (d < timeline.birth + timeline.life) for d in range(10)]
    assert alive[0][:300].all() and not alive[0][300:].any()
    assert 0.3 < alive[9][:300].mean() < 0.5  # most of day 0's ads retired by day 9 (exp(-0.9) live)
    assert alive[9][300:].sum() > alive[1][300:].sum() > 0
    favs = [timeline.day(d).user_fav_cates for d in (0, 1, 9)]
    assert favs[0] is cat.user_fav_cates
    assert 0.13 < (favs[1] != favs[0]).mean() < 0.25  # INTEREST_DRIFT a day, plus favourites left without ads
    assert 0.65 < (favs[2] != favs[0]).mean() < 0.85
    day9 = timeline.day(9)
    assert set(day9.cate_ads.tolist()) == set(np.flatnonzero(alive[9]).tolist())  # targeted ads are live
    assert timeline.day(1).user_fav_cates.tolist() == favs[1].tolist()  # going back replays the same chain


def test_rows_of_a_day_show_live_ads_new_ids_and_the_trajectory(ten_days: dict[str, pa.Table]) -> None:
    table = ten_days["taobao"]
    dts, ads = table.column("dt").to_numpy(), table.column("adgroup_id").to_numpy()
    seen = set(ads[dts == 20260101].tolist())
    for d in daily.day_dates(10)[1:]:
        today = set(ads[dts == int(d)].tolist())
        assert len(today - seen) >= 10, d  # new ads every day
        seen |= today
    cat = taobao.build_catalogue(0, 20_000, users=1000, ads=300)
    timeline = daily.TaobaoTimeline(cat, 0, daily.day_dates(10))
    index = {int(a): i for i, a in enumerate(timeline.cat.ad_id)}
    for d in (0, 9):
        shown = np.array([index[int(a)] for a in ads[dts == int(daily.day_dates(10)[d])]])
        live = (timeline.birth[shown] <= d) & (d < timeline.birth[shown] + timeline.life[shown])
        assert live.all()
    # Ads old enough on day 9 whose trend is strongly up are shown more than on day 0; those going down, less.
    both = (timeline.birth <= 0) & (9 < timeline.birth + timeline.life)
    counts = [
        np.bincount([index[int(a)] for a in ads[dts == int(dt)]], minlength=both.size)
        for dt in ("20260101", "20260110")
    ]
    up, down = both & (timeline.trend > 0.5), both & (timeline.trend < -0.5)
    assert (
        counts[1][up].sum() / counts[0][up].sum() > 1.2 > 0.8 > counts[1][down].sum() / counts[0][down].sum()
    )


def _fit_ctr_tables(table: pa.Table, keys: list[str], label: str) -> dict[str, dict[str, float]]:
    """Per column, each value's smoothed log click-rate lift over the day's mean (unknown values: 0)."""
    y = table.column(label).to_numpy()
    prior = y.mean()
    tables = {}
    for key in keys:
        values, inverse = np.unique(_strings(table, key), return_inverse=True)
        clicks, shown = np.bincount(inverse, y), np.bincount(inverse)
        lift = np.log((clicks + 20 * prior) / (shown + 20)) - np.log(prior)
        tables[key] = dict(zip(values.tolist(), lift.tolist()))
    return tables


def _strings(table: pa.Table, key: str) -> np.ndarray:
    return np.asarray(table.column(key).cast(pa.string()).fill_null("").to_numpy(zero_copy_only=False))


def _auc(tables: dict[str, dict[str, float]], table: pa.Table, label: str) -> float:
    score = sum(np.array([t.get(v, 0.0) for v in _strings(table, key)]) for key, t in tables.items())
    return binary_auc(table.column(label).to_numpy(), score)


@pytest.mark.parametrize(
    ("kind", "keys", "label", "fresh", "decay"),
    [
        ("taobao", ["adgroup_id", "user_id"], "clk", (0.625, 0.68), 0.025),
        ("criteo", [f"C{c}" for c in range(1, 27)], "label", (0.575, 0.61), 0.02),
    ],
)
def test_a_frozen_model_decays_and_one_fitted_on_yesterday_tracks(
    ten_days, kind, keys, label, fresh, decay
) -> None:
    table = ten_days[kind]
    day = {d: table.filter(pc.equal(table["dt"], d)) for d in (20260101, 20260102, 20260109, 20260110)}
    frozen = _fit_ctr_tables(day[20260101], keys, label)
    yesterday = _fit_ctr_tables(day[20260109], keys, label)
    on_day2, on_day10 = _auc(frozen, day[20260102], label), _auc(frozen, day[20260110], label)
    tracked = _auc(yesterday, day[20260110], label)
    assert fresh[0] < on_day2 < fresh[1] and fresh[0] < tracked < fresh[1], (on_day2, tracked)
    assert on_day10 < on_day2 - decay and on_day10 < tracked - decay, (on_day2, on_day10, tracked)


def test_day_k_does_not_depend_on_the_days_after_it(tmp_path: Path) -> None:
    for kind in ("taobao", "criteo"):
        generate(kind, 14 * 400, tmp_path / f"{kind}14", seed=5, days=14, chunk_rows=150)
        generate(kind, 7 * 400, tmp_path / f"{kind}7", seed=5, days=7, chunk_rows=150)
        long, short = _read_days(tmp_path / f"{kind}14"), _read_days(tmp_path / f"{kind}7")
        assert short.equals(long.filter(pc.less_equal(long["dt"], 20260107)))
        again = generate(kind, 7 * 400, tmp_path / f"{kind}7b", seed=5, days=7, chunk_rows=150)
        assert _read_days(Path(again.meta).parent).equals(short)
        other = generate(kind, 7 * 400, tmp_path / f"{kind}7c", seed=6, days=7, chunk_rows=150)
        assert not _read_days(Path(other.meta).parent).equals(short)


def test_days_through_a_synthetic_uri_and_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    syn = parse_synthetic("synthetic:criteo?rows=300&days=3&start=20260105&max_vocab=50")
    assert syn.options == {"days": 3, "start": 20260105, "max_vocab": 50}
    source = open_source(
        "synthetic:criteo?rows=300&days=3&start=20260105&max_vocab=50", generate_into=tmp_path / "raw"
    )
    assert source.num_rows() == 300 and "time_stamp" in source.schema().names
    assert sorted(p.name for p in (tmp_path / "raw").iterdir()) == [
        "_meta.json",
        *(f"dt=2026010{d}" for d in (5, 6, 7)),
    ]
    assert (
        main(["data", "generate", "taobao", "--rows", "300", "--days", "3", "--out", str(tmp_path / "cli")])
        == 0
    )
    out = capsys.readouterr().out
    assert "dt=20260101: rows=100 oracle_auc=" in out and "dt=20260103: rows=100" in out
    assert _read_days(tmp_path / "cli").num_rows == 300
    assert (
        main(
            ["data", "generate", "--config", "x.yaml", "--days", "3", "--rows", "10", "--out", str(tmp_path)]
        )
        == 2
    )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"days": 0}, r"days must be in \[1, 3660\], got 0"),
        ({"days": 3, "start": 20261340}, "start must be a date YYYYMMDD, got 20261340"),
        ({"start": 20260101}, "start is an option of synthetic data with days"),
        ({"days": 200}, "100 rows cannot fill 200 days"),
    ],
)
def test_bad_days_are_refused(tmp_path: Path, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        generate("taobao", 100, tmp_path, **kwargs)


def test_days_need_a_taobao_or_criteo_kind(tmp_path: Path) -> None:
    with pytest.raises(
        ValueError, match="days is an option of synthetic taobao and criteo data, not of 'config'"
    ):
        generate("config", 100, tmp_path, config="configs/rich_taobao_small.yaml", days=3)
