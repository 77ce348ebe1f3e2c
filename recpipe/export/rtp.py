"""RTP-style export: embedding tables as safetensors shards + ``sparse.json``, ``fg.json``, and the dense
part as a ``torch.export`` program (``dense.pt2``) over jagged histories at any batch size; for a model with DIN
towers a second one, ``dense_shared.pt2``, for one user's history shared by every candidate
(:mod:`recpipe.export.shared`).

:class:`RtpModel` is the reference server. It imports neither torchrec nor fbgemm: raw feature rows
→ FG (``fg.json``) → table lookups (``embedding_bag`` / ``embedding`` over the shards; zch keys mapped to
rows by ``searchsorted`` over the frozen remapping in ``zch.safetensors``) → dense program.
Unlike the reference RTP path, the sparse side never pads histories to ``max_length`` and the dense
side never slices them back: a 3-item history is 3 rows of ``<group>__values``. A request's context (one user ×
N candidates) that holds every history column is scored by ``dense_shared.pt2``, the history looked up once;
any other request (and every request to a folder without that program) by ``dense.pt2``.

Example::

    rtp = RtpModel("export/rtp")             # verifies every sha256 first
    logits = rtp.predict_raw(raw_rows)        # pyarrow Table / pandas DataFrame of raw columns
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from recpipe.export.layout import backend_folder
from recpipe.export.manifest import Manifest, read_manifest
from recpipe.export.remap import ZchRemap
from recpipe.export.scorer import Scorer
from recpipe.export.shared import SharedHistory
from recpipe.export.tables import DEFAULT_MAX_SHARD_BYTES, PlanEntry, SparseLookup, TableMeta, write_tables
from recpipe.features.tile import ContextFG

DENSE_PROGRAM = "dense.pt2"


def write_rtp(
    folder: str | Path,
    keys: list[str],
    plan: list[PlanEntry],
    tables: dict[str, torch.Tensor],
    metas: list[TableMeta],
    dense_program: torch.export.ExportedProgram,
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
    remaps: dict[str, ZchRemap] | None = None,
) -> list[str]:
    """Write the tables (and the zch tables' frozen ``remaps``), ``sparse.json`` and ``dense.pt2`` into
    ``folder``; returns the file names."""
    folder = Path(folder)
    names = write_tables(tables, metas, plan, keys, folder, max_shard_bytes, remaps)
    torch.export.save(dense_program, str(folder / DENSE_PROGRAM))
    return [*names, DENSE_PROGRAM]


class RtpModel(Scorer):
    """Scores raw rows from an RTP folder (``fg.json``, ``sparse.json``, shards, ``dense.pt2``).

    Args:
        folder (str | Path): the exported ``rtp`` folder.
        manifest (Manifest | None): an already verified manifest (default: read and verify it).

    Example::

        rtp = RtpModel("export/rtp")
        rtp.predict_raw(table)                      # (B,) logits
        rtp.lookup(values, lengths, batch)           # {"user_id": (B, 16), "seq__values": (T, 48), ...}
    """

    def __init__(self, folder: str | Path, manifest: Manifest | None = None) -> None:
        if manifest is None:  # called directly: ``export/rtp`` names the current export's folder
            folder = backend_folder(folder)
            manifest = read_manifest(folder, verify=True)
        super().__init__(folder, manifest)
        self.lookup = SparseLookup.load(self.folder)
        if self.lookup.keys != self.keys:
            raise ValueError(f"{self.folder}: sparse.json keys differ from fg.json keys")
        self.program = torch.export.load(str(self.folder / DENSE_PROGRAM)).module()
        self.shared_history = SharedHistory.load(self.folder, manifest, self.lookup, self.spec)

    def score_shared(self, context: pa.Table, rows: pa.Table) -> np.ndarray | None:
        """Logits of the one-row ``context`` × the candidate ``rows`` through ``dense_shared.pt2``, each history
        looked up once; None when that cannot be (no such program, no row, a context without every history
        column, or rows whose histories differ anyway).

        Raises:
            DataError: a bad value, naming its row and column (FG's).
        """
        if not self._shares(context, rows):
            return None
        return self._shared_logits(self._tiled.split(context, rows))

    def _shares(self, context: pa.Table, rows: pa.Table) -> bool:
        shared = self.shared_history
        return shared is not None and rows.num_rows > 0 and shared.covers(context.column_names)

    def _shared_logits(self, split: ContextFG) -> np.ndarray | None:
        assert self.shared_history is not None
        with torch.inference_mode():
            logits = self.shared_history.logits(self.lookup, split)
        if logits is None:
            return None
        return logits.detach().to("cpu", torch.float32).numpy().reshape(self._output_shape(split.num_rows))

    def _score_context(self, context: pa.Table, rows: pa.Table) -> np.ndarray:
        if not self._shares(context, rows):
            return super()._score_context(context, rows)
        split = self._tiled.split(context, rows)
        logits = self._shared_logits(split)
        return self._score(split.tiled()) if logits is None else logits

    def _logits(self, dense: torch.Tensor, values: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        inputs = self.lookup(values, lengths, dense.shape[0])
        return self.program(dense, *(inputs[n] for n in self.lookup.input_names))
