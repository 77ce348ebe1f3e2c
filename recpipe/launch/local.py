"""Start a training job on this machine: one plain worker process, or ``torchrun`` of ``nproc`` of them.

Either way the worker is :func:`recpipe.launch.command.worker_command`. The output of every rank is
streamed through; if a rank fails, torchrun stops the others, and the failing rank's error (its traceback,
recorded by the worker's ``@record``, or the traceback a lone process printed) is shown and returned.
"""

from __future__ import annotations

import io
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from recpipe.config import RecpipeConfig, load_config
from recpipe.launch.command import worker_command
from recpipe.launch.errors import LaunchError

_ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\):\n(.*?)\n=+", re.S)
# A lone process's traceback; once its process group is up, torch's excepthook prefixes every line with
# "[rank<r>]: ", and the progress bar (no newline) may share its first line or follow it.
_TRACEBACK = re.compile(r"(\[rank\d+\]: )?Traceback \(most recent call last\):")
TAIL_LINES = 40


def root_cause(output: str) -> str:
    """The failing rank's report in a job's output: torchrun's "Root Cause" block (rank, exit code,
    traceback), else the last Python traceback (a lone process), else the output's last lines."""
    m = _ROOT_CAUSE.search(output)
    if m:
        return m.group(1).strip()
    lines = output.splitlines()
    starts = [(i, m) for i, line in enumerate(lines) if (m := _TRACEBACK.search(line))]
    if starts:
        i, m = starts[-1]
        block = [lines[i][m.start() :], *lines[i + 1 :]]
        prefix = m.group(1)
        if prefix:
            block = [line[len(prefix) :] for line in block if line.startswith(prefix)]
        return "\n".join(block).strip()
    return "\n".join(lines[-TAIL_LINES:])


def local_world(workers: int, gpus_per_worker: int, nproc_per_node: int | None) -> int:
    """Processes to start here: ``nproc_per_node`` if given, else ``workers × max(1, gpus_per_worker)`` (the
    world size the PyTorchJob would have).

    Args:
        workers (int): pods the cluster job would have (>= 1).
        gpus_per_worker (int): GPUs per pod (0: CPU, one process per pod).
        nproc_per_node (int | None): an explicit process count.
    """
    if nproc_per_node is not None:
        return int(nproc_per_node)
    return max(1, int(workers)) * max(1, int(gpus_per_worker))


def torchrun_command(worker: Sequence[str], nproc_per_node: int) -> list[str]:
    """``python -m torch.distributed.run`` of ``worker`` on this node: c10d rendezvous on port 0, so the OS gives
    torchrun's agent a free port when it binds it and the ranks read it from the agent (a port picked before the
    launch could be taken by another process while torchrun imports torch).

    Args:
        worker (Sequence[str]): :func:`~recpipe.launch.command.worker_command`'s arguments.
        nproc_per_node (int): processes.
    """
    return [
        sys.executable, "-m", "torch.distributed.run",
        "--nproc-per-node", str(nproc_per_node),
        "--nnodes", "1",
        "--rdzv-backend", "c10d",
        "--rdzv-endpoint", "127.0.0.1:0",
        "--max-restarts", "0",
        *worker,
    ]  # fmt: skip


def process_command(worker: Sequence[str], nproc_per_node: int) -> tuple[list[str], str]:
    """The command of ``nproc_per_node`` local processes and its name for messages: one plain ``python``
    process (the trainer forms its own 1-process group), or torchrun."""
    if nproc_per_node == 1:
        return [sys.executable, *worker], "1 process"
    return torchrun_command(worker, nproc_per_node), f"torchrun ({nproc_per_node} processes)"


