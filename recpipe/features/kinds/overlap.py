"""Kind ``overlap`` (TorchEasyRec's ``overlap_feature``): how the terms of a ``query`` column and a ``title``
column overlap, one number per row (a dense column, or with ``boundaries`` a bucket id).

Terms are a list column's items or text split by ``separator`` (default ``\\x1d``). The methods (feature.md,
OverlapFeature), with recpipe's reading of what the table leaves open:

- ``query_common_ratio`` / ``title_common_ratio``: the share of the query's (title's) terms that occur in the
  other, each occurrence counted;
- ``is_equal``: 1 when both hold the same terms in the same order;
- ``index_of``: the first term position (0-based) where the whole query occurs, terms contiguous and in
  order, in the title, else -1; ``is_contain``: 1 when it occurs;
- ``proximity_min_cover``: the length in terms of the shortest span of the title holding every distinct
  query term, 0 when one is missing;
- ``proximity_min_dist`` / ``max_dist`` / ``avg_dist``: over the pairs of distinct query terms both in the
  title, the least / greatest / mean distance in positions between their closest occurrences; ``len(title)
  + 1`` when fewer than two query terms occur there.

A missing (null, ``""``, empty) query or title gives the method's no-overlap value (0, ``index_of`` -1, the
distances ``len(title) + 1``): TorchEasyRec's overlap_feature has no default_value. Vectorized over the
batch: terms are coded jointly and compared by sorted codes; the loops run over term positions of the
query (a handful), never over rows.

Example::

    # query "abc\\x1defg", title "abc\\x1dqwe\\x1drty\\x1duio": query_common_ratio 0.5, title_common_ratio 0.25
    KIND.dense(spec.dense[0], batch)
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from recpipe.config.features import OverlapFeatureConfig
from recpipe.features.kinds import values as vals
from recpipe.features.kinds.base import ANY, ColumnKind, DenseOut, FeatureKind, FitNeeds, SparseOut, SpecParts
from recpipe.features.spec import DenseFeature, SparseFeature


def build(f: OverlapFeatureConfig, parts: SpecParts) -> None:
    vals.build_value(f, parts, "overlap", f.query, [f.title], {"method": f.method, "separator": f.separator})


def needs(f: OverlapFeatureConfig) -> FitNeeds:
    return vals.value_needs(f)


class _Terms:
    """The coded terms of one side: ``codes`` at sorted ``rows``, with ``count``/``start`` per row."""

    def __init__(self, rows: np.ndarray, codes: np.ndarray, n: int) -> None:
        self.rows, self.codes = rows, codes
        self.count = np.bincount(rows, minlength=n)[:n]
        self.start = np.cumsum(self.count) - self.count
        self.pos = np.arange(rows.size) - self.start[rows]


def overlap(e: SparseFeature | DenseFeature, batch: pa.RecordBatch) -> np.ndarray:
    """The method's value for every row of ``batch``."""
    n = batch.num_rows
    sep = e.params["separator"]
    qrows, qitems = vals.multi_values(batch.column(e.column), sep, e.column)
    trows, titems = vals.multi_values(batch.column(e.inputs[0]), sep, e.inputs[0])
    qcodes, tcodes = vals.joint_codes([vals.as_text(qitems), vals.as_text(titems)])
    q, t = _Terms(qrows, qcodes, n), _Terms(trows, tcodes, n)
    width = int(max(qcodes.max(initial=0), tcodes.max(initial=0))) + 1
    method = e.params["method"]
    both = (q.count > 0) & (t.count > 0)
    if method in ("query_common_ratio", "title_common_ratio"):
        a, b = (q, t) if method == "query_common_ratio" else (t, q)
        hit = vals.found_in(b.rows * width + b.codes, a.rows * width + a.codes)
        common = np.bincount(a.rows[hit], minlength=n)[:n]
        return np.where(both, common / np.maximum(a.count, 1), 0.0)
    if method == "is_equal":
        return (both & (q.count == t.count) & (_index_of(q, t, n) == 0)).astype(np.float64)
    if method in ("index_of", "is_contain"):
        at = np.where(both, _index_of(q, t, n), -1)
        return (at >= 0).astype(np.float64) if method == "is_contain" else at.astype(np.float64)
    if method == "proximity_min_cover":
        return np.where(both, _min_cover(q, t, n, width), 0.0)
    return _distances(q, t, n, width, method.removeprefix("proximity_").removesuffix("_dist"))


def _index_of(q: _Terms, t: _Terms, n: int) -> np.ndarray:
    """The first title position where the whole query occurs (terms contiguous, in order), else -1."""
    m = q.count
    slots = np.where((m > 0) & (m <= t.count), t.count - m + 1, 0)
    crow = np.repeat(np.arange(n), slots)
    p = np.arange(crow.size) - np.repeat(np.cumsum(slots) - slots, slots)
    ok = np.ones(crow.size, bool)
    for k in range(int(m.max(initial=0))):
        active = np.flatnonzero(m[crow] > k)
        if not active.size:
            break
        r = crow[active]
        ok[active] &= t.codes[t.start[r] + p[active] + k] == q.codes[q.start[r] + k]
    out = np.full(n, -1, np.int64)
    found = np.flatnonzero(ok)
    rows, first = np.unique(crow[found], return_index=True)
    out[rows] = p[found[first]]
    return out


