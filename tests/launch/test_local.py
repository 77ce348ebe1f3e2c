"""Launcher pieces that need no training: the one worker command, its overrides, the local commands,
root-cause parsing, and a lone worker process failing with its traceback."""

import os
import sys
from pathlib import Path

import pytest
import torch

from recpipe.config import parse_overrides
from recpipe.launch.command import WORKER_MODULE, worker_command
from recpipe.launch.errors import LaunchError, TrainingFailed
from recpipe.launch.local import (
    launch_local,
    local_world,
    process_command,
    rank_threads,
    root_cause,
    torchrun_command,
)


def _sets(cmd: list[str]) -> list[str]:
    return [cmd[i + 1] for i, arg in enumerate(cmd) if arg == "--set"]


def test_worker_command_carries_every_input():
    cmd = worker_command("c.yaml", "tr", "out", "ev", "fg.json", {"train.max_steps": 5}, resume=False)
    assert cmd[:2] == ["-m", WORKER_MODULE]
    assert [cmd[cmd.index(f) + 1] for f in ("--config", "--train", "--out", "--eval", "--spec")] == [
        "c.yaml", "tr", "out", "ev", "fg.json",
    ]  # fmt: skip
    assert "--no-resume" in cmd and _sets(cmd) == ["train.max_steps=5"]
    bare = worker_command("c.yaml", "tr", "out")
    assert "--eval" not in bare and "--spec" not in bare and "--no-resume" not in bare and not _sets(bare)


def test_overrides_reach_the_worker_as_the_same_values():
    # The launcher's values, written on the command line and read back by the worker's parser.
    overrides = {
        "data.batch_size": 64, "train.max_steps": None, "train.lr": 0.5, "data.num_workers": 0, "x.flag": True,
        "model.name": "1", "data.csv.delimiter": "x=y", "train.sharding": {"t": "row_wise"}, "l": [1, 2],
    }  # fmt: skip
    assert parse_overrides(_sets(worker_command("c", "t", "o", overrides=overrides))) == overrides


def test_overrides_parse_as_yaml_scalars():
    assert parse_overrides(["a.b=3", "c=0.5", "d=true", "e=[1, 2]", "f=x=y"]) == {
        "a.b": 3, "c": 0.5, "d": True, "e": [1, 2], "f": "x=y",
    }  # fmt: skip
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_overrides(["novalue"])


def test_torchrun_command_is_a_real_torchrun_of_the_worker():
    worker = worker_command("c.yaml", "tr", "out", "ev", overrides={"train.max_steps": 5})
    cmd = torchrun_command(worker, 2)
    assert cmd[1:3] == ["-m", "torch.distributed.run"]
    assert cmd[cmd.index("--nproc-per-node") + 1] == "2"
    assert cmd[cmd.index("--rdzv-backend") + 1] == "c10d"
    # port 0: torchrun's agent binds a port the OS picks then (none is picked beforehand for another to take)
    assert cmd[cmd.index("--rdzv-endpoint") + 1] == "127.0.0.1:0"
    assert cmd[-len(worker) :] == worker


def test_one_process_runs_the_worker_without_torchrun():
    worker = worker_command("c.yaml", "tr", "out")
    cmd, what = process_command(worker, 1)
    assert cmd == [sys.executable, *worker] and what == "1 process"
    cmd, what = process_command(worker, 3)
    assert "torch.distributed.run" in cmd and what == "torchrun (3 processes)"


def test_local_world_is_the_clusters_world_size():
    assert local_world(1, 0, None) == 1 and local_world(2, 2, None) == 4 and local_world(4, 8, 2) == 2


def test_root_cause_is_the_failing_ranks_block():
    out = (
        "noise\n============================================================\n"
        "Root Cause (first observed failure):\n[1]:\n  rank      : 1 (local_rank: 1)\n"
        "  exitcode  : -9 (pid: 42)\n  traceback : Signal 9 (SIGKILL) received by PID 42\n"
        "============================================================\n"
    )
    assert root_cause(out).startswith("[1]:") and "SIGKILL" in root_cause(out)
    assert root_cause("a\nb") == "a\nb"


def test_root_cause_of_a_lone_process_is_its_last_traceback():
    out = (
        "step 1\nTraceback (most recent call last):\n  old\nKeyError: 1\nstep 2\n"
        "Traceback (most recent call last):\n  File \"w.py\", line 3\nValueError: no column 'clk'\n"
    )
    assert (
        root_cause(out)
        == "Traceback (most recent call last):\n  File \"w.py\", line 3\nValueError: no column 'clk'"
    )


def test_root_cause_of_a_lone_rank_drops_the_rank_prefix_and_other_output():
    out = (
        'train:   0%|   | 0/2[rank0]: Traceback (most recent call last):\n[rank0]:   File "loop.py", line 124\n'
        "[rank0]: DataError: missing columns ['clk']\n\ntrain:   0%|          | 0/2\n"
    )
    assert root_cause(out) == (
        "Traceback (most recent call last):\n  File \"loop.py\", line 124\nDataError: missing columns ['clk']"
    )


