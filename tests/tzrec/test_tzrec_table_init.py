"""TorchEasyRec's table initializers as a feature's ``init`` (recpipe/tzrec/table_init.py): dynamicemb's
``initializer_args`` and a feature's ``init_fn``, each refused at its line where it has no counterpart; and an
ungrouped id_feature without ``embedding_dim`` (multi_tower_din_fg_dynamicemb_mock.config's ``id_9``)."""

from __future__ import annotations

import pytest
from tzrec_fixtures import small_din

from recpipe.features.build import build_feature_spec
from recpipe.features.spec import TableInit
from recpipe.tzrec import TzrecImportError, import_tzrec

USER = 'expression: "user:user_id" num_buckets: 100 embedding_dim: 8'
LINE = 14  # the user_id feature's line in small_din()


def _user(extra: str) -> str:
    return small_din().replace(USER, f"{USER} {extra}")


def _dynamicemb(initializer: str) -> str:
    return small_din().replace(
        USER,
        f'expression: "user:user_id" embedding_dim: 8 dynamicemb {{ max_capacity: 64 initializer_args {{ {initializer} }} }}',
    )


def _init(imported) -> dict | None:
    init = imported.config.features[0].init
    return None if init is None else init.to_dict()


@pytest.mark.parametrize(
    ("initializer", "init"),
    [
        # multi_tower_din_fg_rtp_mock.config's user_id and id_8
        ('mode: "NORMAL" std_dev: 0.05', {"mode": "normal", "mean": 0.0, "std": 0.05}),
        ('mode: "NORMAL"', {"mode": "normal", "mean": 0.0}),  # std: 1/sqrt(dim), recpipe's default too
        ("lower: -0.1", {"mode": "uniform", "lower": -0.1}),  # mode unset is UNIFORM
        ('mode: "UNIFORM"', None),  # U(±1/sqrt(max_capacity)): recpipe's default table init
        ('mode: "CONSTANT" value: 0.5', {"mode": "constant", "value": 0.5}),
        ('mode: "CONSTANT"', {"mode": "constant", "value": 0.0}),
        (
            'mode: "TRUNCATED_NORMAL" mean: 0.2 std_dev: 0.1',
            {"mode": "truncated_normal", "mean": 0.2, "std": 0.1, "lower": 0.0, "upper": 1.0},
        ),
    ],
)
def test_dynamicemb_initializer_args_map_to_the_tables_init(initializer, init) -> None:
    imported = import_tzrec(_dynamicemb(initializer))
    assert _init(imported) == init
    table = {t.name: t for t in build_feature_spec(imported.config).tables()}["user_id"]
    assert table.zch_size == 64 and table.init == (None if init is None else TableInit(**init))


def test_dynamicemb_initializer_notes_what_torcheasyrec_does_not_read() -> None:
    imported = import_tzrec(_dynamicemb('mode: "TRUNCATED_NORMAL" lower: -0.5 upper: 0.5'))
    notes = {n.path.rsplit(".", 1)[-1]: n.message for n in imported.notes}
    assert "TorchEasyRec passes dynamicemb no bounds" in notes["initializer_args"]
    assert notes["lower"] == "ignored: TorchEasyRec's TRUNCATED_NORMAL initializer does not read lower"
    imported = import_tzrec(_dynamicemb('mode: "NORMAL" value: 3'))
    assert any(n.message.endswith("NORMAL initializer does not read value") for n in imported.notes)


@pytest.mark.parametrize(
    ("initializer", "message"),
    [
        ('mode: "GAUSS"', "dynamicemb initializer mode 'GAUSS' is not one recpipe maps"),
        (
            'mode: "normal"',
            "initializer mode 'normal' is not one recpipe maps",
        ),  # TorchEasyRec's names are upper case
        ('mode: "DEBUG"', "DEBUG writes test values"),
    ],
)
def test_a_bad_dynamicemb_mode_is_refused_at_its_line(initializer, message) -> None:
    with pytest.raises(TzrecImportError) as err:
        import_tzrec(_dynamicemb(initializer))
    [problem] = err.value.problems
    assert problem.line == LINE
    assert problem.path == "feature_configs[0].id_feature.dynamicemb.initializer_args.mode"
    assert message in problem.message


def test_a_dynamicemb_bound_pair_the_wrong_way_round_is_refused() -> None:
    with pytest.raises(
        TzrecImportError, match=r"initializer_args \(UNIFORM\): init lower 0.5 must be below upper"
    ):
        import_tzrec(_dynamicemb("lower: 0.5 upper: 0.1"))


