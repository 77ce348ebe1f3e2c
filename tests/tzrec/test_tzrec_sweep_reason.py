"""scripts/tzrec_sweep.py's reasons column: each problem as one clean phrase, never cut mid-word."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "tzrec_sweep", Path(__file__).resolve().parents[2] / "scripts" / "tzrec_sweep.py"
)
sweep = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(sweep)


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        # the first clause, not "model 'dssm' is not supported; supported" (split at every ':' before)
        ("model 'dssm' is not supported; supported: multi_tower_din, dlrm", "model 'dssm' is not supported"),
        # a short clause is whole, its ':' included
        (
            "num_class 2: recpipe trains binary CTR models (num_class: 1)",
            "num_class 2: recpipe trains binary CTR models (num_class: 1)",
        ),
        # the phrase before the list of fields read (one reason for MetricConfig's and TrainMetricConfig's)
        (
            "unsupported field 'recall_at_k': MetricConfig fields the importer reads are auc, grouped_auc",
            "unsupported field 'recall_at_k'",
        ),
        (
            "unsupported field 'negative_sampler': DataConfig fields the importer reads are batch_size, dataset_type, "
            "fg_encoded, fg_encoded_multival_sep, label_fields, num_workers",
            "unsupported field 'negative_sampler'",
        ),
        # was cut at 90 characters, mid-word: "(TorchEasyRec's proto has no def"
        (
            "sequence_id_feature 'item_video_id' needs sequence_length (TorchEasyRec's proto has no default)",
            "sequence_id_feature 'item_video_id' needs sequence_length (TorchEasyRec's proto has no default)",
        ),
    ],
)
def test_a_reason_is_the_problems_first_clause(message: str, reason: str) -> None:
    assert sweep.reason(message) == reason


def test_a_reason_past_the_limit_ends_at_a_word_with_an_ellipsis() -> None:
    words = "an id gets a row once its sightings counted across many steps reach the threshold"
    got = sweep.reason(words, limit=40)
    assert got == "an id gets a row once its sightings …" and words.startswith(got[:-2])
