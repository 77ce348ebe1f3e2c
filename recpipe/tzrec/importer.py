"""Import a TorchEasyRec pipeline config (protobuf text) as a validated recpipe config.

Steps: :func:`~recpipe.tzrec.scan.scan` lists every field outside the supported schema with its line;
protobuf's ``text_format`` parses the text against that schema (types, enum values, oneofs), skipping
those fields; missing required fields are listed; the message is mapped section by section, collecting
every value recpipe cannot honour. Any finding stops the import with one :class:`TzrecImportError`
that lists them all by line; otherwise the result is validated with :func:`recpipe.config.parse_config`.

What maps to what (TorchEasyRec → recpipe):

- ``train_input_path`` / ``eval_input_path`` (optional: a model config imports without them) →
  ``data.train`` / ``data.eval`` (``odps://`` URIs are checked as recpipe ODPS sources); each ``{NAME}``
  placeholder (``{PROJECT}``) is kept and listed in ``data.params``, resolved at run time; ``data.split``
  becomes a hashed 10% (TorchEasyRec names no time column); ``data_config``: ``batch_size``, ``num_workers`` (TorchEasyRec's
  defaults 1024 and 8 when unset), ``label_fields`` (one → ``label``; several →
  ``label_fields``, a multi-task model's),
  ``sample_weight_fields`` (at most one) → ``weight``, ``CsvDataset``'s ``delimiter``/``with_header``/
  ``input_fields`` → ``data.csv``; ``dataset_type`` is checked; ``fg_mode`` (or the deprecated
  ``fg_encoded``, as TorchEasyRec resolves them) FG_DAG/FG_NORMAL: raw columns, recpipe's FG; FG_NONE:
  ``data.fg_encoded`` (columns named after the features hold ids and values as they are); FG_BUCKETIZE
  is refused.
- ``train_config``: ``sparse_optimizer`` / ``dense_optimizer`` (``*_optimizer { lr }`` with
  ``constant_learning_rate {}``) → ``{type, lr[, weight_decay]}``; ``num_epochs`` → ``epochs``,
  ``num_steps`` → ``max_steps``, ``save_checkpoints_steps`` → ``checkpoint_every_steps``,
  ``log_step_count_steps`` → ``log_every_steps`` (TorchEasyRec's defaults 1000 and 100 when unset),
  ``save_checkpoints_epochs`` (only "at the end": recpipe's final checkpoint), ``keep_checkpoint_max`` →
  ``keep_last_checkpoints``, ``mixed_precision`` ``BF16``/``FP16`` → ``mixed_precision`` ``bf16``/``fp16``;
  Adam's ``beta1``/``beta2`` → ``betas``, dense Adam's ``eps`` → ``eps``; ``initial_accumulator_value``
  and the fused optimizers' ``gradient_clipping``/``max_gradient`` as they are; ``grad_clipping`` ``norm``/``value``
  → ``grad_clip_norm`` (``norm_type`` → ``grad_clip_norm_type``) / ``grad_clip_value``;
  ``gradient_accumulation_steps``, ``grad_scaler`` as they are; ``global_embedding_constraints.sharding_types``
  → ``sharding_types``.
- ``feature_configs`` → ``features`` (see :mod:`recpipe.tzrec.features`).
- ``model_config``: ``feature_groups`` (``DEEP``/``SEQUENCE``/``JAGGED_SEQUENCE``/``WIDE``) → ``feature_groups``,
  a DEEP group's ``sequence_groups`` → ``sequence`` groups and its ``sequence_encoders`` (``din_encoder``) →
  a multi-task model's ``din_towers`` (see :func:`recpipe.tzrec.models.sequence_encoders`);
  ``multi_tower_din`` (towers/din_towers ``input`` → ``group``), ``multi_tower`` (towers, final), ``deepfm`` and
  ``wide_and_deep`` (``deep``, ``final``; groups ``wide``/``deep``/``fm``; ``wide_embedding_dim`` → the WIDE
  groups' ``embedding_dim``; see :mod:`recpipe.tzrec.models`) and ``dlrm`` (``final`` → ``over_mlp``,
  ``sparse_group: sparse``, ``arch_with_sparse``, which TorchEasyRec defaults to true); ``mmoe``, ``dbmtl``
  and ``ple`` (their one group read as it is, ``task_towers`` → ``task_towers`` by name and label, DBMTL's
  relations, MMoE's and DBMTL's experts, PLE's ``extraction_networks``); ``dcn_v2``, ``dcn_v1`` and ``mask_net``
  (their first group → ``group``; ``cross_num`` → ``num_layers``, ``low_rank``, ``backbone``/``deep``/``final``;
  ``mask_net_module`` → ``num_blocks``, ``mask_block``, ``top_mlp``, ``parallel``) and ``xdeepfm``
  (``cin_layer_size`` → ``cin_layer_sizes``, groups ``wide``/``deep``, ``wide_embedding_dim``, default 16);
  ``MLP``: ``hidden_units``, ``activation``, ``use_bn`` → ``batch_norm``, one ``dropout_ratio``;
  ``metrics`` ``auc {}`` (recpipe always reports AUC) and ``grouped_auc`` → ``eval.gauc_group``;
  ``losses`` ``binary_cross_entropy {}`` (recpipe's loss) and, on a multi-task model's task tower,
  ``binary_focal_loss { gamma alpha }`` → the tower's ``loss: {type: focal, ...}``; ``variational_dropout
  { regularization_lambda }`` → the model's ``variational_dropout`` (models on MultiTowerDIN's dense arch);
  ``num_class: 1``.

Read but ignored (each reported as a note, with its line): ``model_dir``, ``eval_config``,
``data_config`` ``pin_memory``/``fg_threads``/``odps_data_quota_name``/``odps_data_compression``,
``train_metrics`` (recpipe logs a window's training AUC), ``sequence_pk``,
``auc { thresholds }`` (recpipe's AUC is exact), ``train_config``'s TensorBoard, profiling and TF32
switches. Each unsupported thing is one problem (an unsupported model or feature type is not also
"missing"), and :meth:`Findings.summary` counts the fields mapped, ignored and refused. Sections TorchEasyRec has no counterpart for come from
recpipe's defaults: :data:`FROM_DEFAULTS`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import text_format

from recpipe.config import RecpipeConfig, parse_config
from recpipe.config.features import sub_feature_key
from recpipe.config.placeholders import PLACEHOLDER, placeholders
from recpipe.data.odps import parse_odps_uri
from recpipe.tzrec.custom import custom_features
from recpipe.tzrec.features import map_features
from recpipe.tzrec.models import (
    RETRIEVAL,
    check_dlrm_groups,
    check_model_groups,
    check_wukong_dims,
    map_model,
    sequence_group_name,
    wide_embedding_dim,
)
from recpipe.tzrec.problems import Findings, Problem, TzrecImportError, parse_error_problem
from recpipe.tzrec.render import render_yaml
from recpipe.tzrec.scan import scan
from recpipe.tzrec.schema import descriptor, new_config

FROM_DEFAULTS: dict[str, str] = {
    "data.on_bad_row, data.neg_sample_rate, data.oracle_column, data.group_column": "recpipe-only",
    "train.grad_clip_norm, eval_every_steps, keep_last_checkpoints, seed, sharding": (
        "recpipe-only (or not imported)"
    ),
    "eval.gate, eval.threshold": "recpipe's promotion gate",
    "export": "recpipe's export backends",
    "tracking": "recpipe's MLflow tracking",
}

_SPARSE_OPT = {
    "sgd_optimizer": "sgd",
    "adagrad_optimizer": "adagrad",
    "adam_optimizer": "adam",
    "rowwise_adagrad_optimizer": "rowwise_adagrad",
}
_DENSE_OPT = {"sgd_optimizer": "sgd", "adagrad_optimizer": "adagrad", "adam_optimizer": "adam"}
# JAGGED_SEQUENCE (tzrec/protos/model.proto) differs from SEQUENCE only in the tensor TorchEasyRec hands its
# encoders (the items back to back instead of padded: SequenceEmbeddingGroupImpl, tzrec/modules/embedding.py);
# recpipe's sequence groups are jagged already.
_GROUP_TYPES = {"DEEP": "deep", "SEQUENCE": "sequence", "JAGGED_SEQUENCE": "sequence", "WIDE": "wide"}
_CSV_TYPES = {"INT32": "int64", "INT64": "int64", "FLOAT": "float64", "DOUBLE": "float64", "STRING": "string"}


@dataclass
class TzrecImport:
    """An imported config.

    Args:
        config (RecpipeConfig): the validated recpipe config.
        data (dict): the same as the mapping written to YAML (only what the TorchEasyRec config set).
        notes (list[Problem]): fields read but ignored, with lines and reasons.
        source (str): where the TorchEasyRec config came from.
        summary (str): how many fields were mapped, ignored and refused.
        dropped (list[str]): the custom features left out (``drop_custom_features``).
    """

    config: RecpipeConfig
    data: dict[str, Any]
    notes: list[Problem] = field(default_factory=list)
    source: str = "<text>"
    summary: str = ""
    dropped: list[str] = field(default_factory=list)

    def to_yaml(self) -> str:
        """The recpipe YAML, headed by comments on where it came from, what was ignored and what came
        from recpipe's defaults."""
        head = [f"# Imported from {self.source} (TorchEasyRec) by `recpipe config import-tzrec`."]
        if self.summary:
            head.append(f"# {self.summary}")
        if self.notes:
            head.append("# Read but not carried over:")
            head += [f"#   {n}" for n in self.notes]
        head.append("# From recpipe's defaults (no TorchEasyRec counterpart):")
        head += [f"#   {k}: {why}" for k, why in FROM_DEFAULTS.items()]
        return "\n".join(head) + "\n" + render_yaml(self.data)


