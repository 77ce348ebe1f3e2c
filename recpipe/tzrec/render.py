"""recpipe YAML in the layout of the shipped configs: sections in block style, one line per feature,
MLP or optimizer where it fits, lists of scalars inline."""

from __future__ import annotations

from typing import Any

import yaml


class _Flow(dict):
    pass


class _FlowList(list):
    pass


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(_Flow, lambda d, v: d.represent_mapping("tag:yaml.org,2002:map", v, flow_style=True))
_Dumper.add_representer(
    _FlowList, lambda d, v: d.represent_sequence("tag:yaml.org,2002:seq", v, flow_style=True)
)


def _styled(value: Any, depth: int) -> Any:
    if isinstance(value, list):
        items = [_styled(v, depth + 1) for v in value]
        return _FlowList(items) if all(not isinstance(v, dict | list) for v in value) else items
    if isinstance(value, dict):
        flat = all(
            not isinstance(v, dict)
            and not (isinstance(v, list) and any(isinstance(x, dict | list) for x in v))
            for v in value.values()
        )
        out = {k: _styled(v, depth + 1) for k, v in value.items()}
        return _Flow(out) if depth >= 2 and flat and len(str(value)) < 120 else out
    return value


def render_yaml(data: dict[str, Any]) -> str:
    """``data`` as YAML that ``yaml.safe_load`` reads back unchanged.

    Example::

        render_yaml({"model": {"final": {"hidden_units": [64]}}})
        # 'model:\n  final: {hidden_units: [64]}\n'
    """
    return yaml.dump(_styled(data, 0), Dumper=_Dumper, sort_keys=False, width=110, allow_unicode=True)
