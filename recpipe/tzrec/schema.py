"""The part of TorchEasyRec's ``tzrec.protos`` schema the importer reads, built as protobuf descriptors.

Message, field and enum names and field numbers are TorchEasyRec's (``tzrec/protos/*.proto``, proto2),
so a config parses here exactly as it does there, restricted to the fields recpipe can honour; a field
outside this subset is reported as unsupported instead of being dropped. No ``.proto`` compiler is
needed: the descriptors are declared below and added to a private :class:`DescriptorPool` (not the
default one, so a real ``tzrec`` install in the same process is unaffected).

One deliberate difference: TorchEasyRec's ``float`` fields are ``double`` here, so ``lr: 0.001`` and
``boundaries: [1.12]`` come back as the decimals written rather than their float32 neighbours.

Example::

    cfg = message_class("EasyRecConfig")()
    text_format.Parse('model_dir: "x" data_config { batch_size: 64 }', cfg)
    cfg.data_config.batch_size, cfg.data_config.num_workers   # (64, 8): TorchEasyRec's default
"""

from __future__ import annotations

from functools import cache
from typing import Any, NamedTuple

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor
from google.protobuf.message import Message

PACKAGE = "tzrec.protos"
ROOT = "EasyRecConfig"
# The names of TorchEasyRec's ``ModelConfig.model`` oneof (tzrec/protos/model.proto): an unsupported one
# is reported as an unsupported model rather than as an unknown field.
TZREC_MODELS = frozenset(
    "dlrm deepfm multi_tower multi_tower_din mask_net wide_and_deep dcn_v1 dcn_v2 xdeepfm wukong "
    "simple_multi_task mmoe dbmtl ple dc2vr dlrm_hstu pepnet ultra_hstu dssm dssm_v2 dat hstu_match mind "
    "tdm rocket_launching sid_rqvae sid_rqkmeans".split()
)


class FieldSpec(NamedTuple):
    """One field: ``type`` is a scalar (``string``, ``bool``, ``int32``, ``uint32``, ``uint64``, ``double``) or the
    name of a message or enum below; ``default`` is TorchEasyRec's, as protobuf text."""

    name: str
    number: int
    type: str
    label: str = "optional"
    default: str | None = None
    oneof: str | None = None


def _f(name: str, number: int, type_: str, label: str = "optional", default: str | None = None) -> FieldSpec:
    return FieldSpec(name, number, type_, label, default)


def _one(oneof: str, name: str, number: int, type_: str) -> FieldSpec:
    return FieldSpec(name, number, type_, "optional", None, oneof)


_REQ, _REP = "required", "repeated"
# IdFeature's / RawFeature's fields read when the feature is a standalone sequence (feature.proto 101-102).
_SEQUENCE_FIELDS = (
    FieldSpec("sequence_length", 101, "uint32"),
    FieldSpec("sequence_delim", 102, "string", "optional", ";"),
)
_LR = _f("lr", 1, "double", _REQ, "0.002")
_MLP = "MLP"


def _task_tower(label_name: str) -> list[FieldSpec]:
    """tower.proto's TaskTower fields 1-7; ``label_name`` is the label of field 2 (required in TaskTower)."""
    return [
        _f("tower_name", 1, "string", _REQ),
        _f("label_name", 2, "string", label_name),
        _f("metrics", 3, "MetricConfig", _REP),
        _f("losses", 4, "LossConfig", _REP),
        _f("num_class", 5, "uint32", default="1"),
        _f("mlp", 6, _MLP),
        _f("weight", 7, "double", default="1.0"),
        _f("train_metrics", 20, "TrainMetricConfig", _REP),
    ]


# feature.proto's oneof dense_emb of a raw feature and of every value feature.
_DENSE_EMB = (
    _one("dense_emb", "autodis", 40, "AutoDisEmbedding"),
    _one("dense_emb", "mlp", 41, "MLPEmbedding"),
)


def _task_space(first: int) -> list[FieldSpec]:
    """tower.proto's task-space fields of a task tower, numbered from ``first`` (TaskTower's 9, BayesTaskTower's 11)."""
    return [
        _f("task_space_indicator_label", first, "string"),
        _f("in_task_space_weight", first + 1, "double", default="1.0"),
        _f("out_task_space_weight", first + 2, "double", default="1.0"),
    ]