def import_tzrec(
    text: str, source: str = "<text>", name: str | None = None, drop_custom_features: bool = False
) -> TzrecImport:
    """Import TorchEasyRec config text.

    Args:
        text (str): the protobuf text of a TorchEasyRec ``EasyRecConfig``.
        source (str): its name in messages (a path).
        name (str | None): the recpipe config ``name``; default: the last part of ``model_dir``.
        drop_custom_features (bool): leave out each ``custom_feature`` (a compiled FG operator recpipe cannot
            run) and its uses in feature groups, each named in ``notes`` and ``dropped``, instead of refusing.

    Raises:
        TzrecImportError: the config has unsupported fields or values, syntax errors or missing required
            fields; every one is listed with its line.
        ConfigError: the mapped config fails recpipe's own validation.

    Example::

        imported = import_tzrec(Path("dlrm_criteo.config").read_text(), "dlrm_criteo.config")
        imported.config.model.type                  # "dlrm"
        Path("dlrm_criteo.yaml").write_text(imported.to_yaml())
    """
    scanned = scan(text, descriptor())
    if scanned.syntax_error is not None:
        raise TzrecImportError(source, [*scanned.unknown, scanned.syntax_error])
    msg = new_config()
    try:
        # Unknown fields are already listed; skipping them lets every other finding be listed too. Merge, as
        # TorchEasyRec loads configs (tzrec/utils/config_util.py): a field of one value given twice parses (the
        # last kept); the scan has already refused a different second value and noted a same one.
        text_format.Merge(text, msg, allow_unknown_extension=True, allow_unknown_field=True)
    except text_format.ParseError as err:
        raise TzrecImportError(
            source, [*scanned.unknown, *scanned.repeated, parse_error_problem(err)]
        ) from None
    found = Findings(scanned.lines, problems=[*scanned.unknown, *scanned.repeated], notes=list(scanned.notes))
    encoded = fg_mode(msg.data_config)[0] in ("FG_NONE", "FG_BUCKETIZE")
    grouped = _grouped_names(msg)
    for path in msg.FindInitializationErrors():
        # Pre-encoded input (FG_NONE; FG_BUCKETIZE is refused once, at fg_mode) is read by feature name: its
        # configs write no expression, which is no separate problem.
        if encoded and path.endswith(".expression"):
            continue
        if _ungrouped_without_dim(msg, path, grouped, found):
            continue
        if path == "model_config.mind.output_dim":
            found.note(
                path,
                "output_dim not set: TorchEasyRec's loader (text_format.Merge) checks no required field and reads "
                "0, no output Linear (the concat MLP's and the item MLP's last widths must then agree), as recpipe",
            )
            continue
        found.problem(path, f"required field {path.rsplit('.', 1)[-1]!r} is missing")
    dropped = custom_features(msg, found, drop_custom_features)
    data = _map(msg, found, name, set(dropped))
    if found.problems:
        raise TzrecImportError(source, found.problems, found.summary())
    config = parse_config(data, f"{source} (imported from TorchEasyRec)")
    return TzrecImport(config, data, found.notes, source, found.summary(), dropped)


