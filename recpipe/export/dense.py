"""``torch.export`` of a dense program at any batch size and any history value count.

Inputs follow the lookup plan: ``dense (B, D)``, pooled ``(B, D_i)``, jagged history values
``(T_g, D_g)`` with one free ``T_g`` per sequence input, offsets ``(B + 1,)``. Histories stay jagged:
nothing is padded to the sequence's maximum length.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.fx.experimental._config as fx_config
from torch import nn
from torch.export import Dim, ExportedProgram

if TYPE_CHECKING:  # annotations only: export_program imports with torch alone (no safetensors, numpy)
    from recpipe.export.tables import PlanEntry

MAX_BATCH = 1 << 20
MAX_VALUES = (1 << 31) - 2

# The weights go in the package beside the compiled library, not inside it. ``aoti_load_package`` extracts the
# library to a temporary folder, loads it and deletes the folder; a loaded library is never unloaded (``dlclose``
# of it keeps it mapped), so with the weights inside, every load left its whole size (210 MB for the Taobao DIN)
# on the disk and in the address space of the process until it exits: 42 loads in one test process held 7.1 GB
# of deleted files. As a blob, the weights are read into memory that is freed with the loaded model; what stays
# mapped is the code (1.5-9 MB measured). recpipe/export/aoti.py writes ``model.pt2`` with it; it lives here so a
# torch-only process (benchmarks/gpu_check.py) packages its programs the same way. tests/export/test_aoti.py checks
# that the package holds the blob and that a load leaves no more mapped than the package's libraries.
PACKAGE_CONFIG = {
    "aot_inductor.package_constants_in_so": False,
    "aot_inductor.package_constants_on_disk_format": "binary_blob",
}


def dense_dynamic_shapes(plan: list[PlanEntry], offsets: bool = True) -> tuple[dict[int, Any], ...]:
    """``dynamic_shapes`` for ``(dense, *plan inputs)``: one batch dim, one item count per history; without
    ``offsets``, for a program that takes no offsets inputs (the shared-history one)."""
    batch = Dim("batch", min=1, max=MAX_BATCH)
    shapes: list[dict[int, Any]] = [{0: batch}]
    for i, p in enumerate(plan):
        if p.kind == "pooled":
            shapes.append({0: batch})
        elif p.kind == "sequence":
            shapes.append({0: Dim(f"items_{i}", min=0, max=MAX_VALUES)})
        elif offsets:
            shapes.append({0: batch + 1})
    return tuple(shapes)


def export_program(
    module: nn.Module, example: tuple[torch.Tensor, ...], dynamic_shapes: tuple[dict[int, Any], ...]
) -> ExportedProgram:
    """``torch.export.export`` with size-oblivious reasoning, so a batch of 1 and an empty history are
    not specialized away by the example's sizes."""
    module = module.eval()
    with fx_config.patch(backed_size_oblivious=True), torch.no_grad():
        return torch.export.export(module, example, dynamic_shapes=dynamic_shapes, strict=False)


def export_dense(
    program: nn.Module, plan: list[PlanEntry], example: tuple[torch.Tensor, ...]
) -> ExportedProgram:
    """The dense program as an :class:`ExportedProgram` with dynamic batch and item counts.

    ``program.forward`` takes ``*inputs``: torch.export sees one varargs tuple, hence the extra nesting.
    """
    return export_program(program, example, (dense_dynamic_shapes(plan),))


def input_signature(names: list[str], example: tuple[torch.Tensor, ...], plan: list[PlanEntry]) -> list[dict]:
    """Name, dtype and symbolic shape of every dense-program input (for the manifest)."""
    kinds = ["dense"] + [p.kind for p in plan]
    out = []
    for i, (name, kind, t) in enumerate(zip(names, kinds, example)):
        first = {"dense": "B", "pooled": "B", "sequence": f"T{i}", "offsets": "B+1"}[kind]
        out.append(
            {
                "name": name,
                "kind": kind,
                "dtype": str(t.dtype).removeprefix("torch."),
                "shape": [first, *t.shape[1:]],
            }
        )
    return out
