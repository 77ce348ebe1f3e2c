"""Split a trained model into its sparse half (tables + lookup plan) and its dense half (plain torch).

The split is read off the model's own contract: ``dense_input_names()`` names the dense arch's inputs,
the FeatureSpec says which keys and tables build each of them, and the TorchRec collections hold the
weights. :func:`split_model` checks the FeatureSpec against the model's tables first (rows, dims,
features) and, on real rows, that the plan reproduces ``sparse_arch`` exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn
from torchrec.modules.embedding_modules import EmbeddingBagCollection, EmbeddingCollection
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from recpipe.export.remap import ZchRemap
from recpipe.export.tables import PlanEntry, TableMeta
from recpipe.export.zch import zch_remaps
from recpipe.features.spec import FeatureSpec
from recpipe.models.protocol import DenseArchModule

SEQUENCE_SUFFIXES = {"__query": "pooled", "__values": "sequence", "__offsets": "offsets"}


class SpecMismatchError(ValueError):
    """The FeatureSpec does not describe the model being exported (tables, dims, keys)."""


@dataclass
class SplitModel:
    """A model seen as ``dense_arch(dense, lookup(plan, tables, kjt))``.

    Args:
        input_names (list[str]): ``dense_input_names()``, ``"dense"`` first.
        plan (list[PlanEntry]): how every input after ``dense`` is built from the tables.
        tables (dict[str, torch.Tensor]): table name → ``(rows, dim)`` float32 weight.
        metas (list[TableMeta]): tables as stored (features, pooling, id mapping).
        dense (DenseArchModule): ``forward(dense, *embeddings)`` → logits ``(B,)``, without the tables.
        remaps (dict[str, ZchRemap]): zch table name → its frozen key → row remapping.
    """

    input_names: list[str]
    plan: list[PlanEntry]
    tables: dict[str, torch.Tensor]
    metas: list[TableMeta]
    dense: DenseArchModule
    remaps: dict[str, ZchRemap] = field(default_factory=dict)


class DenseListProgram(nn.Module):
    """:class:`~recpipe.models.protocol.DenseArchModule` taking ``(dense, [embeddings...])``: a fixed
    signature TorchScript can call."""

    def __init__(self, program: DenseArchModule) -> None:
        super().__init__()
        self.program = program

    def forward(self, dense: torch.Tensor, embeddings: list[torch.Tensor]) -> torch.Tensor:
        return self.program(dense, *embeddings)


def model_tables(model: nn.Module) -> dict[str, tuple[torch.Tensor, list[str]]]:
    """Every TorchRec table of ``model``: name → ``(weight, feature names)``."""
    out: dict[str, tuple[torch.Tensor, list[str]]] = {}
    for module in model.modules():
        if isinstance(module, EmbeddingBagCollection):
            for c in module.embedding_bag_configs():
                out[c.name] = (module.embedding_bags[c.name].weight, list(c.feature_names))
        elif isinstance(module, EmbeddingCollection):
            for c in module.embedding_configs():
                out[c.name] = (module.embeddings[c.name].weight, list(c.feature_names))
    return out


def check_spec(model: nn.Module, spec: FeatureSpec) -> None:
    """Raise :class:`SpecMismatchError` unless every model table matches the FeatureSpec's table of that
    name (rows, dim, features) and the dense width agrees."""
    for attr in ("dense_input_names", "sparse_arch", "dense_arch", "dense_module"):
        if not callable(getattr(model, attr, None)):
            raise SpecMismatchError(
                f"{type(model).__name__} has no {attr}(); it is not a recpipe ranking model"
            )
    spec_tables = {t.name: t for t in spec.tables()}
    found = model_tables(model)
    if not found:
        raise SpecMismatchError(f"{type(model).__name__} has no TorchRec embedding tables")
    problems = []
    for name, (weight, feats) in found.items():
        t = spec_tables.get(name)
        if t is None:
            problems.append(f"table {name!r} is in the model but not in the FeatureSpec")
            continue
        rows, dim = weight.shape
        if (rows, dim) != (t.num_embeddings, t.embedding_dim):
            problems.append(
                f"table {name!r} is {rows} x {dim} in the model but {t.num_embeddings} x {t.embedding_dim} "
                "in the FeatureSpec"
            )
        extra = [f for f in feats if f not in t.feature_names]
        if extra:
            problems.append(f"table {name!r} serves {extra} in the model; the FeatureSpec's table does not")
    dense_dim = getattr(model, "dense_in_features", None)
    if dense_dim is not None and dense_dim != spec.dense_dim:
        problems.append(f"the model takes {dense_dim} dense features, the FeatureSpec has {spec.dense_dim}")
    if problems:
        raise SpecMismatchError("FeatureSpec does not match the model: " + "; ".join(problems))


def build_plan(input_names: list[str], spec: FeatureSpec) -> list[PlanEntry]:
    """The lookup behind every dense input: a pooled key, or a sequence group's query/values/offsets."""
    if not input_names or input_names[0] != "dense":
        raise SpecMismatchError(f"dense_input_names() must start with 'dense', got {input_names[:3]}")
    keys = set(spec.sparse_keys())
    groups = {g.name: g for g in spec.groups if g.type == "sequence"}
    plan = []
    for name in input_names[1:]:
        if name in keys:
            w = spec.feature(name).weights_key
            plan.append(PlanEntry(name, "pooled", [name], weights={name: w} if w is not None else {}))
            continue
        for suffix, kind in SEQUENCE_SUFFIXES.items():
            group = groups.get(name[: -len(suffix)]) if name.endswith(suffix) else None
            if group is not None:
                keys_of = (
                    group.query if suffix == "__query" else group.history[: 1 if kind == "offsets" else None]
                )
                floats = [k for k in keys_of if kind == "sequence" and spec.feature(k).item_float]
                weights = {
                    k: w
                    for k in keys_of
                    if kind == "pooled" and (w := spec.feature(k).weights_key) is not None
                }
                # several ids per item: the item pools its ids by its id counts key, whose offsets are the items'
                items = {
                    k: [c, spec.feature(k).pooling]
                    for k in keys_of
                    if kind != "pooled" and (c := spec.feature(k).item_lengths_key) is not None
                }
                if kind == "offsets" and items:
                    keys_of, items = [items[keys_of[0]][0]], {}
                plan.append(PlanEntry(name, kind, list(keys_of), floats, weights, items))
                break
        else:
            raise SpecMismatchError(
                f"dense input {name!r} is neither a FeatureSpec key nor <sequence group>__query/__values/__offsets"
            )
    return plan