_ID_DIM = re.compile(r"^feature_configs\[(\d+)\]\.id_feature\.embedding_dim$")


def _grouped_names(msg: Any) -> set[str]:
    """Every feature name a feature group or sequence group lists."""
    return {
        n
        for g in msg.model_config.feature_groups
        for names in (g.feature_names, *(sg.feature_names for sg in g.sequence_groups))
        for n in names
    }


def _ungrouped_without_dim(msg: Any, path: str, grouped: set[str], found: Findings) -> bool:
    """An id_feature without ``embedding_dim`` that no group lists (a note, True): TorchEasyRec's loader
    (``text_format.Merge``, tzrec/utils/config_util.py) does not check required fields, the dim reads 0, and only
    a grouped feature builds a table (``Feature.emb_bag_config`` asserts ``embedding_dim > 0``, tzrec/features/
    feature.py), so FG computes the feature and nothing embeds it: recpipe's table for it is never built either."""
    match = _ID_DIM.match(path)
    if match is None:
        return False
    name = msg.feature_configs[int(match.group(1))].id_feature.feature_name
    if name in grouped:
        found.problem(
            path,
            f"required field 'embedding_dim' is missing: id_feature {name!r} is in a feature group, where "
            "TorchEasyRec asserts embedding_dim > 0 (Feature._embedding_dim)",
        )
    else:
        found.note(
            path,
            f"embedding_dim not set: id_feature {name!r} is in no feature group, so neither TorchEasyRec (which "
            "reads the missing dim as 0) nor recpipe builds its table; FG still computes it",
        )
    return True


