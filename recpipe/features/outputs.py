"""Feature outputs as inputs: an input column ``"feature:X"`` (TorchEasyRec's FG_DAG side ``feature``) is feature
X's output, computed by FG from X's own input column before the features that read it, at training and at
serving alike (``fg.json`` records the input as it is, so serving's FG derives it the same way).

X is a raw feature with listed boundaries and one value a row: the derived column holds its bucket id
(``searchsorted(boundaries, x, side="right")``, a missing value X's ``default``'s bucket), an int64 id. A
request or a table carries X's source column only; ``"feature:X"`` is never read from the data.

Example::

    # raw_6_id: column raw_6, boundaries [0.1, 0.2, 0.3, 0.4]; lookup_5: key "feature:raw_6_id"
    with_feature_outputs(pa.record_batch({"raw_6": [0.25, None]}), outputs_of(spec))
    # → a column "feature:raw_6_id" of [2, 0] (null → default 0.0 → bucket 0)
"""

from __future__ import annotations

import pyarrow as pa

from recpipe.config.features import feature_output, feature_output_refusal
from recpipe.features.kinds.registry import feature_kind
from recpipe.features.spec import FeatureSpec, FeatureSpecError, SparseFeature

# How a reader may take a feature output (an int64 id a row): as ids or as a number, not as a history or text.
_READABLE = ("id", "float")


def outputs_of(spec: FeatureSpec) -> dict[str, SparseFeature]:
    """Every ``"feature:X"`` input column of ``spec`` → X's entry, checked.

    Raises:
        FeatureSpecError: X is no pooled entry, not a bucketized raw feature of one value a row, reads a feature
            output itself, or a reader takes the column as a history or text.
    """
    pooled = {f.name: f for f in spec.sparse if f.sequence is None and f.weights_of is None}
    out: dict[str, SparseFeature] = {}
    for e in spec.fg_entries():
        for column, (how, _) in feature_kind(e.kind).columns(e).items():
            name = feature_output(column)
            if name is None:
                continue
            target = pooled.get(name)
            as_dict = None
            if target is not None:
                value_dim = int(target.params.get("value_dim", 1))
                as_dict = {"kind": target.kind, "boundaries": target.boundaries, "value_dim": value_dim}
                as_dict["column"] = target.column
            why = feature_output_refusal(column, as_dict)
            if why is None and how not in _READABLE:
                why = f"input {column!r} is a bucket id, which feature {e.name!r} cannot read as {how}"
            if why is not None:
                raise FeatureSpecError(f"feature {e.name!r}: {why}")
            out[column] = target  # type: ignore[assignment]
    return out


def with_feature_outputs(
    batch: pa.RecordBatch, outputs: dict[str, SparseFeature], source: pa.RecordBatch | None = None
) -> pa.RecordBatch:
    """``batch`` with a column per feature output (``outputs``: from :func:`outputs_of`), replacing a column of
    that name. Bad values of X's column are X's own bad rows (FG reports them at X), so not again here.

    Args:
        batch (pa.RecordBatch): the rows.
        outputs (dict[str, SparseFeature]): ``"feature:X"`` → X's entry.
        source (pa.RecordBatch | None): the same rows read by the raw-value contract
            (:func:`recpipe.features.raw.normalize`), X's values taken from there; None: ``batch`` is.
    """
    if not outputs:
        return batch
    source = batch if source is None else source
    names = [n for n in batch.schema.names if n not in outputs]
    arrays = [batch.column(n) for n in names]
    for column, target in outputs.items():
        ids = feature_kind(target.kind).sparse(target, source)[0]  # type: ignore[misc]
        names.append(column)
        arrays.append(pa.array(ids, pa.int64()))
    return pa.RecordBatch.from_arrays(arrays, names=names)
