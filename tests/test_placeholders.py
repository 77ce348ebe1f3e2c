"""``{NAME}`` placeholders in input paths (TorchEasyRec's ``odps://{PROJECT}/tables/...``), resolved at run
time from ``data.params`` or the environment."""

import pytest

from recpipe.config import ConfigError, parse_config
from recpipe.config.placeholders import UnresolvedPlaceholder, env_var, placeholders, resolve

URI = "odps://{PROJECT}/tables/criteo_train/ds={DS}"


def test_names_in_order_once():
    assert placeholders(URI + "/x={PROJECT}") == ["PROJECT", "DS"]
    assert placeholders("odps://ads/tables/t") == []


def test_a_param_wins_over_the_environment_which_fills_the_rest():
    """TorchEasyRec's benchmark fills {PROJECT} from its environment with str.format
    (tzrec/benchmark/benchmark.py); here ODPS_PROJECT, or data.params when set."""
    env = {"ODPS_PROJECT": "from_env", "RECPIPE_PARAM_DS": "20170513"}
    assert (
        resolve(URI, {"PROJECT": None, "DS": None}, env) == "odps://from_env/tables/criteo_train/ds=20170513"
    )
    assert resolve(URI, {"PROJECT": "ads", "DS": None}, env) == "odps://ads/tables/criteo_train/ds=20170513"
    assert (env_var("PROJECT"), env_var("DS")) == ("ODPS_PROJECT", "RECPIPE_PARAM_DS")


def test_an_unresolved_name_says_both_ways_to_give_it():
    with pytest.raises(UnresolvedPlaceholder) as err:
        resolve(URI, {"PROJECT": None, "DS": "1"}, {})
    assert "{PROJECT}: --set data.params.PROJECT=<value> or the environment variable ODPS_PROJECT" in str(
        err.value
    )
    assert "{DS}:" not in str(err.value)


def _cfg(data: dict) -> dict:
    return {
        "name": "x",
        "data": {"label": "label", **data},
        "features": [{"kind": "id", "name": "a", "hash_bucket_size": 10, "embedding_dim": 4}],
        "feature_groups": [{"name": "sparse", "type": "deep", "features": ["a"]}],
        "model": {"type": "dlrm", "dense_mlp": {"hidden_units": [4]}, "over_mlp": {"hidden_units": [4]}},
    }


def test_the_config_keeps_a_declared_placeholder_and_refuses_an_undeclared_one():
    cfg = parse_config(_cfg({"train": "odps://{PROJECT}/tables/t", "params": {"PROJECT": None}}))
    assert cfg.data.train == "odps://{PROJECT}/tables/t" and cfg.data.params == {"PROJECT": None}
    with pytest.raises(
        ConfigError,
        match=r"placeholders \['PROJCT'\] in data.train, data.eval or data.negative_sampler.input_path are not listed",
    ):
        parse_config(_cfg({"eval": "odps://{PROJCT}/tables/t", "params": {"PROJECT": None}}))