@pytest.mark.parametrize(
    ("init_fn", "init"),
    [
        (
            "nn.init.uniform_,a=-0.01,b=0.01",
            {"mode": "uniform", "lower": -0.01, "upper": 0.01},
        ),  # feature.md's
        ("nn.init.uniform_", {"mode": "uniform", "lower": 0.0, "upper": 1.0}),  # torch's defaults
        ("torch.nn.init.normal_, std=0.02", {"mode": "normal", "mean": 0.0, "std": 0.02}),
        (
            "nn.init.trunc_normal_,std=0.02",
            {"mode": "truncated_normal", "mean": 0.0, "std": 0.02, "lower": -2.0, "upper": 2.0},
        ),
        ("nn.init.constant_,val=0.3", {"mode": "constant", "value": 0.3}),
        ("nn.init.zeros_", {"mode": "constant", "value": 0.0}),
        ("nn.init.ones_", {"mode": "constant", "value": 1.0}),
    ],
)
def test_init_fn_maps_to_the_tables_init(init_fn, init) -> None:
    imported = import_tzrec(_user(f'init_fn: "{init_fn}"'))
    assert _init(imported) == init
    table = {t.name: t for t in build_feature_spec(imported.config).tables()}["user_id"]
    assert table.init == TableInit(**init)


@pytest.mark.parametrize(
    ("init_fn", "message"),
    [
        ("nn.init.xavier_uniform_", "recpipe maps nn.init.uniform_, nn.init.normal_"),
        ("nn.init.uniform_,-0.1,0.1", "positional arguments, which partial() passes before the weight"),
        ("nn.init.uniform_,a=low", "nn.init.uniform_ takes numeric keyword arguments (a, b)"),
        ("nn.init.normal_,sigma=0.1", "nn.init.normal_ takes numeric keyword arguments (mean, std)"),
        ("nn.init.constant_", "nn.init.constant_ needs val"),
        ("nn.init.uniform_,a=0.5,b=0.1", "init lower 0.5 must be below upper 0.1"),
        ("lambda t: t", "recpipe maps nn.init.uniform_"),
        ("nn.init.uniform_,a=", "is not a function and its keyword arguments"),
    ],
)
def test_an_init_fn_without_a_counterpart_is_refused_at_its_line(init_fn, message) -> None:
    with pytest.raises(TzrecImportError) as err:
        import_tzrec(_user(f'init_fn: "{init_fn}"'))
    [problem] = err.value.problems
    assert (problem.line, problem.path) == (LINE, "feature_configs[0].id_feature.init_fn")
    assert message in problem.message


def test_features_sharing_an_embedding_must_agree_on_init_fn() -> None:
    text = (
        small_din()
        .replace(
            'expression: "item:adgroup_id" num_buckets: 50 embedding_dim: 8 }',
            'expression: "item:adgroup_id" num_buckets: 50 embedding_dim: 8 embedding_name: "ad" init_fn: "nn.init.zeros_" }',
        )
        .replace(
            "                embedding_dim: 8\n",
            '                embedding_dim: 8\n                embedding_name: "ad"\n',
        )
    )
    with pytest.raises(
        TzrecImportError, match="differ in their buckets, embedding_dim, data_type, trainable or init"
    ):
        import_tzrec(text)
    # agreeing: one table, one init
    same = text.replace('embedding_name: "ad"\n', 'embedding_name: "ad" init_fn: "nn.init.zeros_"\n')
    tables = {t.name: t for t in build_feature_spec(import_tzrec(same).config).tables()}
    assert tables["adgroup_id"].init == TableInit("constant", value=0.0)


def test_a_dynamic_table_reads_initializer_args_not_init_fn() -> None:
    text = _dynamicemb('mode: "CONSTANT" value: 0.5').replace(
        "embedding_dim: 8 dynamicemb", 'init_fn: "nn.init.zeros_" embedding_dim: 8 dynamicemb'
    )
    imported = import_tzrec(text)
    assert _init(imported) == {"mode": "constant", "value": 0.5}
    assert any(
        n.path.endswith(".init_fn") and "does not convert init_fn" in n.message for n in imported.notes
    )


def test_an_ungrouped_id_feature_may_leave_embedding_dim_unset() -> None:
    """multi_tower_din_fg_dynamicemb_mock.config's id_9: TorchEasyRec's text_format.Merge does not check required
    fields, and only a grouped feature builds a table (``Feature.emb_bag_config`` asserts the dim > 0)."""
    extra = (
        'feature_configs { id_feature { feature_name: "id_9" expression: "user:id_9" num_buckets: 100 } }\n'
    )
    text = small_din().replace("model_config {", extra + "model_config {", 1)
    imported = import_tzrec(text)
    (note,) = [n for n in imported.notes if n.path == "feature_configs[3].id_feature.embedding_dim"]
    assert "'id_9' is in no feature group" in note.message
    assert [f.name for f in imported.config.features][-1] == "id_9"
    grouped = text.replace(
        'feature_names: ["user_id", "adgroup_id"]', 'feature_names: ["user_id", "adgroup_id", "id_9"]'
    )
    with pytest.raises(TzrecImportError) as err:
        import_tzrec(grouped)
    [problem] = err.value.problems
    assert problem.path == "feature_configs[3].id_feature.embedding_dim"
    assert "'id_9' is in a feature group, where TorchEasyRec asserts embedding_dim > 0" in problem.message
