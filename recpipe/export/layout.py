"""Where an export lives in its folder, so that a whole export (every backend and ``export.json``)
becomes visible at once.

::

    out/
      export.json                      the pointer, written last (os.replace): {"version": ..., "backends": ...}
      versions/<version>/<backend>/    one complete export per version (the current one and the one before)
      .staging-<id>/                   an export being built (removed on failure, stale ones on the next run)

``out/<backend>`` keeps working as a name: :func:`backend_folder` turns it into the current version's
folder through the pointer. Plain folders, no symlinks: an export folder is uploaded to object stores
(KFP output artifacts), which do not keep links. A crash at any point leaves the previous pointer and
the previous version untouched, so the previous export stays fully usable.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

from recpipe.integrity import write_json_atomic

POINTER = "export.json"
VERSIONS = "versions"
STAGING_PREFIX = ".staging-"
KEEP_VERSIONS = 2  # the current one and the one a running server may still be reading


def new_version() -> str:
    """A sortable, unique version name: ``20261130T175100-ab12cd34``."""
    return f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:8]}"


def read_pointer(root: str | Path) -> dict[str, Any] | None:
    """The export's ``export.json`` (``None`` if there is none or it names no version)."""
    path = Path(root) / POINTER
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("version"), str) else None


def version_folder(root: str | Path, version: str) -> Path:
    return Path(root) / VERSIONS / version


def backend_folder(folder: str | Path) -> Path:
    """The real folder of an exported backend: ``out/<backend>`` → ``out/versions/<current>/<backend>``.

    Args:
        folder (str | Path): ``out/<backend>`` (resolved through ``out/export.json``) or a backend folder
            itself (returned as it is).
    """
    folder = Path(folder)
    pointer = read_pointer(folder.parent)
    if pointer is not None and folder.name in pointer.get("backends", {}):
        current = version_folder(folder.parent, pointer["version"]) / folder.name
        # A version folder describes itself with the same export.json: it has no versions/ of its own.
        if current.is_dir():
            return current
    return folder


def clean_stale(root: str | Path) -> None:
    """Remove what interrupted exports left: staging folders, versions the pointer does not keep, and
    backend folders of the layout before versions (now shadowed by the pointer)."""
    root = Path(root)
    pointer = read_pointer(root)
    for p in root.glob(f"{STAGING_PREFIX}*"):
        shutil.rmtree(p, ignore_errors=True)
    if pointer is None:
        return
    keep = {pointer["version"], pointer.get("previous")}
    versions = root / VERSIONS
    if versions.is_dir():
        for p in versions.iterdir():
            if p.name not in keep:
                shutil.rmtree(p, ignore_errors=True)
    for name in pointer.get("backends", {}):
        legacy = root / name
        if (legacy / "manifest.json").is_file() and not legacy.is_symlink():
            shutil.rmtree(legacy, ignore_errors=True)


def publish(root: str | Path, staging: Path, version: str, result: dict[str, Any]) -> Path:
    """Move the finished ``staging`` folder in as ``version``, then switch the pointer to it.

    Args:
        root (str | Path): the export folder.
        staging (Path): a complete export (``<backend>/`` folders) inside ``root``.
        version (str): the new version's name (:func:`new_version`).
        result (dict): the export's result (``backends`` with their folders in the version).

    Returns:
        Path: the new version's folder.
    """
    root = Path(root)
    previous = read_pointer(root)
    target = version_folder(root, version)
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(staging, target)
    pointer = {**result, "version": version, "previous": previous["version"] if previous else None}
    write_json_atomic(target / POINTER, pointer)  # the version describes itself, too
    write_json_atomic(root / POINTER, pointer)  # the one pointer: from here on the new export is visible
    clean_stale(root)
    return target


def is_retrieval_export(folder: str | Path) -> bool:
    """Whether ``folder`` is a retrieval export or one of its versions (its ``export.json`` says ``kind:
    retrieval``). Reads the pointer only: a server decides what to load without importing retrieval code."""
    pointer = read_pointer(folder)
    return pointer is not None and pointer.get("kind") == "retrieval"
