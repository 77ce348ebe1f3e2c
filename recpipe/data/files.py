"""Resolve a data URI (file, folder or glob; local or object store) into an ordered list of files."""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass
from typing import Literal

import pyarrow as pa
import pyarrow.fs as pafs

from recpipe.data.types import DataError

PARQUET_SUFFIXES = (".parquet", ".pq")
CSV_SUFFIXES = (".csv", ".tsv", ".txt")
COMPRESSION_SUFFIXES = (".gz", ".bz2", ".zst", ".lz4")
_GLOB_CHARS = set("*?[")

Format = Literal["parquet", "csv"]


@dataclass(frozen=True)
class DataFiles:
    """The files behind a URI, sorted, on one filesystem.

    Args:
        uri (str): what the user gave.
        filesystem (pafs.FileSystem): where the files live.
        paths (list[str]): filesystem paths of the files, in dataset order.

    Example::

        files = resolve_files("s3://bucket/train/*.parquet")
        files.paths    # ["bucket/train/part-00000.parquet", ...]
        files.name(0)  # "s3://bucket/train/part-00000.parquet"
    """

    uri: str
    filesystem: pafs.FileSystem
    paths: list[str]

    def name(self, i: int) -> str:
        """The user-facing name of file ``i`` (with the URI scheme for object stores)."""
        scheme = _scheme(self.uri)
        return f"{scheme}://{self.paths[i]}" if scheme else self.paths[i]


def _scheme(uri: str) -> str | None:
    if "://" not in uri:
        return None
    scheme = uri.split("://", 1)[0]
    return None if scheme == "file" else scheme


def filesystem_of(uri: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem of ``uri`` and the path on it (local paths made absolute)."""
    scheme = _scheme(uri)
    if scheme is None:
        local = uri.split("://", 1)[1] if uri.startswith("file://") else uri
        return pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(local))
    try:
        return pafs.FileSystem.from_uri(uri)
    except pa.ArrowInvalid as err:
        if "Unrecognized filesystem type" not in str(err):
            raise
        raise DataError(
            f"data source {uri!r}: no filesystem reads {scheme}:// here; recpipe reads local paths, file://, s3:// "
            "(and S3-compatible stores through AWS_ENDPOINT_URL), gs://, hdfs://, odps:// tables and synthetic: "
            "data (an oss:// bucket: mount it, or read it through an S3-compatible endpoint)"
        ) from None


def strip_compression(name: str) -> str:
    """``name`` without a trailing ``.gz``/``.bz2``/``.zst``/``.lz4``."""
    for suffix in COMPRESSION_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def format_of_name(path: str) -> Format | None:
    """``"parquet"`` or ``"csv"`` from the file name's suffix (compression suffixes ignored), else None."""
    name = strip_compression(path.lower())
    if name.endswith(PARQUET_SUFFIXES):
        return "parquet"
    if name.endswith(CSV_SUFFIXES):
        return "csv"
    return None


# The empty objects that Hadoop's S3 connectors and EMR write for a folder (``dt=20260101_$folder$`` beside
# ``dt=20260101/``): markers, not data; Spark, Hive and Trino skip them too.
FOLDER_MARKER = "_$folder$"


def hidden(relative: str) -> bool:
    """Whether a path (relative to the folder listed) names a file or folder that listing skips: a name
    starting with ``_`` or ``.`` (``_SUCCESS``, ``.crc`` files, ``_temporary/``), or a folder marker
    (``dt=20260101_$folder$``)."""
    return any(
        part.startswith(("_", ".")) or part.endswith(FOLDER_MARKER) for part in relative.split("/") if part
    )


def _list_folder(fs: pafs.FileSystem, folder: str) -> list[str]:
    infos = fs.get_file_info(pafs.FileSelector(folder, recursive=True))
    files = [
        i.path
        for i in infos
        if i.type == pafs.FileType.File and not hidden(i.path[len(folder) :].lstrip("/"))
    ]
    return choose_data_files(files, folder)


def choose_data_files(files: list[str], folder: str) -> list[str]:
    """The data files among ``files`` (all under ``folder``), sorted: the Parquet ones, else the CSV ones,
    else all (suffix-less files).

    Raises:
        DataError: ``files`` mix Parquet and CSV files.
    """
    by_format = {f: [p for p in files if format_of_name(p) == f] for f in ("parquet", "csv")}
    if by_format["parquet"] and by_format["csv"]:
        # Reading one format would silently drop the other's rows; reading both would mix two schemas.
        raise DataError(
            f"{folder} holds both Parquet ({len(by_format['parquet'])} files, e.g. "
            f"{by_format['parquet'][0]}) and CSV files ({len(by_format['csv'])}, e.g. {by_format['csv'][0]}); "
            "keep one format per folder, or name the files with a glob (folder/*.parquet)"
        )
    # Prefer files with a data suffix; a folder of suffix-less files (part-00000, day_0) is taken whole.
    chosen = by_format["parquet"] or by_format["csv"] or files
    return sorted(chosen)


def _glob(fs: pafs.FileSystem, pattern: str) -> list[str]:
    parts = pattern.split("/")
    first_glob = next(i for i, p in enumerate(parts) if _GLOB_CHARS & set(p))
    base = "/".join(parts[:first_glob]) or "/"
    recursive = len(parts) - first_glob > 1
    try:
        infos = fs.get_file_info(pafs.FileSelector(base, recursive=recursive, allow_not_found=True))
    except OSError as e:  # e.g. a permission error on the base folder
        raise DataError(f"cannot list {base!r} for pattern {pattern!r}: {e}") from e
    matched = []
    for info in infos:
        if info.type != pafs.FileType.File:
            continue
        path_parts = info.path.split("/")
        if len(path_parts) == len(parts) and all(
            fnmatch.fnmatchcase(a, b) for a, b in zip(path_parts, parts)
        ):
            matched.append(info.path)
    return sorted(matched)


def resolve_files(uri: str) -> DataFiles:
    """The files of ``uri``: one file, every data file of a folder (recursively, sorted; names starting
    with ``_`` or ``.``, and folder markers, skipped; Parquet files preferred over CSV over others), or a
    glob's matches.

    Args:
        uri (str): a local path or ``s3://``, ``gs://``, ``hdfs://``, ``file://`` URI, optionally a glob.

    Raises:
        DataError: nothing exists at ``uri`` or it holds no files.

    Example::

        resolve_files("/data/criteo/day_*.tsv.gz").paths
    """
    fs, path = filesystem_of(uri)
    path = path.rstrip("/") or "/"
    if _GLOB_CHARS & set(path):
        paths = _glob(fs, path)
        if not paths:
            raise DataError(f"no files match {uri!r}")
        return DataFiles(uri, fs, paths)
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.NotFound:
        raise DataError(f"no such file or folder: {uri!r}")
    if info.type == pafs.FileType.File:
        return DataFiles(uri, fs, [path])
    paths = _list_folder(fs, path)
    if not paths:
        raise DataError(
            f"no data files in folder {uri!r} (names starting with '_' or '.', and '…{FOLDER_MARKER}' folder "
            "markers, are skipped)"
        )
    return DataFiles(uri, fs, paths)


def detect_format(files: DataFiles) -> Format:
    """The format of ``files``: from the first file's suffix, or its leading bytes (``PAR1`` = Parquet)."""
    by_name = format_of_name(files.paths[0])
    if by_name is not None:
        return by_name
    with files.filesystem.open_input_file(files.paths[0]) as f:
        return "parquet" if f.read(4) == b"PAR1" else "csv"
