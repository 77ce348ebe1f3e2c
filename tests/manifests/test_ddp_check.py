"""The PyTorchJob check (manifests/checks) runs here as the training operator would run it: two "pods", each
the manifest's own command with the PET_* rendezvous variables the operator sets, all-reduce over gloo."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from local_http import free_port
from manifest_tools import MANIFESTS, kubectl, pod_specs, render

SCRIPT = MANIFESTS / "checks" / "base" / "ddp_check.py"
MOUNT = "/etc/recpipe-check"


@pytest.mark.skipif(kubectl() is None, reason="kubectl is not installed (nothing is installed)")
def test_the_manifests_command_all_reduces_across_two_pods(tmp_path: Path):
    (job,) = [r for r in render(MANIFESTS / "checks" / "base") if r["kind"] == "PyTorchJob"]
    pods = dict(pod_specs(job))
    assert len(pods) == 2 and job["spec"]["nprocPerNode"] == "1"
    (configmap,) = [r for r in render(MANIFESTS / "checks" / "base") if r["kind"] == "ConfigMap"]
    assert configmap["data"]["ddp_check.py"] == SCRIPT.read_text()
    command = next(iter(pods.values()))["containers"][0]["command"]
    assert command[0] == "torchrun" and command[1].startswith(MOUNT + "/")
    # The mounted ConfigMap is the repo's file; torchrun is the venv's, as in the image.
    command = [str(Path(sys.executable).with_name("torchrun")), str(SCRIPT)]
    port = free_port()
    procs = []
    for rank in range(2):
        env = dict(
            os.environ,
            PET_NNODES="2",
            PET_NODE_RANK=str(rank),
            PET_NPROC_PER_NODE=job["spec"]["nprocPerNode"],
            PET_MASTER_ADDR="127.0.0.1",
            PET_MASTER_PORT=str(port),
            OMP_NUM_THREADS="1",
        )
        log = (tmp_path / f"pod{rank}.log").open("w")
        procs.append((subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT), log))
    for proc, log in procs:
        proc.wait(timeout=120)
        log.close()
    for rank, (proc, _) in enumerate(procs):
        out = (tmp_path / f"pod{rank}.log").read_text()
        assert proc.returncode == 0, out
        assert f"rank {rank}/2 gloo on cpu: all_reduce sum 3, expected 3: ok" in out, out


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the failure without a GPU")
def test_the_gpu_check_fails_clearly_without_a_gpu(monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location("ddp_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setenv("RECPIPE_CHECK_BACKEND", "nccl")
    assert module.main() == 1
    assert "no GPU is visible" in capsys.readouterr().out
