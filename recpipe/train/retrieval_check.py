"""What the retrieval trainer (:mod:`recpipe.train.retrieval_job`) refuses in a config, checked without torch: the
pipeline's train step runs it in its own process before it launches the job, and that process imports no torch
(tests/arch/test_light_steps.py)."""

from __future__ import annotations

from recpipe.config import RecpipeConfig

# train: options of the ranking loop the retrieval trainer does not implement. Set, they would be silently
# ignored, so the job refuses them (a config that sets one expects its effect).
UNSUPPORTED_TRAIN_OPTIONS: dict[str, str] = {
    "grad_clip_norm": "gradient clipping",
    "grad_clip_value": "gradient clipping",
    "gradient_accumulation_steps": "gradient accumulation",
    "grad_scaler": "fp16 loss scaling",
    "mixed_precision": "mixed precision",
    "eval_every_steps": "periodic evaluation (it evaluates once, at the end)",
    "checkpoint_every_steps": "periodic checkpoints (it writes one, at the end)",
    "checkpoint_every_seconds": "periodic checkpoints (it writes one, at the end)",
    "init_from": "warm start",
    "sharding": "sharding (one process, unsharded tables)",
    "sharding_types": "sharding (one process, unsharded tables)",
}


def check_retrieval_train_config(cfg: RecpipeConfig) -> None:
    """Refuse ``train:`` options the retrieval trainer would ignore.

    Raises:
        ValueError: naming each set option and what it asks for.
    """
    fields = type(cfg.train).model_fields
    bad = [
        n
        for n in UNSUPPORTED_TRAIN_OPTIONS
        if getattr(cfg.train, n) != fields[n].get_default(call_default_factory=True)
    ]
    if bad:
        what = "; ".join(f"train.{n} ({UNSUPPORTED_TRAIN_OPTIONS[n]})" for n in bad)
        raise ValueError(
            f"model {cfg.model.type!r} trains with the retrieval trainer, which has no {what}: remove them"
        )
