"""Parity: every backend scores the same held-out rows as the eager model, in batches of 1, 7 and 512.

The rows are the held-out data plus rows built on purpose at the front of the batches: a history of
0 items, of 1 item, of ``max_length`` items (100 for ``click_50_seq``), and a row whose id features
are all missing. A backend passes when ``max |Δlogit| <= tolerance`` and its AUC equals the eager
AUC to 4 decimals (the comparison is evaluation's: :mod:`recpipe.eval.agreement`).

Torch-free, so the RTP server's tests can build the same rows.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from recpipe.eval.agreement import by_task, logit_agreement
from recpipe.export.manifest import ParityReport
from recpipe.features.fg import BadRowError, FeatureGenerator, FGOutput
from recpipe.features.spec import FeatureSpec, sub_value_positions

PARITY_BATCH_SIZES = (1, 7, 512, 512)


@dataclass
class ParitySet:
    """Raw parity rows, their FG output and the batch boundaries every backend uses.

    Args:
        table (pa.Table): raw rows (label included), edge rows first.
        features (FGOutput): FG of ``table`` (labels included).
        bounds (list[tuple[int, int]]): ``[start, stop)`` of each batch.
        history_lengths (list[int]): history lengths the edge rows guarantee (empty without sequences).
        label_names (list[str]): the model's outputs (:meth:`FeatureSpec.output_names`), one per logit column
            (``labels`` has a column each when several).
        domain_num (int): a domain-tower model's domains: FG's labels end in the domain column, and each
            output ``<label>_<j>`` is compared against its task's label.
    """

    table: pa.Table
    features: FGOutput
    bounds: list[tuple[int, int]]
    history_lengths: list[int]
    label_names: list[str] = field(default_factory=lambda: ["label"])
    domain_num: int = 0

    @property
    def labels(self) -> np.ndarray:
        """The labels, a column per output: a domain-tower model's task labels, each repeated per domain."""
        if not self.domain_num:
            return self.features.labels
        return np.repeat(self.features.labels[:, :-1], self.domain_num, axis=1)

    @property
    def batch_sizes(self) -> list[int]:
        return sorted({b - a for a, b in self.bounds})


def _edge_rows(table: pa.Table, spec: FeatureSpec) -> tuple[pa.Table, list[int]]:
    """Copies of the first row with histories of 0, 1 and ``max_length`` items, and one with every feature missing
    (but a label's column)."""
    base = table.slice(0, 1)
    rows: list[pa.Table] = []
    lengths: set[int] = set()
    wanted = [0, 1]
    if spec.sequences:
        wanted.append(max(s.max_length for s in spec.sequences))
    for n in wanted:
        t = base
        for s in spec.sequences:
            nsub = sub_value_positions([spec.feature(k) for k in s.sub_features])[-1] + 1
            t = _set(t, s.column, _history(table, s.column, s.delimiter, s.sub_delimiter, nsub, n))
        rows.append(t)
        if spec.sequences:
            lengths.add(n)
    missing = base
    labels = set(spec.labels)  # a domain label is an id feature's column too: the row keeps its domain
    for f in spec.sparse:
        if (
            f.sequence is None
            and f.boundaries is None
            and f.mapping.default_value is None
            and f.column not in labels
        ):
            missing = _set(missing, f.column, None)
    for s in spec.sequences:
        missing = _set(missing, s.column, None)
    for d in spec.dense:
        missing = _set(missing, d.column, None)
    rows.append(missing)
    return pa.concat_tables(rows), sorted(lengths) if spec.sequences else []


def _set(t: pa.Table, column: str, value: object) -> pa.Table:
    i = t.schema.get_field_index(column)
    return t.set_column(i, t.schema.field(i), pa.array([value], type=t.schema.field(i).type))


def _history(table: pa.Table, column: str, delimiter: str, sub_delimiter: str, nsub: int, n: int) -> str:
    """A history of exactly ``n`` items, drawn from the data's own histories (cycled), or zeros."""
    items = [
        it
        for text in pc.drop_null(table.column(column).slice(0, 200)).to_pylist()
        for it in text.split(delimiter)
        if it and it.count(sub_delimiter) == nsub - 1
    ]
    if not items:
        items = [sub_delimiter.join(["0"] * nsub)]
    return delimiter.join(items[i % len(items)] for i in range(n))