_FIELD_TYPES = [
    "INT32", "INT64", "STRING", "FLOAT", "DOUBLE",
    "ARRAY_INT32", "ARRAY_INT64", "ARRAY_STRING", "ARRAY_FLOAT", "ARRAY_DOUBLE",
    "ARRAY_ARRAY_INT32", "ARRAY_ARRAY_INT64", "ARRAY_ARRAY_STRING", "ARRAY_ARRAY_FLOAT", "ARRAY_ARRAY_DOUBLE",
    "MAP_STRING_INT32", "MAP_STRING_INT64", "MAP_STRING_STRING", "MAP_STRING_FLOAT", "MAP_STRING_DOUBLE",
    "MAP_INT64_INT32", "MAP_INT64_INT64", "MAP_INT64_STRING", "MAP_INT64_FLOAT", "MAP_INT64_DOUBLE",
    "MAP_INT32_INT32", "MAP_INT32_INT64", "MAP_INT32_STRING", "MAP_INT32_FLOAT", "MAP_INT32_DOUBLE",
]  # fmt: skip

# Every value of TorchEasyRec's enums parses; the importer rejects the values it cannot honour by name.
ENUMS: dict[str, list[tuple[str, int]]] = {
    "DatasetType": [
        ("OdpsDataset", 1), ("ParquetDataset", 2), ("CsvDataset", 3), ("OdpsDatasetV1", 4), ("KafkaDataset", 5),
    ],
    "FgMode": [("FG_NONE", 1), ("FG_NORMAL", 2), ("FG_DAG", 3), ("FG_BUCKETIZE", 4)],
    "FieldType": [(n, i) for i, n in enumerate(_FIELD_TYPES)],
    "FeatureGroupType": [("DEEP", 0), ("WIDE", 1), ("SEQUENCE", 2), ("JAGGED_SEQUENCE", 3)],
}  # fmt: skip

