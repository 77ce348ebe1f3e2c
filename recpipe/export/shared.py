"""The shared-history dense program (``dense_shared.pt2``): one user × B candidates with the history once.

In a request's context form (``params.context``) every candidate has the user's history. The tiled dense program
(``dense.pt2``) sees it B times: B·T table lookups and a DIN attention over B·T (candidate, item) pairs built from
them. This second program takes each DIN tower's history as ONE row, ``<group>__values (T, D)`` with no
``<group>__offsets``, and the candidates' inputs as usual (``dense (B, ·)``, pooled ``(B, ·)``, queries
``(B, D)``); the model computes the history's part of the attention once
(:class:`~recpipe.models.protocol.SharedHistoryArchModule`, :mod:`recpipe.models.blocks.din_shared`).

The RTP export writes it whenever the model has one (a DIN tower), lists it in the manifest (sha256-verified as
every file; ``extra["shared_history_program"]`` names it) and checks at export that it scores as the tiled
program (:func:`shared_history_parity`). :class:`~recpipe.export.rtp.RtpModel` uses it for a context that holds
every history column, and the tiled program otherwise, or when the folder has none (an older export).

A model whose DIN attention MLPs are plain ReLU MLPs gets a third program, ``dense_shared_bf16.pt2``: the same with
the attention's GEMMs in bfloat16 (:func:`~recpipe.models.blocks.din_shared.shared_history_attention`'s
``gemm_dtype``; the rest float32). The export checks it against the tiled program as the float32 one
(``extra["shared_history_bf16_parity"]``) but does not fail on it: the scorer uses it only where that check passed
within ``export.shared_history_bf16_max_abs_logit_diff`` (default: ``export.max_abs_logit_diff``) and the CPU has
bf16 matrix units (AMX or avx512_bf16, :func:`bf16_hardware`), unless ``RECPIPE_SHARED_HISTORY_BF16=0``; otherwise
the float32 one (``SharedHistory.precision`` says which). One user × 500 candidates of 68 items, one thread: the
program ~3.0 against ~4.5 ms. bf16 rounding moves a trained DIN's logits by ~1e-4 to 1e-3 (a 20,000-row run of
``configs/din_taobao_small.yaml``: 4.8e-5, within the default 1e-4; a 300,000-row one: 6.8e-4, not), so at the
default tolerance a well-trained model usually keeps float32; a looser bf16 tolerance opts in.

Example::

    rtp = RtpModel("export/rtp")
    rtp.shared_history.columns                        # ['click_50_seq']: what a context must hold to use it
    rtp.predict_raw(candidates, context={"user_id": 7, "click_50_seq": "3\\x1d9|4\\x1d2"})   # (B,) logits
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import torch
from torch.export import ExportedProgram

from recpipe.export.dense import dense_dynamic_shapes, export_program
from recpipe.export.manifest import ArtifactError, ExportError, Manifest
from recpipe.export.parity import ParitySet
from recpipe.features.spec import FeatureSpec
from recpipe.features.tile import ContextFG, context_table
from recpipe.models.blocks.din import DinAttention, PaddedDinAttention
from recpipe.models.blocks.din_shared import low_precision_ok
from recpipe.models.protocol import SharedHistoryArchModule

if TYPE_CHECKING:
    from recpipe.export.tables import PlanEntry, SparseLookup

SHARED_PROGRAM = "dense_shared.pt2"
BF16_PROGRAM = "dense_shared_bf16.pt2"
# RECPIPE_SHARED_HISTORY_BF16=0: serve the float32 shared program even where the bf16 one passed parity.
BF16_ENV = "RECPIPE_SHARED_HISTORY_BF16"


def bf16_hardware() -> bool:
    """Whether this CPU has bf16 matrix units oneDNN uses (AMX tiles or avx512_bf16): elsewhere bf16 GEMMs are
    emulated, slower than float32."""
    try:
        units = torch.cpu._is_amx_tile_supported() or torch.cpu._is_avx512_bf16_supported()
    except AttributeError:  # a torch without these probes
        return False
    return bool(units) and torch.backends.mkldnn.is_available()


def _attentions(dense: torch.nn.Module) -> list[DinAttention | PaddedDinAttention]:
    return [m for m in dense.modules() if isinstance(m, DinAttention | PaddedDinAttention)]


def low_precision_supported(dense: torch.nn.Module) -> bool:
    """Whether the dense arch has a DIN attention and every one can run its shared GEMMs in bf16 (plain ReLU)."""
    attentions = _attentions(dense)
    return bool(attentions) and all(low_precision_ok(a.attn_mlp) for a in attentions)


@contextmanager
def gemm_dtype(dense: torch.nn.Module, dtype: torch.dtype | None) -> Iterator[None]:
    """Every DIN attention of ``dense`` computes ``forward_shared``'s GEMMs in ``dtype`` inside the block (what
    :func:`export_shared` traces); restored after."""
    attentions = _attentions(dense)
    before = [a.__dict__.get("shared_gemm_dtype") for a in attentions]
    for a in attentions:
        a.shared_gemm_dtype = dtype
    try:
        yield
    finally:
        for a, b in zip(attentions, before):
            if b is None:
                a.__dict__.pop("shared_gemm_dtype", None)
            else:
                a.shared_gemm_dtype = b


def history_keys(plan: list[PlanEntry]) -> list[str]:
    """The FG keys a shared history is made of: every ``sequence`` input's keys and their id counts keys."""
    keys = [k for p in plan if p.kind == "sequence" for k in (*p.keys, *(c for c, _ in p.items.values()))]
    return list(dict.fromkeys(keys))


