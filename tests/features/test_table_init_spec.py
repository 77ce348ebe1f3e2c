"""A feature's ``init`` (its embedding table's initializer): config → SparseFeature → TableSpec, fg.json, and the
refusals (a bad mode or field, a dense value, two features of one table that disagree)."""

from __future__ import annotations

import pytest
import yaml

from recpipe.config import ConfigError, parse_config
from recpipe.features.build import build_feature_spec
from recpipe.features.spec import FeatureSpec, TableInit

CONFIG = "configs/din_taobao_small.yaml"


def _config(inits: dict[str, dict], sub_inits: dict[str, dict] | None = None) -> dict:
    """The small DIN config with ``init`` set on the named features / history sub-features."""
    data = yaml.safe_load(open(CONFIG).read())
    for f in data["features"]:
        if f["name"] in inits:
            f["init"] = inits[f["name"]]
        for sub in f.get("sub_features", []):
            if sub["name"] in (sub_inits or {}):
                sub["init"] = sub_inits[sub["name"]]
    return data


def test_init_travels_to_the_table_and_through_fg_json(tmp_path) -> None:
    spec = build_feature_spec(
        parse_config(
            _config(
                {
                    "cms_segid": {"mode": "normal", "std": 0.05},
                    "adgroup_id": {"mode": "constant", "value": 0.5},
                },
                {"adgroup_id": {"mode": "constant", "value": 0.5}},
            )
        )
    )
    tables = {t.name: t for t in spec.tables()}
    assert tables["cms_segid"].init == TableInit("normal", std=0.05)
    assert tables["adgroup_id"].init == TableInit("constant", value=0.5)  # the target and its history's key
    assert tables["user_id"].init is None
    d = spec.to_dict()
    (segid,) = [f for f in d["sparse"] if f["name"] == "cms_segid"]
    assert segid["init"] == {"mode": "normal", "std": 0.05}  # only the fields given
    assert all("init" not in f for f in d["sparse"] if f["name"] == "user_id")  # unset: not written
    loaded = FeatureSpec.load(spec.save(tmp_path / "fg.json"))
    assert loaded.feature("cms_segid").init == TableInit("normal", std=0.05)
    assert loaded.digest() == spec.digest()


def test_features_sharing_a_table_must_agree_on_its_init() -> None:
    cfg = parse_config(_config({"adgroup_id": {"mode": "normal", "std": 0.05}}))  # its history's key: no init
    with pytest.raises(ValueError, match="table 'adgroup_id' is shared by features with different init"):
        build_feature_spec(cfg)


@pytest.mark.parametrize(
    ("init", "message"),
    [
        ({"mode": "gaussian"}, "init mode 'gaussian' is not one of"),
        ({"mode": "uniform", "std": 0.1}, r"init mode 'uniform' reads \['lower', 'upper'\], not \['std'\]"),
        ({"mode": "normal", "std": -1.0}, "init std must be > 0"),
        ({"mode": "uniform", "lower": 0.5, "upper": 0.1}, "init lower 0.5 must be below upper 0.1"),
        ({"mode": "truncated_normal", "std": 0.1}, "needs lower and upper"),
        ({"mode": "normal", "sigma": 0.1}, "sigma"),
    ],
)
def test_a_bad_init_is_refused_at_its_feature(init, message) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        parse_config(_config({"cms_segid": init}))
    assert "features.1.init" in str(err.value)  # the feature's entry: features[1] is cms_segid


def test_a_dense_value_has_no_table_to_init() -> None:
    data = _config({"price": {"mode": "constant"}})
    (price,) = [f for f in data["features"] if f["name"] == "price"]
    del price["boundaries"], price["embedding_dim"]  # a dense raw value
    with pytest.raises(
        ConfigError, match="init set a feature's embedding table; this feature is a dense value"
    ):
        parse_config(data)