MESSAGES: dict[str, list[FieldSpec]] = {
    # pipeline.proto
    "EasyRecConfig": [
        # Required in TorchEasyRec's proto, but a model config imports without them: the pipeline's data
        # source gives the input (a path given is kept, as data.train / data.eval).
        _f("train_input_path", 1, "string"),
        _f("eval_input_path", 2, "string"),
        _f("model_dir", 3, "string", _REQ),
        _f("train_config", 4, "TrainConfig"),
        _f("eval_config", 5, "EvalConfig"),
        _f("data_config", 7, "DataConfig"),
        _f("feature_configs", 8, "FeatureConfig", _REP),
        _f("model_config", 9, "ModelConfig"),
    ],
    # train.proto, optimizer.proto
    "TrainConfig": [
        _f("sparse_optimizer", 1, "SparseOptimizer", _REQ),
        _f("dense_optimizer", 2, "DenseOptimizer", _REQ),
        _f("num_steps", 3, "uint32"),
        _f("num_epochs", 4, "uint32"),
        _f("save_checkpoints_steps", 5, "uint32", default="1000"),
        _f("log_step_count_steps", 8, "uint32", default="100"),
        _f("is_profiling", 9, "bool", default="false"),
        _f("use_tensorboard", 10, "bool", default="true"),
        _f("save_checkpoints_epochs", 11, "uint32"),
        _f("tensorboard_summaries", 12, "string", _REP),
        _f("cudnn_allow_tf32", 13, "bool", default="true"),
        _f("cuda_matmul_allow_tf32", 14, "bool", default="false"),
        _f("keep_checkpoint_max", 20, "uint32", default="0"),
        # Read by recpipe.tzrec.training (emb work): autocast of the dense part.
        _f("mixed_precision", 16, "string"),
    ],
    "SparseOptimizer": [
        _one("optimizer", "sgd_optimizer", 1, "FusedSGDOptimizer"),
        _one("optimizer", "adagrad_optimizer", 2, "FusedAdagradOptimizer"),
        _one("optimizer", "adam_optimizer", 3, "FusedAdamOptimizer"),
        _one("optimizer", "rowwise_adagrad_optimizer", 8, "FusedRowWiseAdagradOptimizer"),
        _one("learning_rate", "constant_learning_rate", 101, "ConstantLR"),
    ],
    "DenseOptimizer": [
        _one("optimizer", "sgd_optimizer", 1, "SGDOptimizer"),
        _one("optimizer", "adagrad_optimizer", 2, "AdagradOptimizer"),
        _one("optimizer", "adam_optimizer", 3, "AdamOptimizer"),
        _one("learning_rate", "constant_learning_rate", 101, "ConstantLR"),
    ],
    "FusedSGDOptimizer": [_LR],
    "FusedAdagradOptimizer": [_LR],
    "FusedAdamOptimizer": [
        _LR,
        _f("beta1", 2, "double", default="0.9"),
        _f("beta2", 3, "double", default="0.999"),
        _f("weight_decay", 4, "double", default="0.0"),
    ],
    "FusedRowWiseAdagradOptimizer": [_LR],
    "SGDOptimizer": [
        _LR,
        _f("momentum", 2, "double", default="0.9"),
        _f("weight_decay", 3, "double", default="0.0"),
    ],
    "AdagradOptimizer": [_LR, _f("weight_decay", 2, "double", default="0.0")],
    "AdamOptimizer": [
        _LR,
        _f("beta1", 2, "double", default="0.9"),
        _f("beta2", 3, "double", default="0.999"),
        _f("weight_decay", 4, "double", default="0.0"),
        _f("eps", 5, "double", default="1e-8"),
    ],
    "ConstantLR": [],
    # eval.proto
    "EvalConfig": [_f("num_steps", 1, "uint32"), _f("log_step_count_steps", 2, "uint32", default="10")],
    # data.proto
    "DataConfig": [
        _f("batch_size", 1, "uint32", default="1024"),
        _f("dataset_type", 2, "DatasetType", _REQ, "OdpsDataset"),
        _f("fg_encoded", 3, "bool", default="true"),
        # The separator of multi-value columns under FG_NONE (recpipe.tzrec.features reads it).
        _f("fg_encoded_multival_sep", 4, "string", default="\x03"),
        _f("label_fields", 5, "string", _REP),
        _f("num_workers", 6, "uint32", default="8"),
        _f("pin_memory", 7, "bool", default="true"),
        _f("input_fields", 8, "Field", _REP),
        _f("delimiter", 9, "string", default=","),
        _f("with_header", 10, "bool", default="false"),
        _f("fg_threads", 13, "uint32", default="1"),
        _f("odps_data_quota_name", 15, "string", default="pay-as-you-go"),
        _f("sample_weight_fields", 19, "string", _REP),
        _f("fg_mode", 20, "FgMode", default="FG_NONE"),
        _f("odps_data_compression", 24, "string", default="LZ4_FRAME"),
    ],
    "Field": [_f("input_name", 1, "string", _REQ), _f("input_type", 2, "FieldType")],
    # feature.proto
    "FeatureConfig": [
        _one("feature", "id_feature", 1, "IdFeature"),
        _one("feature", "raw_feature", 2, "RawFeature"),
        _one("feature", "combo_feature", 3, "ComboFeature"),
        _one("feature", "sequence_feature", 6, "SequenceFeature"),
        # feature.proto's value features (recpipe.tzrec.value_features).
        _one("feature", "lookup_feature", 4, "LookupFeature"),
        _one("feature", "match_feature", 5, "MatchFeature"),
        _one("feature", "expr_feature", 7, "ExprFeature"),
        _one("feature", "overlap_feature", 8, "OverlapFeature"),
        # Standalone sequences (recpipe kinds sequence_id, sequence_raw).
        _one("feature", "sequence_id_feature", 101, "IdFeature"),
        _one("feature", "sequence_raw_feature", 102, "RawFeature"),
        _one("feature", "kv_dot_product", 11, "KvDotProduct"),
        _one("feature", "bool_mask_feature", 12, "BoolMaskFeature"),
    ],
    # TorchEasyRec's kv_delimiter is a float field (feature.proto); it is read only to be refused.
    "KvDotProduct": [
        _f("feature_name", 1, "string", _REQ),
        _f("query", 2, "string", _REQ),
        _f("document", 3, "string", _REQ),
        _f("embedding_name", 4, "string"),
        _f("embedding_dim", 5, "uint32"),
        _f("boundaries", 6, "double", _REP),
        _f("separator", 7, "string", default="\x1d"),
        _f("kv_delimiter", 8, "double"),
        _f("normalizer", 9, "string"),
        _f("pooling", 10, "string", default="sum"),
        _f("default_value", 11, "string", default="0"),
        _f("trainable", 33, "bool", default="true"),
        _f("data_type", 35, "string", default="FP32"),
        *_DENSE_EMB,
    ],
    "BoolMaskFeature": [
        _f("feature_name", 1, "string", _REQ),
        _f("expression", 2, "string", _REP),
        _f("embedding_name", 3, "string"),
        _f("embedding_dim", 4, "uint32", _REQ),
        _f("hash_bucket_size", 5, "uint64"),
        _f("num_buckets", 6, "uint64"),
        _f("vocab_list", 7, "string", _REP),
        _f("value_dim", 9, "uint32"),
        _f("pooling", 10, "string", default="sum"),
        _f("default_value", 11, "string", default=""),
        _f("separator", 12, "string", default="\x1d"),
        _f("vocab_file", 17, "string"),
        _f("trainable", 33, "bool", default="true"),
        _f("data_type", 35, "string", default="FP32"),
    ],
    "LookupFeature": [
        _f("feature_name", 1, "string", _REQ),
        _f("map", 2, "string", _REQ),
        _f("key", 3, "string", _REQ),
        _f("embedding_name", 4, "string"),
        _f("embedding_dim", 5, "uint32"),
        _f("boundaries", 6, "double", _REP),
        _f("hash_bucket_size", 7, "uint64"),
        _f("num_buckets", 8, "uint64"),
        _f("vocab_list", 9, "string", _REP),
        _f("pooling", 11, "string", default="sum"),
        _f("combiner", 12, "string", default="sum"),
        _f("default_value", 13, "string", default="0"),
        _f("separator", 14, "string", default="\x1d"),
        _f("need_discrete", 15, "bool", default="false"),
        _f("need_key", 16, "bool", default="false"),
        _f("normalizer", 17, "string"),
        _f("value_dim", 19, "uint32"),
        _f("vocab_file", 23, "string"),
        _f("trainable", 33, "bool", default="true"),
        _f("data_type", 35, "string", default="FP32"),
        *_DENSE_EMB,
    ],
    "MatchFeature": [
        _f("feature_name", 1, "string", _REQ),
        _f("nested_map", 2, "string", _REQ),
        _f("pkey", 3, "string", _REQ),
        _f("skey", 4, "string", _REQ),
        _f("embedding_name", 5, "string"),
        _f("embedding_dim", 6, "uint32"),
        _f("boundaries", 7, "double", _REP),
        _f("hash_bucket_size", 8, "uint64"),
        _f("num_buckets", 9, "uint64"),
        _f("vocab_list", 10, "string", _REP),
        _f("pooling", 12, "string", default="sum"),
        _f("default_value", 13, "string", default="0"),
        _f("need_discrete", 15, "bool", default="false"),
        _f("show_pkey", 16, "bool", default="false"),
        _f("show_skey", 17, "bool", default="false"),
        _f("normalizer", 18, "string"),
        _f("value_dim", 20, "uint32"),
        _f("vocab_file", 23, "string"),
        _f("trainable", 33, "bool", default="true"),
        _f("data_type", 35, "string", default="FP32"),
        *_DENSE_EMB,
    ],
    "ExprFeature": [
        _f("feature_name", 1, "string", _REQ),
        _f("expression", 2, "string", _REQ),
        _f("variables", 3, "string", _REP),
        _f("embedding_name", 4, "string"),
        _f("embedding_dim", 5, "uint32"),
        _f("boundaries", 6, "double", _REP),
        _f("separator", 7, "string", default="\x1d"),
        _f("fill_missing", 8, "double"),
        _f("pooling", 10, "string", default="sum"),
        _f("default_value", 11, "string", default="0"),
        _f("value_dim", 14, "uint32", default="0"),
        _f("trainable", 33, "bool", default="true"),
        _f("data_type", 35, "string", default="FP32"),
        *_DENSE_EMB,
    ],
    "OverlapFeature": [
        _f("feature_name", 1, "string", _REQ),
        _f("query", 2, "string", _REQ),
        _f("title", 3, "string", _REQ),
        _f("method", 4, "string", _REQ),
        _f("embedding_name", 5, "string"),
        _f("embedding_dim", 6, "uint32"),
        _f("boundaries", 7, "double", _REP),
        _f("normalizer", 8, "string"),
        _f("pooling", 10, "string", default="sum"),
        _f("separator", 12, "string", default="\x1d"),
        _f("trainable", 33, "bool", default="true"),
        _f("data_type", 35, "string", default="FP32"),
        *_DENSE_EMB,
    ],
    "IdFeature": [
        _f("feature_name", 1, "string", _REQ),
        _f("expression", 2, "string", _REQ),
        _f("embedding_name", 3, "string"),
        _f("embedding_dim", 4, "uint32", _REQ),
        _f("hash_bucket_size", 5, "uint64"),
        _f("num_buckets", 6, "uint64"),
        _f("vocab_list", 7, "string", _REP),
        _f("value_dim", 9, "uint32"),  # no default: 0, or 1 in a sequence (tzrec/features/id_feature.py)
        _f("pooling", 10, "string", default="sum"),
        _f("default_value", 11, "string", default=""),
        _f("separator", 12, "string", default="\x1d"),
        _f("weighted", 13, "bool", default="false"),
        _f("zch", 16, "ZeroCollisionHash"),
        _f("vocab_file", 17, "string"),
        _f("fg_encoded_default_value", 30, "string"),
        _f("default_bucketize_value", 31, "uint64"),
        _f("trainable", 33, "bool", default="true"),
        _f("data_type", 35, "string", default="FP32"),
        *_SEQUENCE_FIELDS,
    ],
    "ComboFeature": [
        _f("feature_name", 1, "string", _REQ),
        _f("expression", 2, "string", _REP),
        _f("embedding_name", 3, "string"),
        _f("embedding_dim", 4, "uint32"),
        _f("hash_bucket_size", 5, "uint64"),
        _f("vocab_list", 7, "string", _REP),
        _f("value_dim", 9, "uint32", default="0"),
        _f("pooling", 10, "string", default="sum"),
        _f("default_value", 11, "string", default=""),
        _f("separator", 12, "string", default="\x1d"),
        _f("zch", 15, "ZeroCollisionHash"),
        _f("vocab_file", 16, "string"),
        _f("fg_encoded_default_value", 30, "string"),
        _f("default_bucketize_value", 31, "uint64"),
        _f("trainable", 33, "bool", default="true"),
        _f("data_type", 35, "string", default="FP32"),
    ],
    # feature.proto's zero-collision hash of an id feature (recpipe.tzrec.features reads it).
    "ZeroCollisionHash": [
        _f("zch_size", 1, "uint64", _REQ),
        _f("eviction_interval", 2, "uint32", default="5"),
        _f("threshold_filtering_func", 3, "string"),
        _one("eviction_policy", "lfu", 101, "LFU_EvictionPolicy"),
        _one("eviction_policy", "lru", 102, "LRU_EvictionPolicy"),
        _one("eviction_policy", "distance_lfu", 103, "DistanceLFU_EvictionPolicy"),
    ],
    "LFU_EvictionPolicy": [],
    "LRU_EvictionPolicy": [_f("decay_exponent", 1, "double", default="1.0")],
    "DistanceLFU_EvictionPolicy": [_f("decay_exponent", 1, "double", default="1.0")],
    "AutoDisEmbedding": [
        _f("num_channels", 2, "uint32", _REQ),
        _f("temperature", 3, "double", default="0.1"),
        _f("keep_prob", 4, "double", default="0.8"),
    ],
    "MLPEmbedding": [],
    "RawFeature": [
        _f("feature_name", 1, "string", _REQ),
        _f("expression", 2, "string", _REQ),
        _f("embedding_name", 3, "string"),
        _f("embedding_dim", 4, "uint32"),
        _f("boundaries", 5, "double", _REP),
        _f("value_dim", 6, "uint32", default="1"),
        _f("normalizer", 7, "string"),
        _f("default_value", 11, "string", default="0"),
        _f("separator", 12, "string", default="\x1d"),
        _f("fg_encoded_default_value", 30, "string"),
        *_SEQUENCE_FIELDS,
        _f("trainable", 33, "bool", default="true"),
        _f("data_type", 35, "string", default="FP32"),
        _one("dense_emb", "autodis", 40, "AutoDisEmbedding"),
        _one("dense_emb", "mlp", 41, "MLPEmbedding"),
    ],
    "SequenceFeature": [
        _f("sequence_name", 1, "string", _REQ),
        _f("sequence_length", 2, "uint32", _REQ),
        _f("sequence_delim", 3, "string", _REQ, ";"),
        _f("sequence_pk", 4, "string"),
        _f("features", 5, "SeqFeatureConfig", _REP),
    ],
    "SeqFeatureConfig": [
        _one("feature", "id_feature", 1, "IdFeature"),
        _one("feature", "raw_feature", 2, "RawFeature"),
    ],
    # model.proto, rank_model.proto, tower.proto, module.proto, loss.proto, metric.proto
    "ModelConfig": [
        _f("feature_groups", 1, "FeatureGroupConfig", _REP),
        _f("num_class", 2, "uint32", default="1"),
        _f("losses", 3, "LossConfig", _REP),
        _f("metrics", 4, "MetricConfig", _REP),
        _f("train_metrics", 5, "TrainMetricConfig", _REP),
        _one("model", "dlrm", 100, "DLRM"),
        _one("model", "deepfm", 101, "DeepFM"),
        _one("model", "multi_tower", 102, "MultiTower"),
        _one("model", "multi_tower_din", 103, "MultiTowerDIN"),
        _one("model", "wide_and_deep", 105, "WideAndDeep"),
        _one("model", "mmoe", 201, "MMoE"),
        _one("model", "dbmtl", 202, "DBMTL"),
        _one("model", "ple", 203, "PLE"),
    ],
    "FeatureGroupConfig": [
        _f("group_name", 1, "string", _REQ),
        _f("feature_names", 2, "string", _REP),
        _f("group_type", 3, "FeatureGroupType", _REQ, "DEEP"),
        _f("sequence_groups", 4, "SeqGroupConfig", _REP),
        _f("sequence_encoders", 5, "SeqEncoderConfig", _REP),
    ],
    # model.proto's SeqGroupConfig (embedding_name_suffix left out) and seq_encoder.proto's DIN encoder.
    "SeqGroupConfig": [_f("group_name", 1, "string"), _f("feature_names", 2, "string", _REP)],
    "SeqEncoderConfig": [_one("seq_module", "din_encoder", 1, "DINEncoder")],
    "DINEncoder": [
        _f("name", 1, "string"),
        # Required in seq_encoder.proto, yet TorchEasyRec fills it with the only sequence group when unset
        # (tzrec/modules/embedding.py, _inspect_and_supplement_feature_group).
        _f("input", 2, "string"),
        _f("attn_mlp", 3, _MLP, _REQ),
        _f("max_seq_length", 6, "int32", default="0"),
    ],
    "MultiTower": [_f("towers", 1, "Tower", _REP), _f("final", 2, _MLP, _REQ)],
    "MultiTowerDIN": [
        _f("towers", 1, "Tower", _REP),
        _f("din_towers", 2, "DINTower", _REP),
        _f("final", 3, _MLP, _REQ),
    ],
    "DLRM": [
        _f("dense_mlp", 1, _MLP, _REQ),
        _f("arch_with_sparse", 2, "bool", default="true"),
        _f("final", 3, _MLP, _REQ),
    ],
    # rank_model.proto: wide_init_fn (4) is left out, so a config that sets it is told it is unsupported.
    "DeepFM": [
        _f("deep", 1, _MLP, _REQ),
        _f("final", 2, _MLP),
        _f("wide_embedding_dim", 3, "uint32", default="4"),
    ],
    "WideAndDeep": [
        _f("deep", 1, _MLP, _REQ),
        _f("final", 2, _MLP),
        _f("wide_embedding_dim", 3, "uint32", default="4"),
    ],
    # multi_task_rank.proto; DBMTL's mask_net (6) is left out, so a config that sets it is told it is unsupported.
    "MMoE": [
        _f("expert_mlp", 1, _MLP, _REQ),
        _f("gate_mlp", 2, _MLP),
        _f("num_expert", 3, "uint32", _REQ, "3"),
        _f("task_towers", 4, "TaskTower", _REP),
    ],
    "DBMTL": [
        _f("bottom_mlp", 1, _MLP),
        _f("expert_mlp", 2, _MLP),
        _f("gate_mlp", 3, _MLP),
        _f("num_expert", 4, "uint32", default="3"),
        _f("task_towers", 5, "BayesTaskTower", _REP),
    ],
    "PLE": [_f("extraction_networks", 1, "ExtractionNetwork", _REP), _f("task_towers", 2, "TaskTower", _REP)],
    # tower.proto: the pareto fields and sample_weight_name are left out.
    # BayesTaskTower (DBMTL's) is TaskTower with an optional label_name and the relation fields.
    "TaskTower": [*_task_tower(label_name=_REQ), *_task_space(9)],
    "BayesTaskTower": [
        *_task_tower(label_name="optional"),
        _f("relation_tower_names", 8, "string", _REP),
        _f("relation_mlp", 9, _MLP),
        *_task_space(11),
    ],
    # module.proto
    "ExtractionNetwork": [
        _f("network_name", 1, "string", _REQ),
        _f("expert_num_per_task", 2, "uint32", _REQ),
        _f("share_num", 3, "uint32"),
        _f("task_expert_net", 4, _MLP, _REQ),
        _f("share_expert_net", 5, _MLP),
    ],
    "Tower": [_f("input", 1, "string", _REQ), _f("mlp", 2, _MLP, _REQ)],
    "DINTower": [_f("input", 1, "string", _REQ), _f("attn_mlp", 2, _MLP, _REQ)],
    "MLP": [
        _f("hidden_units", 1, "uint32", _REP),
        _f("dropout_ratio", 2, "double", _REP),
        _f("activation", 3, "string", default="nn.ReLU"),
        _f("use_bn", 4, "bool", default="false"),
    ],
    "LossConfig": [_one("loss", "binary_cross_entropy", 1, "BinaryCrossEntropy")],
    "BinaryCrossEntropy": [],
    "MetricConfig": [_one("metric", "auc", 1, "AUC"), _one("metric", "grouped_auc", 7, "GroupedAUC")],
    "AUC": [_f("thresholds", 1, "uint32", default="200")],
    # metric.proto's TrainMetricConfig: only auc (recpipe's training log reports a window's AUC).
    "TrainMetricConfig": [
        _one("metric", "auc", 1, "AUC"),
        _f("decay_rate", 20, "double", default="0.9"),
        _f("decay_step", 21, "uint32", default="100"),
    ],
    "GroupedAUC": [_f("grouping_key", 1, "string", _REQ)],
}

