"""The ``manifest.json`` of an exported backend folder: what is in it, with which sha256, and how it did.

Torch-free on purpose: the RTP reference server and any other loader verify a folder before they read
a byte of model data. A folder is trusted only when every file listed in the manifest has the listed
sha256 and the manifest's major format version is one this recpipe understands.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import recpipe

MANIFEST_NAME = "manifest.json"
# Major bumps when a loader of the old major could misread the folder; minor for additions.
FORMAT_VERSION = "1.0"
_CHUNK = 1 << 20


class ExportError(RuntimeError):
    """An export failed (a backend could not be built, or failed parity); nothing was left in place."""


class ArtifactError(ValueError):
    """An exported folder cannot be trusted or read: missing manifest, sha256 mismatch, newer format."""


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file, streamed in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def library_versions() -> dict[str, str]:
    """Versions recorded in every manifest; torch/torchrec only when already imported or importable."""
    from importlib import metadata

    out = {"recpipe": recpipe.__version__, "python": platform.python_version()}
    for dist, key in (("torch", "torch"), ("torchrec", "torchrec"), ("fbgemm-gpu-cpu", "fbgemm_gpu")):
        try:
            out[key] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    try:
        out["torch"] = __import__("torch").__version__
    except ImportError:
        pass
    return out


@dataclass
class ParityReport:
    """How a backend's logits compare with the eager model's on the same held-out rows.

    Args:
        rows (int): rows scored (``>= 1000``).
        batch_sizes (list[int]): distinct batch sizes used (``[1, 7, 512]``).
        history_lengths (list[int]): history lengths guaranteed present (``[0, 1, 100]``), empty without sequences.
        max_abs_logit_diff (float): measured ``max |logit_backend - logit_eager|``.
        tolerance (float): the allowed maximum (``cfg.export.max_abs_logit_diff``).
        auc_eager (float), auc_backend (float): AUCs of both on the rows' labels.
        passed (bool): ``max_abs_logit_diff <= tolerance`` and the AUCs agree to 4 decimals.
    """

    rows: int
    batch_sizes: list[int]
    history_lengths: list[int]
    max_abs_logit_diff: float
    tolerance: float
    auc_eager: float
    auc_backend: float
    passed: bool
    seconds: float = 0.0


@dataclass
class Manifest:
    """Contents of ``manifest.json``.

    Args:
        backend (str): ``jit``, ``aoti``, ``onnx``, ``rtp`` or ``trt``.
        status (str): ``ok`` or ``skipped`` (then ``reason`` says why and ``files`` is empty).
        files (dict[str, dict]): relative path → ``{"sha256": hex, "bytes": n}``.
        inputs (dict): the input signature (names, dtypes, symbolic shapes, key order).
        versions (dict[str, str]): torch / torchrec / fbgemm_gpu / recpipe / python.
        parity (dict | None): :class:`ParityReport` as a mapping.
        model (dict): model type, FeatureSpec and config digests.
    """

    backend: str
    status: str = "ok"
    reason: str | None = None
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    inputs: dict[str, Any] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=library_versions)
    parity: dict[str, Any] | None = None
    model: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    format_version: str = FORMAT_VERSION

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def write(self, folder: str | Path) -> Path:
        path = Path(folder) / MANIFEST_NAME
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=1, sort_keys=True))
        os.replace(tmp, path)
        return path


def record_files(folder: str | Path, names: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """sha256 and size of ``names`` (default: every file under ``folder`` except the manifest)."""
    folder = Path(folder)
    if names is None:
        names = sorted(
            p.relative_to(folder).as_posix()
            for p in folder.rglob("*")
            if p.is_file() and p.name != MANIFEST_NAME
        )
    return {n: {"sha256": sha256_file(folder / n), "bytes": (folder / n).stat().st_size} for n in names}


def _major(version: str) -> int:
    try:
        return int(str(version).split(".")[0])
    except ValueError:
        raise ArtifactError(f"manifest format_version {version!r} is not 'MAJOR.MINOR'") from None


def read_manifest(folder: str | Path, verify: bool = True) -> Manifest:
    """Read ``folder/manifest.json``; with ``verify`` check the format version and every file's sha256.

    Raises:
        ArtifactError: no manifest, a newer major format version, a missing file or a sha256 mismatch
            (the message names the file).
    """
    folder = Path(folder)
    path = folder / MANIFEST_NAME
    if not path.is_file():
        raise ArtifactError(f"{folder} is not an exported model folder: {MANIFEST_NAME} is missing")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ArtifactError(f"{path} is not valid JSON: {err}") from None
    version = data.get("format_version", "0.0")
    if _major(version) > _major(FORMAT_VERSION):
        raise ArtifactError(
            f"{path}: manifest format version {version} is newer than this recpipe "
            f"({recpipe.__version__}) understands ({FORMAT_VERSION}); upgrade recpipe to load it"
        )
    known = set(Manifest.__dataclass_fields__)
    manifest = Manifest(**{k: v for k, v in data.items() if k in known})
    if verify:
        verify_files(folder, manifest)
    return manifest


def verify_files(folder: str | Path, manifest: Manifest) -> None:
    """Raise :class:`ArtifactError` naming the first listed file that is missing or whose sha256 differs."""
    folder = Path(folder).resolve()
    for name, info in manifest.files.items():
        path = (folder / name).resolve()
        if folder not in path.parents:
            raise ArtifactError(f"{folder}/{MANIFEST_NAME} lists {name!r} outside the folder")
        if not path.is_file():
            raise ArtifactError(f"{folder}: file {name!r} listed in {MANIFEST_NAME} is missing")
        digest = sha256_file(path)
        if digest != info["sha256"]:
            raise ArtifactError(
                f"{folder}: sha256 of {name!r} is {digest}, but {MANIFEST_NAME} says {info['sha256']}; "
                "the file was modified or corrupted after export"
            )
