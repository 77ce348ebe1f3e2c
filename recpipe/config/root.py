"""Typed recpipe configuration (YAML), validated with errors that name the key path and allowed values.

The config describes data, features, feature groups, the model, training, evaluation, export and
tracking. Modules never receive it whole: builders turn the relevant section into constructor
arguments.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import math
from importlib.metadata import entry_points
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from recpipe.config.catalogue import (
    DEFAULT_BACKENDS,
    ENTRY_POINTS,
    FEATURE_KINDS,
    MODELS,
    RETRIEVAL_BACKENDS,
    RETRIEVAL_MODELS,
    Declared,
    check_backend_names,
)
from recpipe.config.features import FeatureGroupConfig, FeatureSection, check_feature_outputs
from recpipe.config.placeholders import check_declared
from recpipe.config.sampler import NegativeSamplerConfig
from recpipe.config.sections import ModelSection, Strict
from recpipe.config.strict_yaml import DuplicateKeyError, load_yaml


class ConfigError(ValueError):
    """A config file failed validation; the message names the file, key path and what was expected."""


class ParameterError(ValueError):
    """A run parameter (a pipeline or command-line value that overrides the config) is invalid; the
    message starts with ``parameter <name>:``."""

    def __init__(self, name: str, message: str) -> None:
        self.parameter = name
        super().__init__(f"parameter {name}: {message}")


# ----------------------------------------------------------------------------------------------- data
class CsvOptions(Strict):
    delimiter: str = ","
    header: bool = True
    # Explicit column names (and types, "int64"/"float64"/"string") for files without a header.
    columns: list[str] | None = None
    column_types: dict[str, str] = Field(default_factory=dict)
    # Columns read as text where a file has them. RecpipeConfig.csv_options() adds every id and history
    # column of the features: type inference would read the id "00000000" as the integer 0, which hashes
    # differently from the same id in Parquet or in a request.
    text_columns: list[str] = Field(default_factory=list)
    # Unquoted fields read as null, in every column: empty, and ``\N``, the null of Hive text tables, MySQL's
    # and PostgreSQL's dumps. A quoted field is always its text.
    null_values: list[str] = Field(default_factory=lambda: ["", "\\N"])
    # The files' text encoding (a Python codec name: utf8, gbk, gb18030, latin1…), read as UTF-8.
    encoding: str = "utf8"

    @field_validator("encoding")
    @classmethod
    def _known_encoding(cls, name: str) -> str:
        import codecs

        try:
            codecs.lookup(name)
        except LookupError:
            raise ValueError(
                f"unknown text encoding {name!r} (a Python codec name: utf8, gbk, gb18030, latin1…)"
            ) from None
        return name


class SplitConfig(Strict):
    """How ingest splits one table into train and eval: the last ``eval_last_days`` (UTC days) of
    ``time_column``, or a deterministic hashed ``eval_fraction`` of rows.

    ``time_column`` holds numbers since the epoch in ``time_unit`` (``s``, ``ms``, ``us``, ``ns``; numeric text
    too), timestamps (with or without a time zone), dates, or ISO-8601 text (``2026-01-07 13:45:00``)."""

    time_column: str | None = "time_stamp"
    eval_last_days: int = Field(1, ge=1)
    time_unit: Literal["s", "ms", "us", "ns"] = "s"
    eval_fraction: float | None = Field(None, gt=0.0, lt=1.0)


# Rows of the training reader's shuffle buffer (data.shuffle_buffer_rows' default).
SHUFFLE_BUFFER_ROWS = 1_048_576


class DataConfig(Strict):
    train: str | None = None
    eval: str | None = None
    csv: CsvOptions = Field(default_factory=CsvOptions)
    # The label column, or TorchEasyRec's label_fields: several (one per task of a multi-task model; the
    # first is the primary one, which negative down-sampling and the single-task metrics read).
    label: str | None = None
    label_fields: list[str] = Field(default_factory=list)
    weight: str | None = None
    # The global batch: rows per training step over all ranks (each rank reads rows_per_rank of them).
    batch_size: int = Field(8192, ge=1)
    num_workers: int = Field(0, ge=0)
    # Training reads each epoch in its own seeded order (train.seed): row groups (files, table ranges)
    # permuted, then the rows of every shuffle_buffer_rows consecutive ones (recpipe/data/shuffle.py).
    # false: file order (rows already shuffled, or an order that must be kept).
    shuffle: bool = True
    shuffle_buffer_rows: int = Field(SHUFFLE_BUFFER_ROWS, ge=1)
    split: SplitConfig = Field(default_factory=SplitConfig)
    # Which partitions of a partitioned source (hive-style dt=YYYYMMDD folders, ODPS partitions) to read:
    # "dt=20260101..20260107", "dt=20260107", "latest", "last:7"; null: every partition.
    partitions: str | None = None
    on_bad_row: Literal["error", "skip"] = "error"
    # Pre-encoded input (TorchEasyRec's fg_mode FG_NONE): each feature's column, named after it, already
    # holds FG's output: row ids in [0, buckets) (checked), bucket ids of bucketized raw features, dense values.
    fg_encoded: bool = False
    # Negative down-sampling at ingestion; the rate is recorded so evaluation can re-calibrate.
    neg_sample_rate: float = Field(1.0, gt=0.0, le=1.0)
    # Columns training never reads: the true click probability of synthetic data, the GAUC group key.
    oracle_column: str | None = "true_prob"
    group_column: str | None = None
    # Values of TorchEasyRec-style {NAME} placeholders in train/eval/negative_sampler.input_path; null: from
    # the environment.
    params: dict[str, str | None] = Field(default_factory=dict)
    # A retrieval model's sampled negatives: the item table and draws per batch (recpipe/config/sampler.py).
    negative_sampler: NegativeSamplerConfig | None = None

    @model_validator(mode="after")
    def _declared_params(self) -> DataConfig:  # a typo fails at load time, not when a run reaches data
        sampler = self.negative_sampler.input_path if self.negative_sampler else None
        check_declared((self.train, self.eval, sampler), self.params)
        return self

    @model_validator(mode="after")
    def _labels(self) -> DataConfig:
        fields = self.label_fields
        if len(set(fields)) != len(fields):
            raise ValueError(f"data.label_fields must be distinct, got {fields}")
        if not fields and self.label is None:
            raise ValueError("data.label (or data.label_fields) is required")
        if fields and self.label not in (None, fields[0]):
            raise ValueError(
                f"data.label {self.label!r} must be the first of data.label_fields {fields} (or be left out)"
            )
        if fields:
            self.label = fields[0]
        return self

    @property
    def labels(self) -> list[str]:
        """Every label column, the primary one first."""
        return list(self.label_fields) or [str(self.label)]


# ------------------------------------------------------------------------------- models and feature kinds
Table = Literal["MODELS", "FEATURE_KINDS"]
_TABLES: dict[str, dict[str, Declared]] = {"MODELS": MODELS, "FEATURE_KINDS": FEATURE_KINDS}
_WHAT = {"MODELS": "model type", "FEATURE_KINDS": "feature kind"}


def declared_names(table: Table) -> list[str]:
    """Every name of ``table`` (``"MODELS"`` or ``"FEATURE_KINDS"``): its catalogue lines and the entry points
    of its group (:data:`~recpipe.config.catalogue.ENTRY_POINTS`)."""
    group = ENTRY_POINTS[table][0]
    return sorted(set(_TABLES[table]) | {ep.name for ep in entry_points(group=group)})


def declared(table: Table, name: str) -> Declared:
    """Where ``name`` of ``table`` is declared: its catalogue line, else an installed package's entry point (a
    module with ``Config`` and the table's code attribute: ``build`` for a model, ``KIND`` for a kind).

    Raises:
        ValueError: an unknown name.
    """
    if name in _TABLES[table]:
        return _TABLES[table][name]
    group, code = ENTRY_POINTS[table]
    found = [ep.value for ep in entry_points(group=group) if ep.name == name]
    if not found:
        raise ValueError(f"unknown {_WHAT[table]} {name!r}; known: {declared_names(table)}")
    module = found[0].partition(":")[0]
    return Declared(config=f"{module}:Config", code=f"{module}:{code}")


def model_names() -> list[str]:
    """Every declared model (:func:`declared_names` of ``MODELS``)."""
    return declared_names("MODELS")


def feature_kind_names() -> list[str]:
    """Every declared feature kind (:func:`declared_names` of ``FEATURE_KINDS``)."""
    return declared_names("FEATURE_KINDS")


def resolve(path: str) -> Any:
    """The attribute a ``"module:attribute"`` string names (imported now).

    Raises:
        ValueError: the module or the attribute does not exist.
    """
    module, _, attr = path.partition(":")
    try:
        found = getattr(importlib.import_module(module), attr, None)
    except ModuleNotFoundError as err:
        raise ValueError(f"{path}: no module {err.name!r}") from None
    if found is None:
        raise ValueError(f"{path}: module {module} has no {attr!r}")
    return found


def config_class(name: str) -> type[ModelSection]:
    """The pydantic class of model ``name``'s config section.

    Raises:
        ValueError: an unknown model, or a declaration without its section class or ``check_groups``.
    """
    entry = declared("MODELS", name)
    cls = resolve(entry.config)
    if not (isinstance(cls, type) and callable(getattr(cls, "check_groups", None))):
        raise ValueError(f"model {name!r}: {entry.config} is not a config section with check_groups")
    return cls


def feature_class(kind: str) -> type[FeatureSection]:
    """The config class of feature kind ``kind``.

    Raises:
        ValueError: an unknown kind, or a declaration whose ``Config`` is not a FeatureSection.
    """
    entry = declared("FEATURE_KINDS", kind)
    cls = resolve(entry.config)
    if not (isinstance(cls, type) and issubclass(cls, FeatureSection)):
        raise ValueError(f"feature kind {kind!r}: {entry.config} is not a FeatureSection")
    return cls


def _section(key: str, base: type, section_class: Any, table: Table) -> Any:
    """A ``BeforeValidator`` of a mapping validated by the class its ``key`` names (``model.type``, a
    feature's ``kind``)."""

    def validate(value: Any) -> Any:
        if isinstance(value, base):
            return value
        if not isinstance(value, dict) or not isinstance(value.get(key), str):
            raise ValueError(f"must be a mapping with a {_WHAT[table]}, one of {declared_names(table)}")
        return section_class(value[key]).model_validate(value)

    return BeforeValidator(validate)


# Any: the class comes from the catalogue at validation time (and serializes as itself).
ModelConfig = Annotated[Any, _section("type", ModelSection, config_class, "MODELS")]
FeatureConfig = Annotated[Any, _section("kind", FeatureSection, feature_class, "FEATURE_KINDS")]


# ---------------------------------------------------------------------------------------------- train
# torch.optim.Adam's and FBGEMM's default (beta1, beta2), and TorchEasyRec's (optimizer.proto).
ADAM_BETAS = (0.9, 0.999)


class OptimizerConfig(Strict):
    type: Literal["adagrad", "rowwise_adagrad", "adam", "sgd"]
    lr: float = Field(gt=0.0)
    eps: float = 1e-8
    weight_decay: float = Field(0.0, ge=0.0)
    # Adam's (beta1, beta2): the decay rates of its gradient and squared-gradient averages (TorchEasyRec's
    # beta1 / beta2); a setting of adam only.
    betas: tuple[float, float] = ADAM_BETAS
    # Adagrad's starting squared-gradient sum (TensorFlow's initial_accumulator_value, TorchEasyRec's
    # adagrad_optimizer field): the first update is lr·g/sqrt(v + g²) instead of lr·sign(g).
    initial_accumulator_value: float = Field(0.0, ge=0.0)
    # train.sparse_optimizer only: FBGEMM's fused kernel clamps each element of a table row's gradient to
    # [-max_gradient, max_gradient] before the update (TorchEasyRec's Fused*Optimizer gradient_clipping).
    gradient_clipping: bool = False
    max_gradient: float = Field(1.0, gt=0.0)

    @model_validator(mode="after")
    def _betas(self) -> OptimizerConfig:
        if any(not 0.0 <= b < 1.0 for b in self.betas):
            raise ValueError(f"betas {list(self.betas)} must each be in [0, 1)")
        if self.type != "adam" and tuple(self.betas) != ADAM_BETAS:
            raise ValueError(f"betas is a setting of adam; optimizer {self.type} has none")
        if self.initial_accumulator_value and self.type not in ("adagrad", "rowwise_adagrad"):
            raise ValueError(
                f"initial_accumulator_value is a setting of adagrad; optimizer {self.type} has none"
            )
        if self.max_gradient != 1.0 and not self.gradient_clipping:
            raise ValueError("max_gradient is read only with gradient_clipping: true")
        return self


class GradScalerConfig(Strict):
    """fp16 loss scaling (``torch.amp.GradScaler``; TorchEasyRec's ``grad_scaler``, the same defaults): the loss
    is multiplied by the scale before the backward, the dense gradients divided by it before clipping and the
    step; a step whose dense gradients hold inf/NaN is skipped and the scale multiplied by ``backoff_factor``,
    and ``growth_interval`` clean steps multiply it by ``growth_factor``.

    Example::

        train: {mixed_precision: fp16, grad_scaler: {init_scale: 1024}}
    """

    init_scale: float = Field(65536.0, gt=0.0)
    growth_factor: float = Field(2.0, gt=1.0)
    backoff_factor: float = Field(0.5, gt=0.0, lt=1.0)
    growth_interval: int = Field(2000, ge=1)


ShardingType = Literal["table_wise", "row_wise", "column_wise", "data_parallel"]


class TrainConfig(Strict):
    sparse_optimizer: OptimizerConfig = Field(
        default_factory=lambda: OptimizerConfig(type="adagrad", lr=1e-3)
    )
    dense_optimizer: OptimizerConfig = Field(default_factory=lambda: OptimizerConfig(type="adam", lr=1e-3))
    epochs: int = Field(1, ge=1)
    max_steps: int | None = Field(None, ge=1)
    # Clipping of the dense gradients before the dense step (after unscaling, over all accumulated micro-batches):
    # their global p-norm (p = grad_clip_norm_type, inf allowed) to grad_clip_norm, or each element to
    # [-grad_clip_value, grad_clip_value] (TorchEasyRec's grad_clipping "norm" / "value"); one of the two.
    grad_clip_norm: float | None = Field(None, gt=0.0)
    grad_clip_norm_type: float = Field(2.0, gt=0.0)
    grad_clip_value: float | None = Field(None, gt=0.0)
    # Micro-batches per dense step (TorchEasyRec's gradient_accumulation_steps): each step's loss is divided by
    # it and the dense gradients summed until the dense optimizer steps at every N-th step. The fused table
    # optimizer still updates at every step, on its 1/N share, as TorchEasyRec's does. A step stays one batch.
    gradient_accumulation_steps: int = Field(1, ge=1)
    grad_scaler: GradScalerConfig | None = None
    eval_every_steps: int | None = Field(None, ge=1)
    checkpoint_every_steps: int | None = Field(None, ge=1)
    # Also (or instead) once this many seconds of rank 0's clock have passed since the last checkpoint; the
    # end of training always writes one. Written in the background (checkpoint_async) unless turned off.
    checkpoint_every_seconds: float | None = Field(None, gt=0.0)
    checkpoint_async: bool = True
    keep_last_checkpoints: int = Field(2, ge=1)
    seed: int = 0
    log_every_steps: int = Field(50, ge=1)
    # torch.autocast of the training forward after the lookups (TorchEasyRec's train_config.mixed_precision
    # "BF16" / "FP16"): parameters and optimizer states stay float32, no loss scaling (TorchEasyRec's without
    # grad_scaler); evaluation and export run in float32.
    mixed_precision: Literal["bf16", "fp16"] | None = None
    # Warm start: "models:/NAME@champion" (a registered version) or a checkpoint folder; its dense and
    # embedding weights, optimizer state and zch remaps seed this run (which trains on data.partitions).
    init_from: str | None = None
    # OMP_NUM_THREADS of each local rank; None: the exported OMP_NUM_THREADS, else cpu_count // ranks.
    threads_per_rank: int | None = Field(None, ge=1)
    allow_oversize: bool = False  # train even if tables exceed the devices' memory (train.memory.check_fits)
    # Per-table sharding type for DistributedModelParallel; tables not listed use the planner default.
    sharding: dict[str, ShardingType] = Field(default_factory=dict)
    # The sharding types the planner may choose among for a table train.sharding does not name (TorchEasyRec's
    # global_embedding_constraints.sharding_types); null: recpipe's defaults (table_wise, sequence tables row_wise).
    sharding_types: list[ShardingType] | None = Field(None, min_length=1)

    @model_validator(mode="after")
    def _step_options(self) -> TrainConfig:
        if self.grad_clip_norm is not None and self.grad_clip_value is not None:
            raise ValueError("grad_clip_norm and grad_clip_value are two ways to clip: set one")
        if self.grad_clip_norm_type != 2.0 and self.grad_clip_norm is None:
            raise ValueError("grad_clip_norm_type is read only with grad_clip_norm")
        if self.dense_optimizer.gradient_clipping:
            raise ValueError(
                "dense_optimizer.gradient_clipping: the fused kernel's clipping is the tables'; clip the dense "
                "gradients with train.grad_clip_norm or train.grad_clip_value"
            )
        n = self.gradient_accumulation_steps
        if n > 1 and self.checkpoint_every_steps and self.checkpoint_every_steps % n:
            raise ValueError(
                f"checkpoint_every_steps {self.checkpoint_every_steps} is not a multiple of "
                f"gradient_accumulation_steps {n}: a checkpoint inside an accumulation would lose its gradients"
            )
        if self.grad_scaler is not None:
            self._check_grad_scaler()
        return self

    def _check_grad_scaler(self) -> None:
        if self.mixed_precision != "fp16":
            raise ValueError(
                f"grad_scaler scales the loss for fp16's narrow range; mixed_precision is {self.mixed_precision}: "
                "set mixed_precision: fp16 or remove grad_scaler"
            )
        # As in TorchEasyRec, the scaler unscales the dense gradients only: the fused table optimizer updates
        # in the backward on the scaled gradient. Adagrad and Adam are invariant to that scale (but for eps);
        # these are not.
        sparse = self.sparse_optimizer
        why = {
            "sgd": "sparse sgd would take steps init_scale times too large",
            "clip": "sparse gradient_clipping would compare the scaled gradient with max_gradient",
            "acc": "sparse initial_accumulator_value would act as value / scale²",
        }
        bad = [
            why[k]
            for k, on in (
                ("sgd", sparse.type == "sgd"),
                ("clip", sparse.gradient_clipping),
                ("acc", sparse.initial_accumulator_value > 0),
            )
            if on
        ]
        if bad:
            raise ValueError(
                "grad_scaler: the fused embedding optimizer sees the scaled gradient (the scaler unscales the "
                f"dense ones only), so {'; '.join(bad)}"
            )


# ------------------------------------------------------------------------------------ eval and export
class GateConfig(Strict):
    """The promotion gate's thresholds: the only place their defaults are written. Pipeline and
    command-line parameters replace them when (and only when) set: ``gate.model_copy(update=
    gate_overrides(...))`` (:func:`gate_overrides`)."""

    min_auc: float = Field(0.5, ge=0.0, le=1.0)
    max_auc_drop: float = Field(0.005, ge=0.0, le=1.0)
    max_logloss_rise: float = Field(0.01, ge=0.0)
    # Drift (recpipe.eval.drift): the largest PSI of any numeric feature of the eval split against the
    # training window, and per feature (its name in features:); None / {}: no drift check.
    max_psi: float | None = Field(None, ge=0.0)
    max_psi_per_feature: dict[str, Annotated[float, Field(ge=0.0)]] = Field(default_factory=dict)
    # A retrieval model's gate (RETRIEVAL_FIELDS): recall@K over the whole catalogue at K = recall_k (one of
    # eval.recall_at_k; None: the largest), at least min_recall_at_k (None: no floor) and at most
    # max_recall_drop below the champion's on the same rows. A ranking model refuses them, and a retrieval
    # model refuses RANKING_FIELDS.
    recall_k: int | None = Field(None, ge=1)
    min_recall_at_k: float | None = Field(None, ge=0.0, le=1.0)
    max_recall_drop: float = Field(0.01, ge=0.0, le=1.0)

    RANKING_FIELDS: ClassVar[tuple[str, ...]] = ("min_auc", "max_auc_drop", "max_logloss_rise")
    RETRIEVAL_FIELDS: ClassVar[tuple[str, ...]] = ("recall_k", "min_recall_at_k", "max_recall_drop")

    def checks_drift(self) -> bool:
        """Whether the gate holds promotion on drift (``max_psi`` or a per-feature limit is set)."""
        return self.max_psi is not None or bool(self.max_psi_per_feature)


def gate_overrides(
    min_auc: float | str | None = None,
    max_auc_drop: float | str | None = None,
    max_logloss_rise: float | str | None = None,
    max_psi: float | str | None = None,
    min_recall_at_k: float | str | None = None,
    max_recall_drop: float | str | None = None,
) -> dict[str, float]:
    """The gate thresholds that are set, as numbers by :class:`GateConfig` field (``{"min_auc": 0.7}``).

    ``None`` or an empty string (a KFP pipeline parameter left empty) means "the config's value", so a
    run that does not set a threshold keeps the YAML's ``eval.gate``.

    Example::

        >>> GateConfig(min_auc=0.6).model_copy(update=gate_overrides(min_auc="0.7", max_auc_drop=""))
        GateConfig(min_auc=0.7, max_auc_drop=0.005, max_logloss_rise=0.01, max_psi=None, max_psi_per_feature={}, recall_k=None, min_recall_at_k=None, max_recall_drop=0.01)

    Raises:
        ParameterError: a value that is not a number in [0, 1] (``max_psi``: a number >= 0).
    """
    out: dict[str, float] = {}
    for name, value, top in (
        ("min_auc", min_auc, 1.0),
        ("max_auc_drop", max_auc_drop, 1.0),
        ("max_logloss_rise", max_logloss_rise, 1.0),
        ("max_psi", max_psi, math.inf),
        ("min_recall_at_k", min_recall_at_k, 1.0),
        ("max_recall_drop", max_recall_drop, 1.0),
    ):
        if value is None or (isinstance(value, str) and not value.strip()):
            continue
        within = "in [0, 1]" if top == 1.0 else ">= 0"
        try:
            v = float(value)
        except (TypeError, ValueError):
            raise ParameterError(name, f"must be a number {within}, got {value!r}") from None
        if not 0.0 <= v <= top:
            raise ParameterError(name, f"must be {within}, got {v}")
        out[name] = v
    return out


class EvalConfig(Strict):
    gate: GateConfig = Field(default_factory=GateConfig)
    # A multi-task model's gate per label column (e.g. buy: {min_auc: 0.7}); a label not listed has ``gate``.
    task_gates: dict[str, GateConfig] = Field(default_factory=dict)
    threshold: float = Field(0.5, ge=0.0, le=1.0)
    gauc_group: str | None = None
    # A retrieval model's cut-offs K of recall@K and hit-rate@K over the whole catalogue (TorchEasyRec's
    # recall_at_k metrics' top_k); ranking models ignore them.
    recall_at_k: list[Annotated[int, Field(ge=1)]] = Field(default_factory=lambda: [10, 50], min_length=1)

    @field_validator("recall_at_k")
    @classmethod
    def _distinct_k(cls, v: list[int]) -> list[int]:
        if len(set(v)) != len(v):
            raise ValueError(f"eval.recall_at_k must be distinct, got {v}")
        return v

    @model_validator(mode="after")
    def _drift_once(self) -> EvalConfig:  # drift is of the data, not of a task: one limit for every task
        drifting = [label for label, g in self.task_gates.items() if g.checks_drift()]
        if drifting:
            raise ValueError(
                f"eval.task_gates {drifting} set max_psi / max_psi_per_feature: drift is the data's, not a "
                "task's; set them once, in eval.gate"
            )
        return self


def _is_default(section: BaseModel, name: str) -> bool:
    """Whether ``section.name`` holds its field's default."""
    return getattr(section, name) == type(section).model_fields[name].get_default(call_default_factory=True)


def check_gate_kind(model_type: str, ev: EvalConfig) -> None:
    """A ranking model's gate sets no retrieval field, a retrieval model's no ranking field (nor per-task
    gates): a field of the other kind would be silently ignored, so it is probably a mistake.

    Raises:
        ValueError: naming the fields, the model and what its gate takes.
    """
    retrieval = model_type in RETRIEVAL_MODELS
    wrong = GateConfig.RANKING_FIELDS if retrieval else GateConfig.RETRIEVAL_FIELDS
    right = GateConfig.RETRIEVAL_FIELDS if retrieval else GateConfig.RANKING_FIELDS
    kind = "a retrieval" if retrieval else "a ranking"
    # "Set" is "not the default": a checkpoint's config.yaml writes every field out, defaults included.
    gates = {"eval.gate": ev.gate, **{f"eval.task_gates.{k}": g for k, g in ev.task_gates.items()}}
    bad = [f"{where}.{n}" for where, g in gates.items() for n in wrong if not _is_default(g, n)]
    if retrieval:  # the ranking metrics' settings, which recall@K does not read
        bad += [f"eval.{n}" for n in ("task_gates", "threshold", "gauc_group") if not _is_default(ev, n)]
    if bad:
        raise ValueError(
            f"{bad}: model {model_type!r} is {kind} model; its gate takes {list(right)} (and the drift limits)"
        )
    k = ev.gate.recall_k
    if retrieval and k is not None and k not in ev.recall_at_k:
        raise ValueError(f"eval.gate.recall_k {k} is not one of eval.recall_at_k {ev.recall_at_k}")


class ExportConfig(Strict):
    # Names of recpipe.config.catalogue.EXPORT_BACKENDS, the one list of backends.
    backends: list[str] = Field(default_factory=lambda: list(DEFAULT_BACKENDS))
    max_abs_logit_diff: float = Field(1e-4, gt=0.0)
    # The RTP export's bf16 shared-history program (dense_shared_bf16.pt2) is served where it scores within this of
    # the tiled program; None: max_abs_logit_diff. bf16 rounds a trained DIN's logits by ~1e-4 to 1e-3, so a
    # looser value (e.g. 1e-3) opts into its speed where the default would keep the float32 program.
    shared_history_bf16_max_abs_logit_diff: float | None = Field(None, gt=0.0)

    @field_validator("backends")
    @classmethod
    def _known_backends(cls, v: list[str]) -> list[str]:
        check_backend_names(v)
        return v


class TrackingConfig(Strict):
    uri: str | None = None
    experiment: str = "recpipe"
    registered_model: str | None = None


# ---------------------------------------------------------------------------------------------- root
class RecpipeConfig(Strict):
    name: str
    data: DataConfig
    features: list[FeatureConfig] = Field(min_length=1)
    feature_groups: list[FeatureGroupConfig] = Field(min_length=1)
    model: ModelConfig
    train: TrainConfig = Field(default_factory=TrainConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    export: ExportConfig = Field(default_factory=ExportConfig)
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)

    @model_validator(mode="after")
    def _cross_refs(self) -> RecpipeConfig:
        names = [key for f in self.features for key in f.feature_keys()]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"duplicate feature names {dup}")
        known = set(names)
        check_feature_outputs(self.features)
        for g in self.feature_groups:
            missing = [n for n in g.features if n not in known]
            if missing:
                raise ValueError(
                    f"feature group {g.name!r} names unknown features {missing}; known: {sorted(known)}"
                )
        unknown = [n for n in self.eval.gate.max_psi_per_feature if n not in known]
        if unknown:
            raise ValueError(
                f"eval.gate.max_psi_per_feature names unknown features {unknown}; known: {sorted(known)}"
            )
        check_gate_kind(self.model.type, self.eval)
        if self.model.type in RETRIEVAL_MODELS and "backends" not in self.export.model_fields_set:
            # Two towers export to their own backends (a ranking model's default would be refused).
            self.export.backends = list(RETRIEVAL_BACKENDS)
        self.model.check_groups(self.feature_groups)
        check_labels = getattr(self.model, "check_labels", None)
        if check_labels is not None:
            check_labels(self.data.labels)
        elif len(self.data.labels) > 1:
            raise ValueError(
                f"model {self.model.type} trains one label, data.label_fields is {self.data.labels}: a multi-task "
                "model (mmoe, dbmtl, ple) trains several"
            )
        return self

    @property
    def model_type(self) -> str:
        return self.model.type

    def csv_options(self) -> CsvOptions:
        """``data.csv`` with every id and history column of the features read as text (the raw-value
        contract: ``123``, ``"123"`` and ``123.0`` are one id, but ``"00000000"`` is not ``0``); under
        ``on_bad_row: skip`` the raw, label and weight columns too, so a bad number anywhere is a skipped row."""
        skip = self.data.on_bad_row == "skip"
        text = [c for f in self.features for c in f.text_columns(skip)]
        if skip:
            # Arrow's typed CSV parser fails the whole pass on a bad number in any block after the one types
            # were inferred from; read as text, FG checks every row and skips (and counts) the bad ones.
            text += [c for c in (*self.data.labels, self.data.weight) if c]
        csv = self.data.csv
        return csv.model_copy(update={"text_columns": list(dict.fromkeys([*csv.text_columns, *text]))})

    @property
    def registered_model_name(self) -> str:
        return self.tracking.registered_model or self.name

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def digest(self) -> str:
        """sha256 of the canonical JSON form: the config hash recorded in lineage."""
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()


