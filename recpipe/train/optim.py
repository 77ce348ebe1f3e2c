"""Optimizers: the sparse one fused into the embedding backward (TorchRec/FBGEMM), the dense one over
the data-parallel parameters, combined into one keyed optimizer for the train pipeline and DCP."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torchrec.optim as trec_optim
from torch import nn
from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward
from torchrec.optim.clipping import GradientClipping, GradientClippingOptimizer
from torchrec.optim.keyed import CombinedOptimizer, KeyedOptimizer, KeyedOptimizerWrapper

from recpipe.config import OptimizerConfig, TrainConfig
from recpipe.config.root import ADAM_BETAS
from recpipe.train.dist import embedding_modules
from recpipe.train.optim_check import CPU_SPARSE, check_sparse_optimizer  # noqa: F401 - re-exported

_SPARSE: dict[str, type[torch.optim.Optimizer]] = {
    "adagrad": torch.optim.Adagrad,
    "rowwise_adagrad": trec_optim.RowWiseAdagrad,
    "sgd": torch.optim.SGD,
    "adam": torch.optim.Adam,
}
# TorchRec's placeholders of the same kernels: they take FBGEMM-only kwargs (gradient_clipping, max_gradient).
_SPARSE_FBGEMM: dict[str, type[torch.optim.Optimizer]] = {
    "adagrad": trec_optim.Adagrad,
    "rowwise_adagrad": trec_optim.RowWiseAdagrad,
    "sgd": trec_optim.SGD,
    "adam": trec_optim.Adam,
}
_DENSE: dict[str, type[torch.optim.Optimizer]] = {
    "adagrad": torch.optim.Adagrad,
    "sgd": torch.optim.SGD,
    "adam": torch.optim.Adam,
}


def _kwargs(cfg: OptimizerConfig) -> dict[str, Any]:
    kw: dict[str, Any] = {"lr": cfg.lr}
    if cfg.type != "sgd":
        kw["eps"] = cfg.eps
    if cfg.weight_decay:
        kw["weight_decay"] = cfg.weight_decay
    if cfg.type == "adam" and tuple(cfg.betas) != ADAM_BETAS:
        kw["betas"] = tuple(cfg.betas)
    return kw


def _sparse_kwargs(cfg: OptimizerConfig) -> tuple[type[torch.optim.Optimizer], dict[str, Any]]:
    # FBGEMM's table-batched kernels take no initial accumulator: set_initial_accumulator fills it after sharding.
    if not cfg.gradient_clipping:
        return _SPARSE[cfg.type], _kwargs(cfg)
    return _SPARSE_FBGEMM[cfg.type], {
        **_kwargs(cfg),
        "gradient_clipping": True,
        "max_gradient": cfg.max_gradient,
    }


def apply_sparse_optimizer(model: nn.Module, cfg: OptimizerConfig, device_type: str) -> None:
    """Fuse ``cfg``'s optimizer into the backward of every embedding table of ``model`` (before sharding).

    After DistributedModelParallel shards the tables, the fused optimizer (state sharded like the
    tables) is ``dmp.fused_optimizer``.
    """
    check_sparse_optimizer(cfg, device_type)
    frozen_tables = frozen_table_names(model)
    params, frozen = [], []
    for _, m in embedding_modules(model):
        for name, p in m.named_parameters():
            # ...embedding_bags.<table>.weight / ...embeddings.<table>.weight
            (frozen if name.rsplit(".", 2)[-2] in frozen_tables else params).append(p)
    if not params and not frozen:
        raise ValueError("the model has no EmbeddingBagCollection / EmbeddingCollection parameters")
    if params:
        cls, kw = _sparse_kwargs(cfg)
        apply_optimizer_in_backward(cls, params, kw)
    if frozen:
        # TorchEasyRec's frozen tables (tzrec/main.py): SGD with lr 0 keeps the fused kernel and the weights.
        apply_optimizer_in_backward(torch.optim.SGD, frozen, {"lr": 0.0})


def set_initial_accumulator(fused: KeyedOptimizer, value: float) -> int:
    """Fill every Adagrad accumulator (``momentum1``) of the sharded tables' fused optimizer with ``value``
    (TorchEasyRec patches FBGEMM's state allocation to the same effect); before any step or checkpoint load.

    Args:
        fused (KeyedOptimizer): ``dmp.fused_optimizer``.
        value (float): ``train.sparse_optimizer.initial_accumulator_value``.

    Returns:
        int: the accumulators filled (one per table shard of this rank).
    """
    filled = 0
    for states in fused.state.values():
        for name, t in states.items():
            if name.endswith(".momentum1"):
                # ShardedTensor (table/row-wise) or DTensor (data_parallel): the local pieces are the kernel's.
                locals_ = [sh.tensor for sh in t.local_shards()] if hasattr(t, "local_shards") else [t]
                for local in locals_:
                    (local.to_local() if hasattr(local, "to_local") else local).fill_(value)
                    filled += 1
    return filled


def frozen_table_names(model: nn.Module) -> set[str]:
    """The tables of ``model`` built with ``trainable: false`` (every EmbeddingGroup's ``frozen_tables``)."""
    return {t for m in model.modules() for t in getattr(m, "frozen_tables", ())}


def dense_parameters(model: nn.Module) -> dict[str, nn.Parameter]:
    """Parameters without an in-backward optimizer: the data-parallel (DDP) part."""
    return {
        name: p
        for name, p in model.named_parameters()
        if p.requires_grad and not hasattr(p, "_in_backward_optimizers")
    }


def dense_optimizer(
    model: nn.Module, cfg: OptimizerConfig, clip: DenseClipping | None = None
) -> KeyedOptimizer:
    """``cfg``'s optimizer over the dense parameters, clipping their gradients first when asked.

    The gradients are already summed over ranks when the optimizer steps, so every rank clips by
    the same norm and the replicas stay identical.

    Args:
        model (nn.Module): the sharded model (its parameters without an in-backward optimizer).
        cfg (OptimizerConfig): ``train.dense_optimizer``.
        clip (DenseClipping | None): :func:`dense_clipping` of ``train``; None: no clipping.
    """
    if cfg.type not in _DENSE:
        raise ValueError(f"train.dense_optimizer {cfg.type!r} is not one of {sorted(_DENSE)}")
    cls, kw = _DENSE[cfg.type], _kwargs(cfg)
    if cfg.initial_accumulator_value:
        kw["initial_accumulator_value"] = cfg.initial_accumulator_value
    opt: KeyedOptimizer = KeyedOptimizerWrapper(dense_parameters(model), lambda ps: cls(ps, **kw))
    if clip is not None:
        opt = GradientClippingOptimizer(
            opt, clipping=clip.clipping, max_gradient=clip.max_gradient, norm_type=clip.norm_type
        )
    return opt


@dataclass(frozen=True)
class DenseClipping:
    """How the dense gradients are clipped: TorchRec's ``GradientClipping`` NORM (``max_gradient`` the largest
    ``norm_type``-norm of all of them) or VALUE (each element within ``±max_gradient``)."""

    clipping: GradientClipping
    max_gradient: float
    norm_type: float = 2.0


def dense_clipping(train: TrainConfig) -> DenseClipping | None:
    """``train.grad_clip_norm`` / ``grad_clip_norm_type`` / ``grad_clip_value`` as a :class:`DenseClipping`."""
    if train.grad_clip_norm is not None:
        return DenseClipping(GradientClipping.NORM, train.grad_clip_norm, train.grad_clip_norm_type)
    if train.grad_clip_value is not None:
        return DenseClipping(GradientClipping.VALUE, train.grad_clip_value)
    return None


def combined_optimizer(fused: KeyedOptimizer, dense: KeyedOptimizer) -> CombinedOptimizer:
    """One optimizer for the pipeline (``zero_grad`` / ``step``) and for checkpoints (``state_dict``).

    The fused part steps inside the backward already; its ``step`` is a no-op.
    """
    return CombinedOptimizer([("sparse", fused), ("dense", dense)])
