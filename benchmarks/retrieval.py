"""Retrieval: recall@50 against the generator's oracle, the ANN index's recall against exact search, and
retrieve-then-rank latency through recpipe's real scoring server.

Setup: one generated world (``synthetic:retrieval``: users and items with latent vectors, so the oracle's recall
is known; ``--items`` items, ``--users`` users) gives both datasets; the pair pipeline (``recpipe run --config
configs/dssm_retrieval_small.yaml --ranker-config configs/deepfm_retrieval_ranker_small.yaml``, kfp.local) trains,
gates, exports, registers and promotes the DSSM retriever and the DeepFM ranker into a fresh sqlite store. Then

- the champions are downloaded verified; the retriever's recall@50 over the run's eval rows is measured through
  the export (user tower → the exact flat index over the stored item embeddings), against the oracle's recall@50
  over the same world (``_meta.json``);
- the HNSW index (built at export for a catalogue of 20,000 items or more) answers the same eval users' top 50
  and top ``--k``; its recall against the flat index's is ``ann_recall_vs_exact`` (at K=50, the metric's) and
  ``ann_recall_vs_exact_k`` (at the served K);
- ``recpipe serve --model <retriever>@champion --ranker <ranker>@champion`` runs on 127.0.0.1 (a real process,
  one worker, one torch thread) and a bounded loop sends ``--requests`` one-user requests (``dataframe_records``,
  ``params`` ``{"k": K, "n": N}``): each retrieves K candidates through the HNSW index and ranks them with the
  ranker in the one-user × K-candidates form; the first answer is checked against the same retrieve and rank done
  by hand in this process (full rows for the ranker).

Last line: ``retrieval: recall_at_50=… oracle_recall_at_50=… ann_recall_vs_exact=… p99_ms_retrieve_rank=…``;
JSON in ``benchmarks/results/retrieval.json``. Goals (issue 30): ANN recall ≥ 0.95 of exact; p99 ≤ 30 ms at K=500.

Run: ``.venv/bin/python benchmarks/retrieval.py`` (about 10 minutes on 2 cores, most of it the pipeline run).
``--quick``: a small world (20,000 rows, 400 items: the flat index, so ANN recall is exact by construction),
20 requests at K 100. ``--runs DIR`` serves what a pair ``recpipe run`` left in DIR instead of training (the quick
test reuses tests/pipelines/test_pair_run.py's run).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import environment, parse_args, quick_out, warn_if_loaded
from serving import _invoke, serve

ROOT = Path(__file__).resolve().parents[1]
RETRIEVER = ROOT / "configs" / "dssm_retrieval_small.yaml"
RANKER = ROOT / "configs" / "deepfm_retrieval_ranker_small.yaml"
RESULTS = ROOT / "benchmarks" / "results" / "retrieval.json"
METRIC_K = 50


def train_pair(work: Path, rows: int, users: int, items: int, min_recall: float) -> Path:
    """Both datasets of one world generated into ``work/data``, the pair pipeline run into ``work/runs`` (the
    retriever's gate floor at ``min_recall``: a catalogue of 20,000 items is harder than the config's 400)."""
    from pipelines.pair_run import run_pair_local
    from recpipe.data.synthetic import generate

    data = work / "data"
    generate("retrieval", rows, data / "retrieval", users=users, items=items)
    generate("retrieval", rows, data / "ranking", users=users, items=items, ranking=True)
    runs = work / "runs"
    summary = run_pair_local(
        runs,
        str(RETRIEVER),
        str(RANKER),
        data_source=str(data / "retrieval"),
        ranker_data_source=str(data / "ranking"),
        overrides={
            "data.params.ITEMS": str(data / "retrieval" / "_items.parquet"),
            "eval.gate.min_recall_at_k": min_recall,
        },
    )
    print(summary.format(), file=sys.stderr)
    if summary.status != "FINISHED" or not summary.outcome.startswith("promoted"):
        raise SystemExit(f"the pair run did not promote a pair: {summary.outcome}")
    (runs / "_world").write_text(str(data / "retrieval"))  # where --runs finds the oracle
    return runs


def world_meta(runs: Path) -> dict:
    """The retriever's generated world's ``_meta.json`` (its oracle recall): this script's, or a pair run's own."""
    named = runs / "_world"
    candidates = [Path(named.read_text()) / "_meta.json"] if named.exists() else []
    candidates += sorted(runs.glob("*/data/retrieval/_meta.json"))
    for path in candidates:
        if path.exists():
            return json.loads(path.read_text())
    raise SystemExit(f"{runs}: no generated retrieval world (_meta.json) found")


def eval_rows(runs: Path, columns: list[str]) -> tuple[object, np.ndarray]:
    """The retriever's eval split (the pipeline's ingest output): the user columns and each row's item id."""
    import pyarrow.parquet as pq

    for folder in sorted(runs.glob("*/kfp/*/ingest/eval_data")):
        table = pq.read_table(folder)
        if set(columns) <= set(table.column_names) and "brand_id" not in table.column_names:
            return table.select(columns), table.column("item_id").to_numpy()
    raise SystemExit(f"{runs}: no retriever eval split found")


