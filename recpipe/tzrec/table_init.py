"""TorchEasyRec's embedding initializers as a recpipe feature's ``init`` (recpipe.config.features.TableInit).

Two fields set a table's initializer in TorchEasyRec:

- ``init_fn`` of a feature (feature.proto; docs/source/feature/feature.md: "any torch built-in init function,
  e.g. ``nn.init.uniform_,a=-0.01,b=0.01``"), evaluated as ``partial(<init_fn>)`` with ``nn`` and ``torch`` in
  scope (``create_init_fn``, tzrec/utils/init_util.py) and given to TorchRec as the table's ``init_fn``. It is
  read here, never evaluated: ``nn.init.uniform_`` / ``normal_`` / ``trunc_normal_`` / ``constant_`` / ``zeros_``
  / ``ones_`` with numeric keyword arguments map, at torch's own defaults for the ones not given (``uniform_``
  U(0, 1), ``normal_`` N(0, 1), ``trunc_normal_`` N(0, 1) on [-2, 2]); anything else is refused at its line.
  A positional argument is refused too: ``partial`` would put it before the weight.
- ``dynamicemb.initializer_args`` (feature.proto ``DynamicEmbInitializerArgs``), built by
  ``_build_dynamicemb_initializer`` (tzrec/utils/dynamicemb_util.py): ``mode`` unset is UNIFORM; NORMAL and
  TRUNCATED_NORMAL read ``mean`` (0) and ``std_dev`` (1/sqrt(embedding_dim)), UNIFORM ``lower`` / ``upper``
  (∓/± 1/sqrt(max_capacity)), CONSTANT ``value`` (0); another mode is TorchEasyRec's ValueError. Those defaults
  are recpipe's (``init`` fields left unset). TRUNCATED_NORMAL gets no bounds from TorchEasyRec, so dynamicemb's
  ``DynamicEmbInitializerArgs`` defaults apply, ``lower`` 0.0 and ``upper`` 1.0 (its kernel conditions the normal
  on [lower, upper]): recpipe writes them out. A dynamic table draws from ``initializer_args`` whatever
  ``init_fn`` says (TorchEasyRec's TODO: "convert eb_config.init_fn to dynamicemb initializer").
"""

from __future__ import annotations

import ast
from typing import Any

from recpipe.config.features import table_init_error
from recpipe.tzrec.problems import Findings

# torch.nn.init functions → (recpipe mode, {keyword: (init field, torch's default)}).
_INIT_FNS: dict[str, tuple[str, dict[str, tuple[str, float | None]]]] = {
    "uniform_": ("uniform", {"a": ("lower", 0.0), "b": ("upper", 1.0)}),
    "normal_": ("normal", {"mean": ("mean", 0.0), "std": ("std", 1.0)}),
    "trunc_normal_": (
        "truncated_normal",
        {"mean": ("mean", 0.0), "std": ("std", 1.0), "a": ("lower", -2.0), "b": ("upper", 2.0)},
    ),
    "constant_": ("constant", {"val": ("value", None)}),
    "zeros_": ("constant", {}),
    "ones_": ("constant", {}),
}
_FIXED = {"zeros_": 0.0, "ones_": 1.0}
# dynamicemb's TRUNCATED_NORMAL interval when TorchEasyRec passes none (DynamicEmbInitializerArgs' defaults).
DYNAMICEMB_TRUNCATED_BOUNDS = (0.0, 1.0)
_DYNAMICEMB_FIELDS = {
    "NORMAL": ("mean", "std_dev"),
    "TRUNCATED_NORMAL": ("mean", "std_dev"),
    "UNIFORM": ("lower", "upper"),
    "CONSTANT": ("value",),
}


def _number(node: ast.expr) -> float | None:
    """The value of a numeric literal (``0.05``, ``-2``), else None."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = _number(node.operand)
        return None if inner is None else (-inner if isinstance(node.op, ast.USub) else inner)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return float(node.value)
    return None


def _function(node: ast.expr) -> str | None:
    """``X`` of ``nn.init.X`` / ``torch.nn.init.X``, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    dotted = ".".join(reversed(parts))
    for prefix in ("nn.init.", "torch.nn.init."):
        if dotted.startswith(prefix) and "." not in dotted[len(prefix) :]:
            return dotted[len(prefix) :]
    return None