def split_model(model: nn.Module, spec: FeatureSpec) -> SplitModel:
    """The sparse/dense split of ``model`` (after :func:`check_spec`)."""
    check_spec(model, spec)
    input_names = list(model.dense_input_names())
    plan = build_plan(input_names, spec)
    found = model_tables(model)
    # An offsets entry reads only its key's lengths (a history's first key: a float one has no table).
    used = {spec.feature(k).table for p in plan if p.kind != "offsets" for k in p.keys if k not in p.floats}
    missing = sorted(used - set(found))
    if missing:
        raise SpecMismatchError(
            f"FeatureSpec does not match the model: tables {missing} are not in the model"
        )
    pooled_keys = {k for p in plan if p.kind == "pooled" for k in p.keys}
    metas = []
    for t in spec.tables():
        if t.name not in used:
            continue
        feats = [spec.feature(f) for f in t.feature_names]
        metas.append(
            TableMeta(
                name=t.name,
                rows=t.num_embeddings,
                dim=t.embedding_dim,
                dtype="float32",
                features=list(t.feature_names),
                pooling={f.name: f.pooling for f in feats if f.name in pooled_keys},
                id_mapping={
                    f.name: {
                        "column": f.column,
                        "kind": "bucketize" if f.boundaries is not None else f.mapping.kind,
                        "size": f.mapping.size,
                        "sequence": f.sequence,
                        **({"zch": True} if f.zch else {}),
                    }
                    for f in feats
                },
            )
        )
    remaps = _used_remaps(model, spec, metas)
    for m in metas:
        if m.name in remaps:
            m.zch = remaps[m.name].sizes()
    tables = {m.name: found[m.name][0].detach().to("cpu", torch.float32) for m in metas}
    return SplitModel(input_names, plan, tables, metas, DenseArchModule(model), remaps)


def _used_remaps(model: nn.Module, spec: FeatureSpec, metas: list[TableMeta]) -> dict[str, ZchRemap]:
    """The frozen remapping of every zch table the plan uses, checked against the FeatureSpec."""
    spec_zch = {t.name: t.zch_size for t in spec.tables() if t.zch_size is not None}
    try:
        found = zch_remaps(model)
    except ValueError as err:
        raise SpecMismatchError(f"cannot freeze the model's zch remapping: {err}") from None
    problems = [
        f"table {t!r} is zch in the model but not in the FeatureSpec" for t in found if t not in spec_zch
    ]
    out = {}
    for m in metas:
        if m.name not in spec_zch:
            continue
        remap = found.get(m.name)
        if remap is None:
            problems.append(f"table {m.name!r} is zch in the FeatureSpec but has no remapping in the model")
        elif remap.table_rows != m.rows:
            problems.append(
                f"zch table {m.name!r}: the remapping covers {remap.table_rows} rows, the table has {m.rows}"
            )
        else:
            out[m.name] = remap
    if problems:
        raise SpecMismatchError("FeatureSpec does not match the model: " + "; ".join(problems))
    return out


def kjt_of(keys: list[str], values: torch.Tensor, lengths: torch.Tensor) -> KeyedJaggedTensor:
    return KeyedJaggedTensor.from_lengths_sync(keys=keys, values=values, lengths=lengths)
