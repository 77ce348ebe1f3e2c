"""feature_configs → recpipe features: normalizers, columns, defaults and shared embedding tables."""

import pytest
from tzrec_fixtures import small_din

from recpipe.features.build import build_feature_spec
from recpipe.tzrec import import_tzrec
from recpipe.tzrec.features import map_normalizer


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("method=expression,expr=log(x+3)", "log(x+3)"),
        ("method = expression, expr = log( x + 3.5 )", "log(x+3.5)"),
        ("log(x+3)", "log(x+3)"),
        ("method=zscore,mean=0.0,standard_deviation=10.0", None),
        ("method=log10,threshold=1e-10,default=-10", None),
        ("method=expression,expr=sign(x)", None),
        ("method=expression,expr=log(x+3),zscore", None),
    ],
)
def test_normalizers_as_torcheasyrec_writes_them(text, expected):
    assert map_normalizer(text) == expected


def _tables(cfg):
    return {t.name: t.feature_names for t in build_feature_spec(cfg).tables()}


def test_a_sub_feature_without_embedding_name_gets_its_own_table_as_in_torcheasyrec():
    cfg = import_tzrec(small_din()).config
    assert cfg.features[2].sub_features[0].embedding_name == "click_50_seq__adgroup_id"
    assert _tables(cfg) == {
        "user_id": ["user_id"],
        "adgroup_id": ["adgroup_id"],
        "click_50_seq__adgroup_id": ["click_50_seq__adgroup_id"],
    }


def test_embedding_name_shares_the_target_features_table():
    cfg = import_tzrec(small_din('embedding_name: "adgroup_id_emb"')).config
    assert cfg.features[2].sub_features[0].embedding_name == "adgroup_id"
    assert _tables(cfg)["adgroup_id"] == ["adgroup_id", "click_50_seq__adgroup_id"]


def test_columns_defaults_and_pooling():
    text = small_din('default_value: "0"').replace(
        'feature_name: "user_id" expression: "user:user_id"',
        'feature_name: "user_id" expression: "user:uid" pooling: "mean" default_value: "-1"',
    )
    cfg = import_tzrec(text).config
    user = cfg.features[0]
    assert (user.column, user.pooling, user.default_value) == ("uid", "mean", "-1")
    assert cfg.features[1].column is None and cfg.features[1].default_value is None
    assert cfg.features[2].sub_features[0].default_value == "0"
