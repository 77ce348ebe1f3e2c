"""TorchEasyRec's ``rocket_launching`` (general_rank_model.proto, tzrec/models/rocket_launching.py) imports to
recpipe's field by field: ``rocket_launching_criteo``'s constructs (:data:`tzrec_fixtures.ROCKET_MODEL`, two
classes with softmax cross-entropy) as shipped, the losses and class counts TorchEasyRec asserts against
refused at their line, and the imported config trains on generated hashed Criteo rows."""

from __future__ import annotations

import pytest
from test_tzrec_cross_models import trains_on_generated_hashed_criteo
from tzrec_fixtures import ROCKET_LOSSES, ROCKET_MODEL, tzrec_criteo_dag

from recpipe.tzrec import TzrecImportError, import_tzrec

DEEP = (
    'feature_groups { group_name: "deep" '
    + " ".join(f'feature_names: "int_{i}"' for i in range(13))
    + " "
    + " ".join(f'feature_names: "cat_{i}"' for i in range(26))
    + " group_type: DEEP }"
)


def _rocket(model: str = ROCKET_MODEL, losses: str = ROCKET_LOSSES, **kw) -> str:
    return tzrec_criteo_dag(model, DEEP, losses=losses, **kw)


def _refused(text: str) -> list[str]:
    with pytest.raises(TzrecImportError) as err:
        import_tzrec(text)
    return [f"{p.path}: {p.message}" for p in err.value.problems]


def test_rocket_launching_criteo_imports_as_shipped():
    m = import_tzrec(_rocket()).config.model
    assert m.type == "rocket_launching" and m.group == "deep" and m.num_class == 2
    assert m.booster_mlp.hidden_units == [256, 128, 64, 32] and m.light_mlp.hidden_units == [96, 64, 32]
    assert m.share_mlp is None
    assert m.feature_based_distillation and m.feature_distillation_function == "cosine"


def test_share_mlp_the_similarity_and_one_class_with_bce_map():
    model = ROCKET_MODEL.replace(
        "feature_based_distillation: true",
        "share_mlp { hidden_units: [128] } feature_based_distillation: true feature_distillation_function: EUCLID",
    )
    m = import_tzrec(_rocket(model, "losses { binary_cross_entropy {} }")).config.model
    assert m.num_class == 1 and m.share_mlp.hidden_units == [128]
    assert m.feature_distillation_function == "euclid"
    inner = import_tzrec(_rocket(model.replace("EUCLID", "INNER_PRODUCT")))
    assert inner.config.model.feature_distillation_function == "euclid"
    assert any("Euclidean" in n.message for n in inner.notes)


def test_class_counts_and_losses_torcheasyrec_asserts_against_are_refused():
    assert any("num_class 2 with losses ['binary_cross_entropy']" in p for p in _refused(
        _rocket(losses="num_class: 2\n losses { binary_cross_entropy {} }")
    ))  # fmt: skip
    assert any("softmax_cross_entropy needs num_class 2" in p for p in _refused(
        _rocket(losses="losses { softmax_cross_entropy {} }")
    ))  # fmt: skip
    assert any("focal loss" in p for p in _refused(_rocket(losses="losses { binary_focal_loss {} }")))


def test_rocket_launching_criteo_as_shipped_trains_on_generated_hashed_criteo(tmp_path):
    trains_on_generated_hashed_criteo(import_tzrec(_rocket(max_buckets=1000)).data, tmp_path)
