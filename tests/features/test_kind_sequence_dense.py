"""A grouped sequence's dense sub-feature (``{"name": "ts", "dense": true}``: TorchEasyRec's raw_feature without
boundaries inside a sequence_feature, docs/source/feature/feature.md 分组序列特征): one float per item, jagged as
the history, carried in the KJT as its float64 bits; an empty sub-value is ``default``; text that is no finite
number is a bad row naming the history column; fg.json keeps it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch

from recpipe.config import parse_config
from recpipe.features.build import build_feature_spec
from recpipe.features.fg import BadRowError, FeatureGenerator
from recpipe.features.spec import FeatureSpec
from recpipe.models.blocks.item_floats import floats_of_bits

SUBS = [
    {"name": "item_id", "num_buckets": 100, "embedding_dim": 4},
    {"name": "ts", "dense": True, "default": -1.0},
]


def spec() -> FeatureSpec:
    item = {"kind": "id", "name": "item_id", "num_buckets": 100, "embedding_dim": 4}
    seq = {"kind": "sequence", "name": "click_seq", "sequence_length": 3, "sub_features": SUBS}
    cfg = parse_config(
        {
            "name": "dense_sub",
            "data": {"label": "label"},
            "features": [item, seq],
            "feature_groups": [
                {
                    "name": "seq",
                    "type": "sequence",
                    "features": ["item_id", "click_seq__item_id", "click_seq__ts"],
                }
            ],
            "model": {
                "type": "multi_tower_din",
                "towers": [],
                "din_towers": [{"group": "seq", "attn_mlp": {"hidden_units": [4]}}],
                "final": {"hidden_units": [4]},
            },
        }
    )
    return build_feature_spec(cfg)


def floats(s: FeatureSpec, column: list) -> tuple[list[list[float]], list[list[int]]]:
    out = FeatureGenerator(s, with_labels=False)(
        pa.table({"item_id": [1] * len(column), "click_seq": column})
    )
    keys = s.sparse_keys()
    ts, ids = keys.index("click_seq__ts"), keys.index("click_seq__item_id")
    assert out.lengths[ts].tolist() == out.lengths[ids].tolist()  # item i of every sub-feature is one item
    split = np.cumsum(out.lengths[ts])[:-1]
    return (
        [v.tolist() for v in np.split(out.values[ts].view(np.float64), split)],
        [v.tolist() for v in np.split(out.values[ids], split)],
    )


def test_one_float_per_item_empty_is_default_and_histories_are_truncated() -> None:
    s = spec()
    got, ids = floats(s, ["7\x0312.5|8\x030.25", "9\x03", "", None, "1\x031|2\x032|3\x033|4\x034"])
    assert got == [[12.5, 0.25], [-1.0], [], [], [1.0, 2.0, 3.0]]
    assert ids == [[7, 8], [9], [], [], [1, 2, 3]]
    # the model reads the same values back from the bits
    out = FeatureGenerator(s, with_labels=False)(
        pa.table({"item_id": [1], "click_seq": ["7\x03-0.1|8\x031e-300"]})
    )
    k = s.sparse_keys().index("click_seq__ts")
    np.testing.assert_array_equal(floats_of_bits(torch.from_numpy(out.values[k])).numpy(), [-0.1, 1e-300])


@pytest.mark.parametrize("bad", ["7\x03soon", "7\x03nan", "7\x03inf"])
def test_a_bad_item_is_a_bad_row_naming_the_column(bad: str) -> None:
    with pytest.raises(
        BadRowError,
        match=r"row 1, column 'click_seq': expected a finite number in sub-feature 'click_seq__ts'",
    ):
        floats(spec(), ["7\x031", bad])
    fg = FeatureGenerator(spec(), on_bad_row="skip", with_labels=False)
    out = fg(pa.table({"item_id": [1, 1], "click_seq": ["7\x031", bad]}))
    assert out.num_rows == 1 and fg.stats.skipped_by_column == {"click_seq": 1}


def test_fg_json_round_trip(tmp_path: Path) -> None:
    s = spec()
    back = FeatureSpec.load(s.save(tmp_path / "fg.json"))
    assert back.to_dict() == s.to_dict() and back.item_float_keys() == ["click_seq__ts"]
    column = ["7\x0312.5|8\x03", "9\x030.5"]
    assert floats(back, column) == floats(s, column)
    assert [t.name for t in back.tables()] == ["item_id"]
