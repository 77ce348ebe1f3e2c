"""The one-pass path of id histories (kind ``sequence``'s ``_sequence_fast``: separators dropped, one text →
int64 cast) gives what the general path gives — the same ids and lengths, no bad rows, nothing truncated — on
random histories of ids with leading zeros, up to 19 digits, empty sub-values (with and without a default),
empty items, items of another width, other bytes, nulls, long histories, sliced arrays and large strings; and
declines (the general path then names the bad rows) whenever the general path finds one."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from recpipe.config import parse_config
from recpipe.features.build import build_feature_spec
from recpipe.features.columns import BadRows
from recpipe.features.kinds import sequence as seq_kind
from recpipe.features.spec import FeatureSpec

IDS = ["0", "7", "07", "123", "000000000000000001", "999999999999999999", "42"]
# What the general path refuses (or, for a sub-value, fills with its default).
ODD = ["", "x", "-1", "+1", "猫", "1000000000000000000", "0" * 19]


def spec(
    defaults: list[str | None], max_length: int = 5, delimiter: str = "|", sub: str = "\x03"
) -> FeatureSpec:
    subs = [
        {"name": f"s{j}", "num_buckets": 1000 + j, "embedding_dim": 4, **({"default_value": d} if d else {})}
        for j, d in enumerate(defaults)
    ]
    item = {"kind": "id", "name": "s0", "num_buckets": 1000, "embedding_dim": 4}
    history = {
        "kind": "sequence",
        "name": "h",
        "sequence_length": max_length,
        "delimiter": delimiter,
        "sub_delimiter": sub,
        "sub_features": subs,
    }
    cfg: dict[str, Any] = {
        "name": "seq",
        "data": {"label": "label"},
        "features": [item, history],
        "feature_groups": [{"name": "g", "type": "sequence", "features": ["s0", "h__s0"]}],
        "model": {
            "type": "multi_tower_din",
            "towers": [],
            "din_towers": [{"group": "g", "attn_mlp": {"hidden_units": [4]}}],
            "final": {"hidden_units": [4]},
        },
    }
    return build_feature_spec(parse_config(cfg))


def _history(rng: random.Random, nsub: int, odd: float, delimiter: str, sub: str) -> str | None:
    if rng.random() < 0.08:
        return None
    items = []
    for _ in range(rng.randrange(0, 6 if not odd else 7)):
        width = nsub if rng.random() > odd else rng.choice([nsub - 1, nsub + 1])
        values = [rng.choice(IDS) if rng.random() > odd else rng.choice(ODD) for _ in range(width)]
        items.append(sub.join(values))
    if items and rng.random() < odd:
        items.insert(rng.randrange(len(items)), "")
    return delimiter.join(items)


def _run(
    arr: pa.Array, sp: FeatureSpec, fast: bool, monkeypatch: pytest.MonkeyPatch
) -> tuple[dict, dict, list, int]:
    s = sp.sequences[0]
    feats = [sp.feature(k) for k in s.sub_features]
    values: dict[str, np.ndarray] = {}
    lengths: dict[str, np.ndarray] = {}
    bads: list[BadRows] = []
    with monkeypatch.context() as m:
        if not fast:
            m.setattr(seq_kind, "_sequence_fast", lambda *a: None)
        truncated = seq_kind.sequence_ids(arr, s, feats, len(arr), values, lengths, bads)
    return values, lengths, bads, truncated


@pytest.mark.parametrize("defaults", [[None], ["5"], [None, None, None], [None, "3", "0"]])
@pytest.mark.parametrize(("delimiter", "sub"), [("|", "\x03"), (";", ",")])
def test_fast_path_equals_the_general_path(defaults, delimiter, sub, monkeypatch):
    sp = spec(defaults, delimiter=delimiter, sub=sub)
    s = sp.sequences[0]
    feats = [sp.feature(k) for k in s.sub_features]
    rng = random.Random(len(defaults) * 7 + ord(delimiter))
    taken = declined = 0
    for trial in range(60):
        odd = [0.0, 0.02, 0.2][trial % 3]
        texts = [_history(rng, len(defaults), odd, delimiter, sub) for _ in range(rng.randrange(1, 40))]
        arr = pa.array(texts, pa.large_string() if trial % 4 == 1 else pa.string())
        if trial % 5 == 2 and len(arr) > 2:
            arr = arr.slice(1, len(arr) - 2)
        fast = seq_kind._sequence_fast(arr, s, feats, len(arr))
        values, lengths, bads, truncated = _run(arr, sp, False, monkeypatch)
        if fast is None:
            declined += 1
            continue
        taken += 1
        assert not bads and truncated == 0, texts
        for key, v in zip(s.sub_features, fast[0]):
            assert v.dtype == np.int64
            assert v.tolist() == values[key].tolist(), (key, texts)
            assert fast[1].tolist() == lengths[key].tolist(), (key, texts)
        got = _run(arr, sp, True, monkeypatch)
        assert all(got[0][k].tolist() == values[k].tolist() for k in s.sub_features)
    assert taken > 10 and declined > 10


def test_fast_path_declines_what_the_general_path_refuses_or_truncates(monkeypatch):
    sp = spec([None, None])
    s = sp.sequences[0]
    feats = [sp.feature(k) for k in s.sub_features]
    for text in [
        "1\x032|3",
        "1\x032\x033",
        "1\x03x",
        "1\x03\x032",
        "1\x032||3\x034",
        "1\x03-2",
        "0" * 19 + "\x031",
    ]:
        arr = pa.array([text])
        assert seq_kind._sequence_fast(arr, s, feats, 1) is None, text
        assert _run(arr, sp, False, monkeypatch)[2], text  # the general path names a bad row
    long = pa.array(["|".join(["1\x032"] * 6)])
    assert seq_kind._sequence_fast(long, s, feats, 1) is None
    assert _run(long, sp, False, monkeypatch)[3] == 1
    # A null row whose slot spans bytes: declined, the general path reads it as no history.
    arr = pa.Array.from_buffers(
        pa.string(),
        2,
        [
            pa.py_buffer(np.packbits([0, 1], bitorder="little")),
            pa.py_buffer(np.array([0, 3, 6], np.int32)),
            pa.py_buffer(b"1\x0321\x032"),
        ],
    )
    assert seq_kind._sequence_fast(arr, s, feats, 2) is None
    assert _run(arr, sp, False, monkeypatch)[1]["h__s0"].tolist() == [0, 1]
