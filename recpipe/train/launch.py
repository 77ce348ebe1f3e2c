"""Start a training job on this machine: a real ``torchrun`` of ``nproc_per_node`` worker processes.

The output of every rank is streamed through; if any rank fails, torchrun stops the others and the
failing rank's error (its traceback, recorded by the worker's ``@record``) is shown and returned.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from recpipe.config import load_config
from recpipe.config import parse_overrides


class LaunchError(RuntimeError):
    """A training job failed; ``returncode`` is torchrun's, ``root_cause`` the failing rank's report."""

    def __init__(self, returncode: int, root_cause: str) -> None:
        self.returncode, self.root_cause = returncode, root_cause
        super().__init__(f"training failed (torchrun exit code {returncode}):\n{root_cause}")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


_ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\):\n(.*?)\n=+", re.S)


def root_cause(output: str) -> str:
    """torchrun's "Root Cause" block (rank, exit code, traceback) from its output, else the output's tail."""
    m = _ROOT_CAUSE.search(output)
    if m:
        return m.group(1).strip()
    return "\n".join(output.splitlines()[-40:])


def torchrun_command(
    config_path: str | Path,
    train_uri: str,
    eval_uri: str | None,
    out_dir: str | Path,
    nproc_per_node: int,
    overrides: Mapping[str, Any] | None = None,
    resume: bool = True,
    spec_path: str | None = None,
) -> list[str]:
    """The torchrun command line of :func:`launch` (one node, c10d rendezvous on a free local port)."""
    cmd = [
        sys.executable, "-m", "torch.distributed.run",
        "--nproc-per-node", str(nproc_per_node),
        "--nnodes", "1",
        "--rdzv-backend", "c10d",
        "--rdzv-endpoint", f"127.0.0.1:{free_port()}",
        "--max-restarts", "0",
        "-m", "recpipe.train.worker",
        "--config", str(config_path), "--train", str(train_uri), "--out", str(out_dir),
    ]  # fmt: skip
    if eval_uri:
        cmd += ["--eval", str(eval_uri)]
    if spec_path:
        cmd += ["--spec", str(spec_path)]
    if not resume:
        cmd.append("--no-resume")
    for key, value in (overrides or {}).items():
        cmd += ["--set", f"{key}={value}"]
    return cmd


def launch(
    config_path: str | Path,
    train_uri: str,
    eval_uri: str | None,
    out_dir: str | Path,
    nproc_per_node: int | None = None,
    overrides: Mapping[str, Any] | list[str] | None = None,
    *,
    resume: bool = True,
    spec_path: str | None = None,
    threads_per_rank: int = 1,
    timeout: float | None = None,
    check: bool = False,
    echo: Callable[[str], None] | None = None,
) -> int:
    """Train with ``nproc_per_node`` processes under torchrun; returns torchrun's exit code.

    Args:
        config_path (str | Path): the config YAML.
        train_uri (str), eval_uri (str | None): the data.
        out_dir (str | Path): training output folder (checkpoints, metrics).
        nproc_per_node (int | None): processes; default ``train.nproc_per_node`` of the config.
        overrides (Mapping | list[str] | None): dotted config overrides, ``{"train.max_steps": 100}`` or
            ``["train.max_steps=100"]``.
        resume (bool): continue from the latest checkpoint in ``out_dir``.
        spec_path (str | None): the fitted FeatureSpec (default: ``out_dir/fg.json``, beside the data, or fitted).
        threads_per_rank (int): ``OMP_NUM_THREADS`` of every rank.
        timeout (float | None): seconds before the whole job is killed (exit code 124).
        check (bool): raise :class:`LaunchError` instead of returning a non-zero code.
        echo (Callable | None): where output lines go (default: this process's stdout).

    Example::

        code = launch("configs/din_taobao_small.yaml", "runs/x/data/train", "runs/x/data/eval",
                      "runs/x/train", nproc_per_node=2, overrides={"train.max_steps": 200})
    """
    if isinstance(overrides, list):
        overrides = parse_overrides(overrides)
    overrides = dict(overrides or {})
    cfg = load_config(config_path, overrides)  # fail here, once, on a bad config
    nproc = nproc_per_node or cfg.train.nproc_per_node
    if nproc < 1:
        raise ValueError(f"nproc_per_node must be >= 1, got {nproc}")
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    cmd = torchrun_command(config_path, train_uri, eval_uri, out_dir, nproc, overrides, resume, spec_path)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads_per_rank), "PYTHONUNBUFFERED": "1"}
    write = echo or (lambda line: print(line, end="", flush=True))
    tail: list[str] = []
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True
    )
    timed_out = threading.Event()

    def expire() -> None:
        timed_out.set()
        _kill_group(proc)

    timer = threading.Timer(timeout, expire) if timeout is not None else None
    if timer is not None:
        timer.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            write(line)
            tail.append(line)
            del tail[:-400]
        code = proc.wait()
    except BaseException:
        _kill_group(proc)
        raise
    finally:
        if timer is not None:
            timer.cancel()
    if timed_out.is_set():
        code = 124
    if code != 0:
        cause = root_cause("".join(tail))
        write(f"[recpipe.train] training failed (exit code {code}); failing rank:\n{cause}\n")
        if check:
            raise LaunchError(code, cause)
    return code


def _kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGTERM torchrun and its workers (their own session), then SIGKILL what is left."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
