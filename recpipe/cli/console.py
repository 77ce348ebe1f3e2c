"""What a ``recpipe`` command shows and what it keeps: the console gets progress, results and one line per
failure; a log file gets everything (dependency warnings, log records, the training job's whole output,
tracebacks).

Exit codes (:data:`EXIT_CODES`), the same for every command: 0 success, 1 error, 2 usage or config (a bad
argument, config, parameter, or data that does not fit the config), 3 gate rejected (``evaluate``, and
``run`` when the gate rejects the model).
"""

from __future__ import annotations

import logging
import os
import re
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from typing import Any, TextIO

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_GATE = 0, 1, 2, 3
EXIT_CODES = {
    EXIT_OK: "success",
    EXIT_ERROR: "error",
    EXIT_USAGE: "usage or config error (also: data that does not fit the config)",
    EXIT_GATE: "the gate rejected the model (evaluate, run)",
}
EPILOG = "exit codes: " + ", ".join(f"{code} {what}" for code, what in EXIT_CODES.items())
ENV_LOG_DIR = "RECPIPE_LOG_DIR"
KEEP_LOGS = 200  # command logs kept in the log folder, the newest

# Output of dependencies and of failing ranks that only the log file keeps (unless --verbose).
_NOISE = (
    re.compile(r"^\[rank\d+\]:"),  # a rank's log records and traceback, prefixed by torch
    re.compile(r"^\S+\.py:\d+: \w*Warning: "),  # warnings.showwarning's first line
    re.compile(r"^(WARNING|INFO|DEBUG):[\w.]+:"),  # logging.basicConfig's format
    re.compile(r"^[WIE]\d{4} \d\d:\d\d:\d\d"),  # torch's glog-style records
    re.compile(r"^Downloading artifacts"),  # MLflow's artifact bars
    re.compile(r"^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d (DEBUG|INFO|WARNING) "),  # MLflow's log records
)
_RANK_PREFIX = re.compile(r"\[rank\d+\]:")
_TRACEBACK = re.compile(r"^(\[rank\d+\]: )?Traceback \(most recent call last\):")
_EXCEPTION_LINE = re.compile(
    r"^(?P<type>[A-Za-z_][\w.]*(Error|Exception|Mismatch|Failed|Interrupt|Exit))(: ?(?P<msg>.*))?$"
)
_TORCHRUN_FAILURE = re.compile(r"^(torch\.distributed\.elastic\.multiprocessing\.errors\.)?ChildFailedError")


def _prune(folder: Path, keep: int) -> None:
    """Remove all but the ``keep`` newest command logs in ``folder`` (every command writes one). Commands run
    side by side prune the same folder: a log another one removed meanwhile is simply gone."""
    stamped = []
    for log in folder.glob("*.log"):
        try:
            stamped.append((log.stat().st_mtime, log))
        except FileNotFoundError:
            continue
    stamped.sort(key=lambda pair: pair[0], reverse=True)
    for _, old in stamped[keep:]:
        old.unlink(missing_ok=True)


def log_dir() -> Path:
    """Where command logs go: ``RECPIPE_LOG_DIR``, else ``<temp>/recpipe-logs``."""
    return Path(os.environ.get(ENV_LOG_DIR) or Path(tempfile.gettempdir()) / "recpipe-logs")


class _Filter:
    """A text stream in front of the console: whole lines to the log file, the lines worth reading to the
    console. Progress frames (ending in ``\\r``) reach the console only, so the log keeps the last one."""

    def __init__(self, console: TextIO, log: TextIO, verbose: bool) -> None:
        self.console, self.log, self.verbose = console, log, verbose
        self.pending = ""
        self.failing = False  # after a traceback, the rest of a job's output is the failure's report
        self.skip_indented = False  # the source line under a warning
        self.mid_line = False  # the console's cursor is after a progress frame

    def write(self, text: str) -> int:
        self.pending += text
        while True:
            cut = min((i for i in (self.pending.find("\n"), self.pending.find("\r")) if i >= 0), default=-1)
            if cut < 0:
                break
            line, self.pending = self.pending[: cut + 1], self.pending[cut + 1 :]
            self._line(line)
        return len(text)

    def _line(self, line: str) -> None:
        m = _RANK_PREFIX.search(line)
        if m and m.start() > 0:  # a rank's record written after a progress frame, on the same line
            self._line(line[: m.start()] + "\r")
            line = line[m.start() :]
        frame = line.endswith("\r")
        if frame and not line.strip():
            return  # the "\r" a bar starts each frame with: nothing to show
        if not frame:
            self.log.write(line)
        if self.verbose or self._shown(line.rstrip("\r\n")):
            self.console.write(line)
            self.console.flush()
            self.mid_line = frame

    def _shown(self, text: str) -> bool:
        if self.skip_indented and text.startswith((" ", "\t")):
            return False
        self.skip_indented = False
        if _TRACEBACK.match(text) or _TORCHRUN_FAILURE.match(text):
            self.failing = True
        if self.failing:
            return False
        for pattern in _NOISE:
            if pattern.match(text):
                self.skip_indented = pattern is _NOISE[1]
                return False
        return True

    def flush(self) -> None:
        if self.pending:
            self._line(self.pending)
            self.pending = ""
        self.log.flush()
        self.console.flush()

    def isatty(self) -> bool:
        return self.console.isatty()

    def fileno(self) -> int:
        return self.console.fileno()

    @property
    def encoding(self) -> str:
        return getattr(self.console, "encoding", "utf-8")


