"""TorchEasyRec configs written for these tests (``configs/*.config``) and a builder of small ones.

A module of its own (not conftest.py) so tests can import it by a name no other test folder uses."""

from __future__ import annotations

from pathlib import Path

# TorchRec's / TorchEasyRec's Criteo Terabyte vocabulary sizes (the ids of its hashed tables are below them).
from recpipe.data.synthetic.criteo import TERABYTE_BUCKETS

CONFIGS = Path(__file__).parent / "configs"
DIN_CONFIG = CONFIGS / "multi_tower_din_taobao.config"
DLRM_CONFIG = CONFIGS / "dlrm_criteo.config"
DSSM_CONFIG = CONFIGS / "dssm_taobao.config"


def dssm_v2_text() -> str:
    """:data:`DSSM_CONFIG` as TorchEasyRec's examples/dssm_v2_taobao.config differs from its DSSM one:
    ``force_base_data_group: true`` in data_config and the model block ``dssm_v2``."""
    text = DSSM_CONFIG.read_text()
    text = text.replace(
        '    label_fields: "clk"\n', '    label_fields: "clk"\n    force_base_data_group: true\n', 1
    )
    return text.replace("    dssm {", "    dssm_v2 {", 1)


HEAD = """\
train_input_path: "data/train"
eval_input_path: "data/eval"
model_dir: "experiments/small"
train_config {
    sparse_optimizer { adagrad_optimizer { lr: 0.01 } constant_learning_rate {} }
    dense_optimizer { adam_optimizer { lr: 0.001 } constant_learning_rate {} }
}
data_config {
    batch_size: 64
    dataset_type: ParquetDataset
    fg_mode: FG_DAG
    label_fields: "clk"
}
"""


def small_din(sequence_extra: str = "", model_extra: str = "") -> str:
    """A small valid MultiTowerDIN config (lines 1-13 are :data:`HEAD`); the extras go inside the
    sequence sub-feature ``adgroup_id`` and inside ``model_config``."""
    return (
        HEAD
        + f"""\
feature_configs {{ id_feature {{ feature_name: "user_id" expression: "user:user_id" num_buckets: 100 embedding_dim: 8 }} }}
feature_configs {{ id_feature {{ feature_name: "adgroup_id" expression: "item:adgroup_id" num_buckets: 50 embedding_dim: 8 }} }}
feature_configs {{
    sequence_feature {{
        sequence_name: "click_50_seq"
        sequence_length: 20
        sequence_delim: "|"
        features {{
            id_feature {{
                feature_name: "adgroup_id"
                expression: "item:adgroup_id"
                num_buckets: 50
                embedding_dim: 8
                {sequence_extra}
            }}
        }}
    }}
}}
model_config {{
    feature_groups {{ group_name: "deep" feature_names: ["user_id", "adgroup_id"] group_type: DEEP }}
    feature_groups {{
        group_name: "seq"
        feature_names: "adgroup_id"
        feature_names: "click_50_seq__adgroup_id"
        group_type: SEQUENCE
    }}
    multi_tower_din {{
        towers {{ input: "deep" mlp {{ hidden_units: [16, 8] }} }}
        din_towers {{ input: "seq" attn_mlp {{ hidden_units: [8] }} }}
        final {{ hidden_units: [8] }}
    }}
    {model_extra}
}}
"""
    )


DLRM_MODEL = """dlrm {
        dense_mlp { hidden_units: 64 hidden_units: 16 }
        final { hidden_units: 64 hidden_units: 32 }
        arch_with_sparse: true
    }"""


def wukong_model(dense_mlp: str = "512, 256, 128") -> str:
    """TorchEasyRec's ``examples/wukong_criteo.config`` model block (its ``dense_mlp`` ends at 128, the
    embeddings are 16 wide; ``dense_mlp`` replaces the widths)."""
    layer = (
        "wukong_layers { lcb_feature_num: 16 fmb_feature_num: 16 compressed_feature_num: 24 "
        "feature_num_mlp { hidden_units: 512 } }"
    )
    return (
        f"wukong {{ dense_mlp {{ hidden_units: [{dense_mlp}] }} {layer} {layer} "
        "final { hidden_units: 512 hidden_units: 64 } }"
    )


