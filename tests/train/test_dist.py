"""Sharding constraints: defaults per table kind, GPU-only types falling back on CPU, unknown tables."""

import pytest

from recpipe.config import load_config
from recpipe.features.build import build_feature_spec
from recpipe.models.registry import build_model
from recpipe.train.dist import sharding_constraints


@pytest.fixture(scope="module")
def model(taobao):
    cfg = load_config(taobao["config"])
    return build_model(build_feature_spec(cfg), cfg.model)


def _types(constraints):
    return {t: c.sharding_types[0] for t, c in constraints.items()}


def test_defaults_table_wise_pooled_and_row_wise_sequence_tables(model):
    constraints, messages = sharding_constraints(model, {}, "cpu")
    types = _types(constraints)
    assert messages == []
    assert {t for t, k in types.items() if k == "row_wise"} == {"adgroup_id", "cate_id", "brand"}
    assert types["user_id"] == types["pid"] == "table_wise" and len(types) == 16


def test_row_wise_pooled_tables_fall_back_to_table_wise_on_cpu_only(model):
    constraints, messages = sharding_constraints(
        model, {"user_id": "row_wise", "brand": "column_wise"}, "cpu"
    )
    assert _types(constraints)["user_id"] == "table_wise" and _types(constraints)["brand"] == "column_wise"
    assert len(messages) == 1 and "'user_id': row_wise sharding is not available on cpu" in messages[0]
    constraints, messages = sharding_constraints(model, {"user_id": "row_wise"}, "cuda")
    assert _types(constraints)["user_id"] == "row_wise" and messages == []


def test_unknown_tables_are_named(model):
    with pytest.raises(ValueError, match=r"unknown tables \['nope'\]"):
        sharding_constraints(model, {"nope": "table_wise"}, "cpu")


def test_sharding_types_leave_the_planner_the_types_each_table_can_do(model):
    # TorchEasyRec's global_embedding_constraints: table_wise or row_wise; pooled tables cannot be row-wise on
    # CPU, sequence tables can; a table of train.sharding keeps its type.
    allowed = ["table_wise", "row_wise"]
    constraints, messages = sharding_constraints(model, {"brand": "column_wise"}, "cpu", allowed)
    assert messages == []
    assert constraints["user_id"].sharding_types == ["table_wise"]
    assert constraints["adgroup_id"].sharding_types == allowed
    assert constraints["brand"].sharding_types == ["column_wise"]
    constraints, _ = sharding_constraints(model, {}, "cuda", allowed)
    assert constraints["user_id"].sharding_types == allowed
    constraints, messages = sharding_constraints(model, {}, "cpu", ["data_parallel"])
    assert constraints["adgroup_id"].sharding_types == ["data_parallel"]
