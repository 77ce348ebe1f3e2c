"""Embedding memory report and the all-to-all volume formula (shared/seeds sections 3 and 5.1)."""

import pytest

from recpipe.config import load_config
from recpipe.features.build import build_feature_spec
from recpipe.train.memory import MIB, all_to_all_volume, embedding_memory_report, optimizer_state_bytes

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