def history_columns(plan: list[PlanEntry], spec: FeatureSpec) -> list[str]:
    """The request columns the history keys are read from (their sequences' columns): a context holding all of
    them gives every candidate the same history."""
    sequences = {s.name: s for s in spec.sequences}
    out = []
    for key in history_keys(plan):
        seq = spec.feature(key).sequence
        if seq not in sequences:
            raise ValueError(f"history key {key!r} belongs to no sequence of the FeatureSpec (got {seq!r})")
        out.append(sequences[seq].column)
    return list(dict.fromkeys(out))


def shared_plan(plan: list[PlanEntry]) -> list[PlanEntry]:
    """The shared program's inputs after ``dense``: the plan without its ``offsets`` entries."""
    return [p for p in plan if p.kind != "offsets"]


def shared_example(plan: list[PlanEntry], example: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    """The shared program's example inputs from the tiled program's ``(dense, *plan inputs)``: every candidate
    row, and each history of the row whose shortest history is longest (an empty one would teach the trace
    nothing about the items)."""
    by_name = {p.name: t for p, t in zip(plan, example[1:])}
    offsets = [by_name[p.name] for p in plan if p.kind == "offsets"]
    lengths = torch.stack([o[1:] - o[:-1] for o in offsets]).min(0).values
    row = int(torch.argmax(lengths))
    out = [example[0]]
    for p in shared_plan(plan):
        t = by_name[p.name]
        if p.kind == "sequence":
            off = by_name[p.name.removesuffix("__values") + "__offsets"]
            t = t[int(off[row]) : int(off[row + 1])]
        out.append(t)
    return tuple(out)


def export_shared(
    dense: torch.nn.Module,
    plan: list[PlanEntry],
    example: tuple[torch.Tensor, ...],
    dtype: torch.dtype | None = None,
) -> tuple[ExportedProgram, tuple[torch.Tensor, ...]] | None:
    """The shared-history program of the dense arch ``dense`` (``model.dense_module()``) and its example inputs;
    None when the model has no history to share. ``dtype``: the DIN attentions' GEMMs in it (``torch.bfloat16``;
    :func:`gemm_dtype`).

    Raises:
        ExportError: the model's shared inputs are not the plan's inputs without their offsets.
    """
    module = SharedHistoryArchModule.of(dense)
    if module is None or not any(p.kind == "sequence" for p in plan):
        return None
    want = ["dense", *(p.name for p in shared_plan(plan))]
    if module.input_names != want:
        raise ExportError(f"the shared-history inputs {module.input_names} are not the lookup plan's {want}")
    inputs = shared_example(plan, example)
    with gemm_dtype(dense, dtype):
        program = export_program(module, inputs, (dense_dynamic_shapes(plan, offsets=False),))
    return program, inputs


def shared_signature(plan: list[PlanEntry], example: tuple[torch.Tensor, ...]) -> list[dict[str, Any]]:
    """Name, dtype and symbolic shape of every shared-program input (the manifest's ``shared_dense_program``)."""
    out = [{"name": "dense", "kind": "dense", "dtype": "float32", "shape": ["B", *example[0].shape[1:]]}]
    for p, t in zip(shared_plan(plan), example[1:]):
        # T<i>: the tiled program's name of that history's item count (its input's position)
        first = "B" if p.kind == "pooled" else f"T{plan.index(p) + 1}"
        dtype = str(t.dtype).removeprefix("torch.")
        out.append({"name": p.name, "kind": p.kind, "dtype": dtype, "shape": [first, *t.shape[1:]]})
    return out


def write_shared(
    folder: Path,
    dense: torch.nn.Module,
    plan: list[PlanEntry],
    example: tuple[torch.Tensor, ...],
    spec: FeatureSpec,
) -> tuple[list[str], dict[str, Any], dict[str, Any]]:
    """Export and save ``dense_shared.pt2`` into ``folder`` when the model has a history to share, and
    ``dense_shared_bf16.pt2`` when its attentions can run in bf16 (:func:`low_precision_supported`): ``(files,
    input signature entries, manifest extra entries)``, all empty when it has none. Both take the same inputs."""
    done = export_shared(dense, plan, example)
    if done is None:
        return [], {}, {}
    program, inputs = done
    torch.export.save(program, str(folder / SHARED_PROGRAM))
    files = [SHARED_PROGRAM]
    extra = {"shared_history_program": SHARED_PROGRAM, "shared_history_columns": history_columns(plan, spec)}
    if low_precision_supported(dense):
        bf16 = export_shared(dense, plan, example, torch.bfloat16)
        assert bf16 is not None
        torch.export.save(bf16[0], str(folder / BF16_PROGRAM))
        files.append(BF16_PROGRAM)
        extra["shared_history_bf16_program"] = BF16_PROGRAM
    return files, {"shared_dense_program": shared_signature(plan, inputs)}, extra


@dataclass
class SharedHistory:
    """A loaded ``dense_shared.pt2`` and what it needs: the FG keys of the histories and the request columns
    a context must hold.

    Args:
        program (torch.nn.Module): the loaded program used, ``(dense, *shared inputs)`` → logits.
        plan (list[PlanEntry]): the folder's lookup plan.
        keys (list[str]): the FG keys in ``fg.json`` order.
        columns (list[str]): the history columns (:func:`history_columns`).
        programs (dict[str, torch.nn.Module]): every loaded program by precision (``"float32"``, and
            ``"bfloat16"`` when the folder has one), ``program`` among them.
        precision (str): ``program``'s.
    """

    program: torch.nn.Module
    plan: list[PlanEntry]
    keys: list[str]
    columns: list[str]
    programs: dict[str, torch.nn.Module] = field(default_factory=dict)
    precision: str = "float32"

    def __post_init__(self) -> None:
        self._history = {self.keys.index(k) for k in history_keys(self.plan)}
        self.programs.setdefault(self.precision, self.program)

    @classmethod
    def load(
        cls, folder: Path, manifest: Manifest, lookup: SparseLookup, spec: FeatureSpec
    ) -> SharedHistory | None:
        """The folder's shared program, or None when its manifest names none (an export from before it): the bf16
        one where :func:`bf16_usable`, the float32 one otherwise.

        Raises:
            ArtifactError: the manifest names a program its file list does not hold.
        """
        name = manifest.extra.get("shared_history_program")
        if name is None:
            return None
        programs = {"float32": _load_program(folder, manifest, name)}
        bf16_name = manifest.extra.get("shared_history_bf16_program")
        if bf16_name is not None:
            programs["bfloat16"] = _load_program(folder, manifest, bf16_name)
        precision = "bfloat16" if bf16_usable(manifest) else "float32"
        columns = history_columns(lookup.plan, spec)
        return cls(programs[precision], lookup.plan, lookup.keys, columns, programs, precision)

    @contextmanager
    def using(self, precision: str) -> Iterator[None]:
        """Score with the ``precision`` program for a while (the export's parity check of each)."""
        before = self.program, self.precision
        self.program, self.precision = self.programs[precision], precision
        try:
            yield
        finally:
            self.program, self.precision = before

    def covers(self, context_columns: list[str]) -> bool:
        """Whether a context of these columns holds every history: then every candidate has the same one."""
        return set(self.columns) <= set(context_columns)

    def per_key(self, split: ContextFG) -> dict[str, tuple[torch.Tensor, torch.Tensor]] | None:
        """:meth:`~recpipe.export.tables.SparseLookup.split` of one context × B candidates' FG output with each
        history once (the context row's ids), or None when some history key also reads a candidate column (then
        the rows' histories may differ and only the tiled program is right)."""
        one, rows, batch = split.one, split.rows, split.num_rows
        if one is None or not all(split.once_sparse[k] for k in self._history):
            return None
        per_key: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        for k, key in enumerate(self.keys):
            if k in self._history:
                n = int(one.lengths[k][0])
                ids = one.values[k].astype(np.int64, copy=False)
                per_key[key] = (torch.from_numpy(ids), torch.tensor([0, n], dtype=torch.int64))
                continue
            if split.once_sparse[k]:  # a context key of each candidate: the context row's ids, repeated
                ids = np.tile(one.values[k].astype(np.int64, copy=False), batch)
                lengths = np.full(batch, one.lengths[k][0], np.int64)
            else:
                ids, lengths = rows.values[k].astype(np.int64, copy=False), rows.lengths[k]
            offsets = torch.zeros(batch + 1, dtype=torch.int64)
            torch.cumsum(torch.from_numpy(lengths.astype(np.int64, copy=False)), 0, out=offsets[1:])
            per_key[key] = (torch.from_numpy(ids), offsets)
        return per_key

    def logits(self, lookup: SparseLookup, split: ContextFG) -> torch.Tensor | None:
        """The shared program's logits of one context × B candidates (B ≥ 1; :meth:`TiledFG.split
        <recpipe.features.tile.TiledFG.split>`'s output), or None when the rows' histories are not one history
        (:meth:`per_key`)."""
        per_key = self.per_key(split)
        if per_key is None:
            return None
        inputs = lookup.assemble(per_key, with_offsets=False)
        dense = split.tiled_dense()
        return self.program(
            torch.from_numpy(np.ascontiguousarray(dense, dtype=np.float32)),
            *(inputs[p.name] for p in shared_plan(self.plan)),
        )


def _load_program(folder: Path, manifest: Manifest, name: str) -> torch.nn.Module:
    if name not in manifest.files:
        raise ArtifactError(
            f"{folder}: the manifest names the shared-history program {name!r} but does not list the file"
        )
    return torch.export.load(str(folder / name)).module()


def bf16_usable(manifest: Manifest) -> bool:
    """Whether a scorer of this manifest's folder takes its bf16 shared program: it has one, whose parity passed at
    export (``extra["shared_history_bf16_parity"]``), on a CPU with bf16 units (:func:`bf16_hardware`), and
    ``RECPIPE_SHARED_HISTORY_BF16`` is not ``0``."""
    check = manifest.extra.get("shared_history_bf16_parity") or {}
    return (
        manifest.extra.get("shared_history_bf16_program") is not None
        and check.get("passed") is True
        and os.environ.get(BF16_ENV, "1") != "0"
        and bf16_hardware()
    )


def shared_history_parity(
    scorer: Any, parity: ParitySet, tolerance: float, users: int = 6, precision: str = "float32"
) -> dict[str, Any] | None:
    """The shared program against the tiled one at export: the first ``users`` parity rows' histories (the edge
    rows first: 0, 1 and ``max_length`` items, and a missing one) each as a context over the parity's batch of
    512 candidates, scored by :meth:`~recpipe.export.rtp.RtpModel.score_shared` and as full rows (the tiled
    program, itself checked against the eager model). None when ``scorer`` has no shared program, or none of
    ``precision`` (``"float32"``, or ``"bfloat16"``: ``dense_shared_bf16.pt2``).

    Returns:
        dict: ``precision``, ``users``, ``candidates``, ``history_lengths``, ``max_abs_logit_diff``, ``tolerance``, ``passed``,
        ``seconds`` (the manifest's ``extra["shared_history_parity"]``).

    Raises:
        ExportError: the scorer did not take the shared program for a context holding every history column.
    """
    shared: SharedHistory | None = getattr(scorer, "shared_history", None)
    if shared is None or precision not in shared.programs:
        return None
    with shared.using(precision):
        return _parity(scorer, shared, parity, tolerance, users)


def _parity(
    scorer: Any, shared: SharedHistory, parity: ParitySet, tolerance: float, users: int
) -> dict[str, Any]:
    t0 = time.perf_counter()
    spec: FeatureSpec = scorer.spec
    table = parity.table.drop_columns(
        [c for c in spec.label_only_columns() if c in parity.table.column_names]
    )
    a, b = max(parity.bounds, key=lambda ab: ab[1] - ab[0])
    candidates = table.slice(a, b - a).drop_columns(shared.columns)
    diff, lengths = 0.0, []
    for u in range(min(users, table.num_rows)):
        history = {c: table.column(c)[u].as_py() for c in shared.columns}
        full = candidates
        for c, v in history.items():
            full = full.append_column(
                table.schema.field(c), pa.array([v] * candidates.num_rows, table.schema.field(c).type)
            )
        got = scorer.score_shared(context_table(history, spec, candidates.column_names), candidates)
        if got is None:
            raise ExportError(f"the shared-history program was not used for a context of {shared.columns}")
        want = scorer.predict_raw(full)
        diff = max(diff, float(np.abs(np.asarray(got, np.float64) - want).max()))
        key = shared.keys.index(history_keys(shared.plan)[0])
        lengths.append(int(scorer._fg(table.slice(u, 1)).lengths[key][0]))
    return {
        "precision": shared.precision,
        "users": min(users, table.num_rows),
        "candidates": candidates.num_rows,
        "history_lengths": lengths,
        "max_abs_logit_diff": diff,
        "tolerance": tolerance,
        "passed": diff <= tolerance,
        "seconds": round(time.perf_counter() - t0, 3),
    }
