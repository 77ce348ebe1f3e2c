"""The dense step by hand-computed values on a tiny linear model: gradient clipping (norm 2, norm inf,
value), accumulation of two micro-batches equal to one step on their union, and fp16 loss scaling (the
scaled step equals the unscaled one; a non-finite gradient skips the step and halves the scale)."""

from __future__ import annotations

import pytest
import torch
from torch.amp import GradScaler

from recpipe.config import OptimizerConfig, TrainConfig
from recpipe.train.accumulate import DenseSchedule, ScheduledOptimizer
from recpipe.train.optim import dense_clipping, dense_optimizer


def _linear() -> torch.nn.Linear:
    torch.manual_seed(0)
    return torch.nn.Linear(2, 1, bias=False)


def _stepper(model, schedule, opt="sgd", **train):
    cfg = TrainConfig(dense_optimizer=OptimizerConfig(type=opt, lr=1.0), **train)
    return ScheduledOptimizer(dense_optimizer(model, cfg.dense_optimizer, dense_clipping(cfg)), schedule)


@pytest.mark.parametrize(
    ("train", "want"),
    [
        ({"grad_clip_norm": 1.0}, [-0.6, -0.8]),  # gradient (3, 4): 2-norm 5 → (0.6, 0.8)
        ({"grad_clip_norm": 2.0, "grad_clip_norm_type": float("inf")}, [-1.5, -2.0]),  # max-norm 4 → × 1/2
        ({"grad_clip_value": 3.5}, [-3.0, -3.5]),  # each element within ±3.5
        ({}, [-3.0, -4.0]),
    ],
)
def test_dense_gradients_are_clipped_before_the_step(train, want):
    model = _linear()
    before = model.weight.detach().clone()
    opt = _stepper(model, DenseSchedule(), **train)
    opt.zero_grad()
    model(torch.tensor([[3.0, 4.0]])).sum().backward()  # d/dw = x = (3, 4)
    opt.step()
    torch.testing.assert_close(model.weight.detach() - before, torch.tensor([want]))


def test_two_micro_batches_step_once_as_one_batch_of_their_union():
    x, y = torch.randn(8, 2, generator=torch.Generator().manual_seed(1)), torch.arange(8.0).unsqueeze(1)

    def loss(model, rows):
        return ((model(x[rows]) - y[rows]) ** 2).mean()

    union = _linear()
    opt = _stepper(union, DenseSchedule(), opt="adam")
    opt.zero_grad()
    loss(union, slice(0, 8)).backward()
    opt.step()

    accumulated, schedule = _linear(), DenseSchedule(accumulation_steps=2)
    opt = _stepper(accumulated, schedule, opt="adam")
    start = accumulated.weight.detach().clone()
    for k, rows in enumerate((slice(0, 4), slice(4, 8))):
        opt.zero_grad()  # the second zero_grad keeps the first half's gradient
        schedule.backward_loss(loss(accumulated, rows)).backward()
        opt.step()
        if k == 0:
            assert torch.equal(accumulated.weight.detach(), start)  # no step after one micro-batch
    torch.testing.assert_close(accumulated.weight.detach(), union.weight.detach())
    assert schedule.micro_steps == 2 and schedule.window_starts()


def test_a_scaled_step_equals_the_unscaled_one_and_an_inf_skips_it():
    plain, scaled = _linear(), _linear()
    schedule = DenseSchedule(scaler=GradScaler("cpu", init_scale=1024.0, growth_interval=1))
    opts = _stepper(plain, DenseSchedule()), _stepper(scaled, schedule)
    x = torch.tensor([[3.0, 4.0]])
    for model, opt, s in ((plain, opts[0], DenseSchedule()), (scaled, opts[1], schedule)):
        opt.zero_grad()
        loss = s.backward_loss(model(x).sum())
        loss.backward()
        opt.step()
    assert float(loss) == pytest.approx(1024.0 * float(scaled(x).sum() + 25.0), rel=1e-5)  # w moved by -x
    torch.testing.assert_close(scaled.weight.detach(), plain.weight.detach())
    assert schedule.scaler.get_scale() == 2048.0  # one clean step of growth_interval 1: × growth_factor

    before = scaled.weight.detach().clone()
    opts[1].zero_grad()
    schedule.backward_loss(scaled(torch.tensor([[float("inf"), 1.0]])).sum()).backward()
    opts[1].step()
    assert torch.equal(scaled.weight.detach(), before)  # skipped
    assert schedule.scaler.get_scale() == 1024.0  # × backoff_factor
    state = schedule.state()
    fresh = DenseSchedule(scaler=GradScaler("cpu"))
    fresh.restore(2, state)
    assert fresh.scaler.get_scale() == 1024.0 and fresh.micro_steps == 2