class Session:
    """One command's console and log file: ``with Session("train") as s: …``; ``s.fail(err, code)``.

    Inside, ``sys.stdout``/``sys.stderr`` pass through :class:`_Filter`, Python warnings and log records
    go to the log file only.

    Args:
        command (str): the command's name, for messages and the log file's name.
        verbose (bool): show everything on the console too.
        directory (Path | None): where the log file goes (default :func:`log_dir`).
        argv (list[str] | None): the command line, for the log (default ``sys.argv[1:]``).
    """

    def __init__(
        self,
        command: str,
        verbose: bool = False,
        directory: Path | None = None,
        argv: list[str] | None = None,
    ) -> None:
        self.command, self.verbose = command, verbose
        self.argv = sys.argv[1:] if argv is None else argv
        folder = directory or log_dir()
        folder.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.log_path = folder / f"{command.replace(' ', '-')}-{stamp}-{os.getpid()}.log"
        _prune(folder, KEEP_LOGS - 1)

    def __enter__(self) -> Session:
        self.log = open(self.log_path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - closed in __exit__
        self.log.write(f"$ recpipe {' '.join(self.argv)}\n")
        self._saved: tuple[Any, ...] = (sys.stdout, sys.stderr, warnings.showwarning, logging.root.handlers)
        self.stderr = sys.stderr
        sys.stdout = _Filter(sys.stdout, self.log, self.verbose)  # type: ignore[assignment]
        sys.stderr = _Filter(sys.stderr, self.log, self.verbose)  # type: ignore[assignment]
        warnings.showwarning = self._warning
        handler = logging.StreamHandler(self.log)
        handler.setFormatter(logging.Formatter("%(levelname)s:%(name)s:%(message)s"))
        logging.root.handlers = [handler]
        return self

    def _warning(self, message: Any, category: Any, filename: str, lineno: int, *_: Any) -> None:
        self.log.write(warnings.formatwarning(message, category, filename, lineno))

    def fail(self, err: BaseException, code: int, message: str | None = None) -> int:
        """Keep ``err``'s traceback in the log; show ``recpipe <command>: error: …`` and the log's path.

        Args:
            err (BaseException): what failed.
            code (int): the exit code to return.
            message (str | None): what to show (default ``str(err)``).
        """
        self.log.write("".join(traceback.format_exception(err)))
        self.log.flush()
        text = message if message is not None else (str(err) or type(err).__name__)
        if any(getattr(stream, "mid_line", False) for stream in (sys.stdout, sys.stderr)):
            print(file=self.stderr)  # below the progress bar, not on it
        print(f"recpipe {self.command}: error: {text}", file=self.stderr)
        print(f"recpipe {self.command}: full log: {self.log_path}", file=self.stderr)
        return code

    def __exit__(self, *exc: object) -> None:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        sys.stdout, sys.stderr, warnings.showwarning, logging.root.handlers = self._saved
        self.log.close()


def job_succeeded() -> None:
    """A job whose output the console filtered ended well: show what follows again (a rank may print a
    traceback it recovers from, which would otherwise hide the command's result)."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, _Filter):
            stream.failing = False


def error_line(report: str) -> str:
    """The exception line of the last traceback in ``report`` (a training job's failure), without its
    module path: ``part-00000.parquet, row 3, column 'clk': expected a label of 0 or 1, got 2``; else the
    report's last non-empty line.

    Args:
        report (str): the job's error report (tracebacks, torchrun's summary).
    """
    lines = report.splitlines()
    frames = [i for i, line in enumerate(lines) if line.lstrip().startswith('File "')]
    if frames:
        # The exception line is the first one after the last frame indented less than the frames
        # (column 0 in a Python traceback, 2 in torchrun's root-cause block).
        indent = len(lines[frames[-1]]) - len(lines[frames[-1]].lstrip())
        for line in lines[frames[-1] + 1 :]:
            if line.strip() and len(line) - len(line.lstrip()) < indent:
                m = _EXCEPTION_LINE.match(line.strip())
                return (m.group("msg") or m.group("type")) if m else line.strip()
    rest = [line for line in lines if line.strip()]
    return rest[-1].strip() if rest else report.strip()
