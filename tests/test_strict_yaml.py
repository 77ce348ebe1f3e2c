"""A YAML config with a key given twice is an error naming both lines (PyYAML alone keeps the last)."""

from __future__ import annotations

from pathlib import Path

import pytest

from recpipe.config import ConfigError, load_config
from recpipe.config.strict_yaml import DuplicateKeyError, load_yaml

ROOT = Path(__file__).resolve().parents[1]


def test_duplicate_key_names_both_lines():
    text = "data:\n  on_bad_row: raise\n  batch_size: 8\n  on_bad_row: skip\n"
    with pytest.raises(
        DuplicateKeyError, match=r"c.yaml: key 'on_bad_row' appears twice .*line 2 and line 4"
    ):
        load_yaml(text, "c.yaml")


def test_same_key_in_different_mappings_and_merges_are_fine():
    text = "a: {x: 1}\nb: {x: 2}\nbase: &b {y: 1}\nc:\n  <<: *b\n  z: 2\n"
    assert load_yaml(text) == {"a": {"x": 1}, "b": {"x": 2}, "base": {"y": 1}, "c": {"y": 1, "z": 2}}


def test_a_config_with_a_duplicated_line_is_refused(tmp_path):
    text = (ROOT / "configs" / "dlrm_criteo_small.yaml").read_text()
    assert load_config(ROOT / "configs" / "dlrm_criteo_small.yaml") is not None
    lines = text.splitlines()
    top = next(i for i, line in enumerate(lines) if line and not line.startswith((" ", "#")) and ":" in line)
    path = tmp_path / "dup.yaml"
    path.write_text("\n".join([*lines, lines[top]]) + "\n")
    key = lines[top].split(":")[0]
    with pytest.raises(
        ConfigError, match=rf"key '{key}' appears twice in the same mapping: line {top + 1} and line"
    ):
        load_config(path)
