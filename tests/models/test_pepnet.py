"""PEPNet's gates against TorchEasyRec's formulas (tzrec/modules/personalized_net.py) written out by hand."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from recpipe.config import load_config
from recpipe.features.build import build_feature_spec
from recpipe.models.blocks.mlp import MlpSpec
from recpipe.models.blocks.multitask import TowerSpec
from recpipe.models.pepnet.dense import EPNet, GateNU, PepnetHead, PPNet
from recpipe.models.registry import build_model

ROOT = Path(__file__).resolve().parents[2]


def _gate(g: GateNU, x: torch.Tensor) -> torch.Tensor:
    h = torch.clamp(x @ g.hidden.weight.T + g.hidden.bias, min=0.0)
    return g.gamma / (1.0 + torch.exp(-(h @ g.out.weight.T + g.out.bias)))


def test_gate_nu_is_gamma_times_sigmoid_of_a_relu_mlp():
    torch.manual_seed(0)
    g, x = GateNU(5, 3, 4, gamma=2.0), torch.randn(6, 5)
    torch.testing.assert_close(g(x), _gate(g, x))
    assert ((g(x) > 0) & (g(x) < 2)).all()


def test_epnet_scales_the_main_embeddings_by_a_gate_of_domain_and_main():
    torch.manual_seed(1)
    net, main, domain = EPNet(4, 2, 3), torch.randn(3, 4, requires_grad=True), torch.randn(3, 2)
    out = net(main, domain)
    torch.testing.assert_close(out, _gate(net.gate, torch.cat([domain, main], 1)) * main)
    # the gate reads main detached: main's gradient is the gate itself
    out.sum().backward()
    torch.testing.assert_close(main.grad, _gate(net.gate, torch.cat([domain, main.detach()], 1)))


def test_ppnet_gates_each_layer_of_each_task():
    torch.manual_seed(2)
    net, main, uia = PPNet(4, 2, num_tasks=2, hidden_units=[3, 2]), torch.randn(5, 4), torch.randn(5, 2)
    outs = net(main, uia)
    gate_in = torch.cat([uia, main], 1)
    for t, layers in enumerate(net.tasks):
        h = main
        for layer in layers:
            lin = layer["linear"]
            h = torch.relu(h @ lin.weight.T + lin.bias) * _gate(layer["gate"], gate_in)
        torch.testing.assert_close(outs[t], h)
    assert [o.shape for o in outs] == [(5, 2), (5, 2)]


def test_head_splits_main_domain_and_uia_and_ends_in_task_logits():
    torch.manual_seed(3)
    towers = [TowerSpec("ctr", MlpSpec((4,))), TowerSpec("cvr", MlpSpec((4,)))]
    head = PepnetHead([6, 2, 3], towers, True, True, ppnet_hidden_units=[5])
    x = torch.randn(4, 11)
    main, domain, uia = x[:, :6], x[:, 6:8], x[:, 8:]
    tasks = head.ppnet(head.epnet(main, domain), uia)
    torch.testing.assert_close(head(x), head.towers(tasks))
    assert head(x).shape == (4, 2)
    with pytest.raises(ValueError, match="3 group widths for domain=True, uia=False"):
        PepnetHead([6, 2, 3], towers, True, False)


def test_built_from_the_small_config():
    cfg = load_config(ROOT / "configs" / "pepnet_taobao_small.yaml")
    model = build_model(build_feature_spec(cfg), cfg.model)
    assert model.dense.head.widths == [13 * 16, 2 * 16, 3 * 16] and model.task_names == ["ctr", "cvr"]
    bad = cfg.model.model_copy(update={"towers": list(reversed(cfg.model.towers))})
    with pytest.raises(ValueError, match=r"towers must be the groups \['all', 'domain', 'uia'\]"):
        bad.check_groups(cfg.feature_groups)
