"""The PyTorchJob pods recpipe builds (recpipe/launch/pytorchjob.py) follow the same policy as the
hand-written manifests: they carry the object-store and MLflow secrets."""

from __future__ import annotations

import pytest
from manifest_tools import check_pod_policy, pod_specs

from recpipe.launch.pytorchjob import JobResources, Placement, build_pytorchjob
from recpipe.launch.secrets import SecretEnv


@pytest.mark.parametrize(
    "resources",
    [JobResources(), JobResources(gpus=8, cpu="32", memory="256Gi")],
    ids=["cpu-defaults", "gpus"],
)
def test_pytorchjob_pods_follow_the_manifest_policy(resources):
    job = build_pytorchjob(
        "recpipe-train-x",
        "kubeflow",
        "ghcr.io/recpipe/recpipe:0.1.0",
        ["torchrun", "-m", "recpipe.launch.worker"],
        workers=3,
        resources=resources,
        placement=Placement(),
        secret_env=[SecretEnv("AWS_SECRET_ACCESS_KEY", "recpipe-object-store", "secret_access_key")],
        workspace_pvc="ws",
    )
    pods = list(pod_specs(job))
    assert [where.split("/")[-1] for where, _ in pods] == [
        "recpipe-train-x[Master]",
        "recpipe-train-x[Worker]",
    ]
    for where, pod in pods:
        check_pod_policy(where, pod)
        assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault", where
        (c,) = pod["containers"]
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
        assert {"name": "tmp", "mountPath": "/tmp"} in c["volumeMounts"]  # writable scratch space
        assert c["resources"]["limits"]["cpu"] == resources.cpu
