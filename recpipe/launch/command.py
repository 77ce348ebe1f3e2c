"""The one command line of a training process: ``-m recpipe.launch.worker --config … --train … --set …``.

Every launcher runs exactly this after its own interpreter: ``python`` for one process, local ``torchrun``
for a group on this machine, the PyTorchJob pods' ``torchrun`` across nodes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# "local": this machine (one process, or torchrun); "pytorchjob": a Kubeflow PyTorchJob across pods.
LAUNCHERS = ("local", "pytorchjob")

WORKER_MODULE = "recpipe.launch.worker"


def override_arg(key: str, value: Any) -> str:
    """``KEY=VALUE`` for ``--set``, the value written as JSON (a subset of YAML), so the worker's
    :func:`recpipe.config.parse_overrides` reads back the same value: ``None`` stays null, ``"1"`` a string.

    Args:
        key (str): dotted config key, e.g. ``data.batch_size``.
        value (Any): the already-parsed value.
    """
    return f"{key}={json.dumps(value, default=str)}"


def worker_command(
    config_path: str | Path,
    train_uri: str | Path,
    out_dir: str | Path,
    eval_uri: str | Path | None = None,
    spec_path: str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    resume: bool = True,
) -> list[str]:
    """The worker's arguments after the interpreter (``python`` or ``torchrun``).

    Args:
        config_path (str | Path): the config YAML, as the worker's machine sees it.
        train_uri (str | Path): training data.
        out_dir (str | Path): output folder (metrics.jsonl, checkpoints/, train_result.json).
        eval_uri (str | Path | None): validation data (none: no evaluation).
        spec_path (str | Path | None): the fitted FeatureSpec (none: found beside the data, or fitted).
        overrides (Mapping[str, Any] | None): dotted config overrides, ``{"train.max_steps": 100}``.
        resume (bool): continue from the latest checkpoint in ``out_dir``.

    Example::

        >>> worker_command("c.yaml", "data/train", "out", overrides={"data.batch_size": 64})[-2:]
        ['--set', 'data.batch_size=64']
    """
    cmd = [
        "-m",
        WORKER_MODULE,
        "--config",
        str(config_path),
        "--train",
        str(train_uri),
        "--out",
        str(out_dir),
    ]
    if eval_uri:
        cmd += ["--eval", str(eval_uri)]
    if spec_path:
        cmd += ["--spec", str(spec_path)]
    if not resume:
        cmd.append("--no-resume")
    for key, value in (overrides or {}).items():
        cmd += ["--set", override_arg(key, value)]
    return cmd
