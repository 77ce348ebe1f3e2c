"""The sparse optimizer a config asks for against the ranks' device, without torch: the launcher refuses a
config the ranks cannot train before any process starts (exit 2), and each rank checks again
(:mod:`recpipe.train.optim` re-exports these names)."""

from __future__ import annotations

import os

from recpipe.config import OptimizerConfig
from recpipe.config.root import ADAM_BETAS

# The sparse optimizers FBGEMM's CPU embedding kernels fuse (check_sparse_optimizer).
CPU_SPARSE = ("adagrad", "rowwise_adagrad", "sgd")
# Device nodes of a GPU driver (NVIDIA; ROCm's /dev/kfd; WSL's /dev/dxg): without any of them CUDA cannot be
# available, and a launcher on a CPU machine need not import torch (~1.5 s) to learn it.
GPU_DRIVER_NODES = ("/dev/nvidiactl", "/proc/driver/nvidia", "/dev/kfd", "/dev/dxg")


def ranks_device() -> str:
    """``"cuda"`` where torch sees a GPU (the ranks' rule, :mod:`recpipe.train.dist`), else ``"cpu"``; torch is
    imported only on a machine with a GPU driver."""
    if not any(os.path.exists(node) for node in GPU_DRIVER_NODES):
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def check_sparse_optimizer(cfg: OptimizerConfig, device_type: str) -> None:
    """Raise early for a sparse optimizer FBGEMM cannot fuse on ``device_type`` (the launcher calls it
    before starting any rank, so ``recpipe train`` exits 2; each rank calls it again).

    Args:
        cfg (OptimizerConfig): ``train.sparse_optimizer``.
        device_type (str): ``"cpu"`` or ``"cuda"``.

    Raises:
        ValueError: weight decay, non-default betas, or Adam on CPU (naming the optimizers CPU trains with).
    """
    if cfg.weight_decay:
        # FBGEMM's fused optimizers apply weight decay only with a weight_decay_mode, which the sharders
        # do not set: passing it would be silently ignored (measured: identical tables with 0 and 0.5).
        raise ValueError(
            f"train.sparse_optimizer.weight_decay {cfg.weight_decay}: not supported for the fused embedding "
            "optimizer (it would be silently ignored); set it to 0"
        )
    if tuple(cfg.betas) != ADAM_BETAS:
        # The in-backward optimizer's kwargs are torch.optim.Adam's (betas), which FBGEMM's fused Adam does
        # not read (it takes beta1 / beta2): they would be dropped or refused inside the sharder.
        raise ValueError(
            f"train.sparse_optimizer.betas {list(cfg.betas)}: the fused embedding Adam keeps FBGEMM's "
            f"{list(ADAM_BETAS)}; set betas only on train.dense_optimizer"
        )
    if cfg.type == "adam" and device_type == "cpu":
        # fbgemm_gpu's CPU table-batched embedding asserts "Optimizer adam is not supported in CPU mode"
        # (partial_row_wise_adam and lamb too); torchrec's non-fused DENSE kernel would update every row
        # of a table at every step (dense Adam, not the rows a batch touched).
        raise ValueError(
            "train.sparse_optimizer adam: FBGEMM's fused Adam runs on GPU only (its CPU embedding kernels "
            f"have none); on CPU the tables train with {', '.join(CPU_SPARSE)}"
        )
