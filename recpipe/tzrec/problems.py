"""What the importer reports: problems that stop an import and notes on fields it read but ignored,
each with the line of the TorchEasyRec config it is about."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from google.protobuf import text_format

_LAST = re.compile(r"(\.[^.\[\]]+|\[\d+\])$")
_LOCATION = re.compile(r"^\d+(:\d+)? : (?:'': )?")  # "5:1 : '': " (the position, an empty context)


def parent_path(path: str) -> str:
    """``"a.b[2].c"`` → ``"a.b[2]"`` → ``"a.b"`` → ``"a"`` → ``""``."""
    return _LAST.sub("", path) if _LAST.search(path) else ""


@dataclass(frozen=True)
class Problem:
    """One finding about the config.

    Args:
        line (int | None): 1-based line in the TorchEasyRec config (None when not located).
        path (str): field path in protobuf's notation, ``feature_configs[3].raw_feature.normalizer``.
        message (str): what is wrong (or, for a note, what was ignored and why).
    """

    line: int | None
    path: str
    message: str

    def __str__(self) -> str:
        where = f"line {self.line}" if self.line is not None else "no line"
        return f"{where}: {self.path or '<root>'}: {self.message}"


def parse_error_problem(err: text_format.ParseError, prefix: str = "") -> Problem:
    """A protobuf ``ParseError`` as a :class:`Problem` (its ``"line:column : "`` moved to ``line``)."""
    return Problem(err.GetLine(), "", prefix + _LOCATION.sub("", str(err)))


class TzrecImportError(ValueError):
    """A TorchEasyRec config cannot be imported; ``problems`` lists every reason found, by line."""

    def __init__(self, source: str, problems: list[Problem], summary: str = "") -> None:
        self.source = source
        self.problems = sorted(problems, key=lambda p: (p.line is None, p.line or 0, p.path))
        self.summary = summary
        n = len(self.problems)
        lines = [f"cannot import TorchEasyRec config {source}: {n} problem{'s' if n != 1 else ''}"]
        lines += [f"  {p}" for p in self.problems]
        if summary:
            lines.append(summary)
        super().__init__("\n".join(lines))


@dataclass
class Findings:
    """Problems and notes collected while mapping, located through the field → line map of the scan."""

    lines: dict[str, int]
    problems: list[Problem] = field(default_factory=list)
    notes: list[Problem] = field(default_factory=list)

    def line(self, path: str) -> int | None:
        """The line of ``path``, or of its nearest ancestor that was written out (defaults have none)."""
        while path:
            if path in self.lines:
                return self.lines[path]
            path = parent_path(path)
        return None

    def problem(self, path: str, message: str) -> None:
        self.problems.append(Problem(self.line(path), path, message))

    def note(self, path: str, message: str) -> None:
        self.notes.append(Problem(self.line(path), path, message))

    def refine(self, match: Callable[[Problem], bool], message: Callable[[Problem], str]) -> bool:
        """Give the problems ``match`` selects a more specific message (so one thing stays one problem);
        True when there was one."""
        hits = [i for i, q in enumerate(self.problems) if match(q)]
        for i in hits:
            q = self.problems[i]
            self.problems[i] = Problem(q.line, q.path, message(q))
        return bool(hits)

    def summary(self) -> str:
        """``"TorchEasyRec fields: 120 mapped, 3 ignored (notes say why), 2 refused"``: every field written
        in the config (a leaf of the text) is one of the three."""
        leaves = [p for p in self.lines if not any(q.startswith((p + ".", p + "[")) for q in self.lines)]
        refused = {q.path for q in self.problems}
        ignored = {n.path for n in self.notes}

        def under(path: str, paths: set[str]) -> bool:
            return any(path == x or path.startswith((x + ".", x + "[")) for x in paths)

        n_ignored = sum(under(p, ignored) and not under(p, refused) for p in leaves)
        n_refused = len(refused)
        mapped = sum(not under(p, ignored | refused) for p in leaves)
        return (
            f"TorchEasyRec fields: {mapped} mapped, {n_ignored} ignored (notes say why), {n_refused} refused"
        )
