"""TorchEasyRec's ``binary_focal_loss`` (a task tower's ``losses``) and ``model_config.variational_dropout``:
the constructs of tzrec/tests/configs/dbmtl_has_sequence_mock_focal_loss.config and
dbmtl_has_sequence_variational_dropout_mock.config on test_tzrec_sequences' DBMTL with DIN encoders, imported,
built and run one training step in-process; and where recpipe refuses them."""

from __future__ import annotations

import pyarrow as pa
import pytest
import torch
from test_tzrec_sequences import DBMTL, FEATURES, MULTITASK_HEAD, _problems, rows
from torch import nn
from tzrec_fixtures import tzrec_dlrm, tzrec_multi_tower

from recpipe.batch import to_batch
from recpipe.features.build import build_feature_spec
from recpipe.features.fg import FeatureGenerator
from recpipe.models.registry import build_model
from recpipe.models.train_model import TrainModel, bce_loss
from recpipe.tzrec import import_tzrec

BCE = "losses { binary_cross_entropy {} }"
FOCAL = "losses { binary_focal_loss { gamma: 1.5 alpha: 0.25 } }"
VD = "variational_dropout { regularization_lambda: 0.1 }\n    dbmtl {"


def _dbmtl(text: str = DBMTL) -> str:
    return MULTITASK_HEAD + FEATURES + text


def test_focal_loss_and_variational_dropout_import_and_train_one_step():
    text = _dbmtl(DBMTL.replace(BCE, FOCAL).replace("    dbmtl {", "    " + VD, 1))
    imported = import_tzrec(text, "dbmtl_has_sequence_focal_vd.config")
    assert "0 refused" in imported.summary
    model_data = imported.data["model"]
    focal = {"type": "focal", "gamma": 1.5, "alpha": 0.25}
    assert [t["loss"] for t in model_data["task_towers"]] == [focal, focal]
    assert model_data["variational_dropout"] == {"regularization_lambda": 0.1}
    spec = build_feature_spec(imported.config)
    torch.manual_seed(0)
    model = build_model(spec, imported.config.model)
    # group all: user_id (8), item_id (8), raw_1 bucketized (8); its two DIN encoders' outputs one feature each
    assert model.dense.feature_dropout["all"].widths == [8, 8, 8]
    assert len(model.dense.din_dropout.widths) == 2
    with torch.no_grad():
        for site in (model.dense.feature_dropout["all"], model.dense.din_dropout):
            site.feature_p.zero_()  # every dropout 0.5: the penalty is 0.1 / 3 · 5 · (1 - 0.5)
    table = rows().append_column("buy", pa.array([0, 0, 1]))
    batch = to_batch(FeatureGenerator(spec)(table), spec.sparse_keys())
    train = TrainModel(model).train()
    loss, logits = train(batch)
    focal_t = torch.tensor([[1.0, 1.5, 0.25]] * 2)
    torch.testing.assert_close(
        loss - bce_loss(logits, batch.labels, focal=focal_t), torch.tensor(0.1 / 3 * 5 * 0.5)
    )
    loss.backward()
    assert model.dense.din_dropout.feature_p.grad.abs().min() > 0
    # served: the eval graph, deterministic
    model.eval()
    assert torch.equal(model(batch.dense, batch.sparse), model(batch.dense, batch.sparse))


def test_a_plain_import_has_neither():
    data = import_tzrec(_dbmtl(), "dbmtl_has_sequence.config").data["model"]
    assert "variational_dropout" not in data and all("loss" not in t for t in data["task_towers"])


