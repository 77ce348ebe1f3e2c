"""MMoE, PLE and DBMTL heads (TorchEasyRec's tzrec/modules/mmoe.py, extraction_net.py, models/dbmtl.py)."""

from __future__ import annotations

import pytest
import torch

from recpipe.models.blocks.mlp import MlpSpec
from recpipe.models.blocks.multitask import (
    DbmtlHead,
    ExtractionLayer,
    ExtractionSpec,
    MixtureOfExperts,
    MmoeHead,
    PleHead,
    TaskTowers,
    TowerSpec,
)

TOWERS = [TowerSpec("ctr", MlpSpec((16,))), TowerSpec("cvr", MlpSpec((16,)))]


def _grads(loss: torch.Tensor, module: torch.nn.Module) -> float:
    grads = torch.autograd.grad(loss, list(module.parameters()), allow_unused=True, retain_graph=True)
    return sum(float(g.abs().sum()) for g in grads if g is not None)


def test_mmoe_gates_mix_the_experts_per_task():
    """tzrec MMoE: each task's softmax gate weighs the same experts; a one-expert MMoE is that expert."""
    torch.manual_seed(0)
    x = torch.randn(8, 12)
    moe = MixtureOfExperts(12, MlpSpec((6,)), num_experts=3, num_tasks=2)
    a, b = moe(x)
    assert a.shape == b.shape == (8, 6) and not torch.allclose(a, b)
    experts = torch.stack([e(x) for e in moe.experts], dim=1)
    w = torch.softmax(moe.gates[1](x), dim=1)
    torch.testing.assert_close(b, (w.unsqueeze(2) * experts).sum(1))
    single = MixtureOfExperts(12, MlpSpec((6,)), num_experts=1, num_tasks=2, gate=MlpSpec((4,)))
    torch.testing.assert_close(single(x)[0], single.experts[0](x))


def test_mmoe_head_gives_one_logit_per_task():
    head = MmoeHead(12, MlpSpec((8,)), 4, TOWERS)
    out = head(torch.randn(5, 12))
    assert out.shape == (5, 2)


def test_ple_layers_gate_own_and_shared_experts_and_the_last_has_no_shared_gate():
    """tzrec ExtractionNet: a task's gate mixes its experts + the shared ones; the shared gate mixes all
    experts, except in the final layer (final_flag)."""
    layer = ExtractionLayer([10, 10], 10, 2, 1, MlpSpec((6,)), MlpSpec((6,)), final=False)
    assert layer.task_gates[0].out_features == 1 + 2 and layer.shared_gate.out_features == 2 * 1 + 2
    tasks, shared = layer([torch.randn(3, 10)] * 2, torch.randn(3, 10))
    assert [t.shape for t in tasks] == [(3, 6), (3, 6)] and shared.shape == (3, 6)
    last = ExtractionLayer([6, 6], 6, 2, 1, MlpSpec((4,)), MlpSpec((4,)), final=True)
    assert last.shared_gate is None and last(tasks, shared)[1] is None
    spec = ExtractionSpec(2, 1, MlpSpec((8,)), MlpSpec((8,)))
    assert PleHead(10, [spec, spec], TOWERS)(torch.randn(4, 10)).shape == (4, 2)
    with pytest.raises(ValueError, match="output widths must agree"):
        ExtractionLayer([10], 10, 1, 1, MlpSpec((6,)), MlpSpec((5,)), final=True)


def test_dbmtl_buy_tower_reads_the_click_tower_and_not_the_reverse():
    """tzrec DBMTL: relation_tower_names feed an earlier tower's relation output into a later one's
    relation_mlp (buy depends on click); click's logit does not depend on buy's tower."""
    towers = [
        TowerSpec("ctr", MlpSpec((8,)), relation_mlp=MlpSpec((8,))),
        TowerSpec("cvr", MlpSpec((8,)), relation_to=("ctr",), relation_mlp=MlpSpec((8,))),
    ]
    head = DbmtlHead(12, towers, bottom=MlpSpec((16,)))
    x = torch.randn(6, 12)
    out = head(x)
    assert out.shape == (6, 2)
    ctr_tower, cvr_tower = head.towers.mlps[0], head.towers.mlps[1]
    assert _grads(out[:, 1].sum(), ctr_tower) > 0  # buy's logit moves with click's tower
    assert _grads(out[:, 0].sum(), cvr_tower) == 0  # click's logit does not read buy's tower
    assert head.towers.relation_mlps[1].in_features == 8 + 8
    with_moe = DbmtlHead(12, TOWERS, experts=MlpSpec((8,)), num_experts=2)
    assert with_moe(x).shape == (6, 2)


def test_task_towers_refuse_a_relation_to_a_later_or_unknown_tower():
    with pytest.raises(ValueError, match="must name an earlier tower"):
        TaskTowers(
            [4, 4], [TowerSpec("ctr", relation_to=("cvr",), relation_mlp=MlpSpec((4,))), TowerSpec("cvr")]
        )
    with pytest.raises(ValueError, match="needs a relation_mlp"):
        TaskTowers([4, 4], [TowerSpec("ctr"), TowerSpec("cvr", relation_to=("ctr",))])
    with pytest.raises(ValueError, match="distinct"):
        TaskTowers([4, 4], [TowerSpec("ctr"), TowerSpec("ctr")])


@pytest.mark.parametrize("kind", ["mmoe", "ple", "dbmtl"])
def test_heads_export_with_torch_export_and_match_eager(kind):
    """The heads are the dense part of an export: torch.export at any batch size, same logits."""
    torch.manual_seed(1)
    head = {
        "mmoe": lambda: MmoeHead(12, MlpSpec((8,)), 3, TOWERS, gate=MlpSpec((4,))),
        "ple": lambda: PleHead(12, [ExtractionSpec(1, 2, MlpSpec((8,)), MlpSpec((8,)))] * 2, TOWERS),
        "dbmtl": lambda: DbmtlHead(
            12,
            [TowerSpec("ctr", MlpSpec((8,))), TowerSpec("cvr", MlpSpec((8,)), ("ctr",), MlpSpec((8,)))],
            experts=MlpSpec((8,)),
            num_experts=2,
        ),
    }[kind]().eval()
    batch = torch.export.Dim("batch", min=1, max=4096)
    program = torch.export.export(head, (torch.randn(4, 12),), dynamic_shapes=({0: batch},))
    x = torch.randn(33, 12)
    torch.testing.assert_close(program.module()(x), head(x))