_FDP = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    "string": _FDP.TYPE_STRING,
    "bool": _FDP.TYPE_BOOL,
    "uint32": _FDP.TYPE_UINT32,
    "int32": _FDP.TYPE_INT32,
    "uint64": _FDP.TYPE_UINT64,
    "double": _FDP.TYPE_DOUBLE,
}
_LABELS = {"optional": _FDP.LABEL_OPTIONAL, "required": _FDP.LABEL_REQUIRED, "repeated": _FDP.LABEL_REPEATED}


def file_descriptor_proto() -> descriptor_pb2.FileDescriptorProto:
    """The supported subset as one proto2 ``FileDescriptorProto`` in package ``tzrec.protos``."""
    fdp = descriptor_pb2.FileDescriptorProto(
        name="recpipe/tzrec/supported.proto", package=PACKAGE, syntax="proto2"
    )
    for enum_name, values in ENUMS.items():
        enum = fdp.enum_type.add(name=enum_name)
        for value_name, number in values:
            enum.value.add(name=value_name, number=number)
    for msg_name, fields in MESSAGES.items():
        msg = fdp.message_type.add(name=msg_name)
        oneofs: list[str] = []
        for spec in fields:
            field = msg.field.add(name=spec.name, number=spec.number, label=_LABELS[spec.label])
            if spec.type in _SCALARS:
                field.type = _SCALARS[spec.type]
            elif spec.type in ENUMS:
                field.type, field.type_name = _FDP.TYPE_ENUM, f".{PACKAGE}.{spec.type}"
            elif spec.type in MESSAGES:
                field.type, field.type_name = _FDP.TYPE_MESSAGE, f".{PACKAGE}.{spec.type}"
            else:
                raise ValueError(f"field {msg_name}.{spec.name}: unknown type {spec.type!r}")
            if spec.default is not None:
                field.default_value = spec.default
            if spec.oneof is not None:
                if spec.oneof not in oneofs:
                    oneofs.append(spec.oneof)
                    msg.oneof_decl.add(name=spec.oneof)
                field.oneof_index = oneofs.index(spec.oneof)
    return fdp


@cache
def _pool() -> descriptor_pool.DescriptorPool:
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file_descriptor_proto())
    return pool


def descriptor(name: str = ROOT) -> Descriptor:
    """The descriptor of message ``name`` (e.g. ``"IdFeature"``)."""
    return _pool().FindMessageTypeByName(f"{PACKAGE}.{name}")


def message_class(name: str = ROOT) -> type[Message]:
    """The generated message class of ``name``; ``message_class()()`` is an empty ``EasyRecConfig``."""
    return message_factory.GetMessageClass(descriptor(name))


def new_config() -> Any:
    """An empty ``EasyRecConfig`` message."""
    return message_class(ROOT)()