def tzrec_dlrm(max_buckets: int | None = None, model: str = "", model_dir: str = "dlrm_criteo") -> str:
    """A DLRM/Criteo config written the way TorchEasyRec's ``examples/dlrm_criteo.config`` is: ``{PROJECT}``
    ODPS paths, ``odps_data_quota_name: ""``, ``eval_config { num_steps }``, ``int_k`` raw features with a
    ``log(x+3)`` FG expression, ``cat_k`` id features with ``num_buckets`` (capped at ``max_buckets``),
    groups ``dense`` and ``sparse``, ``arch_with_sparse: true``. ``model`` replaces the ``dlrm`` block (TorchEasyRec's
    ``wukong_criteo.config`` and ``masknet_criteo.config`` share these features and groups)."""
    raw = "".join(
        f'feature_configs {{ raw_feature {{ feature_name: "int_{i}" expression: "user:int_{i}" '
        f'normalizer: "method=expression,expr=log(x+3)" }} }}\n'
        for i in range(13)
    )
    ids = "".join(
        f'feature_configs {{ id_feature {{ feature_name: "cat_{i}" expression: "user:cat_{i}" '
        f"num_buckets: {min(n, max_buckets or n)} embedding_dim: 16 }} }}\n"
        for i, n in enumerate(TERABYTE_BUCKETS)
    )
    dense = " ".join(f'feature_names: "int_{i}"' for i in range(13))
    sparse = " ".join(f'feature_names: "cat_{i}"' for i in range(26))
    return f"""\
train_input_path: "odps://{{PROJECT}}/tables/criteo_terabyte_train_hashed_v1"
eval_input_path: "odps://{{PROJECT}}/tables/criteo_terabyte_val_test_hashed_v1"
model_dir: "experiments/{model_dir}"
train_config {{
    sparse_optimizer {{ adagrad_optimizer {{ lr: 0.001 }} constant_learning_rate {{ }} }}
    dense_optimizer {{ adam_optimizer {{ lr: 0.001 }} constant_learning_rate {{ }} }}
    num_epochs: 1
}}
eval_config {{ num_steps: 100 }}
data_config {{
    batch_size: 8192
    dataset_type: OdpsDataset
    fg_mode: FG_DAG
    label_fields: "label"
    odps_data_quota_name: ""
    num_workers: 8
}}
{raw}{ids}model_config {{
    feature_groups {{ group_name: "dense" {dense} group_type: DEEP }}
    feature_groups {{ group_name: "sparse" {sparse} group_type: DEEP }}
    {model or DLRM_MODEL}
    num_class: 1
    metrics {{ auc {{}} }}
    losses {{ binary_cross_entropy {{}} }}
}}
"""


MULTI_TOWER_MODEL = """\
model_config {
    feature_groups {
        group_name: "user"
        feature_names: ["user_id", "cms_segid", "cms_group_id", "final_gender_code", "age_level"]
        feature_names: ["pvalue_level", "shopping_level", "occupation", "new_user_class_level", "pid"]
        group_type: DEEP
    }
    feature_groups {
        group_name: "item"
        feature_names: ["adgroup_id", "cate_id", "campaign_id", "customer", "brand", "price"]
        group_type: DEEP
    }
    multi_tower {
        towers { input: 'user' mlp { hidden_units: [512, 256, 128] } }
        towers { input: 'item' mlp { hidden_units: [512, 256, 128] } }
        final { hidden_units: [64] }
    }
    metrics { auc {} }
    losses { binary_cross_entropy {} }
}
"""


def tzrec_multi_tower() -> str:
    """TorchEasyRec's ``examples/multi_tower_taobao.config`` construct: the MultiTowerDIN config's features
    without the history, groups ``user`` and ``item``, model ``multi_tower``."""
    text = DIN_CONFIG.read_text()
    start = text.index("feature_configs {\n    sequence_feature {")
    return text[:start] + MULTI_TOWER_MODEL


