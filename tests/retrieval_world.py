"""A small trained and exported two-tower world for the tests of what reads a retrieval export (``recpipe predict``,
the scoring server): generated ``synthetic:retrieval`` rows (their oracle known), ``configs/dssm_retrieval_small.yaml``
trained 80 steps by the retrieval job, exported (user tower, item embeddings, flat FAISS index).

:func:`shared_world` is that world made once per test session and read by every test file (and xdist worker) that
asks for it: its export is read-only to them (a tamper test copies it first); the training and the user tower's
AOTInductor compile are ~20 s of CPU each time they are not repeated."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow.parquet as pq
import pytest
import torch

from recpipe.config import load_config
from recpipe.data.synthetic import generate
from recpipe.eval.retrieval import retrieval_metrics
from recpipe.features.build import build_feature_spec
from recpipe.stages import export
from recpipe.train.retrieval_job import train_retrieval_job

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "dssm_retrieval_small.yaml"


def trained_and_exported(root: Path) -> dict[str, Any]:
    """``root``'s world: ``export`` (folder), ``eval`` (1,000 rows), ``items`` (180), the trainer's ``result``."""
    generate("retrieval", 6000, root / "all", seed=3, users=120, items=180)
    table = pq.read_table(root / "all" / "part-00000.parquet")
    for name, part in (("train", table.slice(0, 5000)), ("eval", table.slice(5000))):
        (root / name).mkdir()
        pq.write_table(part, root / name / "part-00000.parquet")
    items = str(root / "all" / "_items.parquet")
    cfg = load_config(CONFIG, {"data.params.ITEMS": items, "train.max_steps": 80})
    torch.manual_seed(0)
    result = train_retrieval_job(
        cfg, build_feature_spec(cfg), str(root / "train"), str(root / "eval"), root / "ckpt",
        lambda model, spec, rows, items: retrieval_metrics(model, spec, rows, items, (10, 50)),
        {"RECPIPE_PARAM_ITEMS": items},
    )  # fmt: skip
    with pytest.MonkeyPatch.context() as env:  # the catalogue, as the pipeline's steps read it
        env.setenv("RECPIPE_PARAM_ITEMS", items)
        r = export.run(str(root / "ckpt"), None, str(root / "export"), data_uri=str(root / "eval"))
    assert r.ok
    return _world(root, result)


def _world(root: Path, result: Any) -> dict[str, Any]:
    return {"root": root, "export": str(root / "export"), "eval": str(root / "eval"), "result": result}


def shared_world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """:func:`trained_and_exported` once per session: built under a file lock in the session's temp folder (the
    one the xdist workers share) by the first to ask, then read by the others. ``result`` holds the trainer's
    ``eval`` metrics (what a reader can be given from another process)."""
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    root, done = shared / "retrieval-world", shared / "retrieval-world.json"
    with FileLock(str(shared / "retrieval-world.lock")):
        if not done.exists():
            shutil.rmtree(root, ignore_errors=True)  # a build that failed part-way
            world = trained_and_exported(root)
            done.write_text(json.dumps({"eval": world["result"].eval}))
    return _world(root, SimpleNamespace(**json.loads(done.read_text())))
