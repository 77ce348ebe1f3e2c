"""``safe_load`` that refuses a mapping with the same key twice, naming both lines.

PyYAML keeps the last of two equal keys without a word: one duplicated ``on_bad_row`` line silently
flips the policy. Every recpipe config goes through :func:`load_yaml`.

Example::

    load_yaml("data:\\n  on_bad_row: raise\\n  on_bad_row: skip\\n", "c.yaml")
    # DuplicateKeyError: c.yaml: key 'on_bad_row' appears twice in the same mapping: line 2 and line 3
"""

from __future__ import annotations

from typing import Any

import yaml


class DuplicateKeyError(yaml.YAMLError):
    """A YAML mapping holds one key twice (the message names the file, the key and both lines)."""


class _StrictSafeLoader(yaml.SafeLoader):
    """A SafeLoader whose mappings reject repeated keys (``<<`` merge keys are left to PyYAML)."""

    name = "<yaml>"

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: PyYAML's own error follows
                continue
            if first is not None:
                raise DuplicateKeyError(
                    f"{self.name}: key {key!r} appears twice in the same mapping: line {first} and line {line}"
                )
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str, name: str = "<yaml>") -> Any:
    """``yaml.safe_load(text)``, refusing duplicate keys.

    Args:
        text (str): the YAML document.
        name (str): what to call it in errors (the file's path).

    Raises:
        DuplicateKeyError: a mapping holds a key twice (both lines named).
        yaml.YAMLError: any other YAML error.
    """
    loader = _StrictSafeLoader(text)
    loader.name = name
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
