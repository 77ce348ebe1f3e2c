"""scripts/local_run.sh names every missing tool before doing anything, and `down` deletes only its cluster.
The tools are stand-ins on a PATH of this test's own (kind, kubectl and a Docker engine are not here)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "local_run.sh"
BASICS = ("bash", "dirname", "grep", "cat", "ps", "rm", "mkdir", "sed", "date", "base64")


def _path_with(tmp_path: Path, tools: dict[str, str]) -> str:
    """A PATH holding the shell basics and, for each tool, a script with the given body."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    for basic in BASICS:
        found = shutil.which(basic)
        if found:
            (bin_dir / basic).symlink_to(found)
    for name, body in tools.items():
        exe = bin_dir / name
        exe.write_text(f'#!/bin/bash\necho "{name} $*" >> {tmp_path / "calls.log"}\n{body}\n')
        exe.chmod(0o755)
    return str(bin_dir)


def _run(tmp_path: Path, tools: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    env = {"PATH": _path_with(tmp_path, tools), "HOME": str(tmp_path), "KIND_CLUSTER": "recpipe-test"}
    return subprocess.run(
        ["bash", str(SCRIPT), *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )


def test_every_missing_tool_is_named(tmp_path):
    out = _run(tmp_path, {}, "up")
    assert out.returncode == 1
    for tool in ("docker: not found", "kind: not found", "kubectl: not found"):
        assert tool in out.stderr, out.stderr
    assert not (tmp_path / "calls.log").exists()  # nothing was started


def test_a_docker_client_without_an_engine_is_named(tmp_path):
    out = _run(tmp_path, {"docker": "exit 1", "kind": "exit 0", "kubectl": "exit 0"}, "up")
    assert out.returncode == 1
    assert "no Docker engine is reachable" in out.stderr
    assert "kind:" not in out.stderr and "kubectl:" not in out.stderr
    assert (tmp_path / "calls.log").read_text().splitlines() == ["docker info"]


def test_down_deletes_its_own_cluster_only(tmp_path):
    listed = 'if [ "$1 $2" = "get clusters" ]; then echo other; echo recpipe-test; fi'
    out = _run(tmp_path / "listed", {"kind": listed}, "down")
    assert out.returncode == 0, out.stderr
    calls = (tmp_path / "listed" / "calls.log").read_text().splitlines()
    assert calls == ["kind get clusters", "kind delete cluster --name recpipe-test"]
    out = _run(tmp_path / "absent", {"kind": "echo other"}, "down")
    assert out.returncode == 0 and "no kind cluster named recpipe-test" in out.stdout
    assert (tmp_path / "absent" / "calls.log").read_text().splitlines() == ["kind get clusters"]
