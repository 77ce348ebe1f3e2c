"""Fixtures: the small configs and their FeatureSpecs (session-scoped: parsed once); declaring a model."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from recpipe.config import load_config
from recpipe.features.build import build_feature_spec
from recpipe.features.spec import FeatureSpec

ROOT = Path(__file__).resolve().parents[2]
DIN_CONFIG = ROOT / "configs" / "din_taobao_small.yaml"
DLRM_CONFIG = ROOT / "configs" / "dlrm_criteo_small.yaml"


@pytest.fixture(scope="session")
def din_cfg():
    return load_config(DIN_CONFIG)


@pytest.fixture(scope="session")
def dlrm_cfg():
    return load_config(DLRM_CONFIG)


@pytest.fixture(scope="session")
def din_spec(din_cfg) -> FeatureSpec:
    return build_feature_spec(din_cfg)


@pytest.fixture(scope="session")
def dlrm_spec(dlrm_cfg) -> FeatureSpec:
    return build_feature_spec(dlrm_cfg)


@pytest.fixture(autouse=True)
def _one_thread():
    # Batches here are tiny: intra-op threads only add OpenMP barrier waits, which take seconds per
    # test when other processes share the cores.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def declare_model(declare_entry_point: Callable[[str, str], None]) -> Callable[[str], None]:
    """Declare a model by its registry line, ``"toy = tests.models.toy"``, the way a package outside recpipe
    does: an entry point of group ``recpipe.models`` (see ``declare_entry_point``)."""
    return lambda line: declare_entry_point("recpipe.models", line)
