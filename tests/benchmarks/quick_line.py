"""The check every benchmark's last line passes (``<name>: key=value …``), shared by the quick-mode tests."""

from __future__ import annotations

import math

import pytest


def assert_last_line(name: str, stdout: str, text_keys: set[str] | frozenset[str] = frozenset()) -> str:
    """Assert that ``stdout``'s last non-blank line is ``<name>: key=value …`` with a finite number for every
    key not in ``text_keys``; return that line.

    Args:
        name (str): the benchmark (its script's stem).
        stdout (str): what the script printed.
        text_keys (set[str]): the keys whose values are words.

    Example::

        assert_last_line("collisions", "...\\ncollisions: auc_delta=0.01 rows=20000\\n")
    """
    lines = [line for line in stdout.splitlines() if line.strip()]
    assert lines, "no output"
    last = lines[-1]
    assert last.startswith(f"{name}: "), last
    pairs = last.removeprefix(f"{name}: ").split()
    assert pairs, last
    for pair in pairs:
        key, sep, value = pair.partition("=")
        assert sep and key and value, f"{pair!r} in {last!r} is not key=value"
        if key in text_keys:
            continue
        try:
            number = float(value)
        except ValueError:
            pytest.fail(f"{key}={value!r} in {last!r} is not a number")
        assert math.isfinite(number), f"{key}={value} in {last!r}"
    return last