def rank_threads(threads_per_rank: int | None, environ: Mapping[str, str], nproc: int) -> int:
    """``OMP_NUM_THREADS`` of each of ``nproc`` local ranks: ``threads_per_rank`` (``train.threads_per_rank``)
    if set, else the ``OMP_NUM_THREADS`` the user exported, else this machine's cores split among the ranks.

    Args:
        threads_per_rank (int | None): the setting.
        environ (Mapping[str, str]): the launching process's environment.
        nproc (int): ranks on this machine.

    Raises:
        ValueError: an exported ``OMP_NUM_THREADS`` that is not a positive integer (refused, not replaced).

    Example::

        >>> rank_threads(None, {"OMP_NUM_THREADS": "3"}, 2)
        3
    """
    if threads_per_rank is not None:
        return int(threads_per_rank)
    exported = environ.get("OMP_NUM_THREADS", "").strip()
    if exported:
        if not exported.isdigit() or int(exported) < 1:
            raise ValueError(
                f"OMP_NUM_THREADS={exported!r} in the environment is not a positive integer; "
                "unset it or set train.threads_per_rank"
            )
        return int(exported)
    return max(1, (os.cpu_count() or 1) // nproc)


def check_ranks_device(cfg: RecpipeConfig) -> None:
    """Refuse, before any rank starts, a config the ranks' device cannot train (the sparse optimizer: Adam
    has no CPU kernel), so it is a config error (``ValueError``, exit code 2), not a failed rank (1).

    Args:
        cfg (RecpipeConfig): the run's config.
    """
    from recpipe.train.optim_check import check_sparse_optimizer, ranks_device

    check_sparse_optimizer(cfg.train.sparse_optimizer, ranks_device())


def launch_local(
    config_path: str | Path,
    train_uri: str,
    eval_uri: str | None,
    out_dir: str | Path,
    nproc_per_node: int | None = None,
    overrides: Mapping[str, Any] | None = None,
    *,
    resume: bool = True,
    spec_path: str | None = None,
    threads_per_rank: int | None = None,
    timeout: float | None = None,
    check: bool = False,
    echo: Callable[[str], None] | None = None,
) -> int:
    """Train with ``nproc_per_node`` processes on this machine; returns the job's exit code.

    Args:
        config_path (str | Path): the config YAML.
        train_uri (str), eval_uri (str | None): the data.
        out_dir (str | Path): training output folder (checkpoints, metrics).
        nproc_per_node (int | None): processes (default 1; the train stage passes its world size).
        overrides (Mapping | None): dotted config overrides, ``{"train.max_steps": 100}``.
        resume (bool): continue from the latest checkpoint in ``out_dir``.
        spec_path (str | None): the fitted FeatureSpec (default: ``out_dir/fg.json``, beside the data, or
            fitted).
        threads_per_rank (int | None): ``OMP_NUM_THREADS`` of every rank (default: :func:`rank_threads` of
            ``train.threads_per_rank`` and this environment).
        timeout (float | None): seconds before the whole job is killed (exit code 124).
        check (bool): raise :class:`~recpipe.launch.errors.LaunchError` instead of returning a non-zero code.
        echo (Callable | None): where output lines go (default: this process's stdout).

    Example::

        code = launch_local("configs/din_taobao_small.yaml", "runs/x/data/train", "runs/x/data/eval",
                            "runs/x/train", nproc_per_node=2, overrides={"train.max_steps": 200})
    """
    overrides = dict(overrides or {})
    cfg = load_config(config_path, overrides)  # fail here, once, on a bad config
    nproc = 1 if nproc_per_node is None else nproc_per_node
    if nproc < 1:
        raise ValueError(f"nproc_per_node must be >= 1, got {nproc}")
    check_ranks_device(cfg)
    threads = (
        rank_threads(cfg.train.threads_per_rank, os.environ, nproc)
        if threads_per_rank is None
        else threads_per_rank
    )
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    worker = worker_command(config_path, train_uri, out_dir, eval_uri, spec_path, overrides, resume)
    cmd, what = process_command(worker, nproc)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1"}
    write = echo or (lambda line: print(line, end="", flush=True))
    code, tail = _run(cmd, env, write, timeout)
    if code != 0:
        cause = root_cause("".join(tail))
        write(f"[recpipe.train] training failed (exit code {code}); failing rank:\n{cause}\n")
        if check:
            raise LaunchError(what, code, cause)
    return code


def _run(
    cmd: list[str], env: dict[str, str], write: Callable[[str], None], timeout: float | None
) -> tuple[int, list[str]]:
    """Run ``cmd`` in its own session, streaming its output; (exit code, last output lines)."""
    tail: list[str] = []
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )
    # newline="": a progress bar's "\r" frames stay frames (a terminal redraws them in place) instead of
    # becoming one line each.
    assert proc.stdout is not None
    stream = io.TextIOWrapper(proc.stdout, encoding="utf-8", errors="replace", newline="")
    timed_out = threading.Event()

    def expire() -> None:
        timed_out.set()
        _kill_group(proc)

    timer = threading.Timer(timeout, expire) if timeout is not None else None
    if timer is not None:
        timer.start()
    try:
        for line in stream:
            write(line)
            if line.endswith("\r"):
                continue  # a progress frame: the tail keeps whole lines
            tail.append(line)
            del tail[:-400]
        code = proc.wait()
    except BaseException:
        _kill_group(proc)
        raise
    finally:
        if timer is not None:
            timer.cancel()
    return (124 if timed_out.is_set() else code), tail


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the job (torchrun and its workers: their own session), then SIGKILL what is left."""
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