def import_tzrec_file(
    path: str | Path, name: str | None = None, drop_custom_features: bool = False
) -> TzrecImport:
    """:func:`import_tzrec` of the file at ``path``."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"TorchEasyRec config {path} does not exist")
    return import_tzrec(path.read_text(), str(path), name, drop_custom_features)


# ------------------------------------------------------------------------------------------ sections
def _map(msg: Any, found: Findings, name: str | None, dropped: set[str]) -> dict[str, Any]:
    if msg.HasField("model_dir"):
        found.note("model_dir", "ignored: recpipe writes runs under its own output folders")
    if msg.HasField("eval_config"):
        for f, _ in msg.eval_config.ListFields():
            found.note(
                f"eval_config.{f.name}",
                "ignored: recpipe evaluates the whole eval split and logs each evaluation",
            )
    model, eval_ = map_model(msg.model_config, found)
    data: dict[str, Any] = {
        "name": name or Path(msg.model_dir.rstrip("/")).name or "tzrec-import",
        "data": _data(msg, found),
        "features": map_features(
            msg.feature_configs,
            found,
            fg_mode(msg.data_config)[0] == "FG_NONE",
            msg.data_config.fg_encoded_multival_sep,
        ),
        "feature_groups": _groups(msg, found, dropped),
        "model": model,
        "train": _train(msg.train_config, found, model.get("type") in RETRIEVAL),
    }
    if eval_:
        data["eval"] = eval_
    _check_sampler(msg, model, data, found)
    if model.get("type") in ("dlrm", "wukong"):
        check_dlrm_groups(msg, data, found)
    check_wukong_dims(data, found)
    check_model_groups(model, data["feature_groups"], found)
    _domain_label_last(data, found)
    return data


def _check_sampler(msg: Any, model: dict[str, Any], data: dict[str, Any], found: Findings) -> None:
    """A negative sampler belongs to a retrieval model, and one without in-batch negatives needs it."""
    sampler = data["data"].get("negative_sampler")
    retrieval = model.get("type") in RETRIEVAL
    if sampler is not None and not retrieval and model:
        found.problem(
            "data_config.negative_sampler",
            f"a negative sampler feeds a retrieval model ({', '.join(RETRIEVAL)}); {model['type']} ranks",
        )
    # another sampler (hard_negative_sampler, negative_sampler_v2) is refused at its line already
    other = any(
        q.path.startswith("data_config.") and "sampler" in q.path.split(".")[1] for q in found.problems
    )
    if retrieval and sampler is None and not model.get("in_batch_negative") and not other:
        found.problem(
            "data_config",
            f"{model['type']} without in_batch_negative trains on sampled negatives: it needs a negative_sampler",
        )


def _domain_label_last(data: dict[str, Any], found: Findings) -> None:
    """PEPNet's ``domain_input_name`` names one of ``label_fields`` (TorchEasyRec reads labels by name);
    recpipe's domain label is the last of ``data.label_fields``: moved there when it is elsewhere."""
    domain = data["model"].get("domain_label")
    labels = data["data"].get("label_fields", [data["data"].get("label")])
    if domain is None:
        return
    if domain not in labels:
        found.problem(
            "model_config.pepnet.domain_input_name",
            f"{domain!r} is not one of data_config.label_fields {labels} (each row's domain is read from that label)",
        )
    elif labels[-1] != domain:
        data["data"]["label_fields"] = [c for c in labels if c != domain] + [domain]
        found.note(
            "data_config.label_fields",
            f"domain label {domain!r} moved last (recpipe's domain towers read it there; TorchEasyRec reads labels by name)",
        )


