"""The retrieval export: the user tower (AOTInductor) with parity, the catalogue's embeddings (safetensors)
and FAISS index, sealed and verified; the served path (exported tower → flat index) finds what evaluation
found; the HNSW index's recall against exact; a tampered file refused; other backends refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from recpipe.config import ParameterError, load_config
from recpipe.data.synthetic import generate
from recpipe.eval.retrieval import retrieval_metrics
from recpipe.export import faiss_index
from recpipe.export.manifest import ArtifactError, read_manifest
from recpipe.export.retrieval import (
    INDEX,
    ITEM_EMBEDDINGS,
    USER_TOWER,
    load_item_attributes,
    load_item_embeddings,
    load_user_tower,
)
from recpipe.features.build import build_feature_spec
from recpipe.stages import export
from recpipe.train.retrieval_job import train_retrieval_job

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "dssm_retrieval_small.yaml"


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("retx")
    generate("retrieval", 6000, root / "all", seed=2, users=120, items=180)
    table = pq.read_table(root / "all" / "part-00000.parquet")
    (root / "train").mkdir()
    (root / "eval").mkdir()
    pq.write_table(table.slice(0, 5000), root / "train" / "part-00000.parquet")
    pq.write_table(table.slice(5000), root / "eval" / "part-00000.parquet")
    items = str(root / "all" / "_items.parquet")
    cfg = load_config(CONFIG, {"data.params.ITEMS": items, "train.max_steps": 80})
    spec = build_feature_spec(cfg)
    torch.manual_seed(0)

    def evaluate(model, spec, rows, items):
        return retrieval_metrics(model, spec, rows, items, (10, 50))

    result = train_retrieval_job(
        cfg,
        spec,
        str(root / "train"),
        str(root / "eval"),
        root / "ckpt",
        evaluate,
        {"RECPIPE_PARAM_ITEMS": items},
    )
    return {"root": root, "ckpt": root / "ckpt", "eval": str(root / "eval"), "items": items, "result": result}


def test_export_stage_seals_tower_embeddings_and_index_and_serves_evaluations_recall(trained, monkeypatch):
    monkeypatch.setenv("RECPIPE_PARAM_ITEMS", trained["items"])
    out = trained["root"] / "export"
    r = export.run(str(trained["ckpt"]), None, str(out), data_uri=trained["eval"])
    assert r.ok and r.items == 180 and r.dim == 16
    p = r.user_tower_parity
    assert (
        p["passed"]
        and p["max_abs_diff"] <= 1e-4
        and p["rows"] == 1000
        and {1, 7, 512} <= set(p["batch_sizes"])
    )
    assert r.index["ann"]["kind"] is None and "180 items < ann_min_items" in r.index["ann"]["reason"]
    assert r.index["flat"]["max_abs_score_diff"] < 1e-4 and r.index["flat"]["k"] == 50
    pointer = json.loads((out / "export.json").read_text())
    assert pointer["kind"] == "retrieval" and set(pointer["backends"]) == {USER_TOWER, ITEM_EMBEDDINGS, INDEX}
    for name, files in ((USER_TOWER, {"model.pt2", "fg.json"}), (ITEM_EMBEDDINGS, {"item_embeddings.safetensors", "item_ids.parquet", "item_attributes.parquet"}), (INDEX, {"flat.faiss"})):  # fmt: skip
        m = read_manifest(out / name, verify=True)  # every file listed with its sha256
        assert m.backend == name and set(m.files) == files
    assert read_manifest(out / USER_TOWER).parity["max_abs_diff"] == p["max_abs_diff"]

    # The served path: raw eval rows → FG → exported user tower → flat index over the stored embeddings.
    from recpipe.export.retrieval import _kjt_tensors
    from recpipe.features.spec import FeatureSpec

    spec = FeatureSpec.load(Path(r.folders[USER_TOWER]) / "fg.json")  # out/<part> names the current version
    rows = pq.read_table(trained["eval"])
    users = load_user_tower(out / USER_TOWER)(*_kjt_tensors(spec, rows)).detach().numpy()
    emb, ids = load_item_embeddings(out / ITEM_EMBEDDINGS)
    index = faiss_index.read_index(Path(r.folders[INDEX]) / faiss_index.FLAT_FILE)
    _, top = faiss_index.search(index, users, 50)
    want = rows.column("item_id").to_numpy()
    found = np.mean([w in set(ids.take(t).to_numpy()) for w, t in zip(want, top)])
    assert found == pytest.approx(trained["result"].eval["recall_at_50"], abs=1.5e-3)  # ties at the 50th item

    # The catalogue's every column is kept, row by row the embeddings' items (what a ranker reads at serving).
    attributes = load_item_attributes(out / ITEM_EMBEDDINGS)
    assert attributes.equals(pq.read_table(trained["items"]))
    assert attributes.column("item_id").combine_chunks().equals(ids)
    kept = Path(r.folders[ITEM_EMBEDDINGS]) / "item_attributes.parquet"
    kept.chmod(0o644)
    pq.write_table(attributes.slice(1), kept)  # an item dropped: refused before it is read
    with pytest.raises(ArtifactError, match="item_attributes.parquet"):
        load_item_attributes(out / ITEM_EMBEDDINGS)

    # A tampered index is refused before it is read.
    flat = Path(r.folders[INDEX]) / faiss_index.FLAT_FILE
    flat.chmod(0o644)
    flat.write_bytes(flat.read_bytes()[:-4] + b"\0\0\0\0")
    with pytest.raises(ArtifactError, match="flat.faiss"):
        read_manifest(out / INDEX, verify=True)


def test_other_backends_are_refused_for_a_retrieval_model(trained, tmp_path) -> None:
    with pytest.raises(
        ParameterError, match=r"\['jit', 'onnx'\]: a retrieval model's user tower is exported to \['aoti'\]"
    ):
        export.run(str(trained["ckpt"]), "jit,aoti,onnx", str(tmp_path / "x"), data_uri=trained["eval"])
    assert not (tmp_path / "x").exists()


def test_hnsw_reaches_the_recall_floor_against_exact_or_names_why_not() -> None:
    rng = np.random.default_rng(0)
    items = rng.standard_normal((30_000, 16)).astype(np.float32)
    queries = rng.standard_normal((300, 16)).astype(np.float32)
    exact = faiss_index.search(faiss_index.flat_index(items), queries, 50)[1]
    brute = np.argsort(-(queries @ items.T), axis=1)[:, :50]
    assert faiss_index.recall_vs_exact(brute, exact) > 0.999  # the flat index is exact (ties aside)
    index, report = faiss_index.hnsw_index(items, queries, 50, exact, 0.95)
    assert report.recall_vs_exact >= 0.95 and report.params["ef_search"] in faiss_index.HNSW_EF_SEARCH
    assert (
        faiss_index.recall_vs_exact(exact, faiss_index.search(index, queries, 50)[1])
        == report.recall_vs_exact
    )
    with pytest.raises(
        faiss_index.AnnRecallError,
        match=r"does not reach recall@50 1.01 .*ef_search 2048: 1.0000|ef_search 2048",
    ):
        faiss_index.hnsw_index(items[:2000], queries, 50, exact[:, :50] % 2000, 1.01)
    assert faiss_index.recall_vs_exact(np.array([[1, 2], [3, 4]]), np.array([[2, 9], [3, 4]])) == 0.75


def test_a_large_enough_catalogue_gets_an_hnsw_index_its_recall_in_the_manifest(trained, tmp_path) -> None:
    from recpipe.data.negative_sampler import ItemTable
    from recpipe.export.manifest import ExportError
    from recpipe.export.retrieval import export_retrieval
    from recpipe.train.checkpoint import load_model_for_inference

    model, spec, cfg = load_model_for_inference(trained["ckpt"])
    items = ItemTable(pq.read_table(trained["items"]), "item_id", ["item_id", "cate_id"])
    rows = pq.read_table(trained["eval"])
    # An unreachable floor fails the export after the index is built: nothing is published.
    with pytest.raises(ExportError, match=r"HNSW index of 180 items does not reach recall@50 1.01"):
        export_retrieval(
            model, spec, cfg, items, tmp_path / "x", rows, ann_min_items=100, min_ann_recall=1.01
        )
    assert not (tmp_path / "x" / "export.json").exists() and not list((tmp_path / "x").glob(".staging-*"))
    r = export_retrieval(model, spec, cfg, items, tmp_path / "y", rows, ann_min_items=100)
    ann = read_manifest(tmp_path / "y" / INDEX, verify=True).extra["ann"]
    assert ann == r.index["ann"] and ann["kind"] == "hnsw" and ann["k"] == 50 and ann["queries"] == 1000
    assert 0.95 <= ann["recall_vs_exact"] <= 1.0 and ann["params"]["M"] == faiss_index.HNSW_M
    assert set(read_manifest(tmp_path / "y" / INDEX).files) == {"flat.faiss", "hnsw.faiss"}