def by_hand(retriever: object, ranker: object, user: dict, k: int, n: int) -> list:
    """The ``n`` best of the retriever's ``k`` for ``user``, each candidate a full row scored by the ranker."""
    import pyarrow as pa
    import pyarrow.compute as pc

    ids, _ = retriever.top_k([user], k)
    catalogue = retriever.attributes()
    found = ids.flatten()
    rows = catalogue.take(pc.index_in(found, value_set=catalogue.column("item_id")))
    rows = rows.select([c for c in ranker.input_columns if c in catalogue.column_names])
    for column in ranker.input_columns:
        if column in user:
            rows = rows.append_column(column, pa.array([user[column]] * k))
    probs = ranker.predict(rows)
    return [found[int(i)].as_py() for i in np.argsort(-probs, kind="stable")[:n]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000, help="generated rows of each dataset")
    ap.add_argument("--users", type=int, default=10_000)
    ap.add_argument("--items", type=int, default=20_000, help="the catalogue (20,000 or more: an HNSW index)")
    ap.add_argument("--requests", type=int, default=300, help="one-user requests sent to the server")
    ap.add_argument("--k", type=int, default=500, help="candidates retrieved per request")
    ap.add_argument("--n", type=int, default=50, help="items answered per request")
    ap.add_argument(
        "--min-recall",
        type=float,
        default=0.05,
        help="the retriever gate's recall@50 floor (the gate is not what is measured; the config's 0.2 is for its "
        "400-item catalogue)",
    )
    ap.add_argument("--runs", type=Path, help="serve what a pair `recpipe run` left here (no training)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    quick = {"rows": 20_000, "users": 1_000, "items": 400, "requests": 20, "k": 100, "n": 10}
    a = parse_args(ap, {**quick, "out": quick_out(RESULTS.name)})
    started, load_before = time.perf_counter(), os.getloadavg()

    from recpipe import tracking
    from recpipe.config import load_config
    from recpipe.export import faiss_index
    from recpipe.export.loaders import load_backend
    from recpipe.export.retriever import Retriever

    retriever_name = load_config(RETRIEVER).registered_model_name
    ranker_name = load_config(RANKER).registered_model_name
    with tempfile.TemporaryDirectory(prefix="recpipe-retrieval-") as tmp:
        work = Path(tmp)
        runs = a.runs or train_pair(work, a.rows, a.users, a.items, a.min_recall)
        uri = f"sqlite:///{runs / 'mlflow.db'}"
        meta = world_meta(runs)
        retriever = Retriever(
            tracking.download_served_export(uri, f"models:/{retriever_name}@champion", work / "r")
        )
        ranker = load_backend(
            tracking.download_served_export(uri, f"models:/{ranker_name}@champion", work / "k")
        )
        users, positives = eval_rows(runs, ["user_id", "user_segment"])
        embedded = retriever.embed_rows(users)
        flat = faiss_index.read_index(next((retriever.folder / "faiss_index").glob("**/flat.faiss")))
        exact50 = faiss_index.search(flat, embedded, METRIC_K)[1]
        ids = retriever.item_ids.to_numpy(zero_copy_only=False)
        recall = float(np.mean([p in set(ids[row]) for p, row in zip(positives, exact50, strict=True)]))
        k = min(a.k, retriever.items)
        if retriever.index_kind == "flat":  # a small catalogue: the flat index is what is served, exact
            ann50 = annk = 1.0
        else:
            ann50 = faiss_index.recall_vs_exact(exact50, retriever.search_rows(embedded, METRIC_K)[0])
            annk = faiss_index.recall_vs_exact(
                faiss_index.search(flat, embedded, k)[1], retriever.search_rows(embedded, k)[0]
            )

        records = json.loads(json.dumps(users.slice(0, 1000).to_pylist()))
        # recpipe's server, one worker at one torch thread (log: work/server.log)
        ranker_option = ["--ranker", f"models:/{ranker_name}@champion", "--threads", "1"]
        server, url = serve(uri, retriever_name, work, extra=ranker_option)
        try:

            def request(i: int) -> dict:
                return {
                    "dataframe_records": [records[i % len(records)]],
                    "params": {"k": k, "n": min(a.n, k)},
                }

            _, first = _invoke(url, request(0))
            want = by_hand(retriever, ranker, records[0], k, min(a.n, k))
            if first[0]["item_ids"] != want:
                raise AssertionError("the server's retrieve-then-rank answer differs from the one by hand")
            for i in range(1, 11):  # warm-up
                _invoke(url, request(i))
            times = [_invoke(url, request(i))[0] for i in range(a.requests)]
        finally:
            server.terminate()
            server.wait(timeout=30)

    ms = np.asarray(times) * 1e3
    stats = {
        "recall_at_50": round(recall, 4),
        "oracle_recall_at_50": round(float(meta["oracle_recall"][str(METRIC_K)]), 4),
        "ann_recall_vs_exact": round(ann50, 4),
        f"ann_recall_vs_exact_at_{k}": round(annk, 4),
        "p50_ms_retrieve_rank": round(float(np.percentile(ms, 50)), 2),
        "p99_ms_retrieve_rank": round(float(np.percentile(ms, 99)), 2),
        "index": retriever.index_kind,
        "items": retriever.items,
        "eval_rows": int(len(positives)),
        "k": k,
        "n": min(a.n, k),
        "requests": a.requests,
        "world": meta["params"],
        "environment": environment(started, load_before),
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(stats, indent=2) + "\n")
    print(json.dumps(stats))
    warn_if_loaded(load_before, os.getloadavg())
    keys = ("recall_at_50", "oracle_recall_at_50", "ann_recall_vs_exact", "p99_ms_retrieve_rank")
    print("retrieval: " + " ".join(f"{k}={stats[k]}" for k in keys))


if __name__ == "__main__":
    main()
