"""The train → evaluate → export walk the end-to-end tests of new features and models share: their rows and
config written as the stages read them, one training through ``recpipe.stages``, and every export backend's
parity checked (imported as a bare module, as ``raw_rows``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from recpipe.stages import evaluate, export, train


def write_splits(
    root: Path, train_rows: pa.Table, eval_rows: pa.Table, config: dict[str, Any]
) -> dict[str, str]:
    """``root/train``, ``root/eval`` (one Parquet file each) and ``root/config.yaml``: their paths by name."""
    for name, table in (("train", train_rows), ("eval", eval_rows)):
        (root / name).mkdir()
        pq.write_table(table, root / name / "part-00000.parquet")
    (root / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return {"config": str(root / "config.yaml"), "train": str(root / "train"), "eval": str(root / "eval")}


def train_and_evaluate(data: dict[str, str], tmp_path: Path) -> tuple[Path, Any]:
    """Train on ``data["train"]`` into ``tmp_path/train`` and evaluate the checkpoint on ``data["eval"]``."""
    checkpoint = tmp_path / "train"
    train.run(
        config_path=data["config"], train_dir=data["train"], eval_dir=data["eval"], out_dir=str(checkpoint)
    )
    report = evaluate.run(checkpoint=str(checkpoint), data_dir=data["eval"], out=str(tmp_path / "eval.json"))
    return checkpoint, report


def export_with_parity(checkpoint: Path, backends: Sequence[str], out_dir: Path, data_uri: str) -> Any:
    """Export ``checkpoint`` to every one of ``backends``; each must pass its parity check (max |dlogit| below
    1e-4 against the eager model)."""
    exported = export.run(
        checkpoint=str(checkpoint), backends=",".join(backends), out_dir=str(out_dir), data_uri=data_uri
    )
    assert exported.ok and sorted(exported.backends) == sorted(backends)
    for name, b in exported.backends.items():
        assert b.status == "ok" and b.parity.passed and b.max_abs_logit_diff < 1e-4, name
    return exported
