"""Warm start (``train.init_from``): a new run whose weights, optimizer state and zch remaps come from
another run's checkpoint, at step 0, in its own output folder, on any world size.

The checkpoint is verified against its manifest, as resume does, and its config must agree with this
run's wherever the tensors depend on it: the model section, the features and feature groups, the
optimizer types (their states are loaded). The run also keeps the parent's fitted FeatureSpec
(``fg.json`` of the checkpoint, which ``fit`` reuses under ``train.init_from``), so a known id keeps its
row; a value the parent's vocabulary does not hold maps to that feature's UNK id, and hashed and zch ids
need no vocabulary. ``models:/`` URIs are resolved to a checkpoint folder above this floor
(:mod:`recpipe.tracking.checkpoints`) and handed down as a folder.

Example::

    ckpt = warm_checkpoint("runs/day1/train")          # its latest verified ckpt-<step>
    check_compatible(ckpt, cfg, spec)                  # or WarmStartError naming what differs
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from recpipe.config import RecpipeConfig, flatten
from recpipe.features.spec import FeatureSpec
from recpipe.train.checkpoint_files import MANIFEST, SPEC, CheckpointError, read_config, resolve_checkpoint

MODELS_SCHEME = "models:/"
# Settings that fix the shapes or the meaning of the loaded tensors (the optimizer types: their states).
_OPTIMIZER_TYPES = ("train.sparse_optimizer.type", "train.dense_optimizer.type")


class WarmStartError(ValueError):
    """``train.init_from`` names no usable checkpoint, or one whose model does not fit this config."""


def is_registered(init_from: str) -> bool:
    """Whether ``init_from`` is a registry URI (``models:/NAME@alias``, ``models:/NAME/3``)."""
    return init_from.startswith(MODELS_SCHEME)


def warm_checkpoint(init_from: str | Path) -> Path:
    """The verified ``ckpt-<step>`` folder ``init_from`` names: a checkpoint itself, or a training output /
    ``checkpoints`` folder (its latest).

    Args:
        init_from (str | Path): a local folder (a ``models:/`` URI is resolved by the train stage first).

    Raises:
        WarmStartError: a ``models:/`` URI, no complete checkpoint there, or one failing its manifest.
    """
    if is_registered(str(init_from)):
        raise WarmStartError(
            f"train.init_from {init_from!r} is a registry URI: the train stage (recpipe train / the pipeline) "
            "resolves it to the checkpoint its version was trained into; the trainer takes a folder"
        )
    try:
        ckpt = resolve_checkpoint(init_from)
        read_config(ckpt)  # verifies every file against the manifest
    except CheckpointError as err:
        raise WarmStartError(f"train.init_from {str(init_from)!r}: {err}") from None
    return ckpt


def manifest_digest(ckpt: Path) -> str:
    """sha256 of ``ckpt``'s ``manifest.json``: one value that pins every file of the checkpoint."""
    return hashlib.sha256((Path(ckpt) / MANIFEST).read_bytes()).hexdigest()


def check_recorded(ckpt: Path, digest: str, where: str) -> None:
    """Refuse a checkpoint location whose content is not the one recorded (``digest`` of its manifest).

    Args:
        ckpt (Path): the folder found at the recorded location.
        digest (str): :func:`manifest_digest` recorded when it was written.
        where (str): what recorded it (named in the error).

    Raises:
        WarmStartError: the manifest is missing or differs.
    """
    path = Path(ckpt) / MANIFEST
    found = manifest_digest(ckpt) if path.is_file() else "no manifest"
    if found != digest:
        raise WarmStartError(
            f"{where} recorded checkpoint {ckpt} with manifest sha256 {digest[:12]}, but the folder there now "
            f"has {found[:12]}: it was replaced or rewritten since; pass a checkpoint folder instead"
        )


def parent_spec(ckpt: Path) -> FeatureSpec:
    """The fitted FeatureSpec a (verified) checkpoint was trained with."""
    return FeatureSpec.load(Path(ckpt) / SPEC)


def _named(items: list[dict[str, Any]], section: str) -> dict[str, dict[str, Any]]:
    return {f"{section}[{item.get('name')}]": item for item in items}


def config_differences(parent: RecpipeConfig, child: RecpipeConfig) -> list[str]:
    """Where ``child`` differs from ``parent`` in what the checkpoint's tensors depend on, one line each.

    Example::

        config_differences(din, dlrm)   # ["model.type: 'multi_tower_din' -> 'dlrm'", ...]
    """
    a, b = parent.to_dict(), child.to_dict()
    out: list[str] = []
    flat_a, flat_b = flatten({"model": a["model"]}), flatten({"model": b["model"]})
    flat_a.update({k: v for k, v in flatten(a).items() if k in _OPTIMIZER_TYPES})
    flat_b.update({k: v for k, v in flatten(b).items() if k in _OPTIMIZER_TYPES})
    for section in ("features", "feature_groups"):
        named_a, named_b = _named(a[section], section), _named(b[section], section)
        for name in sorted(set(named_a) - set(named_b)):
            out.append(f"{name}: only in the parent")
        for name in sorted(set(named_b) - set(named_a)):
            out.append(f"{name}: not in the parent")
        for name in sorted(set(named_a) & set(named_b)):
            flat_a.update(flatten(named_a[name], f"{name}."))
            flat_b.update(flatten(named_b[name], f"{name}."))
    for key in sorted(set(flat_a) | set(flat_b), key=str):
        va, vb = flat_a.get(key, "<unset>"), flat_b.get(key, "<unset>")
        if va != vb:
            out.append(f"{key}: {json.dumps(va)} -> {json.dumps(vb)}")
    return out


def spec_differences(parent: FeatureSpec, child: FeatureSpec) -> list[str]:
    """Tables whose rows or dims differ (or that only one spec has), one line each."""
    ta = {t.name: (t.num_embeddings, t.embedding_dim) for t in parent.tables()}
    tb = {t.name: (t.num_embeddings, t.embedding_dim) for t in child.tables()}
    out = [f"table {n}: only in the parent" for n in sorted(set(ta) - set(tb))]
    out += [f"table {n}: not in the parent" for n in sorted(set(tb) - set(ta))]
    out += [
        f"table {n}: {ta[n][0]} rows x {ta[n][1]} -> {tb[n][0]} rows x {tb[n][1]}"
        for n in sorted(set(ta) & set(tb))
        if ta[n] != tb[n]
    ]
    if not out and parent.digest() != child.digest():
        out.append(
            "fg.json: the same tables, but other fitted vocabularies, boundaries or statistics (ids would "
            "land on other rows); warm-started runs reuse the parent's fg.json (fit does under train.init_from)"
        )
    return out


def check_compatible(ckpt: Path, cfg: RecpipeConfig, spec: FeatureSpec) -> None:
    """Refuse to warm-start ``cfg`` with ``spec`` from ``ckpt`` where the checkpoint's tensors would not
    mean the same, naming every difference.

    Args:
        ckpt (Path): the verified parent checkpoint.
        cfg (RecpipeConfig), spec (FeatureSpec): this run's.

    Raises:
        WarmStartError: the model, features, feature groups or optimizer types differ, or the FeatureSpec
            is not the parent's.
    """
    diffs = config_differences(read_config(ckpt), cfg) + spec_differences(parent_spec(ckpt), spec)
    if diffs:
        raise WarmStartError(
            f"cannot warm-start from {ckpt}: this run differs from it in "
            + "; ".join(diffs[:12])
            + (f"; and {len(diffs) - 12} more" if len(diffs) > 12 else "")
        )