def _term_groups(q: _Terms, width: int) -> tuple[np.ndarray, np.ndarray]:
    """(row, code) of each distinct query term of each row, sorted by row then code."""
    keys = np.unique(q.rows * width + q.codes)
    return keys // width, keys % width


def _occurrences(t: _Terms, group_keys: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """(group, title position) of every title term that is one of the query's terms, sorted by both."""
    g = vals.find_first(group_keys, t.rows * width + t.codes)
    keep = g >= 0
    group, pos = g[keep], t.pos[keep]
    order = np.lexsort((pos, group))
    return group[order], pos[order]


def _min_cover(q: _Terms, t: _Terms, n: int, width: int) -> np.ndarray:
    grow, gcode = _term_groups(q, width)
    gkeys = grow * width + gcode
    occ_g, occ_p = _occurrences(t, gkeys, width)
    terms = np.bincount(grow, minlength=n)[:n]
    present = np.bincount(grow[np.unique(occ_g)], minlength=n)[:n] if occ_g.size else np.zeros(n, np.int64)
    complete = (terms > 0) & (present == terms)
    # For every title position s of a complete row and every term g of the row: g's next occurrence >= s.
    first_g = np.cumsum(terms) - terms
    tpos_rows = np.flatnonzero(complete[t.rows])
    srow, spos = t.rows[tpos_rows], t.pos[tpos_rows]
    per = terms[srow]
    combo_s = np.repeat(np.arange(srow.size), per)
    g = np.repeat(first_g[srow], per) + (np.arange(combo_s.size) - np.repeat(np.cumsum(per) - per, per))
    span = int(t.count.max(initial=0)) + 1
    occ_keys = occ_g * span + occ_p
    at = np.searchsorted(occ_keys, g * span + spos[combo_s])
    hit = at < occ_keys.size
    hit[hit] = occ_g[at[hit]] == g[hit]
    nxt = np.where(hit, occ_p[np.minimum(at, max(occ_keys.size - 1, 0))] if occ_keys.size else 0, np.inf)
    end = np.full(srow.size, -np.inf)
    if combo_s.size:
        np.maximum.at(end, combo_s, nxt)
    width_s = end - spos + 1
    out = np.full(n, np.inf)
    if srow.size:
        np.minimum.at(out, srow, width_s)
    return np.where(complete & np.isfinite(out), out, 0.0)


def _distances(q: _Terms, t: _Terms, n: int, width: int, how: str) -> np.ndarray:
    none = (t.count + 1).astype(np.float64)
    grow, gcode = _term_groups(q, width)
    occ_g, occ_p = _occurrences(t, grow * width + gcode, width)
    if not occ_g.size:
        return none
    # Renumber the groups that occur, per row contiguous.
    used, occ_u = np.unique(occ_g, return_inverse=True)
    urow = grow[used]
    uterms = np.bincount(urow, minlength=n)[:n]
    ufirst = np.cumsum(uterms) - uterms
    span = int(t.count.max(initial=0)) + 2
    okeys = occ_u * span + occ_p
    # Every occurrence of term a against every other term b of its row: b's nearest occurrence.
    orow = urow[occ_u]
    per = uterms[orow]
    o = np.repeat(np.arange(occ_u.size), per)
    b = np.repeat(ufirst[orow], per) + (np.arange(o.size) - np.repeat(np.cumsum(per) - per, per))
    other = b != occ_u[o]
    o, b = o[other], b[other]
    if not o.size:
        return none
    at = np.searchsorted(okeys, b * span + occ_p[o])
    best = np.full(o.size, np.inf)
    for cand in (at, at - 1):
        inside = (cand >= 0) & (cand < okeys.size)
        c = np.clip(cand, 0, okeys.size - 1)
        ok = inside & (occ_u[c] == b)
        best = np.where(ok, np.minimum(best, np.abs(occ_p[c] - occ_p[o])), best)
    a = occ_u[o]
    pair = np.minimum(a, b) * used.size + np.maximum(a, b)
    pairs, inv = np.unique(pair, return_inverse=True)
    dist = np.full(pairs.size, np.inf)
    np.minimum.at(dist, inv.reshape(-1), best)
    prow = urow[pairs // used.size]
    count = np.bincount(prow, minlength=n)[:n]
    if how == "min":
        out = np.full(n, np.inf)
        np.minimum.at(out, prow, dist)
    elif how == "max":
        out = np.full(n, -np.inf)
        np.maximum.at(out, prow, dist)
    else:
        out = np.bincount(prow, weights=dist, minlength=n)[:n] / np.maximum(count, 1)
    return np.where(count > 0, out, none)


def sparse(f: SparseFeature, batch: pa.RecordBatch) -> SparseOut:
    x = overlap(f, batch)
    n = batch.num_rows
    return vals.bucket_out(f, np.arange(n), x, n)


def dense(d: DenseFeature, batch: pa.RecordBatch) -> DenseOut:
    x = overlap(d, batch)
    return vals.dense_out(d, x, np.ones(batch.num_rows, bool), [])


def column(e: SparseFeature | DenseFeature) -> tuple[ColumnKind, str]:
    return "text", ANY


def inputs(e: SparseFeature | DenseFeature) -> dict[str, tuple[ColumnKind, str]]:
    return {e.column: ("text", ANY), e.inputs[0]: ("text", ANY)}


KIND = FeatureKind(
    name="overlap", build=build, column=column, inputs=inputs, needs=needs, sparse=sparse, dense=dense
)
