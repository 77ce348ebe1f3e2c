"""The PyTorchJob manifest is valid against the training operator's CRD schema and its admission rules."""

import copy
from pathlib import Path

import jsonschema
import pytest
import yaml

from recpipe.launch.pytorchjob import (
    JobResources,
    Placement,
    build_pytorchjob,
    check_pytorchjob,
    job_condition,
    job_name,
)
from recpipe.launch.secrets import SecretEnv

CRD = Path(__file__).resolve().parents[2] / "manifests" / "crds" / "kubeflow.org_pytorchjobs.yaml"


def _strict(schema):
    """Kubernetes prunes fields its structural schema does not list; a pruned field is a silent bug
    for us, so the test treats every unlisted field as an error."""
    schema = copy.deepcopy(schema)

    def walk(node):
        if isinstance(node, dict):
            if "properties" in node and not node.get("x-kubernetes-preserve-unknown-fields"):
                node.setdefault("additionalProperties", False)
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(schema)
    return schema


@pytest.fixture(scope="module")
def validator():
    crd = yaml.safe_load(CRD.read_text())
    assert crd["spec"]["group"] == "kubeflow.org" and crd["spec"]["names"]["kind"] == "PyTorchJob"
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema = _strict(version["schema"]["openAPIV3Schema"])
    return jsonschema.Draft7Validator(schema)


def _job(**kw):
    args = dict(
        name="recpipe-train-abc123",
        namespace="kubeflow",
        image="ghcr.io/recpipe/recpipe-cuda:0.1.0",
        command=["recpipe", "train", "--config", "/workspace/j/config.yaml"],
        workers=4,
        resources=JobResources(gpus=8, accelerator="nvidia.com/gpu", cpu="32", memory="256Gi"),
        placement=Placement(
            node_selector={"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"},
            tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        ),
        secret_env=[SecretEnv("AWS_ACCESS_KEY_ID", "recpipe-object-store", "access_key_id")],
        workspace_pvc="recpipe-workspace",
    )
    args.update(kw)
    return build_pytorchjob(**args)


def test_multi_node_gpu_job_is_valid_and_asks_for_the_gpus(validator):
    m = _job()
    errors = sorted(validator.iter_errors(m), key=str)
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors]
    assert (m["apiVersion"], m["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    spec = m["spec"]
    assert spec["nprocPerNode"] == "8"
    replicas = spec["pytorchReplicaSpecs"]
    assert replicas["Master"]["replicas"] == 1 and replicas["Worker"]["replicas"] == 3
    pod = replicas["Worker"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["name"] == "pytorch" and c["image"].endswith(":0.1.0")
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert c["resources"]["requests"] == {"cpu": "32", "memory": "256Gi"}
    assert pod["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    # Credentials come from Secrets, never as literal values.
    (secret,) = [e for e in c["env"] if e["name"] == "AWS_ACCESS_KEY_ID"]
    assert secret["valueFrom"]["secretKeyRef"] == {
        "name": "recpipe-object-store",
        "key": "access_key_id",
        "optional": True,
    }
    assert {"name": "workspace", "persistentVolumeClaim": {"claimName": "recpipe-workspace"}} in pod[
        "volumes"
    ]
    assert {"name": "workspace", "mountPath": "/workspace"} in c["volumeMounts"]
    assert spec["runPolicy"]["backoffLimit"] == 0 and spec["runPolicy"]["cleanPodPolicy"] == "None"


def test_single_pod_cpu_job_and_elastic_policy_are_valid(validator):
    m = _job(workers=1, resources=JobResources(gpus=0), placement=None, workspace_pvc=None)
    assert not list(validator.iter_errors(m))
    assert list(m["spec"]["pytorchReplicaSpecs"]) == ["Master"]
    # Issue 16: a CPU pod has CPU and memory requests and limits too (the default JobResources).
    assert m["spec"]["nprocPerNode"] == "1" and m["spec"]["pytorchReplicaSpecs"]["Master"]["template"][
        "spec"
    ]["containers"][0]["resources"] == {
        "limits": {"cpu": "4", "memory": "32Gi"},
        "requests": {"cpu": "4", "memory": "32Gi"},
    }
    e = _job(elastic_min_workers=2)
    assert not list(validator.iter_errors(e))
    assert e["spec"]["elasticPolicy"] == {
        "minReplicas": 2,
        "maxReplicas": 4,
        "rdzvBackend": "c10d",
        "maxRestarts": 1,
    }


def test_schema_catches_what_kubernetes_would_prune_or_reject(validator):
    bad = _job()
    bad["spec"]["nprocPerNode"] = 8  # must be a string
    bad["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["resources"]["limits"][
        "nvidia.com/gpu"
    ] = "eight"
    bad["spec"]["runPolicy"]["backofLimit"] = 3  # typo: pruned silently by the API server
    messages = [f"{'/'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(bad)]
    assert any(m.startswith("spec/nprocPerNode") for m in messages), messages
    assert any("nvidia.com/gpu" in m for m in messages), messages
    assert any("backofLimit" in m for m in messages), messages


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda m: m["metadata"].update(name="Bad_Name"), "DNS-1035"),
        (
            lambda m: m["spec"]["pytorchReplicaSpecs"].update(
                Chief=m["spec"]["pytorchReplicaSpecs"]["Master"]
            ),
            "must be one of",
        ),
        (lambda m: m["spec"]["pytorchReplicaSpecs"]["Master"].update(replicas=2), "exactly 1 Master"),
        (
            lambda m: m["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0].update(
                name="main"
            ),
            "no container named 'pytorch'",
        ),
        (lambda m: m["spec"].update(elasticPolicy={"nProcPerNode": 8}), "deprecated"),
    ],
)
def test_operator_admission_rules(change, message):
    m = copy.deepcopy(_job())
    change(m)
    with pytest.raises(ValueError, match=message):
        check_pytorchjob(m)


def test_bad_arguments_fail_with_their_name():
    with pytest.raises(ValueError, match="workers"):
        _job(workers=0)
    with pytest.raises(ValueError, match="toleration operator"):
        _job(placement=Placement(tolerations=[{"key": "a", "operator": "Sometimes"}]))
    with pytest.raises(ValueError, match="node selector key"):
        _job(placement=Placement(node_selector={"bad key!": "x"}))
    with pytest.raises(ValueError, match="image_pull_policy"):
        _job(image_pull_policy="Sometimes")


def test_job_name_and_condition():
    name = job_name("recpipe-train", "KFP_Run_1234" * 10)
    assert len(name) <= 63 and name.startswith("recpipe-train-kfp-run-1234")
    check_pytorchjob(_job(name=name))
    assert job_condition(None) == ("Pending", "")
    status = {
        "conditions": [
            {"type": "Created", "status": "True"},
            {"type": "Running", "status": "False"},
            {
                "type": "Failed",
                "status": "True",
                "message": "PyTorchJob recpipe-x is failed because 1 Master replica(s) failed.",
            },
        ]
    }
    assert job_condition(status) == (
        "Failed",
        "PyTorchJob recpipe-x is failed because 1 Master replica(s) failed.",
    )
