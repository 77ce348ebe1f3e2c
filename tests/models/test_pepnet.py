"""PEPNet's gates against TorchEasyRec's formulas (tzrec/modules/personalized_net.py) written out by hand; its
domain towers (tzrec/models/pepnet.py: a tower per task and domain, each row's loss from its domain's)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from recpipe.batch import to_batch
from recpipe.config import load_config
from recpipe.data.synthetic import generate
from recpipe.features.build import build_feature_spec
from recpipe.features.fg import BadRowError, FeatureGenerator
from recpipe.models.blocks.domains import select_domain_tasks
from recpipe.models.blocks.mlp import MlpSpec
from recpipe.models.blocks.multitask import TowerSpec
from recpipe.models.pepnet.config import PepnetConfig
from recpipe.models.pepnet.dense import EPNet, GateNU, PepnetHead, PPNet
from recpipe.models.registry import build_model
from recpipe.models.train_model import TrainModel

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


# ------------------------------------------------------------------------ domain towers (pepnet_taobao's)
DOMAINS = ROOT / "configs" / "pepnet_domains_taobao_small.yaml"


@pytest.fixture(scope="module")
def taobao(tmp_path_factory) -> pa.Table:
    out = tmp_path_factory.mktemp("taobao")
    generate("taobao", 400, out, seed=5)
    return pq.read_table(out)


def test_domain_head_has_a_tower_per_task_and_domain_at_column_i_d_plus_j():
    torch.manual_seed(4)
    towers = [TowerSpec("ctr", MlpSpec((4,))), TowerSpec("cvr", MlpSpec((4,)))]
    head = PepnetHead([6, 2, 3], towers, True, True, ppnet_hidden_units=[5], domain_num=3)
    assert head.towers.names == ["ctr_0", "ctr_1", "ctr_2", "cvr_0", "cvr_1", "cvr_2"]
    x = torch.randn(4, 11)
    tasks = head.ppnet(head.epnet(x[:, :6], x[:, 6:8]), x[:, 8:])
    out = head(x)
    assert out.shape == (4, 6)
    for i in range(2):  # task i's domain j: tower i*3+j over task i's PPNet output
        for j in range(3):
            k = i * 3 + j
            want = head.towers.outputs[k](head.towers.mlps[k](tasks[i]))
            torch.testing.assert_close(out[:, k : k + 1], want)
    assert not torch.allclose(out[:, 0], out[:, 1])  # each domain its own tower


def test_select_domain_tasks_reads_each_rows_domain_tower():
    logits = torch.arange(12.0).view(2, 6)
    labels = torch.tensor([[1.0, 0.0, 2.0], [0.0, 1.0, 0.0]])
    got, tasks = select_domain_tasks(logits, labels, 3)
    torch.testing.assert_close(got, torch.tensor([[2.0, 5.0], [6.0, 9.0]]))
    torch.testing.assert_close(tasks, torch.tensor([[1.0, 0.0], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="domain label value 3 is outside"):
        select_domain_tasks(logits, torch.tensor([[1.0, 0.0, 3.0], [0.0, 1.0, 0.0]]), 3)


def test_domain_model_trains_on_each_rows_domain_tower_and_serves_every_domain(taobao):
    cfg = load_config(DOMAINS)
    spec = build_feature_spec(cfg)
    assert spec.labels == ["clk", "buy", "occupation"] and spec.task_labels == ["clk", "buy"]
    assert spec.output_columns() == [f"probability_{t}_{j}" for t in ("clk", "buy") for j in range(3)]
    torch.manual_seed(0)
    model = build_model(spec, cfg.model).eval()  # no dropout: predict and the loss see the same logits
    assert model.task_domains == 3
    b = to_batch(FeatureGenerator(spec)(taobao), spec.sparse_keys())
    domain = b.labels[:, 2].long()
    assert set(domain.tolist()) == {0, 1}  # generated Taobao users' occupation
    wide = model.predict(b)
    assert wide.shape == (400, 6)
    loss, logits = TrainModel(model)(b)
    mine = torch.stack([wide[r, [domain[r], 3 + domain[r]]] for r in range(400)])
    torch.testing.assert_close(logits, mine)
    clk, buy = b.labels[:, 0], b.labels[:, 1]
    bce = torch.nn.functional.binary_cross_entropy_with_logits
    # ctr over every row; cvr over the clicked rows (its task space: out weight 0)
    want = bce(mine[:, 0], clk) + bce(mine[clk > 0, 1], buy[clk > 0])
    torch.testing.assert_close(loss, want)


def test_domain_label_outside_its_range_is_a_bad_row_not_clamped(taobao):
    spec = build_feature_spec(load_config(DOMAINS))
    occupation = taobao.column("occupation").to_pylist()
    # -1 and 1.5 are refused by the id feature on the same column first (an id is a non-negative integer)
    domain = r"a domain index, an integer in \[0, 3\)"
    for value, why in ((3, domain), (7, domain), (1.5, "a non-negative integer id"), (-1, "a non-negative")):
        bad = taobao.set_column(
            taobao.schema.get_field_index("occupation"),
            "occupation",
            pa.array(occupation[:7] + [value] + occupation[8:], pa.float64()),
        )
        with pytest.raises(BadRowError, match=rf"row 7, column 'occupation': expected {why}.*got '{value}'"):
            FeatureGenerator(spec)(bad)
        assert FeatureGenerator(spec, on_bad_row="skip")(bad).num_rows == 399


def test_domain_config_is_checked():
    cfg = load_config(DOMAINS)
    with pytest.raises(ValueError, match="task_domain_num counts only with a domain_label"):
        PepnetConfig.model_validate({**cfg.model.model_dump(), "domain_label": None})
    with pytest.raises(ValueError, match="task_domain_num"):
        PepnetConfig.model_validate({**cfg.model.model_dump(), "task_domain_num": 0})
    with pytest.raises(
        ValueError, match=r"label_fields must be the task towers' labels \['clk', 'buy'\] then"
    ):
        cfg.model.check_labels(["occupation", "clk", "buy"])
    with pytest.raises(ValueError, match="is a task tower's label"):
        PepnetConfig.model_validate({**cfg.model.model_dump(), "domain_label": "buy"})
