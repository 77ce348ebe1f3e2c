"""Verified folders: a manifest holding every file's sha256, optionally signed, checked before any byte
of the folder is deserialized.

A folder is trusted only when (1) every file in it is listed in its manifest (an unlisted file is
refused: a loader may pick up any file it finds, e.g. DCP reads every ``.distcp`` its metadata names),
(2) every listed file has the listed sha256, and (3) when a signing key is configured, the manifest
carries a valid HMAC-SHA256 of its own content under that key, so whoever can write the folder but
cannot read the key cannot forge an artifact. Standard library only, so every layer may use it; the
checkpoint, export and registered-model manifests all go through :func:`verify_folder`.

Example::

    files = record_files("runs/x/export/rtp", exclude={"manifest.json"})
    payload = sign({"format_version": "1.0", "files": files}, signing_key())
    verify_folder("runs/x/export/rtp", payload, "manifest.json", signing_key())   # or IntegrityError
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

SIGNING_KEY_ENV = "RECPIPE_SIGNING_KEY"
SIGNATURE = "signature"
_CHUNK = 1 << 20
_UNSET: Any = object()
_configured_key: Any = _UNSET


class IntegrityError(ValueError):
    """A folder cannot be trusted: unlisted, missing or modified file, or a missing/invalid signature."""


# ------------------------------------------------------------------------------------------ the key
def configure_signing_key(key: str | bytes | None) -> None:
    """Set this process's manifest signing key (``None``: no signing, no signature required).

    Args:
        key (str | bytes | None): the HMAC key, e.g. read from a Kubernetes Secret at process entry.
    """
    global _configured_key
    _configured_key = key.encode() if isinstance(key, str) else key


def key_from_env(environ: Mapping[str, str] | None = None) -> bytes | None:
    """The key in ``RECPIPE_SIGNING_KEY`` (``None`` when unset or empty).

    Args:
        environ (Mapping[str, str] | None): the environment to read (default: ``os.environ``).
    """
    value = (os.environ if environ is None else environ).get(SIGNING_KEY_ENV, "")
    return value.encode() if value else None


def signing_key() -> bytes | None:
    """The key set by :func:`configure_signing_key`, else the environment's.

    Processes that never call :func:`configure_signing_key` (a torchrun worker, a KFP component) read the
    environment here, once per call: a key that is configured in the cluster must never be skipped
    because one entry point forgot to pass it down.
    """
    if _configured_key is not _UNSET:
        return _configured_key
    return key_from_env()


# ------------------------------------------------------------------------------------------- digests
def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file, streamed in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def folder_files(folder: str | Path, exclude: Iterable[str] = ()) -> list[str]:
    """Every file under ``folder`` (hidden ones and symlinks included) as sorted relative POSIX paths.

    Args:
        folder (str | Path): the folder.
        exclude (Iterable[str]): relative paths left out (the manifest itself).
    """
    folder = Path(folder)
    skip = set(exclude)
    out = []
    for p in folder.rglob("*"):
        if p.is_dir() and not p.is_symlink():
            continue
        rel = p.relative_to(folder).as_posix()
        if rel not in skip:
            out.append(rel)
    return sorted(out)


def record_files(
    folder: str | Path, names: Iterable[str] | None = None, exclude: Iterable[str] = ()
) -> dict[str, dict[str, Any]]:
    """``{relative path: {"sha256": hex, "bytes": n}}`` of ``names`` (default: every file but ``exclude``).

    Args:
        folder (str | Path): the folder.
        names (Iterable[str] | None): relative paths to record.
        exclude (Iterable[str]): relative paths left out when ``names`` is None.
    """
    folder = Path(folder)
    chosen = folder_files(folder, exclude) if names is None else list(names)
    return {n: {"sha256": sha256_file(folder / n), "bytes": (folder / n).stat().st_size} for n in chosen}


# ----------------------------------------------------------------------------------------- signature
def _canonical(payload: Mapping[str, Any]) -> bytes:
    body = {k: v for k, v in payload.items() if k != SIGNATURE}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def signature(payload: Mapping[str, Any], key: bytes) -> str:
    """Hex HMAC-SHA256 of ``payload`` (its ``signature`` field left out) in canonical JSON."""
    return hmac.new(key, _canonical(payload), hashlib.sha256).hexdigest()


def sign(payload: Mapping[str, Any], key: bytes | None) -> dict[str, Any]:
    """``payload`` with its ``signature`` (``None`` without a key)."""
    out = {k: v for k, v in payload.items() if k != SIGNATURE}
    out[SIGNATURE] = signature(out, key) if key else None
    return out


def check_signature(payload: Mapping[str, Any], key: bytes | None, where: str) -> None:
    """Refuse an unsigned or wrongly signed manifest when ``key`` is set (nothing to check without one).

    Raises:
        IntegrityError: naming ``where`` and what is wrong.
    """
    if not key:
        return
    got = payload.get(SIGNATURE)
    if not got:
        raise IntegrityError(
            f"{where} is not signed, but a signing key is configured ({SIGNING_KEY_ENV}); "
            "refusing to load an artifact whose origin cannot be checked"
        )
    if not hmac.compare_digest(str(got), signature(payload, key)):
        raise IntegrityError(
            f"{where}: the signature does not match its content under the configured key; "
            "the manifest was edited, or signed with another key"
        )


# -------------------------------------------------------------------------------------------- verify
def verify_folder(
    folder: str | Path,
    payload: Mapping[str, Any],
    manifest_name: str,
    key: bytes | None,
    unchecked: Iterable[str] = (),
) -> None:
    """Check ``folder`` against its manifest ``payload`` (with ``files``) before anything is read from it.

    Args:
        folder (str | Path): the folder.
        payload (Mapping): the parsed manifest (``files``: relative path → ``{"sha256", "bytes"}``).
        manifest_name (str): the manifest's file name in ``folder`` (the one file it does not list).
        key (bytes | None): the signing key; when set, the signature is required.
        unchecked (Iterable[str]): relative paths neither listed nor checked: files a store writes after
            the seal and that are read as plain data only (MLflow's ``registered_model_meta``).

    Raises:
        IntegrityError: a bad signature, a file listed outside the folder, a missing or modified file,
            or a file the manifest does not list (each message names the file).
    """
    root = Path(folder).resolve()
    where = f"{root}/{manifest_name}"
    check_signature(payload, key, where)
    files = payload.get("files")
    if not isinstance(files, Mapping):
        raise IntegrityError(f"{where} has no 'files' table")
    unlisted = sorted(set(folder_files(root, exclude={manifest_name, *unchecked})) - set(files))
    if unlisted:
        raise IntegrityError(
            f"{root}: {unlisted[0]!r} is not listed in {manifest_name} ({len(unlisted)} unlisted file(s)); "
            "a verified folder holds only the files its manifest names"
        )
    for name, info in files.items():
        path = (root / name).resolve()
        if root not in path.parents:
            raise IntegrityError(f"{where} lists {name!r} outside the folder")
        if not path.is_file():
            raise IntegrityError(f"{root}: file {name!r} listed in {manifest_name} is missing")
        digest = sha256_file(path)
        want = info.get("sha256") if isinstance(info, Mapping) else None
        if digest != want:
            raise IntegrityError(
                f"{root}: sha256 of {name!r} is {digest}, but {manifest_name} says {want}; "
                "the file was modified or corrupted after it was written"
            )


def write_json_atomic(path: str | Path, payload: Mapping[str, Any]) -> Path:
    """Write ``payload`` as JSON to ``path`` through a temporary file and ``os.replace``."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as fh:
        fh.write(json.dumps(payload, indent=1, sort_keys=True))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return path


def read_json(path: str | Path, what: str) -> dict[str, Any]:
    """A JSON object from ``path`` (``what`` names it in the error).

    Raises:
        IntegrityError: the file is missing, is not JSON or is not an object.
    """
    path = Path(path)
    if not path.is_file():
        raise IntegrityError(f"{path.parent} is not {what}: {path.name} is missing")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise IntegrityError(f"{path} is not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise IntegrityError(f"{path} is not a JSON object")
    return data


# ------------------------------------------------------------------------------------ sealed folders
def seal_folder(
    folder: str | Path,
    manifest_name: str,
    kind: str,
    key: bytes | None = None,
    exclude: Iterable[str] = (),
    out: str | Path | None = None,
) -> Path:
    """List every file of ``folder`` with its sha256 in a signed manifest ``manifest_name``.

    Args:
        folder (str | Path): the folder, complete.
        manifest_name (str): the manifest's file name (never listed in itself).
        kind (str): what the folder is (``"checkpoint"``, ``"registered_model"``), written in the manifest.
        key (bytes | None): the signing key; default :func:`signing_key`.
        exclude (Iterable[str]): other relative paths left out (files a store adds afterwards).
        out (str | Path | None): where the manifest is written (default: inside ``folder``).
    """
    payload = {
        "format_version": "1.0",
        "kind": kind,
        "files": record_files(folder, exclude={manifest_name, *exclude}),
    }
    where = Path(out if out is not None else folder) / manifest_name
    return write_json_atomic(where, sign(payload, key if key is not None else signing_key()))


def verify_sealed(
    folder: str | Path, manifest_name: str, what: str, key: bytes | None = None, unchecked: Iterable[str] = ()
) -> dict[str, Any]:
    """Read ``folder``'s manifest (``what`` names the folder in the error) and :func:`verify_folder` it under
    ``key`` (default :func:`signing_key`); returns the manifest.

    Raises:
        IntegrityError: as :func:`read_json` and :func:`verify_folder` do.
    """
    payload = read_json(Path(folder) / manifest_name, what)
    verify_folder(folder, payload, manifest_name, key if key is not None else signing_key(), unchecked)
    return payload
