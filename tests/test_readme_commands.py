"""The README's command-line walk runs as written, in order, in one folder (issue 17: its export example's
paths did not follow from its ingest example, and train/evaluate/register were never shown)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def walk_commands() -> list[str]:
    """The ``recpipe`` lines of the README's first bash block under "## Command line"."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Command line") :]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block is not None
    return [line for line in block.group(1).splitlines() if line.startswith(".venv/bin/recpipe ")]


def test_the_walk_covers_every_step_in_one_folder():
    steps = [shlex.split(c)[1] for c in walk_commands()]
    assert steps == [
        "data",
        "ingest",
        "fit",
        "train",
        "evaluate",
        "export",
        "register",
        "promote",
        "models",
        "predict",
    ]
    assert all("runs/demo" in c for c in walk_commands())


@pytest.mark.slow
def test_every_readme_walk_command_works_as_written(tmp_path):
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "RECPIPE_RUNS")}
    env["RECPIPE_LOG_DIR"] = str(tmp_path / "logs")
    shown = {}
    for command in walk_commands():
        argv = shlex.split(command, comments=True)[1:]
        proc = subprocess.run(
            [sys.executable, "-m", "recpipe.cli.main", *argv],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert proc.returncode == 0, f"{command}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
        shown[argv[0]] = proc.stdout
    assert re.search(r"^\s+1\s+\S*champion\S*\s+0\.\d{4}\s+-\s", shown["models"], re.M), shown["models"]
    demo = tmp_path / "runs" / "demo"
    assert (demo / "scores.parquet").is_file() and (demo / "mlflow.db").is_file()
