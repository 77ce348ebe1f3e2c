"""``recpipe predict`` with a retrieval export (issue 30): each user row's top-K items through the exported user tower
and FAISS index, streamed into Parquet — the same items and scores as brute force over the stored embeddings, the
trainer's recall@50 again, bad rows skipped and counted, and the options of the other kind refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from retrieval_world import shared_world

from recpipe.cli.main import main
from recpipe.data.types import DataError
from recpipe.export.manifest import ArtifactError
from recpipe.export.retrieval import INDEX, ITEM_EMBEDDINGS, load_item_embeddings
from recpipe.export.retriever import Retriever
from recpipe.stages import predict


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict:
    return shared_world(tmp_path_factory)


def test_top_k_is_brute_force_over_the_stored_embeddings_and_recall_is_the_trainers(exported, tmp_path):
    out = tmp_path / "topk.parquet"
    r = predict.run(exported["export"], exported["eval"], str(out), keep=["user_id"], k=50, batch_rows=300)
    assert (r.rows_read, r.rows_scored, r.rows_skipped) == (1000, 1000, 0)
    got = pq.read_table(out)
    assert got.column_names == ["row", "user_id", "item_ids", "scores"]
    assert got.column("row").to_pylist() == list(range(1000))  # the input's order, across 4 batches
    rows = pq.read_table(exported["eval"])
    assert got.column("user_id").equals(rows.column("user_id"))

    retriever = Retriever(exported["export"])
    users = retriever.embed(retriever._fg(rows))
    emb, ids = load_item_embeddings(Path(exported["export"]) / ITEM_EMBEDDINGS)
    brute = users @ emb.T
    want_scores = -np.sort(-brute, axis=1)[:, :50]
    scores = np.asarray(got.column("scores").to_pylist(), np.float32)
    assert np.abs(scores - want_scores).max() < 1e-4  # scores, not ids: tied items may come in either order
    top = np.asarray(got.column("item_ids").to_pylist())
    first = ids.to_numpy()[brute.argmax(axis=1)]
    assert np.mean(top[:, 0] == first) > 0.99
    hits = np.mean([w in set(t) for w, t in zip(rows.column("item_id").to_numpy(), top)])
    assert hits == pytest.approx(exported["result"].eval["recall_at_50"], abs=1.5e-3)


def test_bad_rows_are_skipped_and_counted_or_named(exported, tmp_path):
    rows = pq.read_table(exported["eval"]).slice(0, 6)
    bad = rows.set_column(0, "user_id", pa.array(["7", "x", "9", None, "11", "12"]))  # "x" is no id
    src = tmp_path / "users.parquet"
    pq.write_table(bad, src)
    r = predict.run(exported["export"], str(src), str(tmp_path / "a.parquet"), k=5, on_bad_row="skip")
    assert (r.rows_read, r.rows_scored, r.rows_skipped) == (6, 5, 1) and r.skipped_by_column == {"user_id": 1}
    assert pq.read_table(tmp_path / "a.parquet").column("row").to_pylist() == [0, 2, 3, 4, 5]
    with pytest.raises(ValueError, match=r"row 1.*user_id"):
        predict.run(exported["export"], str(src), str(tmp_path / "b.parquet"), k=5)


def test_the_other_kinds_options_and_a_wrong_k_are_refused(exported, tmp_path, capsys):
    out = str(tmp_path / "x.parquet")
    with pytest.raises(ValueError, match="k must be in 1..180"):
        predict.run(exported["export"], exported["eval"], out, k=181)
    with pytest.raises(ValueError, match="retrieval export.*--output are a ranking model's"):
        predict.run(exported["export"], exported["eval"], out, output="logit")
    strangers = tmp_path / "strangers.parquet"
    pq.write_table(pa.table({"client": [1, 2]}), strangers)
    with pytest.raises(DataError, match="none of its columns is an input column"):
        predict.run(exported["export"], str(strangers), out)
    # the command line: --k for a retrieval export, and a user error (exit 2) for a ranking one's --output
    argv = ["predict", "--model", exported["export"], "--data", exported["eval"], "--out", out, "--k", "3"]
    assert main(argv) == 0
    assert "rows_read=1000 rows_scored=1000" in capsys.readouterr().out
    assert [len(ids) for ids in pq.read_table(out).column("item_ids").to_pylist()[:2]] == [3, 3]


def test_k_is_refused_before_a_ranking_export_is_loaded(exported, tmp_path):
    ranking = (
        tmp_path / "export"
    )  # no export.json of kind retrieval: a ranking model's, refused before loading
    ranking.mkdir()
    with pytest.raises(ValueError, match=r"k \(--k\) is a retrieval export's"):
        predict.run(str(ranking), exported["eval"], str(tmp_path / "x.parquet"), k=5)


def test_a_tampered_index_is_refused_before_it_is_read(exported, tmp_path):
    import shutil

    copy = tmp_path / "export"
    shutil.copytree(exported["export"], copy, symlinks=True)
    index = Retriever(copy)._index  # noqa: F841 - the untouched copy loads
    (part,) = [p for p in (copy / "versions").iterdir() if p.is_dir()]
    flat = part / INDEX / "flat.faiss"
    flat.chmod(0o644)
    flat.write_bytes(flat.read_bytes()[:-4] + b"\0\0\0\0")
    with pytest.raises(ArtifactError, match="flat.faiss"):
        Retriever(copy)
