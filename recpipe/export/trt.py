"""TensorRT export of the dense part through ``torch_tensorrt`` (CUDA only).

The folder is the RTP layout with ``dense_trt.ep`` (a TensorRT-embedded exported program) in place
of ``dense.pt2``; the table lookup stays on the CPU side of the server. Where ``torch_tensorrt`` cannot
be imported or there is no CUDA device the backend is reported as skipped, with the reason, instead
of being built.

Ops TensorRT has no converter for (the jagged segment softmax's ``scatter_reduce``) run in PyTorch
inside the same program: ``torch_tensorrt`` partitions the graph.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch

from recpipe.export.dense import dense_dynamic_shapes
from recpipe.export.manifest import Manifest, read_manifest
from recpipe.export.scorer import Scorer
from recpipe.export.tables import PlanEntry, SparseLookup

TRT_PROGRAM = "dense_trt.ep"
# Shape ranges the engine is built for: batch up to 4096 rows, histories up to 100 items per row.
TRT_OPT_BATCH, TRT_MAX_BATCH, TRT_MAX_ITEMS_PER_ROW = 512, 4096, 100


def trt_unavailable_reason() -> str | None:
    """``None`` when TensorRT can run here, else why not (recorded as the skip reason)."""
    try:
        import torch_tensorrt  # noqa: F401
    except ImportError:
        return "requires a CUDA GPU with TensorRT (torch_tensorrt not importable)"
    if not torch.cuda.is_available():
        return "requires a CUDA GPU with TensorRT (no CUDA device)"
    return None


def _trt_inputs(plan: list[PlanEntry], example: tuple[torch.Tensor, ...]) -> list:
    import torch_tensorrt

    kinds = ["dense"] + [p.kind for p in plan]
    out = []
    for kind, t in zip(kinds, example):
        rest = tuple(t.shape[1:])
        if kind == "sequence":
            lo, opt, hi = 1, TRT_OPT_BATCH * 10, TRT_MAX_BATCH * TRT_MAX_ITEMS_PER_ROW
        elif kind == "offsets":
            lo, opt, hi = 2, TRT_OPT_BATCH + 1, TRT_MAX_BATCH + 1
        else:
            lo, opt, hi = 1, TRT_OPT_BATCH, TRT_MAX_BATCH
        out.append(
            torch_tensorrt.Input(
                min_shape=(lo, *rest), opt_shape=(opt, *rest), max_shape=(hi, *rest), dtype=t.dtype
            )
        )
    return out


def write_trt(
    folder: str | Path,
    dense_program: torch.nn.Module,
    plan: list[PlanEntry],
    example: tuple[torch.Tensor, ...],
) -> list[str]:
    """Compile the dense program with TensorRT (float32) and save it as an exported program."""
    import torch_tensorrt

    from recpipe.export.dense import export_program

    device = torch.device("cuda")
    # A copy: the dense program shares its layers with the model, which must stay on the CPU.
    program = copy.deepcopy(dense_program).to(device).eval()
    example_cuda = tuple(t.to(device) for t in example)
    exported = export_program(program, example_cuda, (dense_dynamic_shapes(plan),))
    inputs = _trt_inputs(plan, example_cuda)
    compiled = torch_tensorrt.dynamo.compile(
        exported, inputs=inputs, enabled_precisions={torch.float32}, min_block_size=1, truncate_double=True
    )
    torch_tensorrt.save(
        compiled, str(Path(folder) / TRT_PROGRAM), output_format="exported_program", inputs=inputs
    )
    return [TRT_PROGRAM]


class TrtScorer(Scorer):
    """Table lookup on CPU, then the TensorRT dense program on CUDA."""

    def __init__(self, folder: str | Path, manifest: Manifest | None = None) -> None:
        reason = trt_unavailable_reason()
        if reason:
            raise RuntimeError(f"cannot load a TensorRT export here: {reason}")
        import torch_tensorrt  # noqa: F401  (registers the TensorRT runtime ops before loading)

        manifest = manifest or read_manifest(folder, verify=True)
        super().__init__(folder, manifest)
        self.lookup = SparseLookup.load(self.folder)
        self.program = torch.export.load(str(self.folder / TRT_PROGRAM)).module()

    def _logits(self, dense: torch.Tensor, values: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        inputs = self.lookup(values, lengths, dense.shape[0])
        args = [dense] + [inputs[n] for n in self.lookup.input_names]
        return self.program(*(a.to("cuda") for a in args)).cpu()
