"""``export(model, spec, cfg, backends, out_dir, parity_data)``: one verified folder per backend.

Every backend is built into a staging folder, loaded back through :func:`load_backend` (sha256
checked, as a server would), and scored on the parity rows against the eager model. Only when every
requested backend passes does the staging folder become a new version of ``out_dir`` and the pointer
``export.json`` switch to it, last and at once (:mod:`recpipe.export.layout`); on any failure or crash
the previous export stays in charge and the staging folder is removed (at the latest by the next run).
"""

from __future__ import annotations

import shutil
import time
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import torch
from torch import nn

from recpipe.config import CsvOptions, RecpipeConfig
from recpipe.export.backends import BACKENDS, parse_backends
from recpipe.export.builders import ExportContext
from recpipe.export.layout import (
    STAGING_PREFIX,
    clean_stale,
    new_version,
    publish,
    read_pointer,
    version_folder,
)
from recpipe.export.loaders import load_backend
from recpipe.export.manifest import ExportError, Manifest, record_files
from recpipe.export.outcome import BackendOutcome, ExportOutcome, skipped_here
from recpipe.export.parity import build_parity_set, compare, score_batches
from recpipe.export.shared import shared_history_parity
from recpipe.export.split import SplitModel, check_spec, kjt_of, split_model
from recpipe.export.tables import DEFAULT_MAX_SHARD_BYTES, SparseLookup, fg_to_kjt_arrays
from recpipe.features.fg import FGOutput
from recpipe.features.spec import FeatureSpec

PARITY_READ_ROWS = 4096


def _tensors(f: FGOutput) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    values, lengths = fg_to_kjt_arrays(f.values, f.lengths)
    return torch.from_numpy(f.dense), values, lengths


# --------------------------------------------------------------------------------------- the export
def read_rows(
    data: Any, spec: FeatureSpec, max_rows: int = PARITY_READ_ROWS, csv: CsvOptions | None = None
) -> pa.Table:
    """Held-out rows for parity: a pyarrow Table, a pandas DataFrame, or a data URI (first ``max_rows``;
    CSV files are parsed with ``csv``, the config's ``csv_options()``)."""
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, str | Path):
        from recpipe.data.sources import open_source

        source = open_source(str(data), csv=csv)
        names = set(source.schema().names)
        columns = [c for c in spec.input_columns() if c in names]
        batches, have = [], 0
        for sb in source.iter_batches(batch_rows=max_rows, columns=columns):
            batches.append(sb.batch)
            have += sb.num_rows
            if have >= max_rows:
                break
        if not batches:
            raise ValueError(f"no rows at {data} for the parity check")
        return pa.Table.from_batches(batches).slice(0, max_rows)
    return pa.Table.from_pandas(data, preserve_index=False)


def _check_lookup(model: nn.Module, ctx_split: SplitModel, keys: list[str], example: tuple) -> None:
    """The plan over the extracted tables must reproduce ``sparse_arch`` (else the split is wrong)."""
    dense, values, lengths = example
    lookup = SparseLookup(keys, ctx_split.plan, ctx_split.metas, ctx_split.tables, ctx_split.remaps)
    with torch.no_grad():
        want = model.sparse_arch(kjt_of(keys, values, lengths))
    got = lookup(values, lengths, dense.shape[0])
    for name in ctx_split.input_names[1:]:
        if name not in want:
            raise ExportError(f"sparse_arch does not return dense input {name!r}")
        a, b = want[name], got[name]
        if a.shape != b.shape or a.dtype != b.dtype or not torch.allclose(a, b, rtol=0, atol=1e-6):
            raise ExportError(
                f"the table lookup for {name!r} does not reproduce sparse_arch ({tuple(a.shape)} vs {tuple(b.shape)})"
            )


