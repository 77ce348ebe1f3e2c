"""The PyTorchJob launcher against a stand-in Kubernetes API: the job it creates, the log it streams, the
checkpoint it brings back, and the error it fails with; the train stage's choice of launcher."""

import json
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from recpipe.config import ParameterError
from recpipe.launch import cluster
from recpipe.launch.errors import TrainingFailed
from recpipe.launch.secrets import SECRETS
from recpipe.stages import train

ROOT = Path(__file__).resolve().parents[2]


class FakeKube:
    """CustomObjectsApi + CoreV1Api as the launcher uses them; the "operator" writes the checkpoint
    onto the shared volume when the job is created and walks the job through ``states``."""

    def __init__(self, states, fail_message=""):
        self.states, self.fail_message = list(states), fail_message
        self.created, self.deleted, self.polls = [], [], 0
        self.lock = threading.Lock()

    # CustomObjectsApi
    def create_namespaced_custom_object(self, group, version, namespace, plural, body):
        self.created.append((group, version, namespace, plural, body))
        cmd = body["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["command"]
        out = Path(cmd[cmd.index("--out") + 1])
        (out / "checkpoints" / "ckpt-5").mkdir(parents=True)
        (out / "checkpoints" / "latest").write_text("ckpt-5")
        (out / "train_result.json").write_text(json.dumps({"steps": 5}))

    def get_namespaced_custom_object(self, group, version, namespace, plural, name):
        state = self.states[min(self.polls, len(self.states) - 1)]
        self.polls += 1
        cond = {"type": state, "status": "True", "message": self.fail_message if state == "Failed" else ""}
        return {"status": {"conditions": [{"type": "Created", "status": "True"}, cond]}}

    def delete_namespaced_custom_object(
        self, group, version, namespace, plural, name, propagation_policy=None
    ):
        self.deleted.append(name)

    # CoreV1Api
    def list_namespaced_pod(self, namespace, label_selector):
        phase = "Failed" if self.states[-1] == "Failed" else "Running"
        meta = SimpleNamespace(name=f"{label_selector.split('=')[1].split(',')[0]}-master-0")
        return SimpleNamespace(items=[SimpleNamespace(metadata=meta, status=SimpleNamespace(phase=phase))])

    def read_namespaced_pod_log(
        self, name, namespace, container, follow=False, _preload_content=True, tail_lines=None
    ):
        if follow:
            return SimpleNamespace(
                stream=lambda: iter([b"[recpipe.train] step 5: loss 0.41\n"]), release_conn=lambda: None
            )
        return "Traceback (most recent call last):\nRuntimeError: NCCL error: unhandled system error"


@pytest.fixture
def inputs(tmp_path, monkeypatch):
    for name in ("train", "eval"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "part-00000.parquet").write_bytes(b"PAR1")
    # a real config: the stage reads train.init_from (a warm start) before it launches anything
    (tmp_path / "config.yaml").write_text((ROOT / "configs" / "din_taobao_small.yaml").read_text())
    (tmp_path / "fg.json").write_text("{}")
    monkeypatch.setattr(cluster, "WORKSPACE_MOUNT", str(tmp_path / "workspace"))
    monkeypatch.setattr(cluster, "POLL_SECONDS", 0.0)
    monkeypatch.setattr(cluster.time, "sleep", lambda s: None)
    return tmp_path


def _run(inputs, kube, **kw):
    args = dict(
        config_path=str(inputs / "config.yaml"), train_dir=str(inputs / "train"), eval_dir=str(inputs / "eval"),
        out_dir=str(inputs / "ckpt"), fg_json=str(inputs / "fg.json"), workers=3, gpus_per_worker=8,
        accelerator="nvidia.com/gpu", node_selector={"gpu": "h200"}, tolerations=[{"key": "gpu", "operator": "Exists"}],
        image="ghcr.io/recpipe/recpipe-cuda:0.1.0", workspace_pvc="shared", namespace="team-a", overrides={"train.max_steps": 5},
    )  # fmt: skip
    args.update(kw)
    return cluster.launch_pytorchjob(**args)


def test_job_runs_and_checkpoint_comes_back(inputs, monkeypatch, capsys):
    kube = FakeKube(["Created", "Running", "Running", "Succeeded"])
    monkeypatch.setattr(cluster, "_clients", lambda: (kube, kube))
    where, world = _run(inputs, kube)
    assert where.startswith("pytorchjob/team-a/recpipe-train-") and world == 24
    (group, version, ns, plural, body) = kube.created[0]
    assert (group, version, ns, plural) == ("kubeflow.org", "v1", "team-a", "pytorchjobs")
    assert (
        body["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2 and body["spec"]["nprocPerNode"] == "8"
    )
    cmd = body["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["command"]
    assert cmd[:5] == ["torchrun", "--max-restarts", "0", "-m", "recpipe.launch.worker"]
    assert "--nnodes" not in cmd  # the operator's PET_* environment supplies node count, rank and master
    assert cmd[cmd.index("--set") + 1] == "train.max_steps=5" and cmd[cmd.index("--spec") + 1].endswith(
        "/fg.json"
    )
    assert (inputs / "ckpt" / "checkpoints" / "latest").read_text() == "ckpt-5"
    assert not kube.deleted and not list((inputs / "workspace").iterdir())  # staged copies cleaned up
    log = capsys.readouterr().out
    assert "PyTorchJob team-a/recpipe-train-" in log and "Succeeded" in log and "step 5: loss 0.41" in log


def test_failed_job_fails_with_its_error_and_is_deleted(inputs, monkeypatch):
    kube = FakeKube(
        ["Created", "Running", "Failed"],
        fail_message="PyTorchJob x is failed because 1 Worker replica(s) failed.",
    )
    monkeypatch.setattr(cluster, "_clients", lambda: (kube, kube))
    with pytest.raises(TrainingFailed) as err:
        _run(inputs, kube)
    assert "1 Worker replica(s) failed" in str(err.value) and "NCCL error" in str(err.value)
    assert len(kube.deleted) == 1


def test_the_job_reads_the_secret_tables_credentials(inputs, monkeypatch):
    kube = FakeKube(["Succeeded"])
    monkeypatch.setattr(cluster, "_clients", lambda: (kube, kube))
    _run(inputs, kube)
    env = kube.created[0][4]["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0][
        "env"
    ]
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in env if "valueFrom" in e}
    assert refs == {
        var: {"name": secret, "key": key, "optional": True}
        for secret in ("recpipe-object-store", "recpipe-mlflow")
        for key, var in SECRETS[secret].items()
    }


def test_multi_node_needs_a_shared_volume(inputs):
    with pytest.raises(ValueError, match="workspace_pvc"):
        _run(inputs, FakeKube(["Succeeded"]), workspace_pvc="")


def _stage(inputs, **kw):
    args = dict(
        config_path=str(inputs / "config.yaml"), train_dir=str(inputs / "train"), eval_dir=str(inputs / "eval"),
        out_dir=str(inputs / "ckpt"),
    )  # fmt: skip
    return train.run(**{**args, **kw})


def test_the_stage_launches_what_it_is_told(inputs, monkeypatch):
    # The environment is no switch: a Kubernetes API in sight changes nothing.
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    calls = []
    monkeypatch.setattr(
        train, "launch_pytorchjob", lambda *a, **kw: calls.append("job") or ("pytorchjob/ns/j", 24)
    )
    monkeypatch.setattr(train, "_train_local", lambda *a: calls.append(("local", a[5])))
    job = _stage(inputs, launcher="pytorchjob", workers=3, gpus_per_worker=8, workspace_pvc="w", image="i")
    assert (job.where, job.world_size) == ("pytorchjob/ns/j", 24)
    r = _stage(inputs, launcher="pytorchjob", workers=1, gpus_per_worker=2)  # one worker: this pod
    assert (r.where, r.world_size) == ("local", 2)
    r = _stage(inputs, launcher="local", workers=3, gpus_per_worker=0)
    assert (r.where, r.world_size) == ("local", 3)
    assert calls == ["job", ("local", 2), ("local", 3)]


def test_the_stage_names_a_bad_parameter(inputs):
    with pytest.raises(ParameterError, match="parameter launcher: must be one of"):
        _stage(inputs, launcher="auto")
    with pytest.raises(ParameterError, match="parameter workspace_pvc"):
        _stage(inputs, launcher="pytorchjob", workers=2, image="img", workspace_pvc="")
    with pytest.raises(ParameterError, match="parameter nproc_per_node"):
        _stage(inputs, nproc_per_node=0)
