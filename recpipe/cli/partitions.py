"""The ``--partitions`` flag of ``recpipe ingest`` and ``recpipe run``: the config's ``data.partitions``."""

from __future__ import annotations

import argparse
from typing import Any


def partition_overrides(a: argparse.Namespace) -> dict[str, Any]:
    """``--set`` overrides, with ``--partitions`` as ``data.partitions`` (``ingest`` and ``run``)."""
    from recpipe.config import parse_overrides

    overrides = parse_overrides(a.set)
    if a.partitions is not None:
        overrides["data.partitions"] = a.partitions
    return overrides


def partitions_arg(p: argparse.ArgumentParser) -> None:
    """Add ``--partitions SELECTOR`` to ``p``."""
    p.add_argument(
        "--partitions",
        default=None,
        help="partitions of a hive-style folder (dt=YYYYMMDD/) or ODPS table to read, as data.partitions: "
        "dt=20260101..20260107, dt=20260107, latest, last:7 (eval: the newest selected one)",
    )
