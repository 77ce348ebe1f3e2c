"""ONNX export of the dense part (the full model does not export: fbgemm ops have no ONNX mapping).

The folder is the RTP layout with ``dense.onnx`` in place of ``dense.pt2``: onnxruntime serves the
dense part, the sparse part is a table lookup over the same safetensors shards. Inputs are named by
``dense_input_names()``: ``dense``, pooled embeddings, ``<group>__values`` (jagged) and
``<group>__offsets``; dynamic batch and item counts.

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


def write_onnx(
    folder: str | Path, dense_program: torch.export.ExportedProgram, input_names: list[str]
) -> list[str]:
    """Write ``dense.onnx`` from the exported dense program; returns the file names."""
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
    _rename_clashes(onnx_program.model.graph, set(input_names) | {"logits"})
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

    def run_dense(self, inputs: dict[str, np.ndarray]) -> np.ndarray:
        """The dense part alone on named numpy inputs (``dense`` and the lookup outputs)."""
        return self.session.run(["logits"], {n: inputs[n] for n in self.input_names})[0]

    def _logits(self, dense: torch.Tensor, values: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        inputs = {"dense": dense.numpy()}
        inputs.update({k: v.numpy() for k, v in self.lookup(values, lengths, dense.shape[0]).items()})
        return torch.from_numpy(self.run_dense(inputs))
