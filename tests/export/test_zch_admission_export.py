"""A zch table with frequency admission (``zch_admission``) exports to jit, onnx, rtp and aoti with parity: the
admitted ids are those the table holds at export, and every other id (counted below the threshold in training,
or never seen) reads the admission's constant at serving as in the eager model.

The DLRM's ``C1`` is a 200-row zch table admitting an id at its 3rd sighting, constant 0.1; 6 training steps
leave some held-out ids with a row and some counted below the threshold.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import torch
from small_training import train_small
from test_zch_export import SPLIT_BACKENDS, TOL, UNSEEN, _set_ids, zch_config

from recpipe.batch import to_batch
from recpipe.config import parse_config
from recpipe.export.api import export
from recpipe.export.loaders import load_backend
from recpipe.export.split import split_model
from recpipe.export.zch import zch_remaps
from recpipe.features.fg import FeatureGenerator
from recpipe.models.blocks.zch_admission import EMPTY

REMAP = "embeddings.mc_ec._managed_collision_collection._managed_collision_modules.C1"
VALUE = 0.1


@pytest.fixture(scope="module")
def admitted(tmp_path_factory):
    data = zch_config("dlrm_criteo_small.yaml", {"C1": 200})
    next(f for f in data["features"] if f["name"] == "C1")["zch_admission"] = {
        "threshold": 3,
        "default_value": VALUE,
    }
    cfg = parse_config(data)
    small = train_small(cfg, "criteo", tmp_path_factory.mktemp("dlrm_admission"))
    return cfg, small


@pytest.fixture(scope="module")
def admitted_export(admitted, tmp_path_factory):
    cfg, small = admitted
    return export(
        small.model, small.spec, cfg, [*SPLIT_BACKENDS, "aoti"], tmp_path_factory.mktemp("x"), small.held_out
    )


def _classes(small) -> tuple[pa.Table, pa.Table]:
    """The clean held-out rows whose C1 id holds a row, and those whose id was counted below the threshold."""
    rows = small.clean.slice(0, 400)
    kjt = to_batch(FeatureGenerator(small.spec, with_labels=False)(rows), small.spec.sparse_keys()).sparse[
        "C1"
    ]
    module = small.model.get_submodule(REMAP)
    held = set(module._mch_sorted_raw_ids.tolist()) - {EMPTY}
    counted = set(module._admit_keys.view(-1).tolist()) - {EMPTY}
    assert counted and not counted & held
    ones = [i for i, n in enumerate(kjt.lengths().tolist()) if n == 1]
    keys = dict(zip(ones, kjt.values().tolist(), strict=True))
    admitted = [i for i, k in keys.items() if k in held]
    below = [i for i, k in keys.items() if k in counted]
    assert len(admitted) >= 5 and len(below) >= 5, (len(admitted), len(below))
    return rows.take(admitted), rows.take(below)


def _logits(small, rows: pa.Table) -> np.ndarray:
    b = to_batch(FeatureGenerator(small.spec, with_labels=False)(rows), small.spec.sparse_keys())
    with torch.no_grad():
        return small.model(b.dense, b.sparse).numpy()


@pytest.mark.parametrize("backend", [*SPLIT_BACKENDS, "aoti"])
def test_a_model_with_admission_exports_with_parity(admitted, admitted_export, backend):
    _, small = admitted
    r = admitted_export.backends[backend]
    assert r.status == "ok", r.reason
    assert r.parity.passed and r.parity.rows >= 1000 and r.parity.max_abs_logit_diff <= TOL
    scorer = load_backend(r.folder)
    with_row, below = _classes(small)
    column = small.spec.feature("C1").column
    for rows in (with_row, below):
        assert np.abs(scorer.predict_raw(rows) - _logits(small, rows)).max() <= TOL
    # an id counted below the threshold reads what a never-seen id reads: the constant
    unseen = _set_ids(below, column, [UNSEEN[i % len(UNSEEN)] for i in range(below.num_rows)])
    assert np.abs(scorer.predict_raw(below) - scorer.predict_raw(unseen)).max() <= TOL
    assert np.abs(_logits(small, below) - _logits(small, unseen)).max() <= TOL
    # an admitted id has its own row, which training moved: replacing it changes the score
    swapped = _set_ids(with_row, column, [UNSEEN[0]] * with_row.num_rows)
    assert not np.allclose(scorer.predict_raw(with_row), scorer.predict_raw(swapped), atol=1e-4)


def test_the_exported_table_holds_the_admitted_ids_and_the_constant_spare_row(admitted):
    cfg, small = admitted
    remap = zch_remaps(small.model)["C1"]
    module = small.model.get_submodule(REMAP)
    assert remap.keys.tolist() == sorted(set(module._mch_sorted_raw_ids.tolist()) - {EMPTY})
    assert 0 < remap.keys.numel() < 199  # admission left rows free
    table = split_model(small.model, small.spec).tables["C1"]
    assert remap.miss_rows.tolist() == [199]
    assert torch.equal(table[199], torch.full((table.shape[1],), VALUE))
