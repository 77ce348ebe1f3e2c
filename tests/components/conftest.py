"""Tiny real data, a trained tiny model and fresh sqlite MLflow stores for the component tests."""

import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TINY_CONFIG = ROOT / "tests" / "pipelines" / "data" / "tiny_din.yaml"
ROWS = 12_000


@pytest.fixture(autouse=True)
def _local(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


@pytest.fixture(scope="session")
def tiny_config() -> str:
    return str(TINY_CONFIG)


@pytest.fixture(scope="session")
def _empty_db(tmp_path_factory) -> Path:
    from recpipe.tracking.uri import client

    db = tmp_path_factory.mktemp("template") / "mlflow.db"
    client(f"sqlite:///{db}").search_experiments()
    return db


@pytest.fixture
def sqlite_uri(tmp_path, _empty_db) -> str:
    store = tmp_path / "store"
    store.mkdir()
    shutil.copy(_empty_db, store / "mlflow.db")
    return f"sqlite:///{store / 'mlflow.db'}"


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory) -> dict[str, str]:
    """Generated Taobao rows split into train/eval Parquet, and the fitted fg.json."""
    from recpipe.config import load_config
    from recpipe.stages import fit, ingest

    root = tmp_path_factory.mktemp("tiny-data")
    data = load_config(TINY_CONFIG).data
    r = ingest.run(
        f"synthetic:taobao?rows={ROWS}&seed=3", None, data.label, data.split, data.neg_sample_rate,
        data.oracle_column, data.csv, train_dir=root / "train", eval_dir=root / "eval",
    )  # fmt: skip
    f = fit.run(str(TINY_CONFIG), str(root / "train"), root / "fg.json")
    return {
        "train": str(root / "train"),
        "eval": str(root / "eval"),
        "fg": f.fg_json,
        "digest": r.eval_digest,
    }


@pytest.fixture(scope="session")
def trained(tmp_path_factory, tiny_data) -> str:
    """A checkpoint of the tiny model trained by the train stage (one CPU process)."""
    from recpipe.stages import train

    out = tmp_path_factory.mktemp("trained") / "checkpoint"
    train.run(str(TINY_CONFIG), tiny_data["train"], tiny_data["eval"], str(out), fg_json=tiny_data["fg"])
    return str(out)
