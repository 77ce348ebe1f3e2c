"""What every loaded backend offers: ``predict_batch`` on FG output and ``predict_raw`` on raw rows.

Torchrec-free: the RTP reference server builds on this.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from recpipe.data.types import DataError
from recpipe.export.manifest import ArtifactError, Manifest
from recpipe.features.fg import FeatureGenerator
from recpipe.features.raw import column_kinds, normalize, to_arrow
from recpipe.features.spec import FG_JSON, FeatureSpec
from recpipe.features.tile import TiledFG, context_table

FG_NAME = FG_JSON
OUTPUTS = ("probability", "logit")


def check_known_columns(
    spec: FeatureSpec, columns: list[str], where: str = "request", expected: list[str] | None = None
) -> None:
    """Refuse rows none of whose columns is a feature column of the model: scored, they would all be
    missing values, a confident wrong answer for a client that renamed its columns. Some known columns
    and others absent is the raw-value contract (absent = missing) and passes.

    Args:
        spec (FeatureSpec): the model's features.
        columns (list[str]): the rows' column names.
        where (str): what the rows are, for the message (a request, a file).
        expected (list[str] | None): the model's input columns, ``column_kinds(spec, with_labels=False)``'s,
            when the caller has them (:meth:`Scorer.check_columns`); else walked from ``spec`` here.

    Raises:
        DataError: no column of ``columns`` is one of the model's (names up to 10 of each).
    """
    if expected is None:
        expected = list(column_kinds(spec, with_labels=False))
    if set(columns) & set(expected):
        return
    more = f" (and {len(expected) - 10} more)" if len(expected) > 10 else ""
    got = f"{list(columns)[:10]}" + (f" (and {len(columns) - 10} more)" if len(columns) > 10 else "")
    raise DataError(
        f"{where}: none of its columns is an input column of the model; expected some of "
        f"{expected[:10]}{more}, got {got}"
    )


def as_tensor(x: Any, dtype: torch.dtype) -> torch.Tensor:
    t = x if isinstance(x, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(x))
    return t.to(dtype)


class Scorer:
    """A verified, loaded backend folder.

    Subclasses implement :meth:`_logits`. Inputs are the KeyedJaggedTensor layout of FG output: keys
    in ``fg.json`` order, ``values (N,)`` ids and ``lengths (F * B,)`` key-major.

    Example::

        scorer = load_backend("export/aoti")
        scorer.predict_batch(dense, values, lengths)   # (B,) float32 logits
        scorer.predict_raw(raw_rows)                    # FG with fg.json, then the same
    """

    def __init__(self, folder: str | Path, manifest: Manifest) -> None:
        self.folder = Path(folder)
        self.manifest = manifest
        self.backend = manifest.backend
        try:
            self.spec = FeatureSpec.load(self.folder / FG_NAME)
        except ValueError as err:
            raise ArtifactError(f"{self.folder}: {err}") from None
        self.keys = self.spec.sparse_keys()
        self._fg = FeatureGenerator(self.spec, on_bad_row="error", with_labels=False)
        self._tiled = TiledFG(self._fg)
        self._inputs = list(self._fg.contract.kinds)

    @property
    def input_columns(self) -> list[str]:
        """The model's input columns (its raw-value contract's), in ``fg.json`` order."""
        return list(self._inputs)

    def check_columns(self, columns: list[str], where: str = "request") -> None:
        """:func:`check_known_columns` against the model's input columns, read from the spec once (a serving
        call checks every request).

        Raises:
            DataError: no column of ``columns`` is one of the model's.
        """
        check_known_columns(self.spec, columns, where, self._inputs)

    def predict_batch(self, dense: Any, values: Any, lengths: Any) -> np.ndarray:
        """Logits ``(B,)`` (``(B, T)`` for a multi-task model) for ``dense (B, D)`` float32, ``values (N,)``
        int64, ``lengths (F * B,)`` int."""
        dense_t = as_tensor(dense, torch.float32)
        if dense_t.dim() != 2 or dense_t.shape[1] != self.spec.dense_dim:
            raise ValueError(f"dense must be (B, {self.spec.dense_dim}), got {tuple(dense_t.shape)}")
        batch = dense_t.shape[0]
        shape = self._output_shape(batch)
        if batch == 0:
            return np.zeros(shape, np.float32)
        lengths_t = as_tensor(lengths, torch.int32)
        if lengths_t.numel() != len(self.keys) * batch:
            raise ValueError(
                f"lengths must have {len(self.keys)} keys x {batch} rows entries, got {lengths_t.numel()}"
            )
        with torch.inference_mode():
            out = self._logits(dense_t, as_tensor(values, torch.int64), lengths_t)
        return out.detach().to("cpu", torch.float32).numpy().reshape(shape)

    def _output_shape(self, batch: int) -> tuple[int, ...]:
        outputs = len(self.spec.output_names())
        return (batch,) if outputs == 1 else (batch, outputs)

    def predict(self, rows: Any, output: str = "probability", context: Any = None) -> np.ndarray:
        """Click probabilities ``(B,)`` float64 for raw rows (``output="logit"``: the logits).

        Probabilities are mapped back to the un-sampled click rate when the model was trained on
        negative-down-sampled data (the export records the rate); the registered pyfunc returns the same.

        Args:
            rows: raw feature rows — a pandas DataFrame, a pyarrow Table, JSON records (a list of dicts);
                values follow the raw-value contract (:mod:`recpipe.features.raw`).
            output (str): ``"probability"`` or ``"logit"``.
            context: the columns every row shares, sent once (:meth:`predict_raw`).
        """
        return self.to_output(self.predict_raw(rows, context), output)

    def to_output(
        self, logits: np.ndarray, output: str = "probability", neg_sample_rate: float | None = None
    ) -> np.ndarray:
        """Logits → what ``output`` asks for: ``"logit"`` as they are, ``"probability"`` through the sigmoid
        and back to the un-sampled click rate (``p / (p + (1 - p) / rate)`` for a negative sampling
        rate < 1: ``neg_sample_rate``, default the one recorded at export)."""
        from recpipe.eval.metrics import recalibrate, sigmoid

        if output not in OUTPUTS:
            raise ValueError(f"output must be one of {list(OUTPUTS)}, got {output!r}")
        if output == "logit":
            return np.asarray(logits, dtype=np.float64)
        p = sigmoid(np.asarray(logits, dtype=np.float64))
        rate = neg_sample_rate or float((self.manifest.model or {}).get("neg_sample_rate", 1.0))
        if rate < 1.0:  # the sampling is the primary label's: only its probabilities are re-calibrated
            if p.ndim == 2:  # the primary task's columns: one, or one per domain
                first = max(self.spec.domain_num, 1)
                p[:, :first] = recalibrate(p[:, :first], rate)
            else:
                p = recalibrate(p, rate)
        return p

    def output_columns(self, output: str = "probability") -> list[str]:
        """Names of the output's columns: ``[output]`` for one task, ``<output>_<label>`` for each task of a
        multi-task model (``probability_clk``, ``probability_buy``; ``probability_clk_0`` ... with domain towers:
        :meth:`~recpipe.features.spec.FeatureSpec.output_columns`)."""
        return self.spec.output_columns(output)

    def output_by_column(self, scores: np.ndarray, output: str = "probability") -> dict[str, np.ndarray]:
        """``to_output``'s ``(B,)`` / ``(B, T)`` scores as named columns (:meth:`output_columns`)."""
        names = self.output_columns(output)
        columns = np.asarray(scores).reshape(len(scores), len(names))
        return {name: columns[:, t] for t, name in enumerate(names)}

    def predict_raw(self, rows: Any, context: Any = None) -> np.ndarray:
        """Logits ``(B,)`` float32 for raw feature rows (a DataFrame, an Arrow table or JSON records).

        Args:
            rows: the raw rows (with a ``context``: the candidates' own columns).
            context: None, or the columns every row shares (one user × the candidate ``rows``), as JSON
                object text or a dict of column → one value: the same logits as the full rows, the
                context's keys FG'd once (:class:`~recpipe.features.tile.TiledFG`).

        Raises:
            DataError: a bad value (naming its row and column), rows without any of the model's columns, or
                a refused context (:func:`~recpipe.features.tile.context_table`).
        """
        table = to_arrow(rows)
        shared = None if context is None else context_table(context, self.spec, table.column_names)
        columns = table.column_names + ([] if shared is None else shared.column_names)
        if table.num_rows:  # no rows, no answer to get wrong
            self.check_columns(columns)
        return self._score(self._fg(table)) if shared is None else self._score_context(shared, table)

    def _score_context(self, context: pa.Table, rows: pa.Table) -> np.ndarray:
        """Logits of the one-row ``context`` × the candidate ``rows``: by default the tiled rows' (a backend with a
        program for one shared history overrides it)."""
        return self._score(self._tiled(context, rows))

    def prepare_raw(self, rows: Any) -> pa.Table:
        """Raw rows read by the raw-value contract, checked, ready for :meth:`score_prepared`: exactly the
        model's input columns (an absent one all missing), each column as FG reads it
        (:func:`~recpipe.features.raw.normalize`), text as ``large_string``. A row's logits do not depend on the rows scored with it, so
        tables prepared from several requests that have one schema can be concatenated and scored at once
        (:class:`~recpipe.export.batching.MicroBatcher`).

        Raises:
            DataError: rows without any of the model's columns (:meth:`check_columns`).
        """
        table = to_arrow(rows)
        if table.num_rows:
            self.check_columns(table.column_names)
        batch = (
            table.combine_chunks().to_batches()[0]
            if table.num_rows
            else pa.RecordBatch.from_pylist([], schema=table.schema)
        )
        table = pa.Table.from_batches(
            [normalize(batch, self.spec, False, self._fg.contract).select(self._inputs)]
        )
        # Text as large_string, whichever way it came (pandas' Arrow strings are large, a column of nulls is
        # read as string): one schema for requests of the same columns, whatever held their nulls.
        large = pa.schema(
            [f.with_type(pa.large_string()) if pa.types.is_string(f.type) else f for f in table.schema]
        )
        return table if large == table.schema else table.cast(large)

    def score_prepared(self, table: pa.Table) -> np.ndarray:
        """Logits ``(B,)`` of :meth:`prepare_raw`'s rows (of one request or several concatenated).

        Raises:
            DataError: a bad value, naming its row (in ``table``) and column.
        """
        return self._score(self._fg(table, normalized=True))

    def _score(self, out: Any) -> np.ndarray:
        values = np.concatenate(out.values) if out.values else np.zeros(0, np.int64)
        lengths = np.concatenate(out.lengths) if out.lengths else np.zeros(0, np.int32)
        return self.predict_batch(out.dense, values, lengths)

    def _logits(self, dense: torch.Tensor, values: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError
