"""AOTInductor export of the whole model, TorchRec and fbgemm ops included: ``model.pt2``.

``torch.export`` of :class:`~recpipe.export.jit.KjtModelWrapper` with a dynamic batch ``B``, value
count ``N`` and ``lengths`` of ``F·B``, then ``aoti_compile_and_package``. A serving process must
``import fbgemm_gpu`` before loading (the compiled code calls its ops); :class:`AotiScorer` does.
"""

from __future__ import annotations

import re
import shutil
import threading
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.export import Dim

from recpipe.export.dense import MAX_BATCH, MAX_VALUES, PACKAGE_CONFIG, export_program
from recpipe.export.manifest import ArtifactError, Manifest, read_manifest
from recpipe.export.scorer import Scorer

PACKAGE = "model.pt2"

# aoti_load_package's extraction folders (``<tmp>/aotinductor_XXXXXX``) whose files this process maps and that still
# exist (a deleted file's line ends in " (deleted)").
_EXTRACTED = re.compile(r"^\S+(?:\s+\S+){4}\s+(/\S*?/aotinductor_[^/\s]+)/\S*$", re.MULTILINE)
_LOADING = threading.Lock()


def load_package(path: str | Path) -> Any:
    """``torch._inductor.aoti_load_package(path)`` with the folder it extracted the package to deleted at once.

    The loader removes that folder (the compiled library, ~43 MB for the small DIN) only when the loaded model is
    destroyed, which a process that exits without collecting it, or is killed (a server worker SIGKILLed and
    restarted, a pipeline step's process), never does: 68 folders, 2.9 GB, were left in /tmp by a day of test runs.
    Once loaded, the library is mapped and the weights are in memory, so the files are not read again; the folder is
    found as the new ``aotinductor_*`` one among the files this process maps (``/proc/self/maps``; where there is
    none, it is left to the loader)."""
    with _LOADING:  # another load in this process between the two reads would be counted as this one's
        before = _extracted_folders()
        runner = torch._inductor.aoti_load_package(str(path))
        for folder in _extracted_folders() - before:
            shutil.rmtree(folder, ignore_errors=True)
    return runner


def _extracted_folders() -> set[str]:
    try:
        with open("/proc/self/maps") as maps:
            return set(_EXTRACTED.findall(maps.read()))
    except OSError:
        return set()


def export_full_model(
    wrapper: nn.Module, num_keys: int, example: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
) -> torch.export.ExportedProgram:
    """``torch.export`` of ``wrapper(dense, values, lengths)`` at any batch and value count."""
    batch = Dim("batch", min=1, max=MAX_BATCH)
    values = Dim("values", min=0, max=MAX_VALUES)
    return export_program(wrapper, example, ({0: batch}, {0: values}, {0: num_keys * batch}))


def write_aoti(folder: str | Path, program: torch.export.ExportedProgram) -> list[str]:
    path = Path(folder) / PACKAGE
    # a copy: the call adds its own keys to the dict it is given
    torch._inductor.aoti_compile_and_package(
        program, package_path=str(path), inductor_configs=dict(PACKAGE_CONFIG)
    )
    return [PACKAGE]


class AotiScorer(Scorer):
    """Loads ``model.pt2`` with ``torch._inductor.aoti_load_package`` (:func:`load_package`)."""

    def __init__(self, folder: str | Path, manifest: Manifest | None = None) -> None:
        import fbgemm_gpu  # noqa: F401  (the compiled model calls torch.ops.fbgemm)

        manifest = manifest or read_manifest(folder, verify=True)
        built_with = manifest.versions.get("torch")
        if built_with != torch.__version__:
            # The package is compiled C++ against that torch's ABI: refuse rather than crash later.
            raise ArtifactError(
                f"{folder}: the AOTInductor package was compiled with torch {built_with}, this is torch "
                f"{torch.__version__}; re-export it, or serve it with the torch that built it"
            )
        super().__init__(folder, manifest)
        self.runner = load_package(self.folder / PACKAGE)

    def _logits(self, dense: torch.Tensor, values: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        batch = dense.shape[0]
        per_key = lengths.view(len(self.keys), batch)
        seq = [i for i, k in enumerate(self.keys) if k in self._sequence_keys]
        if seq and int(per_key[seq].sum()) == 0:
            # The compiled DIN guards on the batch holding at least one history item (a check on the
            # jagged sizes that torch.export keeps), so a batch whose histories are all empty (a one-row
            # request without clicks) gets one extra row with a one-item history, scored and dropped.
            counts = [i for i in seq if self.spec.feature(self.keys[i]).item_lengths_of is not None]
            dense, values, lengths = _with_one_history_row(dense, values, per_key, seq, counts)
            return self.runner(dense, values, lengths)[:batch]
        return self.runner(dense.contiguous(), values.contiguous(), lengths.contiguous())

    @property
    def _sequence_keys(self) -> set[str]:
        # with the id counts keys of multi-value histories (one item of one id: a count of 1)
        subs = {k for s in self.spec.sequences for k in s.sub_features}
        return subs | {c for k in subs if (c := self.spec.feature(k).item_lengths_key) is not None}


def _with_one_history_row(
    dense: torch.Tensor, values: torch.Tensor, per_key: torch.Tensor, seq: list[int], counts: list[int] = ()
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The batch plus a last row with id 0 once in each history key (the id count 1 in each of ``counts``, the
    id counts keys of multi-value histories) and nothing else (key-major layout)."""
    extra = torch.zeros(per_key.shape[0], 1, dtype=per_key.dtype)
    extra[seq] = 1
    chunks = list(torch.split(values, per_key.sum(1).tolist()))
    for i in seq:
        chunks[i] = torch.cat([chunks[i], torch.full((1,), int(i in counts), dtype=values.dtype)])
    dense = torch.cat([dense, torch.zeros(1, dense.shape[1], dtype=dense.dtype)])
    return dense.contiguous(), torch.cat(chunks), torch.cat([per_key, extra], dim=1).reshape(-1).contiguous()
