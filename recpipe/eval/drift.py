"""Drift of an evaluation split (the newest day) against the training window, per FeatureSpec entry.

Every statistic is computed from what FG reads and writes, so training and serving see the same thing:

- **null rate**: share of rows whose raw input column is missing under FG's raw-value contract (null,
  ``""``, NaN: :func:`recpipe.features.raw.normalize`), on each side;
- **new-id rate** (id keys, history sub-features included): share of the eval split's FG ids that the
  training window never produced: for a vocabulary mapping, ids FG mapped to UNK (``mapping.unk_id``: the
  value is not in the vocabulary fitted on training); for hash / mod / identity mappings and zch keys, ids
  (hash buckets, 63-bit keys) that never occurred in the training sample;
- **PSI** (numeric features): of a bucketized raw feature over its FG buckets (its boundaries); of a dense
  column (and a float per history item) over the deciles of the training window's FG values (a monotone
  transform of the raw value, so the same bins as the raw deciles). With ``e_i`` / ``a_i`` the training /
  eval share of bin ``i``, each raised to at least :data:`PSI_EPSILON` so an empty bin has a finite term::

      PSI = sum_i (a_i - e_i) * ln(a_i / e_i)

  (0: the same distribution; by the usual rule of thumb < 0.1 stable, 0.1–0.25 moderate, > 0.25 large);
- **history length** (sequences): mean and p95 of FG's item counts (after ``max_length``), train vs eval.

- **zch evictions** (zero-collision tables): rows of the feature's table evicted during the training run that
  produced the model (``train_result.json``'s ``zch_evictions``, counted by :mod:`recpipe.train.zch` over all
  ranks): ids that lost their row to newer ones. With the new-id rate it is the pressure on the table.

Each side reads at most ``max_rows`` rows (:data:`DRIFT_SAMPLE_ROWS`): the first rows of each of
:data:`SAMPLE_BLOCKS` equal contiguous blocks of the split, so the sample is deterministic and spread over the
whole training window. Everything is numpy over whole columns; there is no loop over rows.

Example::

    report = compute_drift(spec, open_source("runs/x/data/train"), open_source("runs/x/data/eval"))
    report.psi_max, report.top(3)          # 0.31, [("price", 0.31), ("age", 0.12), ("ctr", 0.05)]
    report.metrics()["drift.new_id_rate.adgroup_id"]   # 0.042
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from recpipe.data.sharding import Shard
from recpipe.data.types import Source, SourceBatch
from recpipe.features.fg import FeatureGenerator, FGOutput
from recpipe.features.raw import normalize
from recpipe.features.schema_check import check_schema, required_columns
from recpipe.features.spec import FeatureSpec, SparseFeature

# Rows read from each split at most, and the contiguous blocks a larger split's sample is spread over.
DRIFT_SAMPLE_ROWS = 200_000
SAMPLE_BLOCKS = 64
# The smallest share a PSI bin takes (an empty bin would make its term infinite).
PSI_EPSILON = 1e-4
_DECILES = np.linspace(0.1, 0.9, 9)
ZCH_NOTE = "zch evictions: the training run recorded none (a train_result.json before they were counted)"


@dataclass
class FeatureDrift:
    """One FeatureSpec entry's statistics (None where a statistic does not apply or had no values).

    Args:
        entry (str): ``"sparse"`` (a KJT key), ``"dense"`` (a ``Batch.dense`` column) or ``"sequence"``.
        kind (str): the feature kind that computes it.
        column (str): the raw input column (a history sub-feature: its history's).
        null_rate_train, null_rate_eval (float): share of rows whose input column is missing.
        new_id_rate (float | None): share of the eval split's ids never produced by the training window.
        psi (float | None): PSI of the eval split's bucketized values against the training window's.
        history_mean_train, history_mean_eval, history_p95_train, history_p95_eval (float | None): items
            per row of a history.
        zch_evictions (int | None): rows of its zero-collision table evicted while the model trained.
    """

    entry: str
    kind: str
    column: str
    null_rate_train: float
    null_rate_eval: float
    new_id_rate: float | None = None
    psi: float | None = None
    history_mean_train: float | None = None
    history_mean_eval: float | None = None
    history_p95_train: float | None = None
    history_p95_eval: float | None = None
    zch_evictions: int | None = None


@dataclass
class DriftReport:
    """Per-feature drift of an eval split against the training window (:func:`compute_drift`).

    Args:
        features (dict[str, FeatureDrift]): FeatureSpec entry name → its statistics, in FeatureSpec order.
        psi_max (float | None): the largest PSI of any feature (None: no numeric feature).
        train_rows, eval_rows (int): rows the statistics read from each split.
        train_rows_total, eval_rows_total (int): rows each split has.
        notes (list[str]): what the report leaves out and why.
    """

    features: dict[str, FeatureDrift]
    psi_max: float | None
    train_rows: int
    eval_rows: int
    train_rows_total: int
    eval_rows_total: int
    notes: list[str] = field(default_factory=list)

    def psi_of(self, name: str) -> float | None:
        """The PSI of config feature ``name``: the largest of its entries' (a vector's ``name__0`` …, a
        sequence's sub-features ``name__sub``); None when none of them has one."""
        prefix = f"{name}__"
        values = [
            d.psi
            for key, d in self.features.items()
            if d.psi is not None and (key == name or key.startswith(prefix))
        ]
        return max(values) if values else None

    def top(self, n: int = 3) -> list[tuple[str, float]]:
        """The ``n`` entries with the largest PSI, largest first."""
        scored = [(key, d.psi) for key, d in self.features.items() if d.psi is not None]
        return sorted(scored, key=lambda kv: -kv[1])[:n]

    def metrics(self) -> dict[str, float]:
        """MLflow metrics: ``drift.psi.<f>``, ``drift.null_rate.<f>`` (the eval split's), ``drift.new_id_rate.<f>``,
        ``drift.history_mean.<f>`` / ``drift.history_p95.<f>`` (the eval split's), ``drift.zch_evictions.<f>`` and
        ``drift.psi_max``."""
        out: dict[str, float] = {}
        for key, d in self.features.items():
            out[f"drift.null_rate.{key}"] = d.null_rate_eval
            for metric, value in (
                ("psi", d.psi),
                ("new_id_rate", d.new_id_rate),
                ("history_mean", d.history_mean_eval),
                ("history_p95", d.history_p95_eval),
                ("zch_evictions", d.zch_evictions),
            ):
                if value is not None:
                    out[f"drift.{metric}.{key}"] = value
        if self.psi_max is not None:
            out["drift.psi_max"] = self.psi_max
        return out

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DriftReport:
        known = {f.name for f in fields(cls)}
        missing = sorted(known - set(d) - {"notes"})
        if missing:
            raise ValueError(f"not a drift report: missing {missing}; it has {sorted(d)}")
        return cls(**{**d, "features": {k: FeatureDrift(**v) for k, v in d["features"].items()}})

    def write(self, path: str | Path) -> Path:
        """The report as JSON at ``path``."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=1, sort_keys=True))
        return path


def psi(expected: np.ndarray, actual: np.ndarray, epsilon: float = PSI_EPSILON) -> float | None:
    """PSI of bin counts ``actual`` against ``expected`` (same bins): ``sum (a - e) ln(a / e)`` over the shares,
    each at least ``epsilon``; None when either side has no values.

    Example::

        >>> round(psi(np.array([50, 50]), np.array([25, 75])), 6)   # -0.25 ln 0.5 + 0.25 ln 1.5
        0.274653
    """
    e_total, a_total = expected.sum(), actual.sum()
    if e_total == 0 or a_total == 0:
        return None
    e = np.maximum(expected / e_total, epsilon)
    a = np.maximum(actual / a_total, epsilon)
    return float(np.sum((a - e) * np.log(a / e)))


def decile_psi(train: np.ndarray, evaluated: np.ndarray) -> float | None:
    """PSI of ``evaluated`` over the deciles of ``train`` (repeated deciles merged; a value on a decile falls
    in the bin above it)."""
    if train.size == 0 or evaluated.size == 0:
        return None
    edges = np.unique(np.quantile(train, _DECILES))
    bins = len(edges) + 1
    count = [np.bincount(np.searchsorted(edges, x, side="right"), minlength=bins) for x in (train, evaluated)]
    return psi(count[0], count[1])


def category_psi(train: np.ndarray, evaluated: np.ndarray) -> float | None:
    """PSI over the values themselves as bins (a bucketized feature's bucket ids)."""
    if train.size == 0 or evaluated.size == 0:
        return None
    cats = np.union1d(train, evaluated)
    count = [np.bincount(np.searchsorted(cats, x), minlength=len(cats)) for x in (train, evaluated)]
    return psi(count[0], count[1])


def new_id_rate(feature: SparseFeature, train: np.ndarray, evaluated: np.ndarray) -> float | None:
    """Share of ``evaluated`` ids the training window never produced: UNK for a vocabulary, else ids (buckets,
    zch keys) absent from ``train``; None without eval ids."""
    if evaluated.size == 0:
        return None
    if feature.mapping.kind == "vocab" and not feature.zch:
        return float(np.mean(evaluated == feature.mapping.unk_id))
    return float(np.mean(~np.isin(evaluated, train)))


@dataclass
class _Side:
    """One split's FG output and its input columns' null rates."""

    out: FGOutput
    null_rate: dict[str, float]
    rows: int
    total: int


def sample_batches(source: Source, max_rows: int, columns: list[str]) -> Iterator[SourceBatch]:
    """All of ``source`` when it has at most ``max_rows`` rows, else the first rows of each of
    :data:`SAMPLE_BLOCKS` equal contiguous blocks, ``max_rows`` in all (deterministic: no random draw)."""
    if max_rows < 1:
        raise ValueError(f"max_rows must be >= 1, got {max_rows}")
    if source.num_rows() <= max_rows:
        yield from source.iter_batches(columns=columns)
        return
    blocks = min(SAMPLE_BLOCKS, max_rows)
    for i in range(blocks):
        want = max_rows // blocks + (1 if i < max_rows % blocks else 0)
        # Batches of the default size, not of ``want`` rows: reading up to a block's first row in tiny batches
        # costs far more than slicing a large one.
        for sb in source.iter_batches(Shard(i, blocks), columns=columns):
            take = min(want, sb.num_rows)
            yield SourceBatch(sb.batch.slice(0, take), sb.file, sb.first_row)
            want -= take
            if want == 0:
                break


def _read(spec: FeatureSpec, source: Source, max_rows: int) -> _Side:
    """FG of ``source``'s sample (bad rows skipped: drift describes the rows a model can read) and the null
    rate of every input column over all sampled rows."""
    check_schema(spec, source.schema(), source.uri, with_labels=False)
    columns = list(required_columns(spec, with_labels=False))
    fg = FeatureGenerator(spec, on_bad_row="skip", with_labels=False)
    nulls = dict.fromkeys(columns, 0)
    outs, rows = [], 0
    for sb in sample_batches(source, max_rows, columns):
        raw = normalize(sb.batch, spec, with_labels=False)
        for c in columns:
            nulls[c] += raw.column(c).null_count
        rows += sb.num_rows
        outs.append(fg(sb.batch, sb.file, sb.first_row))
    if not rows:
        raise ValueError(f"{source.uri}: no rows to compute drift statistics from")
    return _Side(FGOutput.concat(outs), {c: n / rows for c, n in nulls.items()}, rows, source.num_rows())


def _history(lengths: np.ndarray) -> tuple[float | None, float | None]:
    if lengths.size == 0:
        return None, None
    return float(lengths.mean()), float(np.percentile(lengths, 95))


def compute_drift(
    spec: FeatureSpec,
    train: Source,
    evaluated: Source,
    max_rows: int = DRIFT_SAMPLE_ROWS,
    zch_evictions: dict[str, int] | None = None,
) -> DriftReport:
    """The drift of ``evaluated`` against ``train``, per FeatureSpec entry (see the module's docstring).

    Args:
        spec (FeatureSpec): the fitted features (the checkpoint's fg.json).
        train (Source): the training window.
        evaluated (Source): the evaluation split (the newest day).
        max_rows (int): rows read from each split at most (:func:`sample_batches`).
        zch_evictions (dict | None): rows each zch table evicted while the model trained (its
            ``TrainResult.zch_evictions``); None: not recorded (a note says so).

    Raises:
        SchemaMismatch: a split lacks a column FG reads.
        ValueError: a split has no rows.
    """
    t, e = _read(spec, train, max_rows), _read(spec, evaluated, max_rows)
    parent = {s.name: s for s in spec.sequences}
    features: dict[str, FeatureDrift] = {}

    def base(entry: str, kind: str, column: str) -> FeatureDrift:
        return FeatureDrift(entry, kind, column, t.null_rate[column], e.null_rate[column])

    for i, f in enumerate(spec.sparse):
        column = f.column if f.sequence is None else parent[f.sequence].column
        d = base("sparse", f.kind, column)
        tv, ev = t.out.values[i], e.out.values[i]
        if f.item_float:  # float64 bits of each item's value
            d.psi = decile_psi(tv.view(np.float64), ev.view(np.float64))
        elif f.boundaries is not None:
            d.psi = category_psi(tv, ev)
        else:
            d.new_id_rate = new_id_rate(f, tv, ev)
        features[f.name] = d
    keys = spec.sparse_keys()
    for s in spec.sequences:
        d = base("sequence", s.kind, s.column)
        first = keys.index(s.sub_features[0])
        d.history_mean_train, d.history_p95_train = _history(t.out.lengths[first])
        d.history_mean_eval, d.history_p95_eval = _history(e.out.lengths[first])
        features[s.name] = d
    for j, dense in enumerate(spec.dense):
        d = base("dense", dense.kind, dense.column)
        d.psi = decile_psi(t.out.dense[:, j], e.out.dense[:, j])
        features[dense.name] = d
    scored = [d.psi for d in features.values() if d.psi is not None]
    zch = [f for f in spec.sparse if f.zch]
    for f in zch:
        if zch_evictions is not None:
            features[f.name].zch_evictions = int(zch_evictions.get(f.table, 0))
    notes = [ZCH_NOTE] if zch and zch_evictions is None else []
    for name, side in (("train", t), ("eval", e)):
        if side.rows < side.total:
            notes.append(
                f"{name}: {side.rows:,} of {side.total:,} rows read ({SAMPLE_BLOCKS} evenly spaced blocks)"
            )
    return DriftReport(
        features=features,
        psi_max=max(scored) if scored else None,
        train_rows=t.rows,
        eval_rows=e.rows,
        train_rows_total=t.total,
        eval_rows_total=e.total,
        notes=notes,
    )


def check_feature_limits(report: DriftReport | None, limits: dict[str, float]) -> None:
    """Refuse per-feature PSI limits on features that have no PSI (ids, histories of ids): such a limit could
    never hold promotion, so it is probably a mistaken name.

    Raises:
        ValueError: naming the features and the ones that have a PSI.
    """
    if report is None or not limits:
        return
    without = [name for name in limits if report.psi_of(name) is None]
    if without:
        numeric = [k for k, d in report.features.items() if d.psi is not None]
        raise ValueError(
            f"eval.gate.max_psi_per_feature names {without}, which have no PSI (PSI is computed for numeric "
            f"features; these have one: {numeric})"
        )
