"""Every table of a config capped at a number of rows: for runs whose figures do not depend on the tables' size
(benchmarks' ``--quick``, the tests' small trained models), where a full-size model's tables cost more to
allocate, initialize, write, hash and load than everything else the run does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

# The fields that size a table, in a feature or a sequence's sub-feature.
TABLE_SIZE_FIELDS = ("num_buckets", "hash_bucket_size")


def cap_tables(cfg: Any, cap: int | None) -> Any:
    """Cap every ``num_buckets`` and ``hash_bucket_size`` in ``cfg.features`` (sequence sub-features too) at
    ``cap`` rows, in place, and return ``cfg``; None leaves the config as it is. Ids still map by modulo and
    hashing, onto fewer rows.

    Example::

        cfg = cap_tables(load_config("configs/din_taobao_small.yaml"), 20_000)  # 50.3M → 1.9M parameters
    """
    if cap is None:
        return cfg

    def visit(node: Any) -> None:
        if isinstance(node, list):
            for item in node:
                visit(item)
            return
        fields = getattr(type(node), "model_fields", None)
        if fields is None:
            return
        for name in fields:
            value = getattr(node, name)
            if name in TABLE_SIZE_FIELDS and isinstance(value, int) and value > cap:
                setattr(node, name, cap)
            else:
                visit(value)

    visit(cfg.features)
    return cfg


def capped_config(path: str | Path, cap: int | None, folder: Path) -> Path:
    """``path``, or a copy of it in ``folder`` with every table capped at ``cap`` rows
    (:func:`cap_tables`'s rule on the YAML itself), for a run that hands a config file to another process or
    stage (``recpipe run``, torchrun, ``recpipe.stages.train``). None: ``path`` as it is."""
    if cap is None:
        return Path(path)

    def visit(node: Any) -> Any:
        if isinstance(node, list):
            return [visit(item) for item in node]
        if isinstance(node, dict):
            return {
                k: min(v, cap) if k in TABLE_SIZE_FIELDS and isinstance(v, int) else visit(v)
                for k, v in node.items()
            }
        return node

    data = yaml.safe_load(Path(path).read_text())
    data["features"] = visit(data["features"])
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / f"capped-{cap}-{Path(path).name}"
    out.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    return out
