"""The ``manifest.json`` of an exported backend folder: what is in it, with which sha256, and how it did.

Torch-free on purpose: the RTP reference server and any other loader verify a folder before they read
a byte of model data. A folder is trusted only when the manifest lists every file in it, every file has
the listed sha256, the manifest's major format version is one this recpipe understands and, when a
signing key is configured (:func:`recpipe.integrity.signing_key`), the manifest's signature is valid
(:func:`recpipe.integrity.verify_folder`).
"""

from __future__ import annotations

import json
import platform
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import recpipe
from recpipe.export.layout import backend_folder
from recpipe.integrity import IntegrityError, sign, signing_key, verify_folder, write_json_atomic
from recpipe.integrity import record_files as _record_files
from recpipe.integrity import sha256_file as sha256_file  # loaders and tests hash files through this module

MANIFEST_NAME = "manifest.json"
# Major bumps when a loader of the old major could misread the folder; minor for additions.
FORMAT_VERSION = "1.0"


class ExportError(RuntimeError):
    """An export failed (a backend could not be built, or failed parity); nothing was left in place."""


class ArtifactError(IntegrityError):
    """An exported folder cannot be trusted or read: missing manifest, sha256 mismatch, unlisted file,
    missing or invalid signature, newer format."""


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
        passed (bool): ``max_abs_logit_diff <= tolerance`` and the AUCs agree to 4 decimals (every task's).
        tasks (dict[str, dict]): a multi-task model's parity per task (label column → ``max_abs_logit_diff``,
            ``auc_eager``, ``auc_backend``); the top-level AUCs are the primary task's. Empty for one task.
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
    tasks: dict[str, dict[str, float]] = field(default_factory=dict)


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
        signature (str | None): HMAC-SHA256 of the rest under the signing key (``None``: unsigned).
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
    signature: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def write(self, folder: str | Path, key: bytes | None = None) -> Path:
        """Write ``folder/manifest.json`` atomically, signed with ``key`` (default: the process's key).

        Args:
            folder (str | Path): the backend folder.
            key (bytes | None): the signing key; default :func:`recpipe.integrity.signing_key`.
        """
        payload = sign(self.to_dict(), key if key is not None else signing_key())
        self.signature = payload["signature"]
        return write_json_atomic(Path(folder) / MANIFEST_NAME, payload)


def record_files(folder: str | Path, names: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """sha256 and size of ``names`` (default: every file under ``folder`` except the manifest)."""
    return _record_files(folder, names, exclude={MANIFEST_NAME})


def _major(version: str) -> int:
    try:
        return int(str(version).split(".")[0])
    except ValueError:
        raise ArtifactError(f"manifest format_version {version!r} is not 'MAJOR.MINOR'") from None


def read_manifest(folder: str | Path, verify: bool = True, key: bytes | None = None) -> Manifest:
    """Read ``folder/manifest.json``; with ``verify`` check the format version, the signature (when a key
    is configured), that every file is listed, and every file's sha256.

    Args:
        folder (str | Path): the backend folder (``out/<backend>``: the current export's, see
            :func:`recpipe.export.layout.backend_folder`).
        verify (bool): check the folder (``False``: only read the manifest, e.g. for its status).
        key (bytes | None): the signing key; default :func:`recpipe.integrity.signing_key`.

    Raises:
        ArtifactError: no manifest, a newer major format version, a missing, unlisted or modified file
            (the message names it), or a missing or invalid signature.
    """
    folder = backend_folder(folder)
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
    if verify:
        try:
            verify_folder(folder, data, MANIFEST_NAME, key if key is not None else signing_key())
        except IntegrityError as err:
            raise ArtifactError(str(err)) from None
    return Manifest(**{k: v for k, v in data.items() if k in known})