def _format_errors(err: ValidationError, source: str) -> str:
    lines = [f"invalid config {source}:"]
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "<root>"
        msg = e["msg"]
        ctx = e.get("ctx") or {}
        if "expected" in ctx:
            msg = f"{msg} (allowed: {ctx['expected']})"
        got = e.get("input")
        if e["type"] not in ("missing",) and not isinstance(got, dict | list):
            msg = f"{msg}; got {got!r}"
        lines.append(f"  {loc}: {msg}")
    return "\n".join(lines)


def parse_config(data: dict[str, Any], source: str = "<dict>") -> RecpipeConfig:
    """Validate a config mapping; raises ConfigError naming every bad key path."""
    if not isinstance(data, dict):
        raise ConfigError(
            f"invalid config {source}: the top level must be a mapping, got {type(data).__name__}"
        )
    try:
        return RecpipeConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_format_errors(err, source)) from None


def load_config(path: str | Path, overrides: dict[str, Any] | None = None) -> RecpipeConfig:
    """Load and validate a YAML config; ``overrides`` maps dotted key paths to values."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    try:
        data = load_yaml(path.read_text(), str(path))  # a key given twice is an error, not "last wins"
    except DuplicateKeyError as err:
        raise ConfigError(str(err)) from None
    except yaml.YAMLError as err:
        raise ConfigError(f"config file {path} is not valid YAML: {err}") from None
    for key, value in (overrides or {}).items():
        set_dotted(data, key, value)
    return parse_config(data, str(path))


def parse_overrides(items: list[str] | None) -> dict[str, Any]:
    """``["train.max_steps=100", "data.batch_size=64"]`` → ``{"train.max_steps": 100, "data.batch_size": 64}``.

    Values are parsed as YAML scalars, so numbers, booleans and lists keep their types. The one parser of
    ``--set KEY=VALUE`` for every command and for the training worker.

    Raises:
        ConfigError: an item without ``=`` or with an empty key.
    """
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        out[key.strip()] = yaml.safe_load(value)
    return out


def set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    """Set ``data['a']['b'] = value`` for key ``'a.b'``, creating mappings on the way."""
    node = data
    parts = key.split(".")
    for p in parts[:-1]:
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override {key!r}: {p!r} is not a mapping")
    node[parts[-1]] = value


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Flatten nested mappings to dotted keys (MLflow params)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out
