"""Launcher pieces that need no processes: the torchrun command line, overrides, root-cause parsing."""

import pytest

from recpipe.train.launch import root_cause, torchrun_command
from recpipe.train.worker import parse_overrides


def test_torchrun_command_is_a_real_torchrun_of_the_worker():
    cmd = torchrun_command("c.yaml", "tr", "ev", "out", 2, {"train.max_steps": 5}, resume=False)
    assert cmd[1:3] == ["-m", "torch.distributed.run"]
    assert cmd[cmd.index("--nproc-per-node") + 1] == "2"
    assert cmd[cmd.index("--rdzv-backend") + 1] == "c10d"
    assert cmd[cmd.index("--rdzv-endpoint") + 1].startswith("127.0.0.1:")
    worker = cmd[cmd.index("-m", 3) :]
    assert worker[:2] == ["-m", "recpipe.train.worker"]
    assert "--no-resume" in worker and worker[worker.index("--set") + 1] == "train.max_steps=5"
    assert worker[worker.index("--eval") + 1] == "ev"


def test_overrides_parse_as_yaml_scalars():
    assert parse_overrides(["a.b=3", "c=0.5", "d=true", "e=[1, 2]", "f=x=y"]) == {
        "a.b": 3, "c": 0.5, "d": True, "e": [1, 2], "f": "x=y",
    }  # fmt: skip
    with pytest.raises(ValueError, match="key=value"):
        parse_overrides(["novalue"])


def test_root_cause_is_the_failing_ranks_block():
    out = (
        "noise\n============================================================\n"
        "Root Cause (first observed failure):\n[1]:\n  rank      : 1 (local_rank: 1)\n"
        "  exitcode  : -9 (pid: 42)\n  traceback : Signal 9 (SIGKILL) received by PID 42\n"
        "============================================================\n"
    )
    assert root_cause(out).startswith("[1]:") and "SIGKILL" in root_cause(out)
    assert root_cause("a\nb") == "a\nb"
