"""Embedding memory report and the all-to-all volume formula (shared/seeds sections 3 and 5.1)."""

import resource
import time
from pathlib import Path

import pytest
import yaml

from recpipe.config import load_config
from recpipe.features.build import build_feature_spec
from recpipe.train.memory import (
    MIB,
    DeviceMemory,
    OversizeError,
    all_to_all_volume,
    check_fits,
    embedding_memory_report,
    host_ram_bytes,
    optimizer_state_bytes,
    planned_device_memory,
)

TAOBAO_ROWS = 4_463_850  # 15 id tables + 101 price buckets + 3 history tables (TorchEasyRec's own tables)


@pytest.fixture(scope="module")
def din_spec():
    return build_feature_spec(load_config("configs/din_taobao.yaml"))


def test_full_din_taobao_is_272_mib_weights_plus_272_mib_adagrad(din_spec):
    r = embedding_memory_report(din_spec, "adagrad")
    assert r.total_rows == TAOBAO_ROWS
    assert r.weight_bytes == TAOBAO_ROWS * 16 * 4 == 285_686_400
    assert r.optimizer_bytes == r.weight_bytes
    assert round(r.weight_bytes / MIB, 1) == 272.5
    assert round(r.total_bytes / MIB) == 545
    assert len(r.tables) == 19  # click_50_seq's sub-features have their own tables
    text = r.format()
    assert "user_id" in text and "544.9 MiB" in text
    assert text.index("user_id") < text.index("adgroup_id")  # largest first


@pytest.mark.parametrize(
    ("optimizer", "state_bytes"),
    [("rowwise_adagrad", TAOBAO_ROWS * 4), ("adam", TAOBAO_ROWS * 16 * 4 * 2), ("sgd", 0)],
)
def test_optimizer_state_per_sparse_optimizer(din_spec, optimizer, state_bytes):
    assert embedding_memory_report(din_spec, optimizer).optimizer_bytes == state_bytes


def test_unknown_optimizer_is_rejected():
    with pytest.raises(ValueError, match="unknown sparse optimizer 'lamb'"):
        optimizer_state_bytes("lamb", 10, 16)


def test_all_to_all_volume_matches_seed_example():
    # 8192/8 × 15 × 2 × 16 × 4 = 1.97 MB per GPU, 7/8 of it remote, sent as 7 messages.
    v = all_to_all_volume(8192, 8, 15, 2, 16)
    assert v.per_rank_bytes == 1_966_080
    assert v.remote_bytes == 1_720_320
    assert v.per_message_bytes == 245_760


def test_all_to_all_volume_single_rank_has_no_remote_traffic():
    v = all_to_all_volume(4096, 1, 19, 1.5, 16)
    assert v.per_rank_bytes == 4096 * 19 * 1.5 * 16 * 4
    assert v.remote_bytes == 0 and v.per_message_bytes == 0
    with pytest.raises(ValueError):
        all_to_all_volume(0, 1, 1, 1, 16)


def test_tables_beyond_the_devices_are_refused_with_per_table_sizes(din_spec):
    report = embedding_memory_report(din_spec, "adagrad")
    check_fits(report, DeviceMemory(report.total_bytes, 1, "exactly enough"))  # fits: no error
    with pytest.raises(OversizeError) as err:
        check_fits(report, DeviceMemory(256 * MIB, 2, "2 GPU(s) × 0.2 GiB HBM (test)"))
    text = str(err.value)
    assert text.startswith("the embedding tables need 0.5 GiB but the planned devices hold 0.5 GiB (2 GPU(s)")
    assert "user_id" in text and "544.9 MiB" in text and "train.allow_oversize=true" in text


def test_planned_memory_is_host_ram_per_host_on_cpu():
    m = planned_device_memory("cpu", world_size=4, local_world_size=2)
    assert (m.devices, m.per_device_bytes) == (2, host_ram_bytes()) and m.total_bytes == 2 * host_ram_bytes()
    assert planned_device_memory("cpu", 3).devices == 1  # local ranks share this host's RAM


def _oversize_config(tmp_path: Path, **train) -> str:
    data = yaml.safe_load(Path("configs/dlrm_criteo_small.yaml").read_text())
    data["features"][13]["hash_bucket_size"] = 10**12  # 10^12 rows × 16 × 4 B: 60 TB with Adagrad's state
    data["train"].update(train)
    (tmp_path / "big.yaml").write_text(yaml.safe_dump(data))
    return str(tmp_path / "big.yaml")


def test_a_trillion_buckets_fail_in_seconds_before_any_allocation(tmp_path):
    """The train stage refuses before torchrun starts: no process, no table, a few MB of Python."""
    from recpipe.stages import train

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    with pytest.raises(
        OversizeError, match=r"the embedding tables need 119209.6 GiB but the planned devices hold"
    ) as err:
        train.run(
            _oversize_config(tmp_path), str(tmp_path / "no"), str(tmp_path / "no"), str(tmp_path / "out")
        )
    assert time.perf_counter() - t0 < 10
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss) * 1024 < 500 * MIB  # KiB on Linux
    assert "1,000,000,000,000" in str(err.value) and not (tmp_path / "out").exists()


def test_allow_oversize_is_the_way_out(tmp_path):
    from recpipe.data.types import DataError
    from recpipe.stages.train import check_data

    config = _oversize_config(tmp_path)
    with pytest.raises(OversizeError):
        check_data(config, str(tmp_path / "no"), None, None, {}, nproc=1)
    with pytest.raises(DataError):  # past the memory check, on to the data
        check_data(config, str(tmp_path / "no"), None, None, {"train.allow_oversize": True}, nproc=1)
