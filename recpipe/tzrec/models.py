"""TorchEasyRec's ``model_config`` model → recpipe's ``model:`` section: MultiTowerDIN, MultiTower, DLRM,
DeepFM, WideAndDeep, the multi-task models and the cross models (DCNv2, DCNv1, MaskNet, xDeepFM), their MLPs,
metrics and the feature groups each reads."""

from __future__ import annotations

from typing import Any

from recpipe.tzrec.problems import Findings, Problem
from recpipe.tzrec.schema import TZREC_MODELS

_ACTIVATIONS = {"nn.ReLU": "relu", "nn.GELU": "gelu", "nn.SiLU": "silu", "Dice": "dice"}
MODELS = ("multi_tower_din", "multi_tower", "dlrm", "deepfm", "wide_and_deep", "mmoe", "dbmtl", "ple")
# The models over one deep group (TorchEasyRec's ``embedding_group.group_names()[0]``) and xDeepFM (issue 29).
CROSS_MODELS = ("dcn_v2", "dcn_v1", "mask_net", "xdeepfm")
MODELS = (*MODELS, *CROSS_MODELS)
MODELS += ("wukong",)
MULTI_TASK = ("mmoe", "dbmtl", "ple")
MODELS += ("pepnet", "simple_multi_task")
MULTI_TASK += ("pepnet", "simple_multi_task")
MODELS += ("rocket_launching",)
# The two-tower retrieval models (recpipe.models.dssm, dssm_v2): softmax cross-entropy over sampled negatives,
# recall@K.
RETRIEVAL = ("dssm", "dssm_v2")
# MIND (recpipe.models.mind): interests by capsule routing over a history group, trained and scored as DSSM.
RETRIEVAL += ("mind",)
MODELS += RETRIEVAL
_SIMILARITIES = {"COSINE": "cosine", "INNER_PRODUCT": "inner_product"}
# The models on MultiTowerDIN's dense arch, which holds recpipe's variational dropout.
# A single-task model's model_config.losses recpipe refuses (its models train BCE on one logit).
SINGLE_TASK_REFUSED = {
    "binary_focal_loss": "focal loss",
    "jrc_loss": "jrc loss",
    "softmax_cross_entropy": "two-class softmax cross-entropy",
}
VARIATIONAL_DROPOUT = ("multi_tower_din", "multi_tower", "mmoe", "dbmtl", "ple")
VARIATIONAL_DROPOUT += ("pepnet", "simple_multi_task", "dssm", "dssm_v2")


def _deep_towers(model: Any, path: str, found: Findings) -> list[dict[str, Any]]:
    """The ``towers`` of a multi_tower / multi_tower_din message: one MLP over each input group."""
    return [
        {"group": t.input, "mlp": _mlp(t.mlp, f"{path}.towers[{i}].mlp", found)}
        for i, t in enumerate(model.towers)
    ]


def _activation(name: str, path: str, found: Findings) -> str | None:
    """recpipe's name of TorchEasyRec's activation ``name``; None, with a problem at ``path``, when it has none."""
    if name not in _ACTIVATIONS:
        found.problem(path, f"activation {name!r} is not supported; supported: {', '.join(_ACTIVATIONS)}")
        return None
    return _ACTIVATIONS[name]


def _one_dropout(ratios: Any, path: str, found: Findings, layers: str) -> float | None:
    """The one dropout ratio of ``layers`` (None: none); different ratios per layer are a problem at ``path``."""
    dropout = set(ratios)
    if len(dropout) > 1:
        found.problem(path, f"recpipe uses one dropout for {layers}; got {list(ratios)}")
    elif dropout and dropout != {0.0}:
        return dropout.pop()
    return None


def _mlp(mlp: Any, path: str, found: Findings, bias: str = "refuse") -> dict[str, Any]:
    """An MLP; ``bias``: what ``bias: false`` does — ``refuse`` (recpipe's MLPs keep their biases), ``map``
    (the section's ``bias``: MIND's concat MLP), or ``read`` (the caller decides)."""
    out: dict[str, Any] = {"hidden_units": list(mlp.hidden_units)}
    if mlp.HasField("bias") and not mlp.bias:
        if bias == "refuse":
            found.problem(f"{path}.bias", "bias: false is not supported here: this MLP keeps its biases")
        elif bias == "map":
            out["bias"] = False
    activation = _activation(mlp.activation, f"{path}.activation", found)
    if activation not in (None, "relu"):
        out["activation"] = activation
    if mlp.use_bn:
        out["batch_norm"] = True
    dropout = _one_dropout(mlp.dropout_ratio, f"{path}.dropout_ratio", found, "all layers")
    if dropout is not None:
        out["dropout"] = dropout
    return out


# TorchEasyRec's train_metrics (metric.proto, TrainMetricConfig: only auc in the schema) are AUCs decayed over
# steps; recpipe's training log already reports an AUC over a window of recent rows.
TRAIN_METRICS_NOTE = (
    "ignored: recpipe's training log reports the AUC of the last 100,000 training rows of the primary label "
    "(train_auc_rank0 in metrics.jsonl) at every log step; decay_rate and decay_step have no counterpart"
)