def _data(msg: Any, found: Findings) -> dict[str, Any]:
    dc, p = msg.data_config, "data_config"
    out: dict[str, Any] = {}
    labels = list(dc.label_fields)
    if not labels:
        found.problem(f"{p}.label_fields", "no label field")
    if len(labels) > 1:  # a multi-task model's labels, one per task tower (its model section checks them)
        out["label_fields"] = labels
    else:
        out["label"] = labels[0] if labels else ""
    weights = list(dc.sample_weight_fields)
    if len(weights) > 1:
        found.problem(f"{p}.sample_weight_fields", f"recpipe takes one sample weight; got {weights}")
    elif weights:
        out["weight"] = weights[0]
    out["batch_size"] = dc.batch_size
    out["num_workers"] = dc.num_workers

    dataset = dc.DESCRIPTOR.fields_by_name["dataset_type"].enum_type.values_by_number[dc.dataset_type].name
    odps = dataset in ("OdpsDataset", "OdpsDatasetV1")
    if dataset == "KafkaDataset":
        found.problem(f"{p}.dataset_type", "KafkaDataset (streaming input) is not supported")
    params: dict[str, None] = {}
    for key, src in (("train", "train_input_path"), ("eval", "eval_input_path")):
        uri = getattr(msg, src)
        if _check_input(uri, odps, dataset, src, found):
            out[key] = uri
            # TorchEasyRec fills {PROJECT} with str.format at run time (tzrec/benchmark/benchmark.py);
            # recpipe keeps the path and resolves each name when a run reads it (recpipe.config.placeholders).
            params.update(dict.fromkeys(placeholders(uri)))
    if params:
        out["params"] = params
    # TorchEasyRec reads train and eval from two inputs and names no time column; when recpipe ingests
    # one source it splits it, by a hashed fraction rather than by recpipe's default "time_stamp".
    out["split"] = {"time_column": None, "eval_fraction": 0.1}
    if dataset == "CsvDataset":
        out["csv"] = _csv(dc, found)

    mode, where = fg_mode(dc)
    if mode == "FG_NONE":
        # Columns named after the features hold FG's output (docs/source/feature/data.md, fg_mode=FG_NONE).
        out["fg_encoded"] = True
    elif mode == "FG_BUCKETIZE":
        found.problem(
            f"{p}.{where}",
            "input generated but not bucketized (FG_BUCKETIZE) is not supported: give raw values (FG_DAG) "
            "or FG's whole output (FG_NONE)",
        )
    if dc.HasField("negative_sampler"):
        out["negative_sampler"] = _negative_sampler(dc.negative_sampler, f"{p}.negative_sampler", found)
        params.update(dict.fromkeys(placeholders(dc.negative_sampler.input_path)))
        if params:
            out["params"] = params
    if dc.HasField("force_base_data_group"):
        found.note(
            f"{p}.force_base_data_group",
            "ignored: recpipe looks up a batch's positives and its sampled items apart, so no data group is "
            "padded to the batch size (TorchEasyRec's DSSMv2 needs it to slice its shared lookup)",
        )
    for key, why in (
        ("pin_memory", "recpipe's loader decides"),
        ("fg_threads", "recpipe's feature generation is vectorized, not a thread pool"),
        ("odps_data_quota_name", "recpipe's ODPS reader uses the tunnel's default quota"),
        (
            "odps_data_compression",
            "a transfer setting of MaxCompute's storage API; recpipe reads through pyodps' Arrow tunnel, "
            "which picks its own compression (the rows read are the same)",
        ),
    ):
        if dc.HasField(key):
            found.note(f"{p}.{key}", f"ignored: {why}")
    return out


def _negative_sampler(ns: Any, path: str, found: Findings) -> dict[str, Any]:
    """``negative_sampler`` → ``data.negative_sampler``: TorchEasyRec's item table is graph-learn's
    ``id | weight | attrs`` with the attributes joined by ``attr_delimiter`` (default ``":"``), so the
    delimiter is always written; ``num_eval_sample`` is a note (recpipe's recall@K ranks the whole catalogue)."""
    if ns.num_sample < 1:
        found.problem(f"{path}.num_sample", f"num_sample {ns.num_sample} must be >= 1")
    if not ns.attr_fields:
        found.problem(f"{path}.attr_fields", "no attr_fields: the sampled items would have no features")
    if ns.num_eval_sample:
        found.note(
            f"{path}.num_eval_sample",
            "ignored: recpipe's recall@K ranks each evaluation row's positive among the whole item table, not "
            "among num_eval_sample sampled items",
        )
    return {
        "input_path": ns.input_path,
        "item_id_field": ns.item_id_field,
        "num_sample": ns.num_sample,
        "attr_fields": list(ns.attr_fields),
        "attr_delimiter": ns.attr_delimiter,
    }


