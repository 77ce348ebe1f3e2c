"""One line per failure, the traceback in a log file, exit codes scripts can use (issue 17)."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from recpipe.cli import main as cli
from recpipe.cli.console import EXIT_ERROR, EXIT_GATE, EXIT_USAGE, Session, _Filter, error_line, job_succeeded
from recpipe.data.synthetic import generate

ROOT = Path(__file__).resolve().parents[2]
RECPIPE = [sys.executable, "-m", "recpipe.cli.main"]
CRITEO = ROOT / "configs" / "dlrm_criteo_small.yaml"

# What a failing rank's report looks like (recpipe.launch.local.root_cause of a 1-process job).
REPORT = """1 process exit code 1: Traceback (most recent call last):
  File "/work/main/recpipe/train/data.py", line 239, in _prepare
    outs = [fg(rb, file, first) for rb, file, first in _join_by_file(pieces)]
            ^^^^^^^^^^^^^^^^^^^
  File "/work/main/recpipe/features/fg.py", line 155, in __call__
    raise self._first_error(bads, file, first_row)
recpipe.features.fg.BadRowError: part-00000.parquet, row 3, column 'clk': expected a label of 0 or 1, got 2
(raised in recpipe data worker thread 0)"""


def test_error_line_is_the_exception_of_the_last_traceback_without_its_module():
    assert error_line(REPORT) == "part-00000.parquet, row 3, column 'clk': expected a label of 0 or 1, got 2"
    assert error_line("killed\nexit code -9") == "exit code -9"
    torchrun = """torchrun (2 processes) exit code 1: [1]:
  time      : 2026-11-30_17:43:51
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 963)
  traceback : Traceback (most recent call last):
    File "/work/main/recpipe/train/loop.py", line 124, in train
      return _Trainer(cfg, spec, env, Path(out_dir)).run(train_uri, eval_uri, resume)
             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  recpipe.data.types.DataError: part-00001.parquet, row 7, column 'price': expected a finite number, got 'abc'
  (raised in recpipe data worker thread 0)"""
    assert (
        error_line(torchrun)
        == "part-00001.parquet, row 7, column 'price': expected a finite number, got 'abc'"
    )


def test_filter_keeps_noise_and_tracebacks_in_the_log_and_frames_on_the_console():
    console, log = io.StringIO(), io.StringIO()
    f = _Filter(console, log, verbose=False)
    f.write("[recpipe.train] training 2 step(s)\n")
    f.write("/x/planners.py:552: FutureWarning: HeuristicalStorageReservation is known to cause issues\n")
    f.write("  else HeuristicalStorageReservation(\n")
    f.write("WARNING:torchrec.distributed.planner:There is a known issue\n")
    f.write("2026/11/30 18:17:46 INFO mlflow.store.db.utils: Creating initial MLflow database tables...\n")
    f.write("\rDownloading artifacts:  50%|#####     | 1/2\rDownloading artifacts: 100%|##########| 2/2\n")
    f.write(
        "\rtrain:   0%|  | 0/2\rtrain:  50%|  | 1/2[rank0]:W1130 17:43:51 torch/fx/_symbolic_trace.py:56] x\n"
    )
    f.write("\rtrain: 100%|  | 2/2\n[rank0]: Traceback (most recent call last):\n")
    f.write('  File "loop.py", line 3\nDataError: bad\n[recpipe.train] training failed (exit code 1)\n')
    f.flush()
    shown = console.getvalue()
    assert shown == (
        "[recpipe.train] training 2 step(s)\ntrain:   0%|  | 0/2\rtrain:  50%|  | 1/2\rtrain: 100%|  | 2/2\n"
    )
    kept = log.getvalue()
    assert "FutureWarning" in kept and "WARNING:torchrec" in kept and "DataError: bad" in kept
    assert "INFO mlflow.store" in kept and "Downloading artifacts: 100%" in kept
    assert "0/2" not in kept and "train: 100%|  | 2/2\n" in kept  # the bar's last frame only


def test_after_a_job_that_succeeded_the_console_shows_output_again(tmp_path, capsys):
    with Session("train", directory=tmp_path):
        print("Traceback (most recent call last):\nValueError: retried")
        print("hidden")
        job_succeeded()
        print('{"checkpoint_dir": "out"}')
    assert capsys.readouterr().out == '{"checkpoint_dir": "out"}\n'


def test_the_log_folder_keeps_the_newest_logs_only(tmp_path, monkeypatch):
    import recpipe.cli.console as console

    monkeypatch.setattr(console, "KEEP_LOGS", 3)
    for i in range(5):
        old = tmp_path / f"train-{i}.log"
        old.write_text("x")
        os.utime(old, (1000 + i, 1000 + i))
    with Session("fit", directory=tmp_path) as s:
        pass
    assert sorted(p.name for p in tmp_path.glob("*.log")) == sorted(
        ["train-3.log", "train-4.log", s.log_path.name]
    )


def test_a_log_another_command_pruned_meanwhile_does_not_fail_this_one(tmp_path, monkeypatch):
    """Commands run side by side prune one folder: a log listed and then removed by another is skipped (a CI
    run failed a command with FileNotFoundError from the prune)."""
    import recpipe.cli.console as console

    monkeypatch.setattr(console, "KEEP_LOGS", 2)
    for i in range(4):
        old = tmp_path / f"train-{i}.log"
        old.write_text("x")
        os.utime(old, (1000 + i, 1000 + i))
    listed = Path.glob

    def racing(self, pattern):
        found = list(listed(self, pattern))
        (tmp_path / "train-0.log").unlink(missing_ok=True)  # the other command's prune, between list and stat
        return iter(found)

    monkeypatch.setattr(Path, "glob", racing)
    with Session("fit", directory=tmp_path) as s:
        pass
    monkeypatch.setattr(Path, "glob", listed)
    assert sorted(p.name for p in tmp_path.glob("*.log")) == sorted(["train-3.log", s.log_path.name])


def test_session_keeps_warnings_in_the_log_and_shows_one_line_per_failure(tmp_path, capsys):
    import warnings

    with warnings.catch_warnings(), Session("train", directory=tmp_path) as s:
        warnings.simplefilter("always")  # pytest's own settings ignore FutureWarning
        warnings.warn("a dependency is deprecated", FutureWarning, stacklevel=1)
        code = s.fail(RuntimeError("no complete checkpoint at nope"), EXIT_ERROR)
    err = capsys.readouterr().err.splitlines()
    assert code == 1 and err == [
        "recpipe train: error: no complete checkpoint at nope",
        f"recpipe train: full log: {s.log_path}",
    ]
    kept = s.log_path.read_text()
    assert (
        "FutureWarning: a dependency is deprecated" in kept and "RuntimeError: no complete checkpoint" in kept
    )


@pytest.mark.parametrize(
    ("argv", "code", "text"),
    [
        (["train", "--config", "nope.yaml", "--train", "x", "--eval", "y", "--out", "z"], EXIT_USAGE, "nope.yaml"),
        (["evaluate", "--checkpoint", "nope", "--data", "x", "--out", "r.json"], EXIT_ERROR, "nope"),
        (["ingest", "--config", str(CRITEO), "--source", "synthetic:taobao?rows=100", "--out", "d"], EXIT_USAGE,
         "missing columns ['C1', 'C2'"),
    ],
)  # fmt: skip
def test_exit_codes_and_one_line(tmp_path, monkeypatch, capsys, argv, code, text):
    monkeypatch.setenv("RECPIPE_LOG_DIR", str(tmp_path / "logs"))
    monkeypatch.chdir(tmp_path)
    assert cli.main(argv) == code
    err = capsys.readouterr().err
    assert err.startswith(f"recpipe {argv[0]}: error: ") and text in err and "Traceback" not in err
    log = Path(err.rstrip().splitlines()[-1].split("full log: ")[1])
    assert "Traceback (most recent call last)" in log.read_text()


def test_a_rejected_gate_exits_3(tmp_path, monkeypatch, capsys):
    from recpipe.stages import evaluate

    class Rejected:
        gate_passed = False
        gate_reasons = ["FAIL auc 0.51 < min_auc 0.60"]

        def describe(self) -> str:
            return "gate: FAILED"

    monkeypatch.setattr(evaluate, "run", lambda *a, **k: Rejected())
    argv = ["evaluate", "--checkpoint", "c", "--data", "d", "--out", str(tmp_path / "r.json")]
    assert cli.main(argv) == EXIT_GATE
    assert "FAIL auc 0.51 < min_auc 0.60" in capsys.readouterr().err


def test_a_failing_rank_reaches_the_console_as_one_line(tmp_path):
    # Issue 17: a bad row surfaced as ~350 lines (the rank's traceback 4 times through torchrun's report).
    generate("criteo", 1500, tmp_path / "raw", seed=1)
    table = pq.read_table(tmp_path / "raw")
    for name, part in (("train", table.slice(0, 1200)), ("eval", table.slice(1200))):
        (tmp_path / name).mkdir()
        labels = pa.array([2] * part.num_rows) if name == "train" else part.column("label")
        pq.write_table(part.set_column(0, "label", labels), tmp_path / name / "part-00000.parquet")
    env = {**os.environ, "RECPIPE_LOG_DIR": str(tmp_path / "logs")}
    argv = ["train", "--config", str(CRITEO), "--train", str(tmp_path / "train"), "--eval", str(tmp_path / "eval"),
            "--out", str(tmp_path / "out"), "--set", "data.batch_size=256", "--set", "train.max_steps=2"]  # fmt: skip
    proc = subprocess.run([*RECPIPE, *argv], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == EXIT_ERROR
    err = proc.stderr.strip().splitlines()
    # Every training label is bad; the reader's shuffle decides which row comes first (each is named by its
    # own file and row).
    assert re.fullmatch(
        re.escape(f"recpipe train: error: training failed: {tmp_path / 'train' / 'part-00000.parquet'}, row ")
        + r"\d+, column 'label': expected a label of 0 or 1, got '2'",
        err[-2],
    ), err[-2]
    assert "Traceback" not in proc.stdout + proc.stderr and "[rank0]" not in proc.stdout + proc.stderr
    log = Path(err[-1].split("full log: ")[1]).read_text()
    assert "Traceback (most recent call last)" in log and "BadRowError" in log


def test_train_console_fits_in_25_lines_up_to_the_progress_bar(tmp_path):
    # Issue 17: ~100 lines before the bar (a 26-row memory table, the plan's two 26-row tables,
    # torchrec's FutureWarnings, an fx warning inside the bar) and gauc=nan on Criteo.
    generate("criteo", 1500, tmp_path / "raw", seed=1)
    table = pq.read_table(tmp_path / "raw")
    for name, part in (("train", table.slice(0, 1200)), ("eval", table.slice(1200))):
        (tmp_path / name).mkdir()
        pq.write_table(part, tmp_path / name / "part-00000.parquet")
    env = {**os.environ, "RECPIPE_LOG_DIR": str(tmp_path / "logs")}
    argv = ["train", "--config", str(CRITEO), "--train", str(tmp_path / "train"), "--eval", str(tmp_path / "eval"),
            "--out", str(tmp_path / "out"), "--set", "data.batch_size=256", "--set", "train.max_steps=4"]  # fmt: skip
    proc = subprocess.run([*RECPIPE, *argv], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    console = proc.stdout.replace("\r", "\n").splitlines()
    first_bar = next(i for i, line in enumerate(console) if line.startswith("train:"))
    assert first_bar < 25, console[: first_bar + 1]
    text = proc.stdout + proc.stderr
    assert (
        text.count("sharding plan for 1 rank(s)") == 1
        and "table_wise / fused on ranks [0]: 26 table(s)" in text
    )
    assert "Warning" not in text and "[rank0]" not in text and "gauc=nan" not in text
    assert text.count("gauc omitted: the config names no user column") == 1
    details = (tmp_path / "out" / "plan.txt").read_text()
    assert "C26" in details and "shard offsets" in details  # the whole plan, kept
