"""The supported subset of tzrec.protos, built from descriptors: names, numbers, defaults, oneofs."""

from google.protobuf import text_format

from recpipe.tzrec.schema import descriptor, file_descriptor_proto, new_config


def test_descriptors_carry_torcheasyrec_names_numbers_and_labels():
    fdp = file_descriptor_proto()
    assert fdp.package == "tzrec.protos" and fdp.syntax == "proto2"
    id_feature = descriptor("IdFeature")
    assert id_feature.fields_by_name["num_buckets"].number == 6
    assert id_feature.fields_by_name["vocab_file"].number == 17
    assert descriptor("ModelConfig").fields_by_name["multi_tower_din"].number == 103
    assert [f.name for f in descriptor("ModelConfig").oneofs_by_name["model"].fields] == [
        "dlrm",
        "deepfm",
        "multi_tower",
        "multi_tower_din",
        "wide_and_deep",
        "wukong",
        "simple_multi_task",
        "mmoe",
        "dbmtl",
        "ple",
        "mask_net",
        "dcn_v1",
        "dcn_v2",
        "xdeepfm",
        "pepnet",
        "rocket_launching",
        "dssm",
        "dssm_v2",
        "mind",
    ]
    # model.proto: DSSM dssm = 301; DSSMV2 dssm_v2 = 302; MIND mind = 305; data.proto: NegativeSampler
    # negative_sampler = 101
    assert [descriptor("ModelConfig").fields_by_name[m].number for m in ("dssm", "dssm_v2", "mind")] == [
        301,
        302,
        305,
    ]
    # module.proto: B2ICapsule's defaults; MLP bias = 5
    capsule = descriptor("B2ICapsule").fields_by_name
    assert [
        capsule[k].default_value for k in ("max_k", "num_iters", "routing_logits_scale", "squash_pow")
    ] == [
        5,
        3,
        20.0,
        1.0,
    ]
    assert descriptor("MLP").fields_by_name["bias"].number == 5
    assert descriptor("MIND").fields_by_name["similarity"].default_value == 0  # COSINE
    assert descriptor("DataConfig").fields_by_name["negative_sampler"].number == 101
    assert descriptor("NegativeSampler").fields_by_name["attr_delimiter"].default_value == ":"
    assert descriptor("SeqEncoderConfig").fields_by_name["pooling_encoder"].number == 3
    assert descriptor("RecallAtK").fields_by_name["top_k"].default_value == 5
    # model.proto: MaskNet mask_net = 104; DCNV1 dcn_v1 = 106; DCNV2 dcn_v2 = 107; xDeepFM xdeepfm = 108
    cross = ("mask_net", "dcn_v1", "dcn_v2", "xdeepfm")
    assert [descriptor("ModelConfig").fields_by_name[m].number for m in cross] == [104, 106, 107, 108]
    # tzrec/protos/model.proto: MMoE mmoe = 201; DBMTL dbmtl = 202; PLE ple = 203
    assert [descriptor("ModelConfig").fields_by_name[m].number for m in ("mmoe", "dbmtl", "ple")] == [
        201,
        202,
        203,
    ]
    assert descriptor("BayesTaskTower").fields_by_name["relation_mlp"].number == 9
    assert descriptor("MMoE").fields_by_name["num_expert"].default_value == 3
    assert descriptor("ModelConfig").fields_by_name["multi_tower"].number == 102
    assert descriptor("ModelConfig").fields_by_name["deepfm"].number == 101
    assert descriptor("ModelConfig").fields_by_name["wide_and_deep"].number == 105
    assert descriptor("DeepFM").fields_by_name["wide_embedding_dim"].default_value == 4
    assert descriptor("RawFeature").fields_by_name["fg_encoded_default_value"].number == 30
    assert descriptor("DLRM").fields_by_name["final"].message_type.name == "MLP"
    # every message of the file resolves in the pool (its field types included)
    assert all(descriptor(m.name).full_name == f"tzrec.protos.{m.name}" for m in fdp.message_type)
    assert len(fdp.message_type) > 50


def test_unset_fields_read_torcheasyrec_defaults():
    cfg = new_config()
    text_format.Parse('data_config { label_fields: "clk" } model_config { dlrm {} }', cfg)
    dc = cfg.data_config
    assert (dc.batch_size, dc.num_workers, dc.with_header, dc.delimiter) == (1024, 8, False, ",")
    assert not dc.HasField("fg_mode") and dc.fg_encoded is True
    assert cfg.model_config.dlrm.arch_with_sparse is True
    assert cfg.model_config.dlrm.dense_mlp.activation == "nn.ReLU"
    assert cfg.train_config.save_checkpoints_steps == 1000 and cfg.train_config.log_step_count_steps == 100
    assert cfg.train_config.dense_optimizer.sgd_optimizer.momentum == 0.9
    # required fields the text left out are reported by protobuf itself
    assert "model_config.dlrm.dense_mlp" in cfg.FindInitializationErrors()


def test_float_fields_keep_the_decimals_written():
    cfg = new_config()
    text_format.Parse(
        "feature_configs { raw_feature { boundaries: [1.12, 10974.99] } } "
        "train_config { sparse_optimizer { adagrad_optimizer { lr: 0.001 } } }",
        cfg,
    )
    assert list(cfg.feature_configs[0].raw_feature.boundaries) == [1.12, 10974.99]
    assert cfg.train_config.sparse_optimizer.adagrad_optimizer.lr == 0.001