def build_parity_set(
    data: pa.Table, spec: FeatureSpec, batch_sizes: tuple[int, ...] = PARITY_BATCH_SIZES
) -> ParitySet:
    """Parity rows from held-out ``data``: edge rows in the first batch of each size, held-out rows after.

    Rows are repeated if ``data`` holds fewer than ``sum(batch_sizes)`` rows (at least 1,000 by default).
    """
    if data.num_rows == 0:
        raise ValueError("parity data is empty; export needs held-out rows to check parity")
    missing = [c for c in spec.input_columns() if c not in data.column_names]
    if missing:
        raise ValueError(f"parity data lacks columns {missing}")
    total = sum(batch_sizes)
    data, _ = clean_rows(data.select(spec.input_columns()).combine_chunks(), spec, total)
    edges, lengths = _edge_rows(data, spec)
    plain_needed = total - 2 * edges.num_rows
    reps = -(-plain_needed // data.num_rows)
    plain = pa.concat_tables([data] * reps).slice(0, plain_needed)
    # Batch of 1: the empty history; batch of 7: the other edge rows; first 512: every edge row again.
    first = edges.num_rows - 1
    e = edges.num_rows
    table = pa.concat_tables(
        [edges.slice(0, 1), edges.slice(1, first), plain.slice(0, batch_sizes[1] - first), edges]
        + [plain.slice(batch_sizes[1] - first)]
    ).combine_chunks()
    assert table.num_rows == total and e <= batch_sizes[2]
    bounds, start = [], 0
    for b in batch_sizes:
        bounds.append((start, start + b))
        start += b
    features = FeatureGenerator(spec, on_bad_row="error", with_labels=True)(table, file="<parity rows>")
    return ParitySet(table, features, bounds, lengths, spec.output_names(), spec.domain_num)


def clean_rows(data: pa.Table, spec: FeatureSpec, wanted: int, chunk: int = 256) -> tuple[pa.Table, int]:
    """The first ``wanted`` rows of ``data`` that FG accepts, and how many bad rows were passed over.

    Parity compares models, not data quality: a row FG rejects (say ``I2 = -3`` under ``log(x+3)``) is
    left out rather than failing the export.
    """
    fg = FeatureGenerator(spec, on_bad_row="error", with_labels=True)
    kept: list[pa.Table] = []
    have = dropped = 0
    for start in range(0, data.num_rows, chunk):
        part = data.slice(start, chunk)
        while part.num_rows:
            try:
                fg(part)
                break
            except BadRowError as err:
                part = pa.concat_tables([part.slice(0, err.row), part.slice(err.row + 1)])
                dropped += 1
        kept.append(part)
        have += part.num_rows
        if have >= wanted:
            break
    if not have:
        raise ValueError(f"none of the {data.num_rows} parity rows passes FG")
    return pa.concat_tables(kept).combine_chunks(), dropped


def compare(
    eager: np.ndarray,
    backend: np.ndarray,
    labels: np.ndarray,
    tolerance: float,
    parity: ParitySet,
    seconds: float,
) -> ParityReport:
    """The :class:`ParityReport` of ``backend`` logits against ``eager`` logits: ``(N,)``, or ``(N, T)``
    for a multi-task model (then every task is compared, and the top-level AUCs are the first task's); the
    numbers are evaluation's (:func:`recpipe.eval.agreement.logit_agreement`)."""
    agreement = logit_agreement(eager, backend, labels, parity.label_names)
    tasks = {
        name: {
            "max_abs_logit_diff": a.max_abs_logit_diff,
            "auc_eager": a.auc_reference,
            "auc_backend": a.auc_backend,
        }
        for name, a in agreement.items()
    }
    first = agreement[parity.label_names[0]]
    diff = max(a.max_abs_logit_diff for a in agreement.values())
    return ParityReport(
        rows=int(by_task(eager).shape[0]),
        batch_sizes=parity.batch_sizes,
        history_lengths=parity.history_lengths,
        max_abs_logit_diff=diff,
        tolerance=tolerance,
        auc_eager=first.auc_reference,
        auc_backend=first.auc_backend,
        passed=diff <= tolerance and all(a.same_auc for a in agreement.values()),
        seconds=round(seconds, 3),
        tasks=tasks if len(tasks) > 1 else {},
    )


def score_batches(
    parity: ParitySet, fn: Callable[[FGOutput, pa.Table], np.ndarray]
) -> tuple[np.ndarray, float]:
    """Run ``fn(features_slice, raw_slice) -> logits`` over every parity batch; ``(logits, seconds)``."""
    t0 = time.perf_counter()
    out = []
    for a, b in parity.bounds:
        logits = np.asarray(fn(parity.features.slice(a, b), parity.table.slice(a, b - a)), np.float64)
        if logits.ndim == 2 and logits.shape[1] == 1:
            logits = logits[:, 0]
        if logits.ndim == 0 or logits.shape[0] != b - a:
            raise ValueError(f"a batch of {b - a} rows returned logits of shape {logits.shape}")
        out.append(logits)
    return np.concatenate(out), time.perf_counter() - t0
