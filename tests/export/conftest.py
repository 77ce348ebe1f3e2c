"""Small MultiTowerDIN, DLRM, DeepFM and WideAndDeep, trained a few steps on generated data, and their exports
(once per session)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch
from small_training import TABLE_CAP, train_small
from torch import nn

from recpipe.batch import to_batch
from recpipe.config import RecpipeConfig, load_config
from recpipe.config.caps import cap_tables
from recpipe.export.api import export
from recpipe.export.outcome import ExportOutcome
from recpipe.features.fg import FeatureGenerator
from recpipe.features.spec import FeatureSpec

ROOT = Path(__file__).resolve().parents[2]
# Everything but AOTI (slow: compiled once per model in test_aoti.py).
FAST_BACKENDS = ["jit", "onnx", "rtp", "trt"]


@dataclass
class Trained:
    name: str
    model: nn.Module
    spec: FeatureSpec
    cfg: RecpipeConfig
    held_out: pa.Table
    clean: pa.Table

    def eager_logits(self, rows: pa.Table) -> np.ndarray:
        """The eager model's logits for raw rows (FG of the trainer, then ``model(dense, kjt)``)."""
        b = to_batch(FeatureGenerator(self.spec, with_labels=False)(rows), self.spec.sparse_keys())
        with torch.no_grad():
            return self.model(b.dense, b.sparse).numpy()


def _train(name: str, config: str, kind: str, tmp: Path) -> Trained:
    cfg = cap_tables(load_config(ROOT / "configs" / config), TABLE_CAP)
    small = train_small(cfg, kind, tmp)
    return Trained(name, small.model, small.spec, cfg, small.held_out, small.clean)


@pytest.fixture(scope="session")
def din(tmp_path_factory) -> Trained:
    return _train("din", "din_taobao_small.yaml", "taobao", tmp_path_factory.mktemp("din_data"))


@pytest.fixture(scope="session")
def dlrm(tmp_path_factory) -> Trained:
    return _train("dlrm", "dlrm_criteo_small.yaml", "criteo", tmp_path_factory.mktemp("dlrm_data"))


@pytest.fixture(scope="session")
def deepfm(tmp_path_factory) -> Trained:
    return _train("deepfm", "deepfm_criteo_small.yaml", "criteo", tmp_path_factory.mktemp("deepfm_data"))


@pytest.fixture(scope="session")
def wide_and_deep(tmp_path_factory) -> Trained:
    return _train(
        "wide_and_deep", "wide_and_deep_criteo_small.yaml", "criteo", tmp_path_factory.mktemp("wd_data")
    )


def _exported(m: Trained, tmp_path_factory, folder: str) -> tuple[Trained, ExportOutcome]:
    return m, export(m.model, m.spec, m.cfg, FAST_BACKENDS, tmp_path_factory.mktemp(folder), m.held_out)


@pytest.fixture(scope="session")
def din_export(din, tmp_path_factory) -> tuple[Trained, ExportOutcome]:
    return _exported(din, tmp_path_factory, "din_export")


@pytest.fixture(scope="session")
def dlrm_export(dlrm, tmp_path_factory) -> tuple[Trained, ExportOutcome]:
    return _exported(dlrm, tmp_path_factory, "dlrm_export")


@pytest.fixture(scope="session")
def deepfm_export(deepfm, tmp_path_factory) -> tuple[Trained, ExportOutcome]:
    return _exported(deepfm, tmp_path_factory, "deepfm_export")


@pytest.fixture(scope="session")
def wide_and_deep_export(wide_and_deep, tmp_path_factory) -> tuple[Trained, ExportOutcome]:
    return _exported(wide_and_deep, tmp_path_factory, "wd_export")


@pytest.fixture(params=["din", "dlrm", "deepfm", "wide_and_deep"])
def exported(request) -> tuple[Trained, ExportOutcome]:
    return request.getfixturevalue(f"{request.param}_export")
