"""benchmarks/peers.py's encoding of the split rows for FuxiCTR and DeepCTR-Torch: every id indexed by the train
rows' vocabulary (0 pads, unseen values get the last index), the history's items decoded back to the values of
``click_50_seq``, Criteo's counts as ``log(x+3)`` with the config's default where missing. The peers themselves
run in the benchmark's quick run (``test_benchmarks_quick.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from peers import DIN_CONFIG, DLRM_CONFIG, ITEMS, encode  # noqa: E402
from quality import prepare  # noqa: E402


def _raw(folder: str, column: str) -> list:
    return pq.read_table(folder).column(column).to_pylist()


def _decoder(train: list, train_idx: np.ndarray) -> dict[int, object]:
    """Index → value of the train rows, checking the mapping is one-to-one."""
    pairs = set(zip(train_idx.tolist(), train, strict=True))
    assert len(pairs) == len(set(train)) == len({i for i, _ in pairs}), "one index per distinct value"
    return dict(pairs)


@pytest.fixture(scope="module")
def taobao(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    tmp = tmp_path_factory.mktemp("peers-taobao")
    data = prepare("taobao", 3000, "", tmp / "data", DIN_CONFIG, 0)
    meta = encode("din", data.train_dir, data.eval_dir, DIN_CONFIG, tmp / "enc")
    arrays = {s: dict(np.load(tmp / "enc" / f"{s}.npz")) for s in ("train", "eval")}
    return data, meta, arrays


def test_ids_are_indexed_by_the_train_vocabulary(taobao: tuple) -> None:
    data, meta, arrays = taobao
    train, evals = _raw(data.train_dir, "user_id"), _raw(data.eval_dir, "user_id")
    size = meta["vocab"]["user_id"]
    assert size == len(set(train)) + 2
    decode = _decoder(train, arrays["train"]["cat:user_id"])
    assert min(decode) == 1 and max(decode) == size - 2
    got = arrays["eval"]["cat:user_id"]
    unseen = np.array([u not in set(train) for u in evals])
    assert unseen.any() and (~unseen).any()  # the last day has new users and known ones
    assert (got[unseen] == size - 1).all()
    assert [decode[i] for i in got[~unseen]] == [u for u, n in zip(evals, unseen, strict=True) if not n]


def test_history_decodes_to_click_50_seq(taobao: tuple) -> None:
    data, meta, arrays = taobao
    a = arrays["train"]
    seqs = _raw(data.train_dir, "click_50_seq")
    assert meta["max_len"] == 100 and a["hist:adgroup_id"].shape == (len(seqs), 100)
    lengths = np.array([len(s.split("|")) if s else 0 for s in seqs])
    assert (a["hist_len"] == lengths).all() and (lengths == 0).any()
    # the candidate's and the history's values share one vocabulary: decode both through the candidate's
    for k, name in enumerate(ITEMS):
        cands = [v if v is not None else 0 for v in _raw(data.train_dir, name)]
        decode = _decoder(cands, a[f"cat:{name}"])
        hist = a[f"hist:{name}"]
        assert (hist[np.arange(100)[None, :] >= lengths[:, None]] == 0).all()  # padding after each history
        for row in np.flatnonzero(lengths)[:200]:
            want = [int(item.split("\x03")[k] or 0) for item in seqs[row].split("|")]
            got = hist[row, : lengths[row]]
            known = [decode.get(i) for i in got]
            # an item no candidate of the train rows had is still indexed (the vocabulary holds both)
            assert all(w == g for w, g in zip(want, known, strict=True) if g is not None)
            assert (got >= 1).all() and (got <= meta["vocab"][name] - 2).all()


def test_price_is_bucketized_at_the_config_boundaries(taobao: tuple) -> None:
    data, meta, arrays = taobao
    price = np.array(_raw(data.train_dir, "price"))
    idx = arrays["train"]["cat:price"]
    assert meta["vocab"]["price"] == 102  # 100 boundaries: 101 buckets after the padding index
    order = np.argsort(price)
    assert (np.diff(idx[order]) >= 0).all() and idx.min() >= 1 and idx.max() <= 101


def test_criteo_counts_and_categories(tmp_path: Path) -> None:
    data = prepare("criteo", 2000, "", tmp_path / "data", DLRM_CONFIG, 0)
    meta = encode("dlrm", data.train_dir, data.eval_dir, DLRM_CONFIG, tmp_path / "enc")
    a = dict(np.load(tmp_path / "enc" / "train.npz"))
    assert meta["numeric"] == [f"I{i}" for i in range(1, 14)] and len(meta["vocab"]) == 26
    raw = _raw(data.train_dir, "I1")
    want = np.array([-2.5 if v is None else np.log(v + 3) for v in raw], np.float32)
    assert any(v is None for v in raw) and np.allclose(a["num:I1"], want)
    c1 = _raw(data.train_dir, "C1")
    assert meta["vocab"]["C1"] == len(set(c1)) + 2
    _decoder(c1, a["cat:C1"])