def test_torcheasyrecs_defaults_are_recpipes():
    """``binary_focal_loss {}`` and ``variational_dropout {}`` as the shipped configs write them."""
    text = _dbmtl(
        DBMTL.replace(BCE, "losses { binary_focal_loss {} }").replace(
            "    dbmtl {", "    variational_dropout {}\n    dbmtl {", 1
        )
    )
    imported = import_tzrec(text)
    assert imported.data["model"]["task_towers"][0]["loss"] == {"type": "focal", "gamma": 2.0, "alpha": 0.5}
    assert imported.config.model.variational_dropout.regularization_lambda == 0.01


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (BCE, "losses { binary_focal_loss { alpha: 1.0 } }", "alpha 1.0 in (0, 1)"),
        (BCE, BCE + " " + FOCAL, "TorchEasyRec would sum these 2 losses"),
        (
            "    dbmtl {",
            "    variational_dropout { embedding_wise_variational_dropout: true }\n    dbmtl {",
            "takes it as an unused keyword",
        ),
    ],
)
def test_mistakes_are_refused_at_their_line(old, new, expected):
    text = _dbmtl(DBMTL.replace(old, new, 1))
    found = _problems(text)
    line = next(i for i, s in enumerate(text.splitlines(), 1) if new.split("\n")[0].strip()[:30] in s)
    assert len(found) == 1 and expected in found[0] and found[0].startswith(f"{line}:"), found


def test_a_model_without_variational_dropout_or_focal_loss_refuses_them():
    dlrm = tzrec_dlrm(max_buckets=1000).replace("dlrm {", "variational_dropout {}\n    dlrm {", 1)
    found = _problems(dlrm)
    assert len(found) == 1 and "recpipe's dlrm has no variational dropout" in found[0], found
    single = tzrec_multi_tower().replace(
        "multi_tower {", "losses { binary_focal_loss {} }\n    multi_tower {", 1
    )
    found = _problems(single)
    assert len(found) == 1 and "a focal loss is a multi-task model's task tower's" in found[0], found


def test_multi_tower_takes_variational_dropout():
    text = tzrec_multi_tower().replace("multi_tower {", "variational_dropout {}\n    multi_tower {", 1)
    imported = import_tzrec(text)
    model = build_model(build_feature_spec(imported.config), imported.config.model)
    assert set(model.dense.feature_dropout) == {t.group for t in imported.config.model.towers}


JRC = 'num_class: 2 losses { jrc_loss { session_name: "user_id" alpha: 0.25 } }'


def test_a_jrc_task_tower_imports_and_trains_one_step():
    """dbmtl_jrc.config's construct: cvr's tower num_class 2 with jrc_loss over user_id; its logit l1 - l0."""
    from recpipe.models.blocks.multitask import TwoClassLogit
    from recpipe.models.train_model import jrc_session_loss, session_ids

    imported = import_tzrec(_dbmtl(DBMTL.replace(BCE, JRC).replace(JRC, BCE, 1)), "dbmtl_jrc.config")
    towers = imported.data["model"]["task_towers"]
    assert "loss" not in towers[0] and "num_class" not in towers[0]
    assert towers[1]["num_class"] == 2
    assert towers[1]["loss"] == {"type": "jrc", "session": "user_id", "alpha": 0.25}
    spec = build_feature_spec(imported.config)
    torch.manual_seed(0)
    model = build_model(spec, imported.config.model)
    pair = model.dense.head.towers.outputs[1]
    assert isinstance(pair, TwoClassLogit) and isinstance(model.dense.head.towers.outputs[0], nn.Linear)
    table = rows().append_column("buy", pa.array([0, 1, 1]))
    table = table.set_column(0, "user_id", pa.array(["u1", "u1", "u3"]))  # u1's session: a buy and not
    batch = to_batch(FeatureGenerator(spec)(table), spec.sparse_keys())
    seen = []
    hook = pair.pair.register_forward_hook(lambda _m, _i, out: seen.append(out))
    loss, logits = TrainModel(model).train()(batch)
    hook.remove()
    (l01,) = seen
    torch.testing.assert_close(logits[:, 1], (l01[:, 1] - l01[:, 0]).detach())
    # the sessions are user_id's bucket ids (tests/models/test_train_model.py checks the terms' values)
    sessions = session_ids(batch.sparse, "user_id")
    assert sessions[0] == sessions[1] != sessions[2]
    d, buy = logits[:, 1:], batch.labels[:, 1:]
    terms = jrc_session_loss(l01, buy[:, 0], sessions).unsqueeze(1)
    assert terms[:2].min() > 0 and terms[2] == 0
    want = bce_loss(logits[:, 0], batch.labels[:, 0]) + bce_loss(d, buy, jrc=(torch.tensor([0.25]), terms))
    torch.testing.assert_close(loss, want)
    loss.backward()
    grad = pair.pair.weight.grad  # l0 and l1 apart: not the opposite rows BCE on l1 - l0 alone gives
    assert (grad[0] + grad[1]).abs().max() > 1e-5


