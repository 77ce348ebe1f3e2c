"""recpipe.train.heap: after keep_freed_memory a freed large tensor stays in the process's heap (without it glibc
unmaps it at once); an exported MALLOC_* variable is left as the user gave it; the trainer calls it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from recpipe.train import heap, loop

# In a fresh interpreter: RSS (MB) after a 256 MB tensor is written, then after it is freed.
PROBE = """
import sys, torch
from recpipe.train.heap import keep_freed_memory
kept = keep_freed_memory() if sys.argv[1] == "keep" else None
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 // (1 << 20)
t = torch.ones(64 << 20)
full = rss()
del t
print(kept, full, rss())
"""


def _probe(mode: str, **env: str) -> tuple[str, int, int]:
    clean = {k: v for k, v in os.environ.items() if k not in heap.ENV}
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode], env={**clean, **env}, capture_output=True, text=True, check=True
    )
    kept, full, after = out.stdout.split()
    return kept, int(full), int(after)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc and /proc")
def test_a_freed_tensor_stays_in_the_heap_only_with_the_setting() -> None:
    kept, full, after = _probe("keep")
    assert kept == "True"
    assert after > full - 64, (full, after)  # the 256 MB are still the process's
    _, full, after = _probe("default")
    assert after < full - 192, (full, after)  # glibc's default: unmapped at free


def test_an_exported_variable_is_the_users() -> None:
    assert heap.keep_freed_memory({"MALLOC_TRIM_THRESHOLD_": "1048576"}) is False
    kept, full, after = _probe("keep", MALLOC_MMAP_THRESHOLD_="131072")
    assert kept == "False" and after < full - 192, (full, after)


def test_the_trainer_sets_it_before_anything_else(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def stop() -> None:
        calls.append("init_distributed")
        raise RuntimeError("stop here")

    monkeypatch.setattr(loop, "keep_freed_memory", lambda: calls.append("keep_freed_memory"))
    monkeypatch.setattr(loop, "init_distributed", stop)
    with pytest.raises(RuntimeError, match="stop here"):
        loop.train(None, None, "", None, "")  # type: ignore[arg-type]
    assert calls == ["keep_freed_memory", "init_distributed"]