def test_a_failing_lone_worker_fails_with_its_error(tmp_path):
    # A real worker process (no torchrun) whose training data does not exist.
    config = Path(__file__).parents[1] / "pipelines" / "data" / "tiny_din.yaml"
    lines: list[str] = []
    with pytest.raises(LaunchError) as err:
        launch_local(
            config, str(tmp_path / "missing"), None, tmp_path / "out", 1, check=True, echo=lines.append
        )
    assert isinstance(err.value, TrainingFailed) and err.value.what == "1 process"
    assert err.value.returncode == 1 and err.value.root_cause.startswith("Traceback (most recent call last):")
    assert "missing" in err.value.root_cause.splitlines()[-1]
    assert str(err.value).startswith("1 process exit code 1: Traceback")


def test_rank_threads_is_the_setting_else_the_users_export_else_the_cores_split(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    assert rank_threads(3, {"OMP_NUM_THREADS": "5"}, 2) == 3  # the setting wins
    assert rank_threads(None, {"OMP_NUM_THREADS": "5"}, 2) == 5  # then what the user exported
    assert rank_threads(None, {"OMP_NUM_THREADS": " 7 "}, 4) == 7
    assert rank_threads(None, {}, 2) == 8 and rank_threads(None, {"OMP_NUM_THREADS": ""}, 3) == 5
    assert rank_threads(None, {}, 32) == 1  # more ranks than cores: one thread each
    for bad in ("0", "four", "-2", "1.5"):
        with pytest.raises(ValueError, match=f"OMP_NUM_THREADS={bad!r}.*train.threads_per_rank"):
            rank_threads(None, {"OMP_NUM_THREADS": bad}, 2)


@pytest.mark.parametrize(
    ("overrides", "exported", "argument", "want"),
    [
        ({"train.threads_per_rank": 2}, "6", None, "2"),
        ({}, "6", None, "6"),
        ({}, None, None, str(max(1, (os.cpu_count() or 1) // 2))),
        ({"train.threads_per_rank": 2}, "6", 1, "1"),  # a caller's explicit value (benchmarks/scaling.py)
    ],
)
def test_launch_local_starts_the_ranks_with_those_threads(
    tmp_path, monkeypatch, overrides, exported, argument, want
):
    import recpipe.launch.local as local

    config = Path(__file__).parents[1] / "pipelines" / "data" / "tiny_din.yaml"
    if exported is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", exported)
    started: list[dict[str, str]] = []
    # The command is not run: what is checked is the environment the ranks would be started with.
    monkeypatch.setattr(local, "_run", lambda cmd, env, write, timeout: (started.append(env), (0, []))[1])
    code = launch_local(
        config, "tr", None, tmp_path / "out", 2, overrides, threads_per_rank=argument, echo=lambda _: None
    )
    assert code == 0 and started[0]["OMP_NUM_THREADS"] == want


@pytest.mark.skipif(torch.cuda.is_available(), reason="FBGEMM's fused Adam trains the tables on GPU")
def test_sparse_adam_on_cpu_is_refused_before_any_rank_starts(tmp_path, monkeypatch):
    import recpipe.launch.local as local

    config = Path(__file__).parents[1] / "pipelines" / "data" / "tiny_din.yaml"
    started: list[list[str]] = []
    monkeypatch.setattr(local, "_run", lambda cmd, env, write, timeout: (started.append(cmd), (0, []))[1])
    adam = {"train.sparse_optimizer.type": "adam"}
    with pytest.raises(ValueError, match="on CPU the tables train with adagrad, rowwise_adagrad, sgd"):
        launch_local(config, "tr", None, tmp_path / "out", 2, adam, echo=lambda _: None)
    assert started == []
    launch_local(config, "tr", None, tmp_path / "out", 2, {"train.sparse_optimizer.type": "sgd"})
    assert len(started) == 1


@pytest.mark.skipif(torch.cuda.is_available(), reason="FBGEMM's fused Adam trains the tables on GPU")
def test_recpipe_train_with_sparse_adam_on_cpu_exits_2(tmp_path, capsys):
    from recpipe.cli.main import main
    from recpipe.data.synthetic import generate

    config = Path(__file__).parents[1] / "pipelines" / "data" / "tiny_din.yaml"
    generate("taobao", 200, tmp_path / "train", seed=0)
    argv = [
        "train",
        "--config",
        str(config),
        "--train",
        str(tmp_path / "train"),
        "--eval",
        str(tmp_path / "train"),
    ]
    argv += ["--out", str(tmp_path / "o")]
    code = main([*argv, "--set", "train.sparse_optimizer.type=adam"])
    assert code == 2
    assert "FBGEMM's fused Adam runs on GPU only" in capsys.readouterr().err
    assert not (tmp_path / "o" / "checkpoints").exists()
