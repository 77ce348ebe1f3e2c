"""The fused table optimizer's options by hand-computed values on a one-table EBC sharded on one rank:
Adagrad's initial accumulator (``initial_accumulator_value``) and FBGEMM's per-element gradient clipping
(``gradient_clipping`` / ``max_gradient``)."""

from __future__ import annotations

import math

import pytest
import torch
from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor

from recpipe.config import OptimizerConfig
from recpipe.train.dist import init_distributed, plan_sharding, shard_model, shutdown
from recpipe.train.optim import apply_sparse_optimizer, set_initial_accumulator

GRAD = [3.0, 0.5, -2.0, 0.1]  # d loss / d row 1 of the table: the pooled embedding times these
LR = 0.1


class _Lookup(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        table = EmbeddingBagConfig(name="t", embedding_dim=4, num_embeddings=4, feature_names=["f"])
        self.ebc = EmbeddingBagCollection(tables=[table])

    def forward(self, kjt: KeyedJaggedTensor) -> torch.Tensor:
        return (self.ebc(kjt)["f"] * torch.tensor([GRAD])).sum()


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.local_shards()[0].tensor


def _one_step(cfg: OptimizerConfig) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Row 1 before and after one step on id 1, and the accumulator after it (None: SGD has none)."""
    env = init_distributed()
    try:
        torch.manual_seed(0)
        model = _Lookup()
        apply_sparse_optimizer(model, cfg, "cpu")
        plan, _ = plan_sharding(model, env, {})
        dmp = shard_model(model, env, plan)
        if cfg.initial_accumulator_value:
            assert set_initial_accumulator(dmp.fused_optimizer, cfg.initial_accumulator_value) == 1
        weight = _local(dmp.state_dict()["ebc.embedding_bags.t.weight"])
        before = weight[1].clone()
        kjt = KeyedJaggedTensor.from_lengths_sync(
            ["f"], torch.tensor([1]), torch.tensor([1], dtype=torch.int32)
        )
        dmp(kjt).backward()
        (state,) = dmp.fused_optimizer.state.values()
        acc = state.get("t.momentum1")
        return before, weight[1].clone(), None if acc is None else _local(acc)[1].clone()
    finally:
        shutdown(env)


@pytest.mark.parametrize("v", [0.0, 0.1])
def test_adagrads_first_update_is_lr_g_over_sqrt_v_plus_g2(v):
    before, after, acc = _one_step(OptimizerConfig(type="adagrad", lr=LR, initial_accumulator_value=v))
    want = torch.tensor([-LR * g / (math.sqrt(v + g * g) + 1e-8) for g in GRAD])
    torch.testing.assert_close(after - before, want, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(acc, torch.tensor([v + g * g for g in GRAD]))


def test_sparse_gradient_clipping_clamps_each_element_before_the_update():
    cfg = OptimizerConfig(
        type="adagrad", lr=LR, initial_accumulator_value=0.1, gradient_clipping=True, max_gradient=1.0
    )
    before, after, acc = _one_step(cfg)
    clipped = [max(-1.0, min(1.0, g)) for g in GRAD]  # 3 → 1, -2 → -1; 0.5 and 0.1 kept
    want = torch.tensor([-LR * g / (math.sqrt(0.1 + g * g) + 1e-8) for g in clipped])
    torch.testing.assert_close(after - before, want, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(acc, torch.tensor([0.1 + g * g for g in clipped]))


def test_sgd_gradient_clipping_too():
    before, after, _ = _one_step(OptimizerConfig(type="sgd", lr=LR, gradient_clipping=True, max_gradient=0.4))
    torch.testing.assert_close(after - before, torch.tensor([-0.04, -0.04, 0.04, -0.01]))
