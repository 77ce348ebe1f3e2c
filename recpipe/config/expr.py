"""The expression language of kind ``expr`` (TorchEasyRec's ``expr_feature``, docs/source/feature/feature.md):
parsed here, on the config's floor, so a config naming an unknown function or a malformed expression is
refused when it loads; :mod:`recpipe.features.kinds.expr` evaluates the tree over whole columns.

A small recursive-descent parser (nothing is ever ``eval``-ed). The operators and their precedence are the
doc's: ``||`` (1), ``&&`` (2), ``|`` (3), ``&`` (4), ``<= >= != == > <`` (5), ``+ -`` (6), ``* /`` (7),
``^`` (8, right-associative), the C-style ``c ? a : b`` (lowest), unary ``-``/``+`` (binding weaker than
``^``: ``-2^2`` is ``-4``), the constants ``_pi`` and ``_e``, and the doc's functions (:data:`FUNCTIONS`,
:data:`VECTOR_FUNCTIONS`). ``rnd()`` is refused: a random value would differ between training and serving.

Example::

    p = parse_expression("u_age == i_age ? 1 : 0")
    p.variables            # ['u_age', 'i_age']
    parse_expression("dot(a, b) / len(a)").vectors    # {'a', 'b'}
    parse_expression("foo(x)")                        # ExprError: unknown function 'foo'; ...
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

# name → number of arguments (-1: one or more). All take and give numbers.
FUNCTIONS: dict[str, int] = {
    **dict.fromkeys(
        "isnan sin cos tan asin acos atan sinh cosh tanh asinh acosh atanh log2 log10 log ln exp sqrt sign "
        "abs rint floor ceil trunc round sigmoid".split(),
        1,
    ),
    "roundp": 2,
    "mod": 2,
    "sphere_dist": 4,
    "haversine": 4,
    **dict.fromkeys(("min", "max", "sum", "avg"), -1),
}
# Functions of vectors (a multi-value column each argument): name → number of vector arguments.
VECTOR_FUNCTIONS: dict[str, int] = {
    **dict.fromkeys(
        "len l2_norm squared_norm std_dev pop_std_dev variance pop_variance reduce_min reduce_max reduce_sum "
        "reduce_mean reduce_prod".split(),
        1,
    ),
    **dict.fromkeys(("dot", "euclid_dist", "corr"), 2),
}
CONSTANTS: dict[str, float] = {"_pi": 3.141592653589793, "_e": 2.718281828459045}
REFUSED: dict[str, str] = {
    "rnd": "rnd() is a random number: training and serving would see different values",
}
_BINARY: list[tuple[str, ...]] = [
    ("||",),
    ("&&",),
    ("|",),
    ("&",),
    ("<=", ">=", "!=", "==", ">", "<"),
    ("+", "-"),
    ("*", "/"),
]
_TOKEN = re.compile(
    r"\s*(?:(?P<num>(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)|(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<op>\|\||&&|<=|>=|!=|==|[-+*/^<>?:(),|&]))"
)


class ExprError(ValueError):
    """An expression that does not parse, or names an unknown or refused function."""


@dataclass(frozen=True)
class Node:
    """One node: ``op`` is ``num`` (``value``), ``var`` / ``const`` (``name``), ``call`` (``name``, ``args``),
    ``neg`` (``args[0]``), ``if`` (condition, then, else) or a binary operator (``args`` left, right)."""

    op: str
    args: tuple[Node, ...] = ()
    name: str = ""
    value: float = 0.0


@dataclass
class Parsed:
    """A parsed expression: its tree, the variables it names (in order of appearance) and which of them are
    vectors (arguments of a vector function)."""

    root: Node
    variables: list[str] = field(default_factory=list)
    vectors: set[str] = field(default_factory=set)


def parse_expression(text: str) -> Parsed:
    """Parse ``text``; raises :class:`ExprError` naming what is wrong."""
    tokens = _tokenize(text)
    parser = _Parser(tokens)
    root = parser.ternary()
    if parser.i != len(tokens):
        raise ExprError(f"unexpected {tokens[parser.i][1]!r} at token {parser.i + 1}")
    out = Parsed(root)
    scalars: set[str] = set()
    _collect(root, out, scalars, in_vector=False)
    both = sorted(scalars & out.vectors)
    if both:
        raise ExprError(
            f"variables {both} are used both as vectors (arguments of a vector function) and as numbers"
        )
    return out


def _tokenize(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise ExprError(f"unexpected character {text[pos:].lstrip()[:1]!r} at position {pos}")
        kind = m.lastgroup or ""
        tokens.append((kind, m.group(kind)))
        pos = m.end()
    if not tokens:
        raise ExprError("the expression is empty")
    return tokens


class _Parser:
    def __init__(self, tokens: list[tuple[str, str]]) -> None:
        self.tokens = tokens
        self.i = 0

    def peek(self) -> str | None:
        return self.tokens[self.i][1] if self.i < len(self.tokens) else None

    def take(self, want: str | None = None) -> tuple[str, str]:
        if self.i >= len(self.tokens):
            raise ExprError(f"the expression ends early{f'; expected {want!r}' if want else ''}")
        tok = self.tokens[self.i]
        if want is not None and tok[1] != want:
            raise ExprError(f"expected {want!r}, got {tok[1]!r} at token {self.i + 1}")
        self.i += 1
        return tok

    def ternary(self) -> Node:
        cond = self.binary(0)
        if self.peek() == "?":
            self.take("?")
            then = self.ternary()
            self.take(":")
            other = self.ternary()
            return Node("if", (cond, then, other))
        return cond

    def binary(self, level: int) -> Node:
        if level == len(_BINARY):
            return self.unary()
        left = self.binary(level + 1)
        while self.peek() in _BINARY[level] and self.tokens[self.i][0] == "op":
            op = self.take()[1]
            left = Node(op, (left, self.binary(level + 1)))
        return left

    def unary(self) -> Node:
        if self.peek() in ("-", "+"):
            op = self.take()[1]
            inner = self.unary()
            return Node("neg", (inner,)) if op == "-" else inner
        return self.power()

    def power(self) -> Node:
        base = self.primary()
        if self.peek() == "^":
            self.take("^")
            return Node("^", (base, self.unary()))  # right-associative: 2^3^2 is 2^9
        return base

    def primary(self) -> Node:
        kind, text = self.take()
        if kind == "num":
            return Node("num", value=float(text))
        if kind == "name":
            if self.peek() == "(":
                return self.call(text)
            if text in CONSTANTS:
                return Node("const", name=text)
            if text in FUNCTIONS or text in VECTOR_FUNCTIONS or text in REFUSED:
                raise ExprError(f"function {text!r} needs its arguments in parentheses")
            return Node("var", name=text)
        if text == "(":
            inner = self.ternary()
            self.take(")")
            return inner
        raise ExprError(f"unexpected {text!r} at token {self.i}")

    def call(self, name: str) -> Node:
        if name in REFUSED:
            raise ExprError(f"function {name!r} is not supported: {REFUSED[name]}")
        if name not in FUNCTIONS and name not in VECTOR_FUNCTIONS:
            known = sorted([*FUNCTIONS, *VECTOR_FUNCTIONS])
            raise ExprError(f"unknown function {name!r}; known: {', '.join(known)}")
        self.take("(")
        args: list[Node] = []
        if self.peek() != ")":
            args.append(self.ternary())
            while self.peek() == ",":
                self.take(",")
                args.append(self.ternary())
        self.take(")")
        want = FUNCTIONS.get(name, VECTOR_FUNCTIONS.get(name))
        if (want == -1 and not args) or (want != -1 and len(args) != want):
            raise ExprError(
                f"function {name!r} takes {'one or more' if want == -1 else want} argument(s), got {len(args)}"
            )
        if name in VECTOR_FUNCTIONS:
            for a in args:
                if a.op != "var":
                    raise ExprError(
                        f"the arguments of vector function {name!r} are variables (vector columns)"
                    )
        return Node("call", tuple(args), name=name)


def _collect(node: Node, out: Parsed, scalars: set[str], in_vector: bool) -> None:
    if node.op == "var":
        if node.name not in out.variables:
            out.variables.append(node.name)
        (out.vectors if in_vector else scalars).add(node.name)
        return
    vector = node.op == "call" and node.name in VECTOR_FUNCTIONS
    for a in node.args:
        _collect(a, out, scalars, vector)


def describe(node: Node) -> Any:
    """The tree as nested lists (for messages and tests): ``["+", ["var", "a"], ["num", 1.0]]``."""
    if node.op == "num":
        return ["num", node.value]
    if node.op in ("var", "const"):
        return [node.op, node.name]
    head = [node.op, node.name] if node.op == "call" else [node.op]
    return [*head, *(describe(a) for a in node.args)]
