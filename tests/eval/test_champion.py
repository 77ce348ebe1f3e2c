"""The champion's numbers: re-scored through a served model on the same rows when it loads and scores,
else the numbers recorded at its registration (the source says which), else an error."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from recpipe.eval.champion import ChampionEval, evaluate_champion, score_predictor
from recpipe.eval.metrics import MetricAccumulator


class ColumnModel:
    """Predicts the data's own ``p`` column (a served model that needs only raw columns)."""

    def __init__(self) -> None:
        self.calls = 0

    def predict(self, rows):  # noqa: ANN001, ANN201 - a pandas DataFrame in, probabilities out
        self.calls += 1
        return rows["p"].to_numpy()


@pytest.fixture
def data(tmp_path):
    rng = np.random.default_rng(0)
    n = 500
    p = rng.uniform(0.05, 0.95, n)
    table = pa.table(
        {"label": (rng.uniform(size=n) < p).astype(np.int64), "user_id": rng.integers(0, 20, n), "p": p}
    )
    (tmp_path / "eval").mkdir()
    pq.write_table(table, tmp_path / "eval" / "part-00000.parquet")
    return str(tmp_path / "eval"), table


def test_a_predictor_is_scored_like_the_accumulator_would(data):
    uri, table = data
    report = score_predictor(ColumnModel(), uri, "label", "user_id")
    acc = MetricAccumulator(from_logits=False)
    acc.update(
        labels=table["label"].to_numpy(), preds=table["p"].to_numpy(), groups=table["user_id"].to_numpy()
    )
    want = acc.compute()
    assert (
        report.rows == 500
        and report.auc == pytest.approx(want.auc)
        and report.gauc == pytest.approx(want.gauc)
    )
    assert report.tasks == {}


def test_the_champion_is_re_scored_when_its_model_loads(data):
    uri, _ = data
    model = ColumnModel()
    c = evaluate_champion("m", 3, {"auc": 0.1, "logloss": 9.0}, lambda: model, uri, "label", "user_id")
    assert model.calls == 1 and c.version == 3 and c.source.startswith("v3 re-evaluated")
    assert c.report is not None and c.metrics()["auc"] == c.report.auc and c.result() is c.report


def test_a_champion_that_cannot_be_scored_falls_back_to_its_recorded_numbers(data):
    uri, _ = data

    def broken():  # noqa: ANN202
        raise OSError("artifact store unreachable")

    recorded = {"auc": 0.7, "logloss": 0.4, "buy.auc": 0.8, "buy.logloss": 0.1}
    c = evaluate_champion("m", 2, recorded, broken, uri, "label", None)
    assert c.report is None and c.result() == recorded and c.metrics() == recorded
    assert (
        c.source
        == "v2 metrics recorded at its registration (not re-evaluated: OSError: artifact store unreachable)"
    )
    assert c.task_results() == {"buy": {"auc": 0.8, "logloss": 0.1}}
    with pytest.raises(RuntimeError, match="could not be re-evaluated .* has no metric tags"):
        evaluate_champion("m", 2, {"auc": 0.7}, broken, uri, "label", None)


def test_a_re_scored_single_task_champion_has_no_task_results():
    assert ChampionEval(1, "s", recorded={"auc": 0.7, "logloss": 0.4}).task_results() == {}


class DomainModel:
    """A domain-tower model's served output: per task (clk, buy) and domain j, ``p_<task>`` where j is the row's
    domain and 0.5 elsewhere, so only reading each row's own domain gives the data's probabilities."""

    def predict(self, rows):  # noqa: ANN001, ANN201 - a pandas DataFrame in, (N, T·D) probabilities out
        d = rows["occupation"].to_numpy()
        mine = np.arange(3)[None, :] == d[:, None]
        return np.concatenate(
            [np.where(mine, rows[f"p_{t}"].to_numpy()[:, None], 0.5) for t in ("clk", "buy")], 1
        )


def test_a_domain_tower_champion_is_scored_by_each_rows_domain(tmp_path):
    rng = np.random.default_rng(1)
    n = 600
    p_clk, p_buy = rng.uniform(0.05, 0.95, n), rng.uniform(0.05, 0.95, n)
    table = pa.table(
        {
            "clk": (rng.uniform(size=n) < p_clk).astype(np.int64),
            "buy": (rng.uniform(size=n) < p_buy).astype(np.int64),
            "occupation": rng.integers(0, 3, n),
            "p_clk": p_clk,
            "p_buy": p_buy,
        }
    )
    (tmp_path / "eval").mkdir()
    pq.write_table(table, tmp_path / "eval" / "part-00000.parquet")
    labels = ["clk", "buy", "occupation"]
    report = score_predictor(DomainModel(), str(tmp_path / "eval"), labels, None, domains=("occupation", 3))
    assert set(report.tasks) == {"clk", "buy"}
    for task in ("clk", "buy"):
        acc = MetricAccumulator(from_logits=False)
        acc.update(labels=table[task].to_numpy(), preds=table[f"p_{task}"].to_numpy())
        assert report.tasks[task]["auc"] == pytest.approx(acc.compute().auc)
