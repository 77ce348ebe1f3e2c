"""How each backend's folder is written from one :class:`ExportContext` (the trained model, its split
into tables and dense program, and example inputs): the builders :mod:`recpipe.export.backends` names.

Each builder returns ``(files, inputs, extra)``: the files it wrote, the input signature and the
backend-specific manifest entries.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from recpipe.export.dense import export_dense, input_signature
from recpipe.export.parity import ParitySet
from recpipe.export.split import SplitModel
from recpipe.features.spec import FeatureSpec


@dataclass
class ExportContext:
    """What every builder reads: the model (on CPU, eval mode), its FeatureSpec, its split into tables
    and dense program, the parity rows and example inputs of both graphs.

    Args:
        model (nn.Module): the trained ranking model.
        spec (FeatureSpec): its FeatureSpec.
        split (SplitModel): the extracted tables, lookup plan and dense module.
        parity (ParitySet): held-out rows, FG applied.
        example_full (tuple): ``(dense, values, lengths)`` of a few rows, for the full-model graphs.
        example_dense (tuple): the dense program's inputs for the same rows.
        max_shard_bytes (int): largest safetensors shard.
    """

    model: nn.Module
    spec: FeatureSpec
    split: SplitModel
    parity: ParitySet
    example_full: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    example_dense: tuple[torch.Tensor, ...]
    max_shard_bytes: int
    _dense_program: torch.export.ExportedProgram | None = None
    _serving_model: nn.Module | None = None

    @property
    def serving_model(self) -> nn.Module:
        """The model the full-model backends export: zch collections frozen (no admission, no eviction)."""
        if self._serving_model is None:
            from recpipe.export.zch import freeze_zch

            self._serving_model = (
                freeze_zch(self.model, self.split.remaps) if self.split.remaps else self.model
            )
        return self._serving_model

    @property
    def keys(self) -> list[str]:
        return self.spec.sparse_keys()

    def dense_program(self) -> torch.export.ExportedProgram:
        if self._dense_program is None:
            self._dense_program = export_dense(self.split.dense, self.split.plan, self.example_dense)
        return self._dense_program

    def kjt_signature(self) -> dict[str, Any]:
        return {
            "kind": "kjt",
            "keys": self.keys,
            "dense": {"dtype": "float32", "shape": ["B", self.spec.dense_dim]},
            "values": {"dtype": "int64", "shape": ["N"]},
            "lengths": {"dtype": "int32", "shape": [f"{len(self.keys)}*B"], "layout": "key-major (F, B)"},
        }

    def split_signature(self) -> dict[str, Any]:
        raw = [c for c in self.spec.input_columns() if c not in self.spec.label_only_columns()]
        return {
            "kind": "split",
            "raw_columns": raw,
            "keys": self.keys,
            "dense_program": input_signature(self.split.input_names, self.example_dense, self.split.plan),
            "histories": "jagged: <group>__values (T, D) with <group>__offsets (B + 1,), never padded",
        }


def build_jit(ctx: ExportContext, folder: Path) -> tuple[list[str], dict, dict]:
    from recpipe.export.jit import script_model, write_jit

    module, how = script_model(ctx.serving_model, ctx.split, ctx.keys, ctx.example_dense)
    return write_jit(folder, module), ctx.kjt_signature(), how


def build_aoti(ctx: ExportContext, folder: Path) -> tuple[list[str], dict, dict]:
    from recpipe.export.aoti import export_full_model, write_aoti
    from recpipe.export.jit import KjtModelWrapper

    program = export_full_model(KjtModelWrapper(ctx.serving_model, ctx.keys), len(ctx.keys), ctx.example_full)
    return write_aoti(folder, program), ctx.kjt_signature(), {"needs_fbgemm": "1"}


def _write_tables(ctx: ExportContext, folder: Path) -> list[str]:
    from recpipe.export.tables import write_tables

    s = ctx.split
    return write_tables(s.tables, s.metas, s.plan, ctx.keys, folder, ctx.max_shard_bytes, s.remaps)


def build_onnx(ctx: ExportContext, folder: Path) -> tuple[list[str], dict, dict]:
    from recpipe.export.onnx import ONNX_OPSET, task_output_names, write_onnx

    labels = ctx.spec.output_names()
    files = _write_tables(ctx, folder) + write_onnx(
        folder, ctx.dense_program(), ctx.split.input_names, labels
    )
    extra = {"opset": str(ONNX_OPSET)}
    if len(labels) > 1:
        extra["task_outputs"] = ",".join(task_output_names(labels))
    return files, ctx.split_signature(), extra


def build_rtp(ctx: ExportContext, folder: Path) -> tuple[list[str], dict, dict]:
    from recpipe.export.rtp import write_rtp
    from recpipe.export.shared import write_shared

    s = ctx.split
    files = write_rtp(
        folder, ctx.keys, s.plan, s.tables, s.metas, ctx.dense_program(), ctx.max_shard_bytes, s.remaps
    )
    # A DIN model's second program, for one user's history shared by every candidate (checked at export by
    # recpipe.export.shared.shared_history_parity, after the folder's own parity).
    shared_files, shared_inputs, shared_extra = write_shared(
        folder, s.dense.dense, s.plan, ctx.example_dense, ctx.spec
    )
    inputs = {**ctx.split_signature(), **shared_inputs}
    return [*files, *shared_files], inputs, {"server": "recpipe.export.rtp.RtpModel", **shared_extra}


def build_trt(ctx: ExportContext, folder: Path) -> tuple[list[str], dict, dict]:
    from recpipe.export.trt import write_trt

    files = _write_tables(ctx, folder) + write_trt(folder, ctx.split.dense, ctx.split.plan, ctx.example_dense)
    return files, ctx.split_signature(), {"precision": "float32"}