def map_init_fn(text: str, path: str, found: Findings) -> dict[str, Any] | None:
    """A feature's ``init_fn`` text as recpipe's ``init``, or None with a problem at ``path``."""
    known = ", ".join(f"nn.init.{name}" for name in _INIT_FNS)
    try:
        call = ast.parse(f"partial({text})", mode="eval").body
    except SyntaxError:
        found.problem(
            path, f"init_fn {text!r} is not a function and its keyword arguments; recpipe reads {known}"
        )
        return None
    assert isinstance(call, ast.Call)
    name = _function(call.args[0]) if call.args else None
    if name not in _INIT_FNS:
        found.problem(path, f"init_fn {text!r}: recpipe maps {known} (with numeric keyword arguments)")
        return None
    if len(call.args) > 1:
        found.problem(
            path,
            f"init_fn {text!r} has positional arguments, which partial() passes before the weight; give them "
            "by keyword",
        )
        return None
    mode, kwargs = _INIT_FNS[name]
    values: dict[str, float] = {}
    for kw in call.keywords:
        value = None if kw.arg is None else _number(kw.value)
        if kw.arg not in kwargs or value is None:
            allowed = ", ".join(kwargs) or "none"
            found.problem(
                path, f"init_fn {text!r}: nn.init.{name} takes numeric keyword arguments ({allowed})"
            )
            return None
        values[kw.arg] = value
    if name in _FIXED:
        init = {"mode": mode, "value": _FIXED[name]}
    else:
        init = {"mode": mode}
        for arg, (field, default) in kwargs.items():
            value = values.get(arg, default)
            if value is None:
                found.problem(path, f"init_fn {text!r}: nn.init.{name} needs {arg}")
                return None
            init[field] = value
    return _checked(init, f"init_fn {text!r}", path, found)


def map_initializer_args(args: Any, path: str, found: Findings) -> dict[str, Any] | None:
    """dynamicemb's ``initializer_args`` as recpipe's ``init`` (None: recpipe's default table init, which is
    dynamicemb's default, or a problem at ``path``). A field TorchEasyRec leaves to its default is left unset:
    recpipe's defaults are the same (``std`` 1/sqrt(dim), ``lower`` / ``upper`` ∓/± sqrt(1/max_capacity))."""
    mode = args.mode if args.HasField("mode") else "UNIFORM"
    if mode not in _DYNAMICEMB_FIELDS:
        found.problem(
            f"{path}.mode",
            f"dynamicemb initializer mode {mode!r} is not one recpipe maps ({', '.join(_DYNAMICEMB_FIELDS)}; "
            "TorchEasyRec refuses names outside DynamicEmbInitializerMode, and DEBUG writes test values)",
        )
        return None
    read = _DYNAMICEMB_FIELDS[mode]
    for name in ("mean", "std_dev", "lower", "upper", "value"):
        if args.HasField(name) and name not in read:
            found.note(f"{path}.{name}", f"ignored: TorchEasyRec's {mode} initializer does not read {name}")
    if mode == "UNIFORM" and not any(args.HasField(f) for f in read):
        return None  # U(±1/sqrt(max_capacity)): recpipe's default, U(±sqrt(1/rows))
    init: dict[str, Any] = {"mode": mode.lower()}
    given = {"std_dev": "std"}
    for name in read:
        if name in ("mean", "value"):  # proto defaults 0.0, TorchEasyRec's values either way
            init[name] = getattr(args, name)
        elif args.HasField(name):
            init[given.get(name, name)] = getattr(args, name)
    if mode == "TRUNCATED_NORMAL":
        init["lower"], init["upper"] = DYNAMICEMB_TRUNCATED_BOUNDS
        found.note(
            path,
            f"TRUNCATED_NORMAL on [{DYNAMICEMB_TRUNCATED_BOUNDS[0]}, {DYNAMICEMB_TRUNCATED_BOUNDS[1]}]: "
            "TorchEasyRec passes dynamicemb no bounds, so its DynamicEmbInitializerArgs defaults apply",
        )
    return _checked(init, f"dynamicemb initializer_args ({mode})", path, found)


def _checked(init: dict[str, Any], what: str, path: str, found: Findings) -> dict[str, Any] | None:
    why = table_init_error(init)
    if why is not None:
        found.problem(path, f"{what}: {why}")
        return None
    return init