def test_two_class_softmax_cross_entropy_is_bce_on_the_logit_difference():
    """softmax_cross_entropy with num_class 2: the tower's pair (l0, l1); its CE equals BCE on l1 - l0."""
    imported = import_tzrec(
        _dbmtl(DBMTL.replace(BCE, "num_class: 2 losses { softmax_cross_entropy {} }", 1)),
        "dbmtl_softmax.config",
    )
    towers = imported.data["model"]["task_towers"]
    assert towers[0]["num_class"] == 2 and "loss" not in towers[0]
    spec = build_feature_spec(imported.config)
    model = build_model(spec, imported.config.model)
    batch = to_batch(
        FeatureGenerator(spec)(rows().append_column("buy", pa.array([0, 1, 1]))), spec.sparse_keys()
    )
    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(2))
    pair = model.dense.head.towers.outputs[0]
    ce = torch.nn.functional.cross_entropy(pair.pair(x), batch.labels[:, 0].long())
    torch.testing.assert_close(bce_loss(pair(x).squeeze(1), batch.labels[:, 0]), ce)
    assert torch.allclose(torch.sigmoid(pair(x))[:, 0], torch.softmax(pair.pair(x), 1)[:, 1])


@pytest.mark.parametrize(
    ("new", "expected", "where"),
    [
        ("num_class: 2 " + BCE, "num_class 2 with losses ['binary_cross_entropy']", "num_class"),
        ("num_class: 2", "num_class 2 with losses ['binary_cross_entropy (the default)']", "num_class"),
        ('losses { jrc_loss { session_name: "user_id" } }', "jrc_loss needs num_class 2", "losses"),
        (
            "num_class: 3 losses { softmax_cross_entropy {} }",
            "num_class 3: recpipe's task towers have 1 or 2",
            "",
        ),
        (
            'num_class: 2 losses { jrc_loss { session_name: "user_id" alpha: 1.5 } }',
            "alpha 1.5 must be in",
            "",
        ),
        ("num_class: 2 losses { softmax_cross_entropy { label_smoothing: 0.1 } }", "label_smoothing", ""),
    ],
)
def test_two_class_mistakes_are_refused(new, expected, where):
    found = _problems(_dbmtl(DBMTL.replace(BCE, new, 1)))
    assert len(found) == 1 and expected in found[0], found


def test_a_jrc_session_must_be_an_id_feature_of_the_model():
    imported = import_tzrec(
        _dbmtl(DBMTL.replace(BCE, JRC.replace('"user_id"', '"nobody"'), 1)), "dbmtl_jrc.config"
    )
    with pytest.raises(ValueError, match="the jrc loss's session 'nobody' is not an id feature"):
        build_model(build_feature_spec(imported.config), imported.config.model)


def test_a_single_task_model_refuses_jrc():
    single = tzrec_multi_tower().replace(
        "multi_tower {", 'losses { jrc_loss { session_name: "user_id" } }\n    multi_tower {', 1
    )
    found = _problems(single)
    assert len(found) == 1 and "a jrc loss is a multi-task model's task tower's" in found[0], found
