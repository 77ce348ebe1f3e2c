"""TorchEasyRec's ``binary_focal_loss`` (a task tower's ``losses``) and ``model_config.variational_dropout``:
the constructs of tzrec/tests/configs/dbmtl_has_sequence_mock_focal_loss.config and
dbmtl_has_sequence_variational_dropout_mock.config on test_tzrec_sequences' DBMTL with DIN encoders, imported,
built and run one training step in-process; and where recpipe refuses them."""

from __future__ import annotations

import pyarrow as pa
import pytest
import torch
from test_tzrec_sequences import DBMTL, FEATURES, MULTITASK_HEAD, _problems, rows
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
