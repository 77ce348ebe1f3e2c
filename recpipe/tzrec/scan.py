"""A pre-pass over protobuf text that finds *every* field outside the supported schema, with its line.

protobuf's own ``text_format.Parse`` stops at the first unknown field; this walk uses its tokenizer
(so it splits text exactly as the parser does), follows the schema's descriptors, records each
unknown field and skips its value, whatever shape the value has. It also records the line of every
field it meets, so later findings about values can name their line too. Values themselves are left
to the real parser.

Example::

    found = scan('a: 1\\ndata_config { batch_size: 2 }', descriptor("EasyRecConfig"))
    found.unknown[0].line, found.unknown[0].path    # (1, "a")
    found.lines["data_config.batch_size"]           # 2
"""

from __future__ import annotations

from typing import NamedTuple

from google.protobuf import text_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from recpipe.tzrec.problems import Problem, parse_error_problem

_CLOSE = {"{": "}", "<": ">", "[": "]"}
_QUOTES = ("'", '"')


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


class _Scanner:
    def __init__(self, text: str) -> None:
        self.tok = text_format.Tokenizer(text.split("\n"))
        self.unknown: list[Problem] = []
        self.lines: dict[str, int] = {}

    def line(self) -> int:
        # The tokenizer keeps its position private; the ParseError it builds carries it (1-based).
        return self.tok.ParseError("").GetLine()

    def message(self, desc: Descriptor, path: str, end: str | None) -> None:
        counts: dict[str, int] = {}
        tok = self.tok
        while True:
            if end is None and tok.AtEnd():
                return
            if end is not None:
                if tok.TryConsume(end):
                    return
                if tok.AtEnd():
                    raise tok.ParseError(f'Expected "{end}".')
            self.field(desc, path, counts)
            if not tok.TryConsume(","):
                tok.TryConsume(";")

    def field(self, desc: Descriptor, path: str, counts: dict[str, int]) -> None:
        tok, line = self.tok, self.line()
        if tok.TryConsume("["):  # an extension or Any: ``[type.googleapis.com/T] { ... }``
            name = ""
            while not tok.LookingAt("]"):
                if tok.AtEnd():
                    raise tok.ParseError('Expected "]".')
                name += tok.token
                tok.NextToken()
            tok.NextToken()
            self._unknown(line, desc, path, f"[{name}]")
            self.skip_value()
            return
        name = tok.ConsumeIdentifierOrNumber()
        fd = desc.fields_by_name.get(name)
        if fd is None:
            self._unknown(line, desc, path, name)
            self.skip_value()
            return
        fpath = _join(path, name)
        self.lines.setdefault(fpath, line)
        repeated = fd.label == FieldDescriptor.LABEL_REPEATED
        if fd.type == FieldDescriptor.TYPE_MESSAGE:
            tok.TryConsume(":")
            if repeated and tok.TryConsume("["):
                while not tok.TryConsume("]"):
                    self.submessage(fd, fpath, counts)
                    if not tok.LookingAt("]"):
                        tok.Consume(",")
            else:
                self.submessage(fd, fpath, counts)
            return
        tok.Consume(":")
        if repeated and tok.TryConsume("["):
            while not tok.TryConsume("]"):
                self._element(fpath, counts)
                self.skip_scalar()
                if not tok.LookingAt("]"):
                    tok.Consume(",")
        else:
            if repeated:
                self._element(fpath, counts)
            self.skip_scalar()

    def submessage(self, fd: FieldDescriptor, fpath: str, counts: dict[str, int]) -> None:
        sub = self._element(fpath, counts) if fd.label == FieldDescriptor.LABEL_REPEATED else fpath
        tok = self.tok
        if tok.TryConsume("{"):
            end = "}"
        elif tok.TryConsume("<"):
            end = ">"
        else:
            raise tok.ParseError('Expected "{".')
        self.message(fd.message_type, sub, end)

    def skip_value(self) -> None:
        tok = self.tok
        colon = tok.TryConsume(":")
        if tok.token in _CLOSE:
            self.skip_block()
        elif colon:
            self.skip_scalar()
        else:
            raise tok.ParseError('Expected ":" or "{".')

    def skip_block(self) -> None:
        tok, depth = self.tok, 0
        while True:
            if tok.AtEnd():
                raise tok.ParseError("Unbalanced brackets.")
            if tok.token in _CLOSE:
                depth += 1
            elif tok.token in _CLOSE.values():
                depth -= 1
            tok.NextToken()
            if depth == 0:
                return

    def skip_scalar(self) -> None:
        tok = self.tok
        if tok.AtEnd():
            raise tok.ParseError("Expected a value.")
        if tok.token[:1] in _QUOTES:  # adjacent strings concatenate
            while tok.token[:1] in _QUOTES:
                tok.NextToken()
        else:
            tok.NextToken()

    def _element(self, fpath: str, counts: dict[str, int]) -> str:
        name = fpath.rsplit(".", 1)[-1]
        index = counts.get(name, 0)
        counts[name] = index + 1
        element = f"{fpath}[{index}]"
        self.lines[element] = self.line()
        return element

    def _unknown(self, line: int, desc: Descriptor, path: str, name: str) -> None:
        known = ", ".join(f.name for f in desc.fields) or "none"
        self.unknown.append(
            Problem(
                line,
                _join(path, name),
                f"unsupported field {name!r}: {desc.name} fields the importer reads are {known}",
            )
        )


class ScanResult(NamedTuple):
    """What :func:`scan` found.

    Args:
        unknown (list[Problem]): every unsupported field, in text order.
        lines (dict[str, int]): the line of each field path met, e.g.
            ``"feature_configs[3].raw_feature.normalizer"`` (repeated fields also as ``"x[i]"``).
        syntax_error (Problem | None): the first syntax error; the walk stops there.
    """

    unknown: list[Problem]
    lines: dict[str, int]
    syntax_error: Problem | None


def scan(text: str, desc: Descriptor) -> ScanResult:
    """Walk ``text`` as message ``desc``, collecting unsupported fields and field lines."""
    scanner = _Scanner(text)
    try:
        scanner.message(desc, "", None)
    except text_format.ParseError as err:
        return ScanResult(scanner.unknown, scanner.lines, parse_error_problem(err, "syntax error: "))
    return ScanResult(scanner.unknown, scanner.lines, None)