def fg_mode(dc: Any) -> tuple[str, str]:
    """TorchEasyRec's FG mode and the field that sets it, as ``_get_compatible_fg_mode``
    (tzrec/utils/config_util.py) decides: the deprecated ``fg_encoded`` when set (true: FG_NONE; false:
    FG_DAG with ``fg_threads`` > 0, else FG_NORMAL), else ``fg_mode``, whose default is FG_NONE."""
    if dc.HasField("fg_encoded"):
        if dc.fg_encoded:
            return "FG_NONE", "fg_encoded"
        return ("FG_DAG" if dc.fg_threads > 0 else "FG_NORMAL"), "fg_encoded"
    return dc.DESCRIPTOR.fields_by_name["fg_mode"].enum_type.values_by_number[dc.fg_mode].name, "fg_mode"


def _check_input(uri: str, odps: bool, dataset: str, path: str, found: Findings) -> bool:
    if not uri:  # missing: reported as a required field
        return False
    if uri.count("odps://") > 1:
        found.problem(path, f"{uri!r} lists several tables; recpipe reads one source per split")
        return False
    if uri.startswith("odps://") != odps:
        found.problem(path, f"{uri!r} does not fit dataset_type {dataset}")
        return False
    if odps:
        try:
            parse_odps_uri(PLACEHOLDER.sub("x", uri))  # the form is checked; the names resolve at run time
        except ValueError as err:
            found.problem(path, str(err))
            return False
    return True


def _csv(dc: Any, found: Findings) -> dict[str, Any]:
    out: dict[str, Any] = {"delimiter": dc.delimiter, "header": dc.with_header}
    types = dc.DESCRIPTOR.fields_by_name["input_fields"].message_type.fields_by_name["input_type"].enum_type
    columns, column_types = [], {}
    for i, f in enumerate(dc.input_fields):
        columns.append(f.input_name)
        if f.HasField("input_type"):
            t = types.values_by_number[f.input_type].name
            if t not in _CSV_TYPES:
                found.problem(
                    f"data_config.input_fields[{i}].input_type", f"CSV column type {t} is not supported"
                )
            else:
                column_types[f.input_name] = _CSV_TYPES[t]
    if columns:
        out["columns"] = columns
    elif not dc.with_header:
        found.problem("data_config", "a CSV without a header (with_header: false) needs input_fields")
    if column_types:
        out["column_types"] = column_types
    return out


def _train(tc: Any, found: Findings, retrieval: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "sparse_optimizer": _optimizer(
            tc.sparse_optimizer, "train_config.sparse_optimizer", _SPARSE_OPT, found
        ),
        "dense_optimizer": _optimizer(tc.dense_optimizer, "train_config.dense_optimizer", _DENSE_OPT, found),
    }
    if tc.HasField("num_epochs"):
        out["epochs"] = tc.num_epochs
    if tc.HasField("num_steps"):
        out["max_steps"] = tc.num_steps
    out["log_every_steps"] = tc.log_step_count_steps
    if tc.HasField("mixed_precision"):
        # TorchEasyRec autocasts the model's forward to BF16 or FP16 (tzrec/main.py, mixed_precision).
        # Its values are exactly "BF16" and "FP16" (tzrec/acc/utils.py, mixed_precision_to_dtype).
        if tc.mixed_precision in ("BF16", "FP16"):
            out["mixed_precision"] = tc.mixed_precision.lower()
        else:
            found.problem(
                "train_config.mixed_precision",
                f"mixed_precision {tc.mixed_precision!r} is not 'BF16' or 'FP16'",
            )
    _checkpoints(tc, out, found, retrieval)
    _step_options(tc, out, found)
    for key, why in (
        ("use_tensorboard", "recpipe logs metrics to metrics.jsonl and MLflow"),
        ("tensorboard_summaries", "recpipe logs metrics to metrics.jsonl and MLflow"),
        ("is_profiling", "recpipe's benchmarks/ profile training"),
        ("cudnn_allow_tf32", "recpipe keeps PyTorch's TF32 defaults"),
        ("cuda_matmul_allow_tf32", "recpipe keeps PyTorch's TF32 defaults"),
    ):
        if (len(tc.tensorboard_summaries) > 0) if key == "tensorboard_summaries" else tc.HasField(key):
            found.note(f"train_config.{key}", f"ignored: {why}")
    return out


