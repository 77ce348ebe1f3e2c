"""ONNX export of the dense part (the full model does not export: fbgemm ops have no ONNX mapping).

The folder is the RTP layout with ``dense.onnx`` in place of ``dense.pt2``: onnxruntime serves the
dense part, the sparse part is a table lookup over the same safetensors shards. Inputs are named by
``dense_input_names()``: ``dense``, pooled embeddings, ``<group>__values`` (jagged) and
``<group>__offsets``; dynamic batch and item counts. The output is ``logits`` (``(B,)``, or ``(B, T)`` for a
multi-task model, which adds one named ``(B,)`` output per task, ``logit_<label>``, so a server reads each
task by name instead of by column position).

``repeat_interleave(lengths, output_size=T)`` (segment ids of jagged rows) has no usable ONNX
translation in onnxscript (the stock one rejects ``output_size`` and is O(B·T)); we translate it as
a scatter-add of row starts followed by a cumulative sum, O(B + T).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from recpipe.export.manifest import Manifest, read_manifest
from recpipe.export.scorer import Scorer
from recpipe.export.tables import SparseLookup

DENSE_ONNX = "dense.onnx"
ONNX_OPSET = 18


def _segment_ids(repeats: Any, output_size: Any = None) -> Any:
    """ONNX for ``aten.repeat_interleave.Tensor(repeats)``: ``[0]*r0 + [1]*r1 + ...`` (traced by onnxscript)."""
    from onnxscript import opset18 as op

    zero = op.Constant(value_int=0)
    starts = op.CumSum(repeats, zero, exclusive=1)
    total = op.ReduceSum(repeats, keepdims=1)
    marks = op.Expand(op.Constant(value_ints=[0]), op.Add(total, op.Constant(value_ints=[1])))
    ones = op.Expand(op.Constant(value_ints=[1]), op.Shape(repeats))
    # Empty rows share a start: reduction="add" stacks their marks, so the cumsum skips them.
    marks = op.ScatterElements(marks, starts, ones, axis=0, reduction="add")
    seg = op.Sub(op.CumSum(marks, zero), op.Constant(value_ints=[1]))
    return op.Slice(seg, op.Constant(value_ints=[0]), total)


def _rename_clashes(graph: Any, names: set[str]) -> None:
    """Rename intermediate values whose exporter-made names (``cat_1``: the second ``torch.cat``) equal an
    input name: a feature named ``cat_1`` (TorchEasyRec's Criteo columns) would otherwise define the name
    twice, which onnxruntime refuses to load."""
    taken = {v.name for node in graph for v in node.outputs} | names
    for node in graph:
        for value in node.outputs:
            if value.name in names and value not in graph.outputs:
                i = 0
                while f"{value.name}__{i}" in taken:
                    i += 1
                value.name = f"{value.name}__{i}"
                taken.add(value.name)


def task_output_names(labels: list[str]) -> list[str]:
    """The per-task outputs of a multi-task graph (``logit_clk``, ``logit_buy``; with domain towers
    ``logit_clk_0`` ...), ``labels`` the model's :meth:`~recpipe.features.spec.FeatureSpec.output_names`; none
    for one task."""
    return [f"logit_{label}" for label in labels] if len(labels) > 1 else []


def _add_task_outputs(graph: Any, labels: list[str]) -> None:
    """Add a ``Gather(logits, t, axis=1)`` output named ``logit_<name>`` per output of a ``(B, T)`` graph."""
    import onnx_ir as ir

    logits = graph.outputs[0]
    for t, name in enumerate(task_output_names(labels)):
        index = ir.node(
            "Constant", [], {"value": ir.tensor(np.array(t, dtype=np.int64))}, name=f"{name}_index"
        )
        gather = ir.node("Gather", [logits, index.outputs[0]], {"axis": 1}, name=name)
        out = gather.outputs[0]
        out.name, out.dtype, out.shape = name, logits.dtype, ir.Shape([logits.shape[0]])
        graph.extend([index, gather])
        graph.outputs.append(out)


def write_onnx(
    folder: str | Path,
    dense_program: torch.export.ExportedProgram,
    input_names: list[str],
    labels: list[str] | None = None,
) -> list[str]:
    """Write ``dense.onnx`` from the exported dense program; returns the file names. ``labels``: the
    model's outputs in column order (:meth:`~recpipe.features.spec.FeatureSpec.output_names`); two or more
    add the per-task outputs (:func:`task_output_names`)."""
    path = Path(folder) / DENSE_ONNX
    onnx_program = torch.onnx.export(
        dense_program,
        dynamo=True,
        input_names=list(input_names),
        output_names=["logits"],
        opset_version=ONNX_OPSET,
        custom_translation_table={torch.ops.aten.repeat_interleave.Tensor: _segment_ids},
        external_data=False,
        verbose=False,
    )
    outputs = ["logits", *task_output_names(labels or [])]
    _rename_clashes(onnx_program.model.graph, set(input_names) | set(outputs))
    if len(outputs) > 1:
        _add_task_outputs(onnx_program.model.graph, list(labels or []))
    onnx_program.save(str(path))
    return [DENSE_ONNX]


class OnnxScorer(Scorer):
    """Table lookup (``sparse.json`` + shards) followed by ``dense.onnx`` on onnxruntime (CPU)."""

    def __init__(
        self, folder: str | Path, manifest: Manifest | None = None, threads: int | None = None
    ) -> None:
        import onnxruntime as ort

        manifest = manifest or read_manifest(folder, verify=True)
        super().__init__(folder, manifest)
        self.lookup = SparseLookup.load(self.folder)
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        self.session = ort.InferenceSession(
            str(self.folder / DENSE_ONNX), options, providers=["CPUExecutionProvider"]
        )
        self.input_names = [i.name for i in self.session.get_inputs()]
        # a multi-task graph is read through its named per-task outputs, so parity checks those
        self.output_names = task_output_names(self.spec.output_names()) or ["logits"]

    def run_dense(self, inputs: dict[str, np.ndarray]) -> np.ndarray:
        """The dense part alone on named numpy inputs (``dense`` and the lookup outputs): ``(B,)`` logits,
        or ``(B, T)`` stacked from the per-task outputs of a multi-task model."""
        outs = self.session.run(self.output_names, {n: inputs[n] for n in self.input_names})
        return outs[0] if len(outs) == 1 else np.stack(outs, axis=1)

    def _logits(self, dense: torch.Tensor, values: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        inputs = {"dense": dense.numpy()}
        inputs.update({k: v.numpy() for k, v in self.lookup(values, lengths, dense.shape[0]).items()})
        return torch.from_numpy(self.run_dense(inputs))
