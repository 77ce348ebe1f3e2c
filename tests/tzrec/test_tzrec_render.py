"""The YAML layout: block sections, one-line features and MLPs, and a lossless round trip."""

import yaml

from recpipe.tzrec.render import render_yaml

DATA = {
    "name": "x",
    "data": {"label": "clk", "train": "odps://p/tables/t/ds=1"},
    "features": [
        {"kind": "id", "name": "user_id", "num_buckets": 10, "embedding_dim": 8},
        {"kind": "raw", "name": "price", "boundaries": [float(i) for i in range(40)], "embedding_dim": 8},
    ],
    "model": {"type": "dlrm", "dense_mlp": {"hidden_units": [16, 8]}},
}


def test_layout_and_round_trip():
    text = render_yaml(DATA)
    assert yaml.safe_load(text) == DATA
    lines = text.splitlines()
    assert "data:" in lines and "  label: clk" in lines
    assert "- {kind: id, name: user_id, num_buckets: 10, embedding_dim: 8}" in lines
    assert "- kind: raw" in lines  # too long for one line
    assert "  dense_mlp: {hidden_units: [16, 8]}" in lines