def _checkpoints(tc: Any, out: dict[str, Any], found: Findings, retrieval: bool) -> None:
    """TorchEasyRec saves every ``save_checkpoints_epochs`` epochs when it is set, and then ignores
    ``save_checkpoints_steps`` (tzrec/main.py, ``_train_and_evaluate``); it always saves at the end, as
    recpipe does. recpipe checkpoints by steps, so an epoch interval maps when it means "at the end".
    recpipe's retrieval trainer writes its one checkpoint at the end: the proto's default interval (1000 steps,
    which every config that leaves it out has) is not applied there, and an interval the config sets is refused."""
    p = "train_config.save_checkpoints_epochs"
    steps = "train_config.save_checkpoints_steps"
    if retrieval and tc.save_checkpoints_epochs == 0:
        if not tc.HasField("save_checkpoints_steps"):
            found.note(
                steps,
                f"TorchEasyRec's default of a checkpoint every {tc.save_checkpoints_steps} steps is not applied: "
                "recpipe's retrieval trainer writes one checkpoint, at the end",
            )
        elif tc.save_checkpoints_steps > 0:
            found.problem(
                steps,
                f"a checkpoint every {tc.save_checkpoints_steps} steps: recpipe's retrieval trainer writes one "
                "checkpoint, at the end; remove it",
            )
        out["checkpoint_every_steps"] = None
    elif tc.save_checkpoints_epochs > 0:
        epochs = tc.num_epochs if tc.HasField("num_epochs") else 1
        if tc.save_checkpoints_epochs < epochs:
            found.problem(
                p,
                f"a checkpoint every {tc.save_checkpoints_epochs} of {epochs} epochs has no recpipe "
                "counterpart (it checkpoints by steps); use save_checkpoints_steps",
            )
    elif tc.save_checkpoints_steps > 0:
        out["checkpoint_every_steps"] = tc.save_checkpoints_steps
    else:  # TorchEasyRec's 0: no periodic checkpoint, the one at the end (tzrec/main.py: `if steps > 0`)
        out["checkpoint_every_steps"] = None
    if tc.keep_checkpoint_max > 0:  # TorchEasyRec's 0 keeps all; recpipe keeps its default 2
        out["keep_last_checkpoints"] = tc.keep_checkpoint_max
    elif tc.HasField("keep_checkpoint_max"):
        found.note("train_config.keep_checkpoint_max", "ignored: 0 (keep all) has no recpipe counterpart")


def _optimizer(opt: Any, path: str, types: dict[str, str], found: Findings) -> dict[str, Any]:
    kind = opt.WhichOneof("optimizer")
    if kind is None:
        found.problem(path, f"no optimizer set; supported: {', '.join(types)}")
        return {"type": "sgd", "lr": 1.0}
    cfg = getattr(opt, kind)
    out: dict[str, Any] = {"type": types[kind], "lr": cfg.lr}
    if "momentum" in cfg.DESCRIPTOR.fields_by_name and cfg.momentum != 0.0:
        found.problem(
            f"{path}.{kind}.momentum",
            f"momentum {cfg.momentum} (TorchEasyRec's default is 0.9) is not supported: recpipe's dense SGD "
            "has no momentum; set momentum: 0",
        )
    if "weight_decay" in cfg.DESCRIPTOR.fields_by_name and cfg.weight_decay:
        out["weight_decay"] = cfg.weight_decay
    if "beta1" in cfg.DESCRIPTOR.fields_by_name and (cfg.HasField("beta1") or cfg.HasField("beta2")):
        # optimizer.proto's Adam beta1 / beta2 (defaults 0.9 / 0.999, torch's and FBGEMM's too).
        out["betas"] = [cfg.beta1, cfg.beta2]
    if "eps" in cfg.DESCRIPTOR.fields_by_name and cfg.HasField("eps"):
        out["eps"] = cfg.eps
    for key in ("initial_accumulator_value", "gradient_clipping"):  # the fused kernel's clipping: sparse only
        if key in cfg.DESCRIPTOR.fields_by_name and getattr(cfg, key):
            out[key] = getattr(cfg, key)
    if out.get("gradient_clipping"):
        out["max_gradient"] = cfg.max_gradient
    return out