def export(
    model: nn.Module,
    spec: FeatureSpec,
    cfg: RecpipeConfig,
    backends: list[str] | tuple[str, ...] | str,
    out_dir: str | Path,
    parity_data: Any,
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
) -> ExportOutcome:
    """Export ``model`` to each backend under ``out_dir/<backend>``, each verified by parity.

    Args:
        model (nn.Module): a trained ranking model (``forward``, ``sparse_arch``, ``dense_arch``,
            ``dense_input_names``) on CPU.
        spec (FeatureSpec): its FeatureSpec (checked against the model's tables).
        cfg (RecpipeConfig): its config (``export.max_abs_logit_diff``; digests go to the manifests).
        backends (list[str]): names in :data:`~recpipe.export.backends.BACKENDS` (or ``"jit,rtp"``).
        out_dir (str | Path): the export folder; the whole export replaces the previous one at once
            (``out_dir/<backend>`` names the current one, see :func:`recpipe.export.layout.backend_folder`).
        parity_data: held-out raw rows (pyarrow Table, pandas DataFrame or data URI) with labels.
        max_shard_bytes (int): largest safetensors shard for the split backends.

    Returns:
        ExportOutcome: per backend ``ok`` with its parity report, or ``skipped`` (this machine cannot build
        it: :func:`~recpipe.export.outcome.skipped_here`) with the reason; also written to ``export.json``.

    Raises:
        SpecMismatchError: the FeatureSpec does not describe the model.
        ExportError: a backend failed to build or failed parity; nothing was left in ``out_dir``.

    Example::

        result = export(model, spec, cfg, ["jit", "aoti", "onnx", "rtp"], "runs/x/export", held_out)
        print(result.summary())
    """
    names = parse_backends(backends)
    out = Path(out_dir)
    model = model.eval()
    check_spec(model, spec)
    tolerance = cfg.export.max_abs_logit_diff
    bf16_tolerance = cfg.export.shared_history_bf16_max_abs_logit_diff  # None: tolerance
    parity = build_parity_set(read_rows(parity_data, spec, csv=cfg.csv_options()), spec)
    keys = spec.sparse_keys()

    def eager(f: FGOutput, _raw: pa.Table) -> np.ndarray:
        dense, values, lengths = _tensors(f)
        with torch.no_grad():
            return model(dense, kjt_of(keys, values, lengths)).numpy()

    eager_logits, _ = score_batches(parity, eager)
    split = split_model(model, spec)
    a, b = parity.bounds[2]
    example_full = _tensors(parity.features.slice(a, b))
    _check_lookup(model, split, keys, example_full)
    with torch.no_grad():
        emb = model.sparse_arch(kjt_of(keys, example_full[1], example_full[2]))
    example_dense = (example_full[0], *(emb[n] for n in split.input_names[1:]))
    ctx = ExportContext(model, spec, split, parity, example_full, example_dense, max_shard_bytes)
    model_info = {
        "name": cfg.name,
        "type": cfg.model.type,
        "class": type(model).__name__,
        "config_digest": cfg.digest(),
        "spec_digest": spec.digest(),
        # Probabilities are mapped back to the un-sampled click rate with it (Scorer.predict).
        "neg_sample_rate": float(cfg.data.neg_sample_rate),
    }

    out.mkdir(parents=True, exist_ok=True)
    clean_stale(out)  # what an interrupted export left behind
    staging = out / f"{STAGING_PREFIX}{uuid.uuid4().hex[:12]}"
    result = ExportOutcome(out_dir=str(out))
    skipped = skipped_here(names)
    try:
        for name in names:
            result.backends[name] = _export_one(
                ctx,
                name,
                staging / name,
                model_info,
                eager_logits,
                tolerance,
                skipped.get(name),
                bf16_tolerance,
            )
        version = new_version()
        for name in names:
            result.backends[name].folder = str(version_folder(out, version) / name)
        previous = read_pointer(out)
        publish(out, staging, version, result.to_dict())
        result.version, result.previous = version, previous["version"] if previous else None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return result


def _logits_output(labels: list[str]) -> dict[str, Any]:
    """The manifest's ``logits`` entry: ``(B,)``, or ``(B, T)`` with the output of each column
    (:meth:`~recpipe.features.spec.FeatureSpec.output_names`: a label each, or a label and domain each)."""
    if len(labels) == 1:
        return {"dtype": "float32", "shape": ["B"]}
    return {"dtype": "float32", "shape": ["B", len(labels)], "tasks": list(labels)}


def _export_one(
    ctx: ExportContext,
    name: str,
    folder: Path,
    model_info: dict,
    eager_logits: np.ndarray,
    tolerance: float,
    skipped: BackendOutcome | None,
    bf16_tolerance: float | None = None,
) -> BackendOutcome:
    t0 = time.perf_counter()
    folder.mkdir(parents=True)
    ctx.spec.save(folder / "fg.json")
    if skipped is not None:
        files = record_files(folder)  # fg.json: a verified folder lists every file, skipped or not
        Manifest(backend=name, status="skipped", reason=skipped.reason, files=files, model=model_info).write(
            folder
        )
        return skipped
    backend = BACKENDS[name]
    try:
        _, inputs, extra = backend.build(ctx, folder)
    except Exception as err:
        raise ExportError(f"backend {name!r} could not be exported: {type(err).__name__}: {err}") from err
    for path in folder.rglob("*"):
        if path.is_file():
            path.chmod(0o644)  # some writers use mkstemp (0600); a server may run as another user
    manifest = Manifest(
        backend=name,
        files=record_files(folder),
        inputs=inputs,
        outputs={"logits": _logits_output(ctx.spec.output_names())},
        model=model_info,
        extra=extra,
    )
    manifest.write(folder)
    scorer = load_backend(folder)
    if backend.full_model:
        logits, secs = score_batches(ctx.parity, lambda f, _raw: scorer.predict_batch(*_tensors(f)))
    else:
        logits, secs = score_batches(
            ctx.parity,
            lambda _f, raw: scorer.predict_raw(
                raw.drop_columns([c for c in ctx.spec.label_only_columns() if c in raw.column_names])
            ),
        )
    report = compare(eager_logits, logits, ctx.parity.labels, tolerance, ctx.parity, secs)
    manifest.parity = asdict(report)
    manifest.write(folder)
    if not report.passed:
        raise ExportError(
            f"backend {name!r} failed parity on {report.rows} rows: max |Δlogit| = {report.max_abs_logit_diff:.3g} "
            f"(allowed {tolerance:g}), AUC {report.auc_backend:.6f} vs eager {report.auc_eager:.6f}; "
            "nothing was exported"
        )
    shared = shared_history_parity(scorer, ctx.parity, tolerance)  # None: no shared-history program
    if shared is not None:
        manifest.extra["shared_history_parity"] = shared
        manifest.write(folder)
        if not shared["passed"]:
            raise ExportError(
                f"backend {name!r}: its shared-history program ({manifest.extra['shared_history_program']}) failed "
                f"parity against the tiled program on {shared['users']} users x {shared['candidates']} candidates: "
                f"max |Δlogit| = {shared['max_abs_logit_diff']:.3g} (allowed {tolerance:g}); nothing was exported"
            )
        # Its bf16 form, when written: recorded, not a failure (the scorer takes it only where this passed).
        bf16 = shared_history_parity(scorer, ctx.parity, bf16_tolerance or tolerance, precision="bfloat16")
        if bf16 is not None:
            manifest.extra["shared_history_bf16_parity"] = bf16
            manifest.write(folder)
    return BackendOutcome(name, "ok", parity=report, seconds=round(time.perf_counter() - t0, 2))