def tzrec_deepfm(max_buckets: int | None = None, model: str = "", groups: str = "") -> str:
    """A DeepFM/Criteo config written the way TorchEasyRec's ``examples/deepfm_criteo.config`` is: ``{PROJECT}``
    ODPS paths of the hashed Terabyte tables, ``fg_mode: FG_NONE`` (pre-encoded input, so no ``expression``
    and no normalizer), ``int_k`` raw features with only a name, ``cat_k`` id features with ``num_buckets``
    (capped at ``max_buckets``), groups ``wide`` (WIDE), ``fm`` and ``deep``, ``deepfm { deep final }``.
    ``model`` replaces the ``deepfm`` block and ``groups`` the three groups."""
    raw = "".join(f'feature_configs {{ raw_feature {{ feature_name: "int_{i}" }} }}\n' for i in range(13))
    ids = "".join(
        f'feature_configs {{ id_feature {{ feature_name: "cat_{i}" num_buckets: {min(n, max_buckets or n)} '
        f"embedding_dim: 16 }} }}\n"
        for i, n in enumerate(TERABYTE_BUCKETS)
    )
    dense = " ".join(f'feature_names: "int_{i}"' for i in range(13))
    sparse = " ".join(f'feature_names: "cat_{i}"' for i in range(26))
    groups = groups or (
        f'feature_groups {{ group_name: "wide" {sparse} group_type: WIDE }}\n'
        f'    feature_groups {{ group_name: "fm" {sparse} group_type: DEEP }}\n'
        f'    feature_groups {{ group_name: "deep" {dense} {sparse} group_type: DEEP }}'
    )
    model = model or "deepfm { deep { hidden_units: [512, 256, 128] } final { hidden_units: [64] } }"
    return f"""\
train_input_path: "odps://{{PROJECT}}/tables/criteo_terabyte_train_hashed_v1"
eval_input_path: "odps://{{PROJECT}}/tables/criteo_terabyte_val_test_hashed_v1"
model_dir: "experiments/deepfm_criteo"
train_config {{
    sparse_optimizer {{ adagrad_optimizer {{ lr: 0.001 }} constant_learning_rate {{ }} }}
    dense_optimizer {{ adam_optimizer {{ lr: 0.001 }} constant_learning_rate {{ }} }}
    num_epochs: 1
}}
eval_config {{ num_steps: 100 }}
data_config {{
    batch_size: 8192
    dataset_type: OdpsDataset
    fg_mode: FG_NONE
    label_fields: "label"
    num_workers: 8
}}
{raw}{ids}model_config {{
    {groups}
    {model}
    metrics {{ auc {{}} }}
    losses {{ binary_cross_entropy {{}} }}
}}
"""


def tzrec_criteo_dag(
    model: str,
    groups: str = "",
    max_buckets: int | None = None,
    losses: str = "losses { binary_cross_entropy {} }",
) -> str:
    """A Criteo config written the way TorchEasyRec's ``examples/masknet_criteo.config`` is (and
    ``wukong_criteo``, ``rocket_launching_criteo``): empty input paths and ``model_dir``, ``fg_mode: FG_DAG``,
    ``int_k`` raw features with ``embedding_dim: 16``, an ``expression: "user:int_k"`` and a
    ``normalizer: "method=expression,expr=log(x+3)"``, ``cat_k`` id features with ``hash_bucket_size`` (the
    Terabyte counts, capped at ``max_buckets``) and ``expression: "item:cat_k"``, one DEEP group
    ``all_features`` of the 26 ids then the 13 counts (``groups`` replaces it), and ``model`` (the model's
    block, e.g. ``mask_net { … }``) and its ``losses`` (``num_class`` too, when it has two)."""
    raw = "".join(
        f'feature_configs {{ raw_feature {{ feature_name: "int_{i}" embedding_dim: 16 expression: "user:int_{i}" '
        f'normalizer: "method=expression,expr=log(x+3)" }} }}\n'
        for i in range(13)
    )
    ids = "".join(
        f'feature_configs {{ id_feature {{ feature_name: "cat_{i}" hash_bucket_size: {min(n, max_buckets or n)} '
        f'embedding_dim: 16 expression: "item:cat_{i}" }} }}\n'
        for i, n in enumerate(TERABYTE_BUCKETS)
    )
    names = (
        " ".join(f'feature_names: "cat_{i}"' for i in range(26))
        + " "
        + " ".join(f'feature_names: "int_{i}"' for i in range(13))
    )
    groups = groups or f'feature_groups {{ group_name: "all_features" {names} group_type: DEEP }}'
    return f"""\
train_input_path: ""
eval_input_path: ""
model_dir: ""
train_config {{
    sparse_optimizer {{ adagrad_optimizer {{ lr: 0.0001 }} constant_learning_rate {{ }} }}
    dense_optimizer {{ adam_optimizer {{ lr: 0.0001 }} constant_learning_rate {{ }} }}
    num_epochs: 1
    save_checkpoints_epochs: 1
}}
eval_config {{
}}
data_config {{
    batch_size: 8192
    dataset_type: OdpsDataset
    fg_mode: FG_DAG
    label_fields: "label"
    num_workers: 8
}}
{raw}{ids}model_config {{
    {groups}
    {model}
    metrics {{ auc {{}} }}
    {losses}
}}
"""


# examples/rocket_launching_criteo.config's model block and losses (its group is named "deep").
ROCKET_MODEL = """rocket_launching {
        booster_mlp { hidden_units: [256, 128, 64, 32] }
        light_mlp { hidden_units: [96, 64, 32] }
        feature_based_distillation: true
    }"""
ROCKET_LOSSES = "num_class: 2\n    losses { softmax_cross_entropy {} }"


# examples/masknet_criteo.config's model block.
MASKNET_MODEL = """mask_net {
        mask_net_module {
            n_mask_blocks: 3
            mask_block { reduction_ratio: 3 hidden_dim: 512 }
            use_parallel: true
            top_mlp { hidden_units: [256, 128, 64] }
        }
    }"""