def _step_options(tc: Any, out: dict[str, Any], found: Findings) -> None:
    """``grad_clipping``, ``gradient_accumulation_steps``, ``grad_scaler`` and ``global_embedding_constraints``
    (tzrec/main.py: GradientClippingOptimizer, TZRecOptimizer, GradScaler, create_planner)."""
    if tc.HasField("grad_clipping"):
        gc, p = tc.grad_clipping, "train_config.grad_clipping"
        kind = gc.clipping_type.upper()  # TorchEasyRec reads GradientClipping[clipping_type.upper()]
        if kind == "NORM":
            out["grad_clip_norm"] = gc.max_gradient
            out["grad_clip_norm_type"] = gc.norm_type
        elif kind == "VALUE":
            out["grad_clip_value"] = gc.max_gradient
        elif kind != "NONE":
            found.problem(
                f"{p}.clipping_type", f"clipping_type {gc.clipping_type!r} is not norm, value or none"
            )
        if gc.HasField("enable_global_grad_clip"):
            found.note(
                f"{p}.enable_global_grad_clip",
                "ignored: TorchEasyRec passes no param_to_pgs, so it clips locally, as recpipe does (on the "
                "dense gradients, already summed over ranks)",
            )
    if tc.gradient_accumulation_steps > 1:
        out["gradient_accumulation_steps"] = tc.gradient_accumulation_steps
    if tc.HasField("grad_scaler"):
        gs = tc.grad_scaler
        out["grad_scaler"] = {k: getattr(gs, k) for k in ("init_scale", "growth_factor", "backoff_factor")}
        out["grad_scaler"]["growth_interval"] = gs.growth_interval
    types = list(tc.global_embedding_constraints.sharding_types)
    known = ("table_wise", "row_wise", "column_wise", "data_parallel")
    for i, t in enumerate(types):
        if t not in known:
            found.problem(
                f"train_config.global_embedding_constraints.sharding_types[{i}]",
                f"sharding type {t!r} is not one of recpipe's {', '.join(known)}",
            )
    if types:
        out["sharding_types"] = types


def _groups(msg: Any, found: Findings, dropped: set[str]) -> list[dict[str, Any]]:
    wide_dim = wide_embedding_dim(msg.model_config)
    known = set()
    # TorchEasyRec names a grouped sub-feature "<sequence>_<feature>" when run with USE_RTP=1 (feature.py,
    # Feature._underline; export_util.py _adjust_fg_json_for_rtp), else "<sequence>__<feature>": a group may
    # list either spelling; recpipe's key is the second.
    rtp: dict[str, str] = {}
    for fc in msg.feature_configs:
        kind = fc.WhichOneof("feature")
        if kind == "sequence_feature":
            seq = fc.sequence_feature
            for s in seq.features:
                if s.WhichOneof("feature"):
                    sub = getattr(s, s.WhichOneof("feature")).feature_name
                    known.add(sub_feature_key(seq.sequence_name, sub))
                    rtp[f"{seq.sequence_name}_{sub}"] = sub_feature_key(seq.sequence_name, sub)
        elif kind is not None:
            known.add(getattr(fc, kind).feature_name)
    rtp = {k: v for k, v in rtp.items() if k not in known}

    def resolved(names: Any) -> list[str]:  # a dropped custom feature is left out (noted where it is defined)
        return [rtp.get(n, n) for n in names if n not in dropped]

    # A feature of an unsupported type (sequence_id_feature) is reported once, where it is defined, not
    # again in every group that names it.
    unsupported = any(
        re.match(r"feature_configs\[\d+\]\.\w+$", q.path) and q.message.startswith("unsupported field")
        for q in found.problems
    )
    out = []
    names = {g.group_name for g in msg.model_config.feature_groups}
    for i, g in enumerate(msg.model_config.feature_groups):
        path = f"model_config.feature_groups[{i}]"
        gtype = g.DESCRIPTOR.fields_by_name["group_type"].enum_type.values_by_number[g.group_type].name
        if gtype not in _GROUP_TYPES:
            found.problem(
                f"{path}.group_type",
                f"group_type {gtype} is not supported; supported: {', '.join(_GROUP_TYPES)}",
            )
        for j, feature in enumerate(resolved(g.feature_names)):
            if feature not in known and not unsupported:
                found.problem(
                    f"{path}.feature_names[{j}]", f"feature {feature!r} is not defined in feature_configs"
                )
        group = {
            "name": g.group_name,
            "type": _GROUP_TYPES.get(gtype, "deep"),
            "features": resolved(g.feature_names),
        }
        if gtype == "WIDE" and wide_dim is not None:
            group["embedding_dim"] = (
                wide_dim  # the model's wide_embedding_dim sizes every WIDE group's tables
            )
        out.append(group)
        for j, sg in enumerate(g.sequence_groups):
            sp = f"{path}.sequence_groups[{j}]"
            for k, feature in enumerate(resolved(sg.feature_names)):
                if feature not in known and not unsupported:
                    found.problem(
                        f"{sp}.feature_names[{k}]", f"feature {feature!r} is not defined in feature_configs"
                    )
            name = sequence_group_name(g, j)
            if name in names:
                found.problem(f"{sp}.group_name", f"sequence group {name!r}: a feature group has that name")
            names.add(name)
            out.append({"name": name, "type": "sequence", "features": resolved(sg.feature_names)})
    return out
