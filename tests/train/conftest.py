"""Small generated data and shrunken configs for the trainer tests.

The configs are ``configs/din_taobao_small.yaml`` / ``configs/dlrm_criteo_small.yaml`` with every table
above 1000 rows cut to 1% (or 1000 rows for Criteo's hashed tables): the same model shapes at a
fraction of the memory and checkpoint size. (Dotted ``--set`` overrides cannot reach list items.)
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from recpipe.config import load_config
from recpipe.data.synthetic import generate
from recpipe.features.build import build_feature_spec

# 6401 = 64·100 + 1 rows: the last step of a 64-row global batch has one row, so on 2 ranks one rank
# trains a padding row of weight 0 there; 6401 = 37·173 divides by neither the batch nor the world size.
TRAIN_ROWS = 6401
EVAL_ROWS = 1001
BATCH = 64


@pytest.fixture(scope="session", autouse=True)
def _one_thread():
    """Train in this process with one thread, like every rank the launcher starts (OMP_NUM_THREADS=1):
    on a busy 2-core machine OpenMP's thread team on tiny tensors is ~10x slower than one thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _shrink(src: str, dst: Path, divide: int | None = None, cap: int | None = None) -> Path:
    data = yaml.safe_load(Path(src).read_text())

    def small(n: int) -> int:
        if n <= 1000:
            return n
        return n // divide if divide else min(n, cap or n)

    for f in data["features"]:
        for key in ("num_buckets", "hash_bucket_size"):
            if key in f:
                f[key] = small(f[key])
        for sub in f.get("sub_features", []):
            for key in ("num_buckets", "hash_bucket_size"):
                if key in sub:
                    sub[key] = small(sub[key])
    dst.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    return dst


def _split(root: Path, train_files: list[int], eval_rows: int) -> tuple[str, str]:
    """Rewrite ``root/all`` as ``train/`` (files of ``train_files`` rows, row groups of 500) and ``eval/``
    (the last ``eval_rows`` rows): two splits of one synthetic world."""
    import pyarrow.parquet as pq

    table = pq.read_table(root / "all")
    assert table.num_rows == sum(train_files) + eval_rows
    (root / "train").mkdir()
    (root / "eval").mkdir()
    start = 0
    for i, n in enumerate(train_files):
        pq.write_table(table.slice(start, n), root / "train" / f"part-{i:05d}.parquet", row_group_size=500)
        start += n
    pq.write_table(table.slice(start), root / "eval" / "part-00000.parquet")
    return str(root / "train"), str(root / "eval")


@pytest.fixture(scope="session")
def taobao(tmp_path_factory) -> dict[str, str]:
    """Train (6401 rows in 3 files) and eval (1001 rows) splits of one synthetic world, and the config."""
    root = tmp_path_factory.mktemp("taobao")
    generate("taobao", TRAIN_ROWS + EVAL_ROWS, root / "all", seed=3)
    train, eval_ = _split(root, [2000, 2401, 2000], EVAL_ROWS)
    config = _shrink("configs/din_taobao_small.yaml", root / "din_tiny.yaml", divide=100)
    return {"train": train, "eval": eval_, "config": str(config)}


@pytest.fixture(scope="session")
def criteo(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("criteo")
    generate("criteo", 2500, root / "all", seed=4)
    train, eval_ = _split(root, [2000], 500)
    config = _shrink("configs/dlrm_criteo_small.yaml", root / "dlrm_tiny.yaml", cap=1000)
    return {"train": train, "eval": eval_, "config": str(config)}


@pytest.fixture(scope="session")
def taobao_spec(taobao):
    return build_feature_spec(load_config(taobao["config"]))


@pytest.fixture(scope="session")
def taobao_multitask(taobao, tmp_path_factory) -> dict[str, str]:
    """The Taobao splits with ``configs/dbmtl_taobao_small.yaml`` shrunk like the DIN one (labels clk, buy)."""
    root = tmp_path_factory.mktemp("taobao_mt")
    config = _shrink("configs/dbmtl_taobao_small.yaml", root / "dbmtl_tiny.yaml", divide=100)
    return {**taobao, "config": str(config)}
