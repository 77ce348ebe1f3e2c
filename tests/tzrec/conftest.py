"""Paths of the TorchEasyRec configs written for these tests."""

from pathlib import Path

import pytest
from tzrec_fixtures import DIN_CONFIG, DLRM_CONFIG


@pytest.fixture(scope="session")
def din_config() -> Path:
    return DIN_CONFIG


@pytest.fixture(scope="session")
def dlrm_config() -> Path:
    return DLRM_CONFIG
