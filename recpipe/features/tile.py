"""One user × N candidates: a request's shared columns (the *context*: a user's features and history) sent once,
FG'd once and broadcast across the candidate rows (TorchEasyRec's INPUT_TILE).

The FG output equals that of the N full rows (the context's columns repeated in every row): FG is row-wise, so a
key whose input columns are all the context's is the same in every row; it is computed on the one context row
and tiled. A key that also reads a candidate column (a cross of user and item, a lookup of the item in a user's
map) is computed on the candidates with the context columns it reads repeated (``pa.Table.take`` of the parsed
context row: no text parsed again). Neither side computes what the other gives: the context row only the keys
reading a context column, the candidates every key but the context-only ones. :meth:`TiledFG.split` keeps the two
apart (:class:`ContextFG`), for a reader that takes the context's keys once (the shared-history program,
:mod:`recpipe.export.shared`, reads the history from the context row, never tiled).

The context is refused, naming why, when it is probably a mistake: not a JSON object, a column that is no input
column of the model, a column also in the rows, more than one value for a column (a list, or the same key twice).

Example::

    tiled = TiledFG(FeatureGenerator(spec, with_labels=False))
    context = context_table('{"user_id": 7, "click_50_seq": "3\\x1d9"}', spec, ["adgroup_id", "price"])
    tiled(context, candidates)   # FGOutput of len(candidates) rows, == FG of the full rows
    tiled.split(context, candidates).one   # the context row's keys, once
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from recpipe.config.features import feature_output
from recpipe.data.types import DataError
from recpipe.features.fg import FeatureGenerator, FGOutput
from recpipe.features.kinds.registry import feature_kind
from recpipe.features.outputs import outputs_of
from recpipe.features.raw import column_kinds, to_arrow
from recpipe.features.spec import FeatureSpec

WHERE = "params.context"


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for k, v in pairs:
        if k in seen:
            raise DataError(f"{WHERE}: column {k!r} is given twice; the context holds one value per column")
        seen[k] = v
    return seen


def parse_context(context: str | Mapping[str, Any], histories: Collection[str] = ()) -> dict[str, Any]:
    """The context as a dict of column → one value (JSON object text, or a mapping already); a column of
    ``histories`` may hold its items as a list (:func:`recpipe.features.raw.history_text`).

    Raises:
        DataError: not JSON, not an object, a column given twice, or a list/object value elsewhere.
    """
    if isinstance(context, str):
        try:
            context = json.loads(context, object_pairs_hook=_no_duplicates)
        except json.JSONDecodeError as err:
            raise DataError(f"{WHERE}: not JSON ({err})") from None
    if not isinstance(context, Mapping):
        raise DataError(
            f"{WHERE}: expected a JSON object of column → value (the columns shared by every row), "
            f"got {type(context).__name__}"
        )
    for k, v in context.items():
        if isinstance(v, (list, tuple)) and k in histories:
            continue
        if isinstance(v, (list, tuple, dict, Mapping)):
            raise DataError(
                f"{WHERE}: column {k!r} holds {type(v).__name__} {str(v)[:60]!r}; the context holds one value "
                f"per column (a multi-value id as its text, values joined by \\x1d; only a history may be a list "
                f"of its items); per-row values go in the rows"
            )
    return dict(context)


def context_table(
    context: str | Mapping[str, Any], spec: FeatureSpec, row_columns: Sequence[str]
) -> pa.Table:
    """The context as a one-row Arrow table, checked against the model's input columns and the rows' columns.

    Args:
        context (str | Mapping): JSON object text or a mapping of column → value.
        spec (FeatureSpec): the model's features.
        row_columns (Sequence[str]): the candidate rows' columns.

    Raises:
        DataError: see :func:`parse_context`; a column that is no input column of the model; a column that is
            in the rows too (which one would win is a guess).
    """
    ctx = parse_context(context, {s.column for s in spec.sequences})
    known = column_kinds(spec, with_labels=False)
    unknown = [c for c in ctx if c not in known]
    if unknown:
        raise DataError(
            f"{WHERE}: {unknown} {'is no' if len(unknown) == 1 else 'are no'} input column of the model; "
            f"expected some of {list(known)[:10]}"
        )
    both = [c for c in ctx if c in set(row_columns)]
    if both:
        raise DataError(f"{WHERE}: {both} also in the rows; a column is either shared (context) or per row")
    return to_arrow([ctx]) if ctx else pa.table({})


class TiledFG:
    """FG of one context row × N candidate rows, the context-only keys computed once.

    Args:
        fg (FeatureGenerator): the serving FG (``with_labels=False``).
    """

    def __init__(self, fg: FeatureGenerator) -> None:
        self.fg = fg
        spec = fg.spec
        derived = outputs_of(spec)
        reads: dict[
            str, set[str]
        ] = {}  # fg entry → the request columns it reads (a feature output: its source's)
        for e in spec.fg_entries():
            cols: set[str] = set()
            for column in feature_kind(e.kind).columns(e):
                if feature_output(column) is None:
                    cols.add(column)
                else:
                    target = derived[column]
                    cols |= {
                        c for c in feature_kind(target.kind).columns(target) if feature_output(c) is None
                    }
            reads[e.name] = cols
        self._sparse_reads = []
        for f in spec.sparse:
            owner = f.sequence or f.weights_of or f.name  # a history's items and a weights key: their entry's
            self._sparse_reads.append(reads[owner])
        self._dense_reads = [reads[d.name] for d in spec.dense]
        # Histories a sequence group reads item by item are checked against each other: FG them together.
        keys = spec.sparse_keys()
        self._together = [(keys.index(a), keys.index(b)) for _, a, b in fg._aligned]
        self._keys = keys
        self._dense_names = spec.dense_names()

    def __call__(self, context: pa.Table, rows: pa.Table) -> FGOutput:
        """FG output of ``rows`` each with the one-row ``context``'s columns (no column in both)."""
        return self.split(context, rows).tiled()

    def split(self, context: pa.Table, rows: pa.Table) -> ContextFG:
        """FG of ``rows`` each with the one-row ``context``'s columns, kept apart: the context-only keys FG'd on
        the context row alone (not computed on the rows), the others on the rows (no column in both)."""
        shared = set(context.column_names)
        n = rows.num_rows
        once_sparse = [bool(r) and r <= shared for r in self._sparse_reads]
        for a, b in self._together:
            once_sparse[a] = once_sparse[b] = once_sparse[a] and once_sparse[b]
        once_dense = [bool(r) and r <= shared for r in self._dense_reads]
        # The context columns a per-row key reads, repeated per candidate (already parsed: a take, no JSON).
        needed = set().union(
            *(r for r, once in zip(self._sparse_reads, once_sparse) if not once),
            *(r for r, once in zip(self._dense_reads, once_dense) if not once),
        )
        full = rows
        idx = pa.array(np.zeros(n, np.int64))
        for c in context.column_names:
            if c in needed:
                full = full.append_column(c, context.column(c).take(idx))
        if not (any(once_sparse) or any(once_dense)):
            return ContextFG(None, self.fg(full), once_sparse, once_dense)
        # The context row: every key reading a context column (first, so a bad context value is named as the
        # context's), not the candidates' own keys (their columns are absent there: all missing).
        own = frozenset(
            [k for k, r in zip(self._keys, self._sparse_reads) if not r & shared]
            + [d for d, r in zip(self._dense_names, self._dense_reads) if not r & shared]
        )
        one = self.fg(context, file=WHERE, skip=own)
        # The rows: every key but the context-only ones (their columns are absent there too).
        once = frozenset(
            [k for k, o in zip(self._keys, once_sparse) if o]
            + [d for d, o in zip(self._dense_names, once_dense) if o]
        )
        return ContextFG(one, self.fg(full, skip=once), once_sparse, once_dense)


