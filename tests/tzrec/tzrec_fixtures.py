"""TorchEasyRec configs written for these tests (``configs/*.config``) and a builder of small ones.

A module of its own (not conftest.py) so tests can import it by a name no other test folder uses."""

from __future__ import annotations

from pathlib import Path

CONFIGS = Path(__file__).parent / "configs"
DIN_CONFIG = CONFIGS / "multi_tower_din_taobao.config"
DLRM_CONFIG = CONFIGS / "dlrm_criteo.config"

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
