"""A pre-pass over protobuf text that finds *every* field outside the supported schema, with its line.

protobuf's own ``text_format.Parse`` stops at the first unknown field; this walk uses its tokenizer
(so it splits text exactly as the parser does), follows the schema's descriptors, records each
unknown field and skips its value, whatever shape the value has. It also records the line of every
field it meets, so later findings about values can name their line too. Values themselves are left
to the real parser.

A field that holds one value given more than once: TorchEasyRec loads configs with ``text_format.Merge``, which
keeps the last value (and merges a message given twice, and lets a later member of a oneof replace an earlier
one). The walk decides what recpipe does instead: a singular scalar given again with the *same* value is a note
(harmless); with a *different* value, a problem naming both lines (probably a mistake: which one was meant?);
a singular message block given twice, or two members of one oneof, a problem too.

Example::

    found = scan('a: 1\\ndata_config { batch_size: 2 }', descriptor("EasyRecConfig"))
    found.unknown[0].line, found.unknown[0].path    # (1, "a")
    found.lines["data_config.batch_size"]           # 2
"""

from __future__ import annotations

from typing import NamedTuple

from google.protobuf import message_factory, text_format
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
        self.repeated: list[Problem] = []
        self.notes: list[Problem] = []
        self.lines: dict[str, int] = {}

    def line(self) -> int:
        # The tokenizer keeps its position private; the ParseError it builds carries it (1-based).
        return self.tok.ParseError("").GetLine()

    def message(self, desc: Descriptor, path: str, end: str | None) -> None:
        counts: dict[str, int] = {}
        # Per field of this occurrence that holds one value: (line, value); per oneof: (member, line).
        seen: dict[str, tuple[int, object]] = {}
        oneofs: dict[str, tuple[str, int]] = {}
        tok = self.tok
        while True:
            if end is None and tok.AtEnd():
                return
            if end is not None:
                if tok.TryConsume(end):
                    return
                if tok.AtEnd():
                    raise tok.ParseError(f'Expected "{end}".')
            self.field(desc, path, counts, seen, oneofs)
            if not tok.TryConsume(","):
                tok.TryConsume(";")

    def field(
        self,
        desc: Descriptor,
        path: str,
        counts: dict[str, int],
        seen: dict[str, tuple[int, object]],
        oneofs: dict[str, tuple[str, int]],
    ) -> None:
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
        oneof = fd.containing_oneof
        if oneof is not None:
            other, other_line = oneofs.setdefault(oneof.name, (name, line))
            if other != name:
                self.repeated.append(
                    Problem(
                        line,
                        fpath,
                        f"{name!r} and {other!r} (line {other_line}) are both set, members of one oneof "
                        f"{oneof.name!r}: TorchEasyRec's text_format.Merge keeps the last; keep the one meant",
                    )
                )
        if fd.type == FieldDescriptor.TYPE_MESSAGE:
            tok.TryConsume(":")
            if repeated and tok.TryConsume("["):
                while not tok.TryConsume("]"):
                    self.submessage(fd, fpath, counts)
                    if not tok.LookingAt("]"):
                        tok.Consume(",")
            else:
                if not repeated and name in seen:
                    self.repeated.append(
                        Problem(
                            line,
                            fpath,
                            f"{name!r} is given twice (lines {seen[name][0]} and {line}): TorchEasyRec's "
                            "text_format.Merge merges the two blocks; write one",
                        )
                    )
                seen.setdefault(name, (line, None))
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
            else:
                self._singular(desc, name, fpath, line, self.skip_scalar(), seen)

    def _singular(
        self,
        desc: Descriptor,
        name: str,
        fpath: str,
        line: int,
        raw: str,
        seen: dict[str, tuple[int, object]],
    ) -> None:
        """A field of one value met again: the same value is a note, a different one a problem."""
        value = _value_of(desc, name, raw)
        if name not in seen:
            seen[name] = (line, value)
            return
        first, before = seen[name]
        if before == value:
            self.notes.append(
                Problem(
                    line,
                    fpath,
                    f"given again with the same value (first at line {first}); TorchEasyRec's text_format.Merge "
                    "keeps the last, the same",
                )
            )
        else:
            self.repeated.append(
                Problem(
                    line,
                    fpath,
                    f"{name!r} is given twice with different values ({before!r} at line {first}, {value!r} here): "
                    "TorchEasyRec's text_format.Merge silently keeps the last; keep the one meant",
                )
            )

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

    def skip_scalar(self) -> str:
        """Skip one value; return its text (adjacent strings joined by a space)."""
        tok = self.tok
        if tok.AtEnd():
            raise tok.ParseError("Expected a value.")
        parts = []
        if tok.token[:1] in _QUOTES:  # adjacent strings concatenate
            while tok.token[:1] in _QUOTES:
                parts.append(tok.token)
                tok.NextToken()
        else:
            parts.append(tok.token)
            tok.NextToken()
        return " ".join(parts)

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


def _value_of(desc: Descriptor, name: str, raw: str) -> object:
    """The value ``raw`` (a scalar's text) means for field ``name`` of ``desc`` (``"\\x02"`` and ``'\\x02'``,
    ``20`` and ``20.0`` of a float are equal); the text itself when it does not parse (the real parser says why)."""
    msg = message_factory.GetMessageClass(desc)()
    try:
        text_format.Parse(f"{name}: {raw}", msg)
    except text_format.ParseError:
        return raw
    return getattr(msg, name)


class ScanResult(NamedTuple):
    """What :func:`scan` found.

    Args:
        unknown (list[Problem]): every unsupported field, in text order.
        lines (dict[str, int]): the line of each field path met, e.g.
            ``"feature_configs[3].raw_feature.normalizer"`` (repeated fields also as ``"x[i]"``).
        syntax_error (Problem | None): the first syntax error; the walk stops there.
        repeated (list[Problem]): fields of one value given twice with different values, message blocks given
            twice, two members of one oneof.
        notes (list[Problem]): fields of one value given again with the same value.
    """

    unknown: list[Problem]
    lines: dict[str, int]
    syntax_error: Problem | None
    repeated: list[Problem] = []
    notes: list[Problem] = []


def scan(text: str, desc: Descriptor) -> ScanResult:
    """Walk ``text`` as message ``desc``, collecting unsupported fields and field lines."""
    scanner = _Scanner(text)
    try:
        scanner.message(desc, "", None)
    except text_format.ParseError as err:
        return ScanResult(
            scanner.unknown,
            scanner.lines,
            parse_error_problem(err, "syntax error: "),
            scanner.repeated,
            scanner.notes,
        )
    return ScanResult(scanner.unknown, scanner.lines, None, scanner.repeated, scanner.notes)
