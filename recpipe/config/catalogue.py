"""The catalogues of names: every model and every export backend recpipe knows, name → where it lives.

The one list of each. Entries name modules by ``"module:attribute"`` strings and this module imports
nothing, so the config (the ground floor) can validate ``model.type``, every feature's ``kind`` and
``export.backends`` without importing torch or any package above it. Each string is resolved by one module,
the one :data:`RESOLVED_BY` names (``tests/arch/test_imports.py`` reads these strings as imports *of that
module*, and holds them to the floors):

- every ``config`` by :mod:`recpipe.config.root` (so a model's section file imports only ``recpipe.config``
  modules: it stands on the ground floor, however deep its folder is);
- a model's ``code`` by :mod:`recpipe.models.registry`, a kind's by :mod:`recpipe.features.kinds.registry`;
- a backend's builder, scorer and availability check by :mod:`recpipe.export.backends`.

Adding a model: its folder ``recpipe/models/<name>/`` and one line in :data:`MODELS`. Adding a feature kind:
its module ``recpipe/features/kinds/<kind>.py``, its config class (a section of the config, so on this floor:
``recpipe/config/features.py``) and one line in :data:`FEATURE_KINDS`; outside recpipe, one module holding
both (``Config`` and ``KIND``) and an entry point of group ``recpipe.feature_kinds`` (:data:`ENTRY_POINTS`). A package outside
recpipe declares a model by an entry point of group ``recpipe.models`` instead (``my_model =
"my_package.my_model"``, a module with ``Config`` and ``build``): every process that loads a config finds it,
training workers and cluster pods included.

Example::

    MODELS["dlrm"].config                  # 'recpipe.models.dlrm.config:DlrmConfig'
    FEATURE_KINDS["id"].code               # 'recpipe.features.kinds.id:KIND'
    EXPORT_BACKENDS["rtp"].full_model      # False: raw rows in, FG inside
    DEFAULT_BACKENDS                       # ('jit', 'aoti', 'onnx', 'rtp')
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Declared:
    """A model or a feature kind: where its config class and its code live.

    Args:
        config (str): ``"module:Class"``, its section: a :class:`~recpipe.config.sections.ModelSection` (the
            YAML under ``model:``, with ``check_groups``) or a :class:`~recpipe.config.features.FeatureSection`
            (one entry of ``features:``); the module imports only ``recpipe.config`` modules.
        code (str): ``"module:attribute"``: a model's ``build(spec, cfg, device=None) -> nn.Module`` (a
            :class:`~recpipe.models.base.SplitModel`), a kind's
            :class:`~recpipe.features.kinds.base.FeatureKind` (its FeatureSpec entries, fitting and FG).
    """

    config: str
    code: str


@dataclass(frozen=True)
class BackendEntry:
    """One export backend.

    Args:
        builder (str): ``"module:function"``, ``(ctx: ExportContext, folder) -> (files, inputs, extra)``
            writes the backend's files into ``folder``.
        scorer (str): ``"module:Class"``, ``Class(folder, manifest)`` loads a verified folder as a Scorer.
        full_model (bool): the folder holds the whole model and scores FG tensors (``predict_batch``);
            otherwise it holds tables plus the dense program and scores raw rows (``predict_raw``).
        default (bool): exported when the config does not list backends.
        serving_rank (int | None): preference of the registered pyfunc (0 first); None: never served.
        unavailable (str | None): ``"module:function"`` returning why the backend cannot be built on
            this machine (it is then recorded as skipped), or None when it always can.
    """

    builder: str
    scorer: str
    full_model: bool
    default: bool = True
    serving_rank: int | None = None
    unavailable: str | None = None


FEATURE_KINDS: dict[str, Declared] = {
    "id": Declared("recpipe.config.features:IdFeatureConfig", "recpipe.features.kinds.id:KIND"),
    "raw": Declared("recpipe.config.features:RawFeatureConfig", "recpipe.features.kinds.raw:KIND"),
    "sequence": Declared(
        "recpipe.config.features:SequenceFeatureConfig", "recpipe.features.kinds.sequence:KIND"
    ),
    "lookup": Declared("recpipe.config.features:LookupFeatureConfig", "recpipe.features.kinds.lookup:KIND"),
    "expr": Declared("recpipe.config.features:ExprFeatureConfig", "recpipe.features.kinds.expr:KIND"),
    "overlap": Declared(
        "recpipe.config.features:OverlapFeatureConfig", "recpipe.features.kinds.overlap:KIND"
    ),
    "match": Declared("recpipe.config.features:MatchFeatureConfig", "recpipe.features.kinds.match:KIND"),
    "combo": Declared("recpipe.config.features:ComboFeatureConfig", "recpipe.features.kinds.combo:KIND"),
    "sequence_id": Declared(
        "recpipe.config.features:SequenceIdFeatureConfig", "recpipe.features.kinds.sequence_id:KIND"
    ),
    "sequence_raw": Declared(
        "recpipe.config.features:SequenceRawFeatureConfig", "recpipe.features.kinds.sequence_raw:KIND"
    ),
    "kv_dot_product": Declared(
        "recpipe.config.features:KvDotProductFeatureConfig", "recpipe.features.kinds.kv_dot_product:KIND"
    ),
    "bool_mask": Declared(
        "recpipe.config.features:BoolMaskFeatureConfig", "recpipe.features.kinds.bool_mask:KIND"
    ),
    "tokenize": Declared(
        "recpipe.config.tokenize:TokenizeFeatureConfig", "recpipe.features.kinds.tokenize:KIND"
    ),
}

MODELS: dict[str, Declared] = {
    "multi_tower_din": Declared(
        "recpipe.models.multi_tower_din.config:MultiTowerDinConfig",
        "recpipe.models.multi_tower_din.model:build",
    ),
    "dlrm": Declared("recpipe.models.dlrm.config:DlrmConfig", "recpipe.models.dlrm.model:build"),
    "multi_tower": Declared(
        "recpipe.models.multi_tower.config:MultiTowerConfig", "recpipe.models.multi_tower.model:build"
    ),
    "deepfm": Declared("recpipe.models.deepfm.config:DeepFMConfig", "recpipe.models.deepfm.model:build"),
    "wide_and_deep": Declared(
        "recpipe.models.wide_and_deep.config:WideAndDeepConfig", "recpipe.models.wide_and_deep.model:build"
    ),
    "mmoe": Declared("recpipe.models.mmoe.config:MmoeConfig", "recpipe.models.mmoe.model:build"),
    "dbmtl": Declared("recpipe.models.dbmtl.config:DbmtlConfig", "recpipe.models.dbmtl.model:build"),
    "ple": Declared("recpipe.models.ple.config:PleConfig", "recpipe.models.ple.model:build"),
    "dcn_v2": Declared("recpipe.models.dcn_v2.config:DcnV2Config", "recpipe.models.dcn_v2.model:build"),
    "dcn_v1": Declared("recpipe.models.dcn_v1.config:DcnV1Config", "recpipe.models.dcn_v1.model:build"),
    "mask_net": Declared(
        "recpipe.models.mask_net.config:MaskNetConfig", "recpipe.models.mask_net.model:build"
    ),
    "xdeepfm": Declared("recpipe.models.xdeepfm.config:XDeepFMConfig", "recpipe.models.xdeepfm.model:build"),
    "wukong": Declared("recpipe.models.wukong.config:WukongConfig", "recpipe.models.wukong.model:build"),
    "pepnet": Declared("recpipe.models.pepnet.config:PepnetConfig", "recpipe.models.pepnet.model:build"),
    "simple_multi_task": Declared(
        "recpipe.models.simple_multi_task.config:SimpleMultiTaskConfig",
        "recpipe.models.simple_multi_task.model:build",
    ),
    "rocket_launching": Declared(
        "recpipe.models.rocket_launching.config:RocketLaunchingConfig",
        "recpipe.models.rocket_launching.model:build",
    ),
    "dssm": Declared("recpipe.models.dssm.config:DssmConfig", "recpipe.models.dssm.model:build"),
    "dssm_v2": Declared("recpipe.models.dssm_v2.config:DssmV2Config", "recpipe.models.dssm_v2.model:build"),
    "mind": Declared("recpipe.models.mind.config:MindConfig", "recpipe.models.mind.model:build"),
}
# The models of MODELS that retrieve (two towers, :class:`~recpipe.models.protocol.RetrievalModel`): trained by the
# retrieval loss over negatives (recpipe.models.retrieval_train), scored by recall@K, not by the ranking loop.
RETRIEVAL_MODELS: tuple[str, ...] = ("dssm", "dssm_v2", "mind")
# What a retrieval model's user tower is exported to (with its item embeddings and FAISS index): torch.export +
# AOTInductor, the path for new work; its ``export.backends`` when the config names none.
RETRIEVAL_BACKENDS: tuple[str, ...] = ("aoti",)
# A package outside recpipe adds to a table by an entry point of this group, naming a module whose ``Config``
# is the config class and whose attribute given here is the code.
ENTRY_POINTS: dict[str, tuple[str, str]] = {
    "MODELS": ("recpipe.models", "build"),
    "FEATURE_KINDS": ("recpipe.feature_kinds", "KIND"),
}
# The module that resolves each table's strings, per field (tests/arch/test_imports.py reads each string as
# an import of that module).
RESOLVED_BY: dict[str, dict[str, str]] = {
    "MODELS": {"config": "recpipe.config.root", "code": "recpipe.models.registry"},
    "FEATURE_KINDS": {"config": "recpipe.config.root", "code": "recpipe.features.kinds.registry"},
    "EXPORT_BACKENDS": dict.fromkeys(("builder", "scorer", "unavailable"), "recpipe.export.backends"),
}

# Serving ranks: every served backend scores raw rows with FG inside; RTP and ONNX need neither torchrec
# nor fbgemm at serving time, so they come first. TensorRT needs a GPU at serving time.
EXPORT_BACKENDS: dict[str, BackendEntry] = {
    "jit": BackendEntry(
        "recpipe.export.builders:build_jit", "recpipe.export.jit:JitScorer", True, serving_rank=2
    ),
    "aoti": BackendEntry(
        "recpipe.export.builders:build_aoti", "recpipe.export.aoti:AotiScorer", True, serving_rank=3
    ),
    "onnx": BackendEntry(
        "recpipe.export.builders:build_onnx", "recpipe.export.onnx:OnnxScorer", False, serving_rank=1
    ),
    "rtp": BackendEntry(
        "recpipe.export.builders:build_rtp", "recpipe.export.rtp:RtpModel", False, serving_rank=0
    ),
    "trt": BackendEntry(
        "recpipe.export.builders:build_trt",
        "recpipe.export.trt:TrtScorer",
        False,
        default=False,
        unavailable="recpipe.export.trt:trt_unavailable_reason",
    ),
}

DEFAULT_BACKENDS: tuple[str, ...] = tuple(name for name, b in EXPORT_BACKENDS.items() if b.default)
# `recpipe run` (the embedded pipeline) leaves out aoti unless asked: compiling its C++ takes minutes on 2 cores.
LOCAL_RUN_BACKENDS: tuple[str, ...] = tuple(name for name in DEFAULT_BACKENDS if name != "aoti")
SERVING_PREFERENCE: tuple[str, ...] = tuple(
    sorted(
        (name for name, b in EXPORT_BACKENDS.items() if b.serving_rank is not None),
        key=lambda name: EXPORT_BACKENDS[name].serving_rank,  # type: ignore[arg-type, return-value]
    )
)


def check_backend_names(names: Sequence[str]) -> None:
    """Raise ``ValueError`` naming every entry of ``names`` that is not a backend."""
    unknown = [b for b in names if b not in EXPORT_BACKENDS]
    if unknown:
        raise ValueError(f"unknown backend(s) {unknown}; choose from {list(EXPORT_BACKENDS)}")


def parse_backends(backends: str | Sequence[str]) -> list[str]:
    """``"jit, ONNX"`` or ``["jit", "onnx"]`` → ``["jit", "onnx"]`` (stripped, lower-cased, first
    occurrence kept): the one parser of a backend list, for the config, the CLI and the pipeline.

    Raises:
        ValueError: an unknown backend, or none at all.

    Example::

        parse_backends("rtp,jit,rtp")    # ['rtp', 'jit']
        parse_backends("jit,tflite")     # ValueError: unknown backend(s) ['tflite']; choose from [...]
    """
    items = backends.split(",") if isinstance(backends, str) else backends
    names = [str(b).strip().lower() for b in items if str(b).strip()]
    if not names:
        raise ValueError(f"no backend given; choose from {list(EXPORT_BACKENDS)}")
    check_backend_names(names)
    return list(dict.fromkeys(names))
