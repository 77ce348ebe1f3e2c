"""A table's own initializer (``TableSpec.init``): the built table's weights follow it, in every collection."""

from __future__ import annotations

import math

import pytest
import torch

from recpipe.features.spec import TableInit, TableSpec
from recpipe.models.blocks.embedding import EmbeddingGroup, EmbeddingInit, table_init_fn

ROWS, DIM = 20_000, 16  # 320k weights: a sample std within 1% of the true one


def _table(name: str, init: TableInit | None, **kw) -> TableSpec:
    return TableSpec(name, kw.pop("rows", ROWS), DIM, [name], sequence=False, init=init, **kw)


def _weights(init: TableInit | None, seed: int = 0, **kw) -> torch.Tensor:
    torch.manual_seed(seed)
    group = EmbeddingGroup([_table("t", init, **kw)], ["t"], [], init=EmbeddingInit("uniform", 0.5))
    return group.ebc.embedding_bags["t"].weight.detach()


def test_normal_table_follows_its_mean_and_std() -> None:
    w = _weights(TableInit("normal", mean=0.25, std=0.05))
    assert abs(w.mean().item() - 0.25) < 0.001
    assert abs(w.std().item() - 0.05) / 0.05 < 0.01
    # std unset: 1/sqrt(dim) (dynamicemb's default)
    assert abs(_weights(TableInit("normal")).std().item() - 1 / math.sqrt(DIM)) < 0.01 / math.sqrt(DIM)


def test_constant_table_is_exact() -> None:
    assert torch.equal(_weights(TableInit("constant", value=0.125)), torch.full((ROWS, DIM), 0.125))
    assert torch.equal(_weights(TableInit("constant")), torch.zeros(ROWS, DIM))


def test_uniform_table_stays_in_its_bounds_with_their_defaults() -> None:
    w = _weights(TableInit("uniform", lower=-0.2, upper=0.6))
    assert w.min().item() >= -0.2 and w.max().item() <= 0.6
    assert abs(w.mean().item() - 0.2) < 0.002 and abs(w.std().item() - 0.8 / math.sqrt(12)) < 0.002
    bound = math.sqrt(1 / ROWS)  # unset bounds: TorchRec's default, ±sqrt(1/rows)
    w = _weights(TableInit("uniform", lower=0.0))
    assert w.min().item() >= 0.0 and w.max().item() <= bound and w.max().item() > 0.99 * bound


def test_truncated_normal_is_the_normal_conditioned_on_its_interval() -> None:
    # N(0, 1) on [0, 1]: mean (phi(0) - phi(1)) / Z, variance 1 - phi(1) / Z - mean², Z = Phi(1) - Phi(0)
    phi = [math.exp(-x * x / 2) / math.sqrt(2 * math.pi) for x in (0.0, 1.0)]
    z = 0.5 * math.erf(1 / math.sqrt(2))
    mean = (phi[0] - phi[1]) / z
    std = math.sqrt(1 - phi[1] / z - mean**2)  # 0.4599, 0.2822
    w = _weights(TableInit("truncated_normal", mean=0.0, std=1.0, lower=0.0, upper=1.0))
    assert w.min().item() >= 0.0 and w.max().item() <= 1.0
    assert abs(w.mean().item() - mean) < 0.002 and abs(w.std().item() - std) < 0.002
    # a half-precision table draws in float32 and keeps its dtype
    half = torch.empty(1000, 4, dtype=torch.float16)
    out = table_init_fn(TableInit("truncated_normal", std=0.1, lower=-0.1, upper=0.1), 1000, 4)(half)
    assert out is half and half.dtype == torch.float16 and half.abs().max().item() <= 0.1


def test_tables_without_their_own_init_take_the_models() -> None:
    torch.manual_seed(0)
    group = EmbeddingGroup(
        [_table("a", TableInit("constant", value=1.0), rows=50), _table("b", None, rows=50)],
        ["a", "b"],
        [],
        init=EmbeddingInit("uniform", 0.01),
    )
    assert torch.equal(group.ebc.embedding_bags["a"].weight, torch.ones(50, DIM))
    b = group.ebc.embedding_bags["b"].weight
    assert b.abs().max().item() <= 0.01 and b.std().item() > 0


def test_zch_and_sequence_tables_take_their_init_and_an_evicted_row_is_redrawn_from_it() -> None:
    torch.manual_seed(0)
    tables = [
        TableSpec("z", 64, DIM, ["z"], sequence=False, zch_size=64, init=TableInit("constant", value=0.5)),
        TableSpec("s", 40, DIM, ["s"], sequence=True, init=TableInit("constant", value=-0.5)),
    ]
    group = EmbeddingGroup(tables, ["z"], ["s"])
    zch = group.mc_ec._embedding_module
    assert torch.equal(zch.embeddings["z"].weight, torch.full((64, DIM), 0.5))
    assert torch.equal(group.ec.embeddings["s"].weight, torch.full((40, DIM), -0.5))
    # the sharded zch collection re-draws an evicted row with the table's init_fn (recpipe/train/zch.py)
    (config,) = zch.embedding_configs()
    assert torch.equal(config.init_fn(torch.zeros(3, DIM)), torch.full((3, DIM), 0.5))


def test_bad_bounds_and_modes_are_refused() -> None:
    with pytest.raises(ValueError, match="init mode 'gaussian' is not one of"):
        TableInit("gaussian")
    with pytest.raises(ValueError, match=r"reads \['value'\], not \['std'\]"):
        TableInit("constant", std=0.1)
    with pytest.raises(ValueError, match="needs lower and upper"):
        TableInit("truncated_normal", std=0.1)
    with pytest.raises(ValueError, match="std must be > 0"):
        TableInit("normal", std=0.0)
    # an unset bound's default may cross a given one: refused when the table's rows are known
    with pytest.raises(ValueError, match=r"table 't': init uniform lower 0.5 is not below upper 0.0070"):
        _weights(TableInit("uniform", lower=0.5))