@dataclass
class ContextFG:
    """FG of one context × N candidate rows before the context's keys are broadcast (:meth:`TiledFG.split`).

    Args:
        one (FGOutput | None): the context row's FG of the keys reading a context column (the candidates' own
            keys not computed: empty), or None when no key reads only context columns.
        rows (FGOutput): the candidates' FG, each key marked ``once`` left empty (ids) / zero (dense).
        once_sparse (list[bool]): per sparse key (``spec.sparse_keys()`` order), whether it reads only context
            columns: the same for every row, ``one``'s.
        once_dense (list[bool]): the same per dense column.
    """

    one: FGOutput | None
    rows: FGOutput
    once_sparse: list[bool]
    once_dense: list[bool]

    @property
    def num_rows(self) -> int:
        return self.rows.num_rows

    def tiled_dense(self) -> np.ndarray:
        """``(N, dense)``: the rows' dense columns with the context's where it has them."""
        dense = self.rows.dense
        if self.one is None or not any(self.once_dense) or not len(dense):
            return dense
        dense = dense.copy()
        cols = np.flatnonzero(self.once_dense)
        dense[:, cols] = self.one.dense[0, cols]
        return dense

    def tiled(self) -> FGOutput:
        """The FG output of the full rows: every context key's output repeated for each candidate."""
        one, per_row, n = self.one, self.rows, self.rows.num_rows
        if one is None or n == 0:
            return per_row
        values, lengths = list(per_row.values), list(per_row.lengths)
        for k, once in enumerate(self.once_sparse):
            if once:
                values[k] = np.tile(one.values[k], n)
                lengths[k] = np.full(n, one.lengths[k][0], one.lengths[k].dtype)
        return FGOutput(self.tiled_dense(), values, lengths, per_row.labels, per_row.weights, per_row.groups)
