"""Feature outputs as inputs: an input column ``"feature:X"`` (TorchEasyRec's FG_DAG side ``feature``) is feature
X's output, computed by FG from X's own input column before the features that read it, at training and at
serving alike (``fg.json`` records the input as it is, so serving's FG derives it the same way).

X is a raw feature of one value a row. With listed boundaries the derived column holds its bucket id
(``searchsorted(boundaries, x, side="right")``, a missing value X's ``default``'s bucket), an int64 id; without
(a dense raw feature, no normalizer) its value, X's ``default`` where missing, as a float32 (TorchEasyRec's
``value_type: "float"``): a reader taking it as a key reads its shortest round-trip text (``0.5`` → ``"0.5"``,
``2.0`` → ``"2"``). A request or a table carries X's source column only; ``"feature:X"`` is never read from the
data.

Example::

    # raw_6_id: column raw_6, boundaries [0.1, 0.2, 0.3, 0.4]; lookup_5: key "feature:raw_6_id"
    with_feature_outputs(pa.record_batch({"raw_6": [0.25, None]}), outputs_of(spec))
    # → a column "feature:raw_6_id" of [2, 0] (null → default 0.0 → bucket 0)
    # raw_7: column raw_7, dense; lookup_7: key "feature:raw_7" → a float32 column [0.25, 0.0]: keys "0.25", "0"
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from recpipe.config.features import feature_output, feature_output_refusal
from recpipe.features.kinds.registry import feature_kind
from recpipe.features.spec import DenseFeature, FeatureSpec, FeatureSpecError, SparseFeature

# How a reader may take a feature output (one id or number a row): as ids or as a number, not as a history or
# text.
_READABLE = ("id", "float")


def _as_config(target: SparseFeature | DenseFeature) -> dict:
    """X's entry as :func:`feature_output_refusal` reads a config (a dense entry's normalizer: whether its
    transform is not the identity, as fg.json records it)."""
    if isinstance(target, DenseFeature):
        normalized = target.log_offset is not None or (target.mean, target.std) != (0.0, 1.0)
        value_dim = int(target.params.get("value_dim", 1))
        return {"kind": target.kind, "boundaries": None, "value_dim": value_dim, "column": target.column} | (
            {"normalizer": "log(x+C) / zscore"} if normalized else {}
        )
    value_dim = int(target.params.get("value_dim", 1))
    return {
        "kind": target.kind,
        "boundaries": target.boundaries,
        "value_dim": value_dim,
        "column": target.column,
    }


def outputs_of(spec: FeatureSpec) -> dict[str, SparseFeature | DenseFeature]:
    """Every ``"feature:X"`` input column of ``spec`` → X's entry, checked.

    Raises:
        FeatureSpecError: X is no pooled or dense entry, not a raw feature of one value a row (a dense one
            unnormalized), reads a feature output itself, or a reader takes the column as a history or text.
    """
    targets: dict[str, SparseFeature | DenseFeature] = {
        f.name: f for f in spec.sparse if f.sequence is None and f.weights_of is None
    }
    # A vector's dense columns are <name>__<i>, so X names a dense entry of one value a row only.
    targets.update({d.name: d for d in spec.dense if "index" not in d.params and d.name not in targets})
    out: dict[str, SparseFeature | DenseFeature] = {}
    for e in spec.fg_entries():
        for column, (how, _) in feature_kind(e.kind).columns(e).items():
            name = feature_output(column)
            if name is None:
                continue
            target = targets.get(name)
            why = feature_output_refusal(column, None if target is None else _as_config(target))
            if why is None and how not in _READABLE:
                what = "a number" if isinstance(target, DenseFeature) else "a bucket id"
                why = f"input {column!r} is {what}, which feature {e.name!r} cannot read as {how}"
            if why is not None:
                raise FeatureSpecError(f"feature {e.name!r}: {why}")
            out[column] = target  # type: ignore[assignment]
    return out


def with_feature_outputs(
    batch: pa.RecordBatch,
    outputs: dict[str, SparseFeature | DenseFeature],
    source: pa.RecordBatch | None = None,
) -> pa.RecordBatch:
    """``batch`` with a column per feature output (``outputs``: from :func:`outputs_of`), replacing a column of
    that name. Bad values of X's column are X's own bad rows (FG reports them at X), so not again here.

    Args:
        batch (pa.RecordBatch): the rows.
        outputs (dict[str, SparseFeature | DenseFeature]): ``"feature:X"`` → X's entry.
        source (pa.RecordBatch | None): the same rows read by the raw-value contract
            (:func:`recpipe.features.raw.normalize`), X's values taken from there; None: ``batch`` is.
    """
    if not outputs:
        return batch
    source = batch if source is None else source
    names = [n for n in batch.schema.names if n not in outputs]
    arrays = [batch.column(n) for n in names]
    for column, target in outputs.items():
        names.append(column)
        if isinstance(target, DenseFeature):  # X's value as FG computes it (unnormalized: x, or its default)
            x = feature_kind(target.kind).dense(target, source)[0]  # type: ignore[misc]
            arrays.append(pa.array(np.asarray(x, np.float32), pa.float32()))
        else:
            ids = feature_kind(target.kind).sparse(target, source)[0]  # type: ignore[misc]
            arrays.append(pa.array(ids, pa.int64()))
    return pa.RecordBatch.from_arrays(arrays, names=names)