def map_model(mc: Any, found: Findings) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``model:`` section and the ``eval:`` settings the metrics imply."""
    p = "model_config"
    kind = mc.WhichOneof("model")
    if kind == "rocket_launching":  # two nets of num_class 2 with softmax_cross_entropy, or 1 with BCE
        _task_classes(mc.num_class, mc.losses, p, found)
    elif mc.num_class != 1:
        found.problem(
            f"{p}.num_class", f"num_class {mc.num_class}: recpipe trains binary CTR models (num_class: 1)"
        )
    eval_: dict[str, Any] = {}
    for i, metric in enumerate(mc.metrics):
        which = metric.WhichOneof("metric")
        if kind in RETRIEVAL and which not in (None, "recall_at_k"):
            found.problem(
                f"{p}.metrics[{i}].{which}",
                f"{kind} is evaluated by recall_at_k only (TorchEasyRec's DSSM too: 仅支持recall_at_topk)",
            )
        elif which == "recall_at_k":
            if kind not in MODELS:  # an unsupported model is its one problem
                continue
            if kind not in RETRIEVAL:
                found.problem(
                    f"{p}.metrics[{i}].recall_at_k",
                    f"recall_at_k is a retrieval model's metric ({', '.join(RETRIEVAL)}); {kind} ranks",
                )
            else:
                top_k = metric.recall_at_k.top_k
                ks = eval_.setdefault("recall_at_k", [])
                if top_k in ks:
                    found.note(f"{p}.metrics[{i}].recall_at_k", f"ignored: top_k {top_k} is listed already")
                elif top_k < 1:
                    found.problem(f"{p}.metrics[{i}].recall_at_k.top_k", f"top_k {top_k} must be >= 1")
                else:
                    ks.append(top_k)
        elif which == "grouped_auc":
            key = metric.grouped_auc.grouping_key
            if eval_.get("gauc_group", key) != key:
                found.problem(f"{p}.metrics[{i}]", "recpipe reports one GAUC; grouping keys differ")
            eval_["gauc_group"] = key
        elif which == "auc" and metric.auc.HasField("thresholds"):
            found.note(f"{p}.metrics[{i}].auc.thresholds", "ignored: recpipe's AUC is exact")
    if mc.train_metrics and kind in RETRIEVAL:
        found.note(
            f"{p}.train_metrics",
            "ignored: recpipe's retrieval trainer records every step's loss; recall@K is computed at evaluation, "
            "over the whole item table",
        )
    elif mc.train_metrics:
        for i, metric in enumerate(mc.train_metrics):
            which = metric.WhichOneof("metric")
            if which not in (None, "auc"):
                found.problem(
                    f"{p}.train_metrics[{i}].{which}",
                    f"unsupported field '{which}': recpipe's training log reports a window's AUC only; "
                    f"{which} is computed at evaluation, if at all ({kind} ranks)",
                )
        found.note(f"{p}.train_metrics", TRAIN_METRICS_NOTE)
    if kind == "multi_tower":
        mt, mp = mc.multi_tower, f"{p}.multi_tower"
        model = {
            "type": "multi_tower",
            "towers": _deep_towers(mt, mp, found),
            "final": _mlp(mt.final, f"{mp}.final", found),
        }
    elif kind == "multi_tower_din":
        din, mp = mc.multi_tower_din, f"{p}.multi_tower_din"
        model = {
            "type": "multi_tower_din",
            "towers": _deep_towers(din, mp, found),
            "din_towers": [
                {"group": t.input, "attn_mlp": _mlp(t.attn_mlp, f"{mp}.din_towers[{i}].attn_mlp", found)}
                for i, t in enumerate(din.din_towers)
            ],
            "final": _mlp(din.final, f"{mp}.final", found),
        }
    elif kind == "dlrm":
        dlrm, mp = mc.dlrm, f"{p}.dlrm"
        groups = [g.group_name for g in mc.feature_groups]
        model = {
            "type": "dlrm",
            "dense_mlp": _mlp(dlrm.dense_mlp, f"{mp}.dense_mlp", found),
            "over_mlp": _mlp(dlrm.final, f"{mp}.final", found),
            # TorchEasyRec's DLRM reads the group named "sparse" (or the only group).
            "sparse_group": groups[0] if len(groups) == 1 else "sparse",
            # Unset means TorchEasyRec's default, true: the raw embeddings reach the final MLP too.
            "arch_with_sparse": dlrm.arch_with_sparse,
        }
    elif kind == "wukong":
        model = _wukong(mc, f"{p}.wukong", found)
    elif kind in ("deepfm", "wide_and_deep"):
        m, mp = getattr(mc, kind), f"{p}.{kind}"
        # TorchEasyRec's DeepFM / WideAndDeep read the groups named "wide" and "deep", DeepFM's FM term the
        # group "fm" when there is one, else "deep" (tzrec/models/deepfm.py, DeepFM.__init__ / predict).
        model = {
            "type": kind,
            "deep": _mlp(m.deep, f"{mp}.deep", found),
            "wide_group": "wide",
            "deep_group": "deep",
        }
        if m.HasField("final"):
            model["final"] = _mlp(m.final, f"{mp}.final", found)
        if kind == "deepfm":
            has_fm = any(g.group_name == "fm" for g in mc.feature_groups)
            model["fm_group"] = "fm" if has_fm else "deep"
    elif kind in CROSS_MODELS:
        model = _cross_model(mc, kind, f"{p}.{kind}", found)
    elif kind == "pepnet":
        model = _pepnet(mc, f"{p}.pepnet", found)
    elif kind == "rocket_launching":
        model = _rocket_launching(mc, f"{p}.rocket_launching", found)
    elif kind == "mind":
        model = _mind(mc, f"{p}.mind", found)
    elif kind in RETRIEVAL:
        model = _dssm(mc, kind, f"{p}.{kind}", found)
    elif kind in MULTI_TASK:
        model = _multi_task(mc, kind, f"{p}.{kind}", found)
        if mc.feature_groups:
            model["din_towers"] = sequence_encoders(
                mc.feature_groups[0], f"{p}.feature_groups[0]", found, model=kind
            )
            if not model["din_towers"]:
                del model["din_towers"]
    else:
        model = {}
    for i, loss in enumerate(mc.losses):
        which = loss.WhichOneof("loss")
        two_class = kind == "rocket_launching" and which == "softmax_cross_entropy"
        if kind in RETRIEVAL:
            if which not in (None, "softmax_cross_entropy"):
                found.problem(
                    f"{p}.losses[{i}].{which}",
                    f"{kind} trains softmax_cross_entropy over its negatives (TorchEasyRec's DSSM: 目前只支持"
                    "softmax_cross_entropy)",
                )
        elif kind in MODELS and kind not in MULTI_TASK and which in SINGLE_TASK_REFUSED and not two_class:
            found.problem(
                f"{p}.losses[{i}].{which}",
                f"recpipe's {kind} trains binary cross-entropy; a {SINGLE_TASK_REFUSED[which]} is a multi-task "
                "model's task tower's",
            )
    if mc.HasField("variational_dropout") and kind in MODELS:
        model.update(_variational_dropout(mc.variational_dropout, kind, f"{p}.variational_dropout", found))
    if kind in MODELS and kind not in MULTI_TASK and kind not in RETRIEVAL:
        for i, g in enumerate(mc.feature_groups):
            if g.sequence_groups or g.sequence_encoders:
                found.problem(
                    f"{p}.feature_groups[{i}].sequence_encoders",
                    f"group {g.group_name!r}: TorchEasyRec appends its sequence encoders' outputs to the group "
                    f"before {kind} reads it (a tower's MLP takes them); recpipe's DIN towers "
                    "join at the final MLP, a different model. Declare the sequence as a SEQUENCE group with a "
                    "din_towers entry, or use mmoe, dbmtl or ple, which read their group as it is",
                )
    if kind not in MODELS:
        # A TorchEasyRec model recpipe lacks is one problem, at its line, not also "no model set".
        if not found.refine(lambda q: q.path.removeprefix(f"{p}.") in TZREC_MODELS, _unsupported_model):
            found.problem(p, f"no model set; supported: {', '.join(MODELS)}")
    return model, eval_


def _dssm(mc: Any, kind: str, path: str, found: Findings) -> dict[str, Any]:
    """DSSM / DSSMv2 (tzrec/models/dssm.py, dssm_v2.py): each tower's MLP over its ``input`` group, the group's
    ``pooling_encoder`` outputs appended (→ the tower's ``sequence_pooling``); ``output_dim``, ``similarity``
    (EUCLID refused: recpipe's towers score inner products), ``temperature``, ``in_batch_negative``. A group
    neither tower reads with sequence encoders is a note: TorchEasyRec's towers do not read it either."""
    m = getattr(mc, kind)
    groups = {g.group_name: (i, g) for i, g in enumerate(mc.feature_groups)}
    out: dict[str, Any] = {"type": kind}
    for side in ("user_tower", "item_tower"):
        tower, tp = getattr(m, side), f"{path}.{side}"
        entry: dict[str, Any] = {"group": tower.input, "mlp": _mlp(tower.mlp, f"{tp}.mlp", found)}
        if tower.input in groups:
            i, g = groups[tower.input]
            pooled = sequence_encoders(
                g, f"model_config.feature_groups[{i}]", found, accept="pooling_encoder", model=kind
            )
            if pooled:
                entry["sequence_pooling"] = pooled
        out[side] = entry
    read = {m.user_tower.input, m.item_tower.input}
    for name, (i, g) in groups.items():
        if name not in read and (g.sequence_groups or g.sequence_encoders):
            found.note(
                f"model_config.feature_groups[{i}].sequence_encoders",
                f"ignored: {kind}'s towers read groups {sorted(read)}, not {name!r}",
            )
    _match_fields(m, path, found, out)
    out["in_batch_negative"] = m.in_batch_negative
    return out


def _mind(mc: Any, path: str, found: Findings) -> dict[str, Any]:
    """MIND (tzrec/models/mind.py): ``user_tower`` (``input`` → ``group``, ``history_input`` → ``history_group``,
    ``user_mlp``, ``hist_seq_mlp``, ``capsule_config`` → ``capsule``, ``concat_mlp`` with its ``bias``),
    ``item_tower`` as DSSM's, ``output_dim``, ``simi_pow``, ``similarity``, ``temperature``,
    ``in_batch_negative``. TorchEasyRec's user MLP keeps its biases and its history MLP has none whatever ``bias``
    says (both notes when ``bias`` says otherwise); ``user_seq_combine`` is read by no code (a note). A user or
    item group with sequence encoders is refused: MIND reads its history as the ``history_input`` group."""
    m, ut, up = mc.mind, mc.mind.user_tower, f"{path}.user_tower"
    user: dict[str, Any] = {
        "group": ut.input,
        "history_group": ut.history_input,
        "user_mlp": _mlp(ut.user_mlp, f"{up}.user_mlp", found, bias="read"),
    }
    if ut.user_mlp.HasField("bias") and not ut.user_mlp.bias:
        found.note(
            f"{up}.user_mlp.bias", "ignored: TorchEasyRec's MIND user MLP keeps its biases, as recpipe's"
        )
    if ut.HasField("hist_seq_mlp") and ut.hist_seq_mlp.hidden_units:
        user["hist_seq_mlp"] = _mlp(ut.hist_seq_mlp, f"{up}.hist_seq_mlp", found, bias="read")
        if ut.hist_seq_mlp.HasField("bias") and ut.hist_seq_mlp.bias:
            found.note(
                f"{up}.hist_seq_mlp.bias",
                "ignored: TorchEasyRec's MIND history MLP has no biases whatever bias says, as recpipe's",
            )
    cc, cp = ut.capsule_config, f"{up}.capsule_config"
    capsule: dict[str, Any] = {
        k: getattr(cc, k)
        for k in (
            "max_k",
            "max_seq_len",
            "high_dim",
            "num_iters",
            "routing_logits_scale",
            "routing_logits_stddev",
            "squash_pow",
            "const_caps_num",
        )
    }
    for k in ("max_k", "max_seq_len", "high_dim", "num_iters"):
        if cc.HasField(k) and getattr(cc, k) < 1:
            found.problem(f"{cp}.{k}", f"{k} {getattr(cc, k)} must be >= 1")
    if cc.routing_init_method not in ("normal", "zeros"):
        found.problem(
            f"{cp}.routing_init_method",
            f"routing_init_method {cc.routing_init_method!r} is not normal or zeros",
        )
    else:
        capsule["routing_init"] = cc.routing_init_method
    user["capsule"] = capsule
    user["concat_mlp"] = _mlp(ut.concat_mlp, f"{up}.concat_mlp", found, bias="map")
    if ut.HasField("user_seq_combine"):
        found.note(f"{up}.user_seq_combine", "ignored: TorchEasyRec's MIND reads no user_seq_combine")
    it = m.item_tower
    out: dict[str, Any] = {
        "type": "mind",
        "user_tower": user,
        "item_tower": {"group": it.input, "mlp": _mlp(it.mlp, f"{path}.item_tower.mlp", found)},
    }
    for i, g in enumerate(mc.feature_groups):
        if g.group_name in (ut.input, it.input) and (g.sequence_groups or g.sequence_encoders):
            found.problem(
                f"model_config.feature_groups[{i}].sequence_encoders",
                f"group {g.group_name!r}: recpipe's mind reads its history as the history_input group "
                f"({ut.history_input!r}), not through sequence encoders of a tower's group",
            )
    _match_fields(m, path, found, out)
    out["simi_pow"] = m.simi_pow
    out["in_batch_negative"] = m.in_batch_negative
    return out


def _cross_model(mc: Any, kind: str, path: str, found: Findings) -> dict[str, Any]:
    """DCNv2, DCNv1 and MaskNet read their first feature group (``embedding_group.group_names()[0]``,
    tzrec/models/dcn_v2.py, dcn.py, masknet.py); xDeepFM the groups ``wide`` and ``deep``
    (tzrec/models/xdeepfm.py)."""
    m = getattr(mc, kind)
    if kind == "xdeepfm":
        return {
            "type": kind,
            "cin_layer_sizes": list(m.cin.cin_layer_size),
            "deep": _mlp(m.deep, f"{path}.deep", found),
            "final": _mlp(m.final, f"{path}.final", found),
            "wide_group": "wide",
            "deep_group": "deep",
        }
    out: dict[str, Any] = {"type": kind, "group": _first_group(mc, kind, found)}
    if kind == "mask_net":
        mn, mp = m.mask_net_module, f"{path}.mask_net_module"
        block = mn.mask_block
        if block.reduction_ratio < 0:
            found.problem(f"{mp}.mask_block.reduction_ratio", f"reduction_ratio {block.reduction_ratio} < 0")
        if block.reduction_ratio == 0 and not block.aggregation_dim:
            found.problem(
                f"{mp}.mask_block",
                "reduction_ratio 0 and no aggregation_dim: TorchEasyRec's MaskBlock refuses it",
            )
        if block.reduction_ratio and block.HasField("aggregation_dim"):
            found.note(
                f"{mp}.mask_block.aggregation_dim",
                f"ignored: reduction_ratio {block.reduction_ratio} (default 1.0) sizes the mask generator, as in "
                "TorchEasyRec's MaskBlock; set reduction_ratio: 0 to use aggregation_dim",
            )
        out.update(
            num_blocks=mn.n_mask_blocks,
            mask_block={
                "hidden_dim": block.hidden_dim,
                "reduction_ratio": block.reduction_ratio or None,
                "aggregation_dim": block.aggregation_dim or None,
            },
            parallel=mn.use_parallel,
        )
        if mn.HasField("top_mlp"):
            out["top_mlp"] = _mlp(mn.top_mlp, f"{mp}.top_mlp", found)
        else:  # TorchEasyRec's MaskNet reads top_mlp.hidden_units[-1] for its logit Linear
            found.problem(
                f"{mp}.top_mlp", "TorchEasyRec's MaskNet needs a top_mlp (its logit reads its width)"
            )
        return out
    out["cross"] = {"num_layers": m.cross.cross_num}
    if kind == "dcn_v2":
        out["cross"]["low_rank"] = m.cross.low_rank
        for part in ("backbone", "deep"):
            if m.HasField(part):
                out[part] = _mlp(getattr(m, part), f"{path}.{part}", found)
    else:
        out["deep"] = _mlp(m.deep, f"{path}.deep", found)
    out["final"] = _mlp(m.final, f"{path}.final", found)
    return out


def _first_group(mc: Any, kind: str, found: Findings) -> str:
    """The group a model over one deep group reads: the first (TorchEasyRec's
    ``embedding_group.group_names()[0]``), ``all`` when there is none; the others are a note."""
    groups = [g.group_name for g in mc.feature_groups]
    if len(groups) > 1:
        found.note(
            "model_config.feature_groups",
            f"{kind} reads its first group, {groups[0]!r} (TorchEasyRec's too); {groups[1:]} are looked up "
            "by neither",
        )
    return groups[0] if groups else "all"


def _rocket_launching(mc: Any, path: str, found: Findings) -> dict[str, Any]:
    """RocketLaunching (tzrec/models/rocket_launching.py) reads its first group; TorchEasyRec's similarity
    ``INNER_PRODUCT`` takes its Euclidean branch (``feature_based_sim``: anything but COSINE), so it maps to
    ``euclid``."""
    m = mc.rocket_launching
    out: dict[str, Any] = {
        "type": "rocket_launching",
        "group": _first_group(mc, "rocket_launching", found),
        "booster_mlp": _mlp(m.booster_mlp, f"{path}.booster_mlp", found),
        "light_mlp": _mlp(m.light_mlp, f"{path}.light_mlp", found),
    }
    if m.HasField("share_mlp"):
        out["share_mlp"] = _mlp(m.share_mlp, f"{path}.share_mlp", found)
    if mc.num_class == 2:
        out["num_class"] = 2
    if m.feature_based_distillation:
        out["feature_based_distillation"] = True
        function = (
            m.DESCRIPTOR.fields_by_name["feature_distillation_function"]
            .enum_type.values_by_number[m.feature_distillation_function]
            .name
        )
        if function == "INNER_PRODUCT":
            found.note(
                f"{path}.feature_distillation_function",
                "INNER_PRODUCT: TorchEasyRec computes the Euclidean distance for it (its feature_based_sim "
                "treats every function but COSINE alike); mapped to euclid",
            )
        if function != "COSINE":
            out["feature_distillation_function"] = "euclid"
    return out


def _wukong(mc: Any, path: str, found: Findings) -> dict[str, Any]:
    """WuKong (tzrec/models/wukong.py): its sparse group is the only group, else ``sparse``; its ``dense_mlp``
    reads group ``dense`` when there are several groups (recpipe's reads every dense feature: the importer
    checks group ``dense`` lists them all, as for DLRM), else TorchEasyRec builds none."""
    m = mc.wukong
    groups = [g.group_name for g in mc.feature_groups]
    out: dict[str, Any] = {
        "type": "wukong",
        "sparse_group": groups[0] if len(groups) == 1 else "sparse",
        "wukong_layers": [
            {
                "lcb_feature_num": layer.lcb_feature_num,
                "fmb_feature_num": layer.fmb_feature_num,
                "compressed_feature_num": layer.compressed_feature_num,
                "feature_num_mlp": _mlp(
                    layer.feature_num_mlp, f"{path}.wukong_layers[{i}].feature_num_mlp", found
                ),
            }
            for i, layer in enumerate(m.wukong_layers)
        ],
        "final": _mlp(m.final, f"{path}.final", found),
    }
    if len(groups) > 1 and "dense" in groups:
        if not m.HasField("dense_mlp"):
            found.problem(f"{path}", "group 'dense' needs a dense_mlp (TorchEasyRec builds its MLP from it)")
        else:
            out["dense_mlp"] = _mlp(m.dense_mlp, f"{path}.dense_mlp", found)
    elif m.HasField("dense_mlp"):
        found.note(
            f"{path}.dense_mlp",
            "ignored, as TorchEasyRec ignores it: there is no group 'dense' beside the sparse one",
        )
    return out


def _pepnet(mc: Any, path: str, found: Findings) -> dict[str, Any]:
    """PEPNet (tzrec/models/pepnet.py): group ``all``, and ``domain`` (EPNet) and ``uia`` (PPNet) when defined;
    ``domain_input_name`` / ``task_domain_num`` → ``domain_label`` / ``task_domain_num``: a tower per task and
    domain, each row's loss and metrics read from its domain's tower, every domain's probability served
    (``probability_<label>_<j>``, TorchEasyRec's ``probs_<tower>_<j>``)."""
    m = mc.pepnet
    groups = [g.group_name for g in mc.feature_groups]
    if "all" not in groups:
        found.problem(
            "model_config.feature_groups", "PEPNet reads a feature group named 'all' (there is none)"
        )
    other = [g for g in groups if g not in ("all", "domain", "uia")]
    if other:
        found.problem(
            "model_config.feature_groups",
            f"PEPNet reads groups all, domain and uia only; also defined: {other}",
        )
    for i, g in enumerate(mc.feature_groups):
        if g.sequence_groups or g.sequence_encoders:
            found.problem(
                f"model_config.feature_groups[{i}].sequence_encoders",
                "recpipe's pepnet reads its groups' embeddings as they are; sequence encoders are not mapped",
            )
    out: dict[str, Any] = {
        "type": "pepnet",
        "towers": [{"group": g} for g in ("all", "domain", "uia") if g in groups],
    }
    if "domain" in groups:
        out["domain_group"] = "domain"
        if m.HasField("epnet_hidden_unit"):
            out["epnet_hidden_unit"] = m.epnet_hidden_unit
        if m.epnet_gamma != 2.0:
            out["epnet_gamma"] = m.epnet_gamma
    if "uia" in groups:
        out["uia_group"] = "uia"
        out["ppnet_hidden_units"] = list(m.ppnet_hidden_units)
        activation = _activation(m.ppnet_activation, f"{path}.ppnet_activation", found)
        if activation not in (None, "relu"):
            out["ppnet_activation"] = activation
        dropout = _one_dropout(
            m.ppnet_dropout_ratio, f"{path}.ppnet_dropout_ratio", found, "all PPNet layers"
        )
        if dropout is not None:
            out["ppnet_dropout"] = dropout
        if m.ppnet_gamma != 2.0:
            out["ppnet_gamma"] = m.ppnet_gamma
    if m.HasField("domain_input_name"):
        # a tower per task and domain, each row's loss and metrics from its domain's (the label
        # domain_input_name, among data_config.label_fields: the config checks it is the last one)
        out["domain_label"] = m.domain_input_name
        out["task_domain_num"] = m.task_domain_num
        if m.task_domain_num < 1:
            found.problem(f"{path}.task_domain_num", f"task_domain_num must be >= 1, got {m.task_domain_num}")
    elif m.task_domain_num != 1:
        found.problem(f"{path}.task_domain_num", "task_domain_num counts only with domain_input_name")
    out["task_towers"] = [
        _task_tower(t, "pepnet", f"{path}.task_towers[{i}]", found) for i, t in enumerate(m.task_towers)
    ]
    return out


def _multi_task(mc: Any, kind: str, path: str, found: Findings) -> dict[str, Any]:
    """MMoE / DBMTL / PLE: TorchEasyRec's multi-task models read their one feature group's embeddings
    (``embedding_group.group_names()[0]``, tzrec/models/mmoe.py, dbmtl.py, ple.py): a tower without an MLP
    over it; their task towers name their labels and their loss (``binary_cross_entropy`` or
    ``binary_focal_loss``, or with ``num_class: 2`` ``jrc_loss`` or ``softmax_cross_entropy``; any other is
    an unsupported field of the schema, refused there)."""
    m = getattr(mc, kind)
    groups = [g.group_name for g in mc.feature_groups]
    if len(groups) != 1:
        found.problem(f"{path}", f"{kind} reads one feature group (TorchEasyRec's first); groups: {groups}")
    out: dict[str, Any] = {"type": kind, "towers": [{"group": groups[0]}] if groups else []}
    towers = [_task_tower(t, kind, f"{path}.task_towers[{i}]", found) for i, t in enumerate(m.task_towers)]
    out["task_towers"] = towers
    if kind == "mmoe":
        out.update(expert_mlp=_mlp(m.expert_mlp, f"{path}.expert_mlp", found), num_experts=m.num_expert)
    if kind == "dbmtl":
        if m.HasField("bottom_mlp"):
            out["bottom_mlp"] = _mlp(m.bottom_mlp, f"{path}.bottom_mlp", found)
        if m.HasField("expert_mlp"):  # num_expert (default 3) counts only with experts
            out.update(expert_mlp=_mlp(m.expert_mlp, f"{path}.expert_mlp", found), num_experts=m.num_expert)
    if kind in ("mmoe", "dbmtl") and m.HasField("gate_mlp"):
        out["gate_mlp"] = _mlp(m.gate_mlp, f"{path}.gate_mlp", found)
    if kind == "ple":
        networks = []
        for i, n in enumerate(m.extraction_networks):
            np_ = f"{path}.extraction_networks[{i}]"
            net: dict[str, Any] = {
                "network_name": n.network_name,
                "expert_num_per_task": n.expert_num_per_task,
                "share_num": n.share_num,
                "task_expert_net": _mlp(n.task_expert_net, f"{np_}.task_expert_net", found),
            }
            if n.HasField("share_expert_net"):
                net["share_expert_net"] = _mlp(n.share_expert_net, f"{np_}.share_expert_net", found)
            networks.append(net)
        out["extraction_networks"] = networks
    return out


def _task_tower(t: Any, kind: str, tp: str, found: Findings) -> dict[str, Any]:
    """One ``task_towers[]`` entry (TaskTower; DBMTL's BayesTaskTower with its relations)."""
    tower: dict[str, Any] = {"name": t.tower_name, "label": t.label_name or t.tower_name}
    if t.HasField("mlp"):
        tower["mlp"] = _mlp(t.mlp, f"{tp}.mlp", found)
    if t.weight != 1.0:
        tower["weight"] = t.weight
    loss = _task_loss(t.losses, f"{tp}.losses", found)
    if loss is not None:
        tower["loss"] = loss
    if _task_classes(t.num_class, t.losses, tp, found) == 2:
        tower["num_class"] = 2
    if t.HasField("task_space_indicator_label"):  # MultiTaskRank.loss's task space (multi_task_rank.py)
        tower["task_space_indicator_label"] = t.task_space_indicator_label
    for key in ("in_task_space_weight", "out_task_space_weight"):
        if getattr(t, key) != 1.0:
            tower[key] = getattr(t, key)
    if t.metrics:
        found.note(f"{tp}.metrics", "ignored: recpipe reports every task's AUC, GAUC and logloss")
    if t.train_metrics:
        found.note(f"{tp}.train_metrics", TRAIN_METRICS_NOTE)
    if kind == "dbmtl":
        if t.relation_tower_names:
            tower["relation_tower_names"] = list(t.relation_tower_names)
        if t.HasField("relation_mlp"):
            tower["relation_mlp"] = _mlp(t.relation_mlp, f"{tp}.relation_mlp", found)
    return tower


def _match_fields(m: Any, path: str, found: Findings, out: dict[str, Any]) -> None:
    """``similarity``, ``output_dim`` and ``temperature``, which every match model of match_model.proto has, into
    ``out``. TorchEasyRec's loader does not check required fields: an unset ``output_dim`` reads 0 (no output
    Linear), as here."""
    similarity = m.DESCRIPTOR.fields_by_name["similarity"].enum_type.values_by_number[m.similarity].name
    if similarity not in _SIMILARITIES:
        found.problem(
            f"{path}.similarity",
            f"similarity {similarity} is not supported; supported: {', '.join(_SIMILARITIES)}",
        )
    else:
        out["similarity"] = _SIMILARITIES[similarity]
    if m.output_dim < 0:
        found.problem(f"{path}.output_dim", f"output_dim {m.output_dim} must be >= 0")
    out["output_dim"] = max(m.output_dim, 0)
    if m.temperature <= 0:
        found.problem(f"{path}.temperature", f"temperature {m.temperature} must be > 0")
    else:
        out["temperature"] = m.temperature


def _variational_dropout(vd: Any, kind: str, path: str, found: Findings) -> dict[str, Any]:
    """``model_config.variational_dropout`` → the model's ``variational_dropout`` (TorchEasyRec's
    ``RankModel.init_input``: every non-sequence group of more than one feature)."""
    if kind not in VARIATIONAL_DROPOUT:
        found.problem(
            path,
            f"recpipe's {kind} has no variational dropout; supported on: {', '.join(VARIATIONAL_DROPOUT)}",
        )
        return {}
    if vd.embedding_wise_variational_dropout:
        found.problem(
            f"{path}.embedding_wise_variational_dropout",
            "TorchEasyRec's VariationalDropout takes it as an unused keyword and drops whole features "
            "(tzrec/modules/variational_dropout.py), as recpipe does: remove it (true asks for what neither does)",
        )
        return {}
    return {"variational_dropout": {"regularization_lambda": vd.regularization_lambda}}


def _task_loss(losses: Any, path: str, found: Findings) -> dict[str, Any] | None:
    """A task tower's ``losses`` → its ``loss`` (None: binary cross-entropy, recpipe's default)."""
    if len(losses) > 1:
        # an unsupported loss is refused at its own line already (its oneof is unset here)
        if all(loss.WhichOneof("loss") for loss in losses):
            found.problem(
                path, f"recpipe trains one loss per task; TorchEasyRec would sum these {len(losses)} losses"
            )
        return None
    kind = losses[0].WhichOneof("loss") if losses else None
    if kind == "jrc_loss":
        jrc = losses[0].jrc_loss
        if not 0 <= jrc.alpha <= 1:  # alpha · CE + (1 - alpha) · session term: a mix
            found.problem(f"{path}[0].jrc_loss.alpha", f"alpha {jrc.alpha} must be in [0, 1]")
            return None
        return {"type": "jrc", "session": jrc.session_name, "alpha": jrc.alpha}
    if kind != "binary_focal_loss":  # binary / two-class softmax cross-entropy: recpipe's bce
        return None
    focal = losses[0].binary_focal_loss
    if focal.gamma < 0 or not 0 < focal.alpha < 1:  # TorchEasyRec's BinaryFocalLoss asserts these
        found.problem(
            f"{path}[0].binary_focal_loss",
            f"gamma {focal.gamma} must be >= 0 and alpha {focal.alpha} in (0, 1) (tzrec/loss/focal_loss.py)",
        )
        return None
    return {"type": "focal", "gamma": focal.gamma, "alpha": focal.alpha}


def _task_classes(num_class: int, losses: Any, path: str, found: Findings) -> int:
    """A task tower's ``num_class`` as recpipe's: 1, or 2 with a ``jrc_loss`` or ``softmax_cross_entropy``
    (the tower's ``Linear(·, 2)``; its logit ``l1 - l0``, ``sigmoid(l1 - l0)`` TorchEasyRec's ``probs1``,
    two-class softmax cross-entropy BCE on it); the pairs TorchEasyRec asserts (rank_model.py) refused."""
    kinds = [loss.WhichOneof("loss") for loss in losses]
    two_class = [k for k in kinds if k in ("jrc_loss", "softmax_cross_entropy")]
    if num_class == 1 and two_class:
        found.problem(f"{path}.losses", f"{two_class[0]} needs num_class 2 (TorchEasyRec asserts it)")
    elif num_class == 2 and (not kinds or len(two_class) != len(kinds)):
        found.problem(
            f"{path}.num_class",
            f"num_class 2 with losses {kinds or ['binary_cross_entropy (the default)']}: a two-class tower "
            "takes jrc_loss or softmax_cross_entropy (TorchEasyRec asserts num_class 1 for the binary losses)",
        )
    elif num_class > 2:
        found.problem(
            f"{path}.num_class", f"num_class {num_class}: recpipe's task towers have 1 or 2 classes"
        )
    return num_class


def sequence_group_name(g: Any, j: int) -> str:
    """The recpipe feature group of ``g.sequence_groups[j]``: its ``group_name``; TorchEasyRec names the only,
    unnamed one after ``g`` (``_inspect_and_supplement_feature_group``, tzrec/modules/embedding.py), which in
    recpipe is ``<g>_seq`` (``g`` itself is the deep group)."""
    sg = g.sequence_groups[j]
    if sg.HasField("group_name"):
        return sg.group_name
    return f"{g.group_name}_seq"


def sequence_encoders(
    g: Any, path: str, found: Findings, accept: str = "din_encoder", model: str = "model"
) -> list[dict[str, Any]]:
    """A DEEP group's ``sequence_groups`` / ``sequence_encoders`` → recpipe ``din_towers`` (``accept``
    ``din_encoder``) or a DSSM tower's ``sequence_pooling`` (``pooling_encoder``), checked as TorchEasyRec's
    ``_inspect_and_supplement_feature_group`` (tzrec/modules/embedding.py) checks them: both or neither, every
    sequence group named when there are several, each encoder's ``input`` one of them (the only one when unset),
    each group encoded. The encoders' outputs follow the group's own features, in encoder order
    (``EmbeddingGroup.forward``), as recpipe's DIN towers follow a multi-task model's towers and a DSSM tower's
    pooled histories its group's features. An encoder of the other kind is a problem."""
    groups, encoders = list(g.sequence_groups), list(g.sequence_encoders)
    if not groups and not encoders:
        return []
    if g.group_type != 0:  # DEEP
        found.problem(
            path, f"group {g.group_name!r}: sequence_groups and sequence_encoders belong in a DEEP group"
        )
        return []
    if not groups or not encoders:
        missing = "sequence_encoders" if groups else "sequence_groups"
        found.problem(
            f"{path}",
            f"group {g.group_name!r} has {'sequence_groups' if groups else 'sequence_encoders'} but no {missing}",
        )
        return []
    if len(groups) > 1 and not all(sg.HasField("group_name") for sg in groups):
        found.problem(
            f"{path}.sequence_groups", f"group {g.group_name!r} has several sequence_groups: name each"
        )
        return []
    names = {
        sg.group_name if sg.HasField("group_name") else g.group_name: sequence_group_name(g, j)
        for j, sg in enumerate(groups)
    }
    towers, encoded, unknown = [], set(), False
    for i, enc in enumerate(encoders):
        ep = f"{path}.sequence_encoders[{i}]"
        kind = enc.WhichOneof("seq_module")
        if kind is None:  # an unsupported encoder is reported at its line
            continue
        if kind != accept:
            unknown = True
            found.problem(
                f"{ep}.{kind}",
                f"recpipe's {model} reads a sequence group through a {accept}, not a {kind}",
            )
            continue
        sub = getattr(enc, kind)
        source = sub.input or (next(iter(names)) if len(names) == 1 else "")
        if source not in names:
            unknown = True
            found.problem(
                f"{ep}.{kind}.input",
                f"input {sub.input!r} is not one of the sequence_groups {sorted(names)}",
            )
            continue
        encoded.add(source)
        if sub.max_seq_length > 0:
            found.problem(
                f"{ep}.{kind}.max_seq_length",
                f"recpipe's {'DIN' if kind == 'din_encoder' else 'pooling'} reads the history FG kept (the "
                f"sequence's sequence_length); set sequence_length to {sub.max_seq_length} instead",
            )
        if sub.HasField("name"):
            found.note(f"{ep}.{kind}.name", f"ignored: recpipe names a {kind} by its group")
        if kind == "din_encoder":
            towers.append(
                {"group": names[source], "attn_mlp": _mlp(sub.attn_mlp, f"{ep}.din_encoder.attn_mlp", found)}
            )
        elif sub.pooling_type not in ("mean", "sum"):  # TorchEasyRec's PoolingEncoder asserts it
            found.problem(
                f"{ep}.pooling_encoder.pooling_type",
                f"pooling_type {sub.pooling_type!r} is not 'mean' or 'sum'",
            )
        else:
            towers.append({"group": names[source], "pooling": sub.pooling_type})
    for source in names:
        if source not in encoded and not unknown and all(e.WhichOneof("seq_module") for e in encoders):
            found.problem(f"{path}.sequence_groups", f"sequence group {source!r} has no sequence encoder")
    return towers


def _unsupported_model(q: Problem) -> str:
    return f"model {q.path.rsplit('.', 1)[-1]!r} is not supported; supported: {', '.join(MODELS)}"


def check_dlrm_groups(msg: Any, data: dict[str, Any], found: Findings) -> None:
    """recpipe's DLRM (and WuKong) feeds every dense feature to the bottom MLP; TorchEasyRec feeds group ``dense``."""
    groups = {g["name"]: (i, g) for i, g in enumerate(data["feature_groups"])}
    dense = [f["name"] for f in data["features"] if f["kind"] == "raw" and "boundaries" not in f]
    sparse_group = data["model"]["sparse_group"]
    if sparse_group not in groups:
        found.problem(
            "model_config.feature_groups",
            f"{data['model']['type']} needs a feature group named {sparse_group!r}",
        )
    if "dense" in groups:
        i, g = groups["dense"]
        if sorted(g["features"]) != sorted(dense):
            found.problem(
                f"model_config.feature_groups[{i}]",
                f"recpipe's {data['model']['type']} dense MLP reads every dense raw feature ({dense}); group 'dense' lists "
                f"{g['features']}",
            )


def check_wukong_dims(data: dict[str, Any], found: Findings) -> None:
    """WuKong's dense MLP output is one more feature of its stack: its last width must be the sparse group's
    embedding dim (TorchEasyRec refuses the model otherwise: "dense mlp last hidden_unit must be the same sparse
    feature dim", tzrec/models/wukong.py)."""
    model = data["model"]
    if model.get("type") != "wukong" or "dense_mlp" not in model:
        return
    group = next((g for g in data["feature_groups"] if g["name"] == model["sparse_group"]), None)
    names = set(group["features"]) if group else set()
    dims = {f["embedding_dim"] for f in data["features"] if f["name"] in names and "embedding_dim" in f}
    last = model["dense_mlp"]["hidden_units"][-1]
    if len(dims) == 1 and last not in dims:
        found.problem(
            "model_config.wukong.dense_mlp.hidden_units",
            f"the dense MLP's last width {last} must equal the sparse features' embedding dim {dims.pop()}: its "
            "output is one more feature of the stack (TorchEasyRec refuses it too: 'dense mlp last hidden_unit "
            "must be the same sparse feature dim', tzrec/models/wukong.py)",
        )


def wide_embedding_dim(mc: Any) -> int | None:
    """DeepFM's / WideAndDeep's ``wide_embedding_dim`` when set (TorchEasyRec's default, 4, is recpipe's)."""
    kind = mc.WhichOneof("model")
    if kind in ("deepfm", "wide_and_deep") and getattr(mc, kind).HasField("wide_embedding_dim"):
        return int(getattr(mc, kind).wide_embedding_dim)
    if kind == "xdeepfm":  # its default is 16 (rank_model.proto xDeepFM), not the wide groups' 4
        return int(mc.xdeepfm.wide_embedding_dim)
    return None


def check_model_groups(model: dict[str, Any], groups: list[dict[str, Any]], found: Findings) -> None:
    """DeepFM / WideAndDeep / xDeepFM need their groups by name: ``wide`` of type WIDE (its per-feature wide tables
    are summed: tzrec/modules/embedding.py sizes them only for WIDE groups) and ``deep``."""
    if model.get("type") not in ("deepfm", "wide_and_deep", "xdeepfm"):
        return
    types = {g["name"]: g["type"] for g in groups}
    wanted = [("wide", "wide"), ("deep", "deep")] + (
        [("fm", "deep")] if model.get("fm_group") == "fm" else []
    )
    for name, kind in wanted:
        if types.get(name) != kind:
            found.problem(
                "model_config.feature_groups",
                f"{model['type']} reads a feature group {name!r} of group_type {kind.upper()}; "
                + (f"it is {types[name].upper()}" if name in types else "there is none"),
            )
