"""A Kubeflow training-operator ``PyTorchJob`` (kubeflow.org/v1) for multi-node training.

``build_pytorchjob`` is a pure function of primitives that returns the manifest as a dict; ``check_pytorchjob``
repeats the operator's admission rules (``pytorch_validation.go``) so a bad manifest fails here with a clear
message instead of in the cluster. Submitting, waiting and streaming logs live in
:mod:`recpipe.launch.cluster`.

The operator starts ``workers`` pods (one ``Master`` + ``workers - 1`` ``Worker``) and gives every container
the torchrun rendezvous as environment: ``PET_NNODES``, ``PET_NPROC_PER_NODE`` (from ``nprocPerNode``),
``PET_NODE_RANK``, ``PET_MASTER_ADDR``, ``PET_MASTER_PORT``; torchrun reads ``PET_*`` as the defaults of
its flags, so the container command never repeats them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from recpipe.launch.secrets import SecretEnv

API_VERSION = "kubeflow.org/v1"
KIND = "PyTorchJob"
GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "pytorchjobs"
CONTAINER = "pytorch"  # the operator requires one container with this name
REPLICA_TYPES = ("Master", "Worker")
RESTART_POLICIES = ("Always", "OnFailure", "Never", "ExitCode")
CLEAN_POD_POLICIES = ("All", "Running", "None")
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
TOLERATION_OPERATORS = ("Exists", "Equal")
TOLERATION_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
WORKSPACE_VOLUME = "workspace"
SHM_VOLUME = "dshm"
TMP_VOLUME = "tmp"
# The pods carry the object-store and MLflow secrets: the same hardening as the hand-written manifests
# (tests/manifests/manifest_tools.check_pod_policy holds both to it). The root filesystem is read-only, so
# /tmp is an emptyDir and HOME points there (caches of torch, triton and pip).
POD_SECURITY = {
    "runAsNonRoot": True,
    "runAsUser": 10001,  # the images' user (images/*/Dockerfile)
    "runAsGroup": 10001,
    "fsGroup": 10001,  # the workspace volume is writable by it
    "seccompProfile": {"type": "RuntimeDefault"},
}
CONTAINER_SECURITY = {
    "runAsNonRoot": True,
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}

_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_RESOURCE = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$"
)


@dataclass(frozen=True)
class JobResources:
    """What each pod of the job asks for.

    Args:
        gpus (int): accelerators per pod (0 trains on CPU with gloo).
        accelerator (str): the extended resource name of an accelerator, e.g. ``nvidia.com/gpu``.
        cpu (str): CPU request and limit, e.g. ``"8"``; memory (str) the same, e.g. ``"64Gi"`` (the
            in-memory ``/dev/shm`` counts against it).
        shm_size (str): size of the in-memory ``/dev/shm`` (NCCL and DataLoader workers need more than 64Mi).
    """

    gpus: int = 0
    accelerator: str = "nvidia.com/gpu"
    # Every pod has limits (the cluster policy of manifests/): a runaway worker cannot starve its node.
    cpu: str = "4"
    memory: str = "32Gi"
    shm_size: str = "16Gi"


@dataclass(frozen=True)
class Placement:
    """Where the pods may run: a node selector and tolerations (Kubernetes toleration dicts)."""

    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: Sequence[Mapping[str, Any]] = ()


def job_name(prefix: str, unique: str) -> str:
    """A DNS-1035 job name ``<prefix>-<unique>`` of at most 63 characters (the operator's rule)."""
    raw = re.sub(r"[^a-z0-9-]+", "-", f"{prefix}-{unique}".lower()).strip("-")
    if not raw or not raw[0].isalpha():
        raw = f"j-{raw}"
    return raw[:63].rstrip("-")


def _toleration(t: Mapping[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(t) - {"key", "operator", "value", "effect", "tolerationSeconds"})
    if unknown:
        raise ValueError(f"toleration {dict(t)} has unknown fields {unknown}")
    op = t.get("operator", "Equal")
    if op not in TOLERATION_OPERATORS:
        raise ValueError(f"toleration operator must be one of {TOLERATION_OPERATORS}, got {op!r}")
    if op == "Exists" and t.get("value"):
        raise ValueError(f"toleration {dict(t)}: operator Exists takes no value")
    effect = t.get("effect")
    if effect is not None and effect not in TOLERATION_EFFECTS:
        raise ValueError(f"toleration effect must be one of {TOLERATION_EFFECTS}, got {effect!r}")
    out: dict[str, Any] = {k: v for k, v in t.items() if v is not None and k != "tolerationSeconds"}
    out["operator"] = op
    if t.get("tolerationSeconds") is not None:
        out["tolerationSeconds"] = int(t["tolerationSeconds"])
    return out


def _container(
    image: str,
    command: Sequence[str],
    env: Mapping[str, str],
    secret_env: Sequence[SecretEnv],
    resources: JobResources,
    pull_policy: str,
    workspace_mount: str | None,
) -> dict[str, Any]:
    limits: dict[str, Any] = {}
    requests: dict[str, Any] = {}
    if resources.gpus:
        # Extended resources (GPUs) must have requests == limits; setting the limit sets both.
        limits[resources.accelerator] = resources.gpus
    if resources.cpu:
        requests["cpu"] = limits["cpu"] = resources.cpu
    if resources.memory:
        requests["memory"] = limits["memory"] = resources.memory
    env_list: list[dict[str, Any]] = [{"name": k, "value": str(v)} for k, v in env.items()]
    env_list += [
        {
            "name": s.env,
            "valueFrom": {"secretKeyRef": {"name": s.secret, "key": s.key, "optional": s.optional}},
        }
        for s in secret_env
    ]
    mounts = [{"name": SHM_VOLUME, "mountPath": "/dev/shm"}, {"name": TMP_VOLUME, "mountPath": "/tmp"}]
    if workspace_mount:
        mounts.append({"name": WORKSPACE_VOLUME, "mountPath": workspace_mount})
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": image,
        "imagePullPolicy": pull_policy,
        "command": list(command),
        "env": env_list,
        "volumeMounts": mounts,
        "securityContext": CONTAINER_SECURITY,
    }
    if limits or requests:
        container["resources"] = {k: v for k, v in (("limits", limits), ("requests", requests)) if v}
    return container


def build_pytorchjob(
    name: str,
    namespace: str,
    image: str,
    command: Sequence[str],
    workers: int,
    resources: JobResources,
    placement: Placement | None = None,
    env: Mapping[str, str] | None = None,
    secret_env: Sequence[SecretEnv] = (),
    workspace_pvc: str | None = None,
    workspace_mount: str = "/workspace",
    image_pull_policy: str = "IfNotPresent",
    labels: Mapping[str, str] | None = None,
    restart_policy: str = "Never",
    backoff_limit: int = 0,
    active_deadline_seconds: int | None = None,
    ttl_seconds_after_finished: int | None = 86_400,
    elastic_min_workers: int | None = None,
    service_account: str | None = None,
) -> dict[str, Any]:
    """The manifest of a PyTorchJob that runs ``command`` under torchrun on ``workers`` pods.

    Args:
        name (str): job name (DNS-1035 label, <= 63 characters; see ``job_name``).
        namespace (str): Kubernetes namespace.
        image (str): container image (the recpipe CUDA image), never ``:latest``.
        command (Sequence[str]): container command, e.g. ``["recpipe", "train", ...]``.
        workers (int): pods; one is the ``Master`` (rank 0), ``workers - 1`` are ``Worker`` s.
        resources (JobResources): per-pod GPUs (``nprocPerNode``), CPU, memory, /dev/shm.
        placement (Placement | None): node selector and tolerations for every pod.
        env (Mapping[str, str] | None): plain environment variables.
        secret_env (Sequence[SecretEnv]): credentials from Secrets (never put them in ``env``).
        workspace_pvc (str | None): a ReadWriteMany claim mounted at ``workspace_mount`` on every pod.
        image_pull_policy (str): ``Always``, ``IfNotPresent`` or ``Never``.
        labels (Mapping[str, str] | None): labels for the job and its pods.
        restart_policy (str): per-replica restart policy; ``Never`` fails fast (resume is explicit).
        backoff_limit (int): retries before the job is marked Failed.
        active_deadline_seconds (int | None): hard time limit of the job.
        ttl_seconds_after_finished (int | None): when the operator deletes the finished job.
        elastic_min_workers (int | None): with a value, an ``elasticPolicy`` (c10d rendezvous) lets the
            job run with ``elastic_min_workers..workers`` pods.
        service_account (str | None): pods' service account (object-store access by workload identity).

    Returns:
        dict: ``{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": …, "spec": …}``.

    Example::

        >>> m = build_pytorchjob("din-42", "kubeflow", "ghcr.io/recpipe/recpipe-cuda:0.1.0",
        ...                      ["recpipe", "train", "..."], workers=2, resources=JobResources(gpus=8))
        >>> m["spec"]["nprocPerNode"], m["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"]
        ('8', 1)
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if resources.gpus < 0:
        raise ValueError(f"gpus per worker must be >= 0, got {resources.gpus}")
    if resources.gpus and not _RESOURCE.match(resources.accelerator):
        raise ValueError(
            f"accelerator must be a resource name like 'nvidia.com/gpu', got {resources.accelerator!r}"
        )
    if image_pull_policy not in PULL_POLICIES:
        raise ValueError(f"image_pull_policy must be one of {PULL_POLICIES}, got {image_pull_policy!r}")
    if restart_policy not in RESTART_POLICIES:
        raise ValueError(f"restart_policy must be one of {RESTART_POLICIES}, got {restart_policy!r}")
    if not command:
        raise ValueError("command must not be empty")
    placement = placement or Placement()
    for key in placement.node_selector:
        if not _LABEL_KEY.match(key):
            raise ValueError(f"node selector key {key!r} is not a valid label key")
    tolerations = [_toleration(t) for t in placement.tolerations]
    pod_labels = {
        **(labels or {}),
        "app.kubernetes.io/name": "recpipe",
        "app.kubernetes.io/component": "train",
    }
    pod_env = {"NCCL_DEBUG": "WARN", "PYTHONUNBUFFERED": "1", "HOME": "/tmp", **(env or {})}
    container = _container(
        image,
        command,
        pod_env,
        secret_env,
        resources,
        image_pull_policy,
        workspace_mount if workspace_pvc else None,
    )
    volumes: list[dict[str, Any]] = [
        {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": resources.shm_size}},
        {"name": TMP_VOLUME, "emptyDir": {}},
    ]
    if workspace_pvc:
        volumes.append({"name": WORKSPACE_VOLUME, "persistentVolumeClaim": {"claimName": workspace_pvc}})
    pod_spec: dict[str, Any] = {
        "containers": [container],
        "volumes": volumes,
        "securityContext": dict(POD_SECURITY),
        "automountServiceAccountToken": False,  # training never calls the Kubernetes API
    }
    if placement.node_selector:
        pod_spec["nodeSelector"] = dict(placement.node_selector)
    if tolerations:
        pod_spec["tolerations"] = tolerations
    if service_account:
        pod_spec["serviceAccountName"] = service_account

    def replica(n: int) -> dict[str, Any]:
        return {
            "replicas": n,
            "restartPolicy": restart_policy,
            "template": {"metadata": {"labels": dict(pod_labels)}, "spec": pod_spec},
        }

    replicas = {"Master": replica(1)}
    if workers > 1:
        replicas["Worker"] = replica(workers - 1)
    run_policy: dict[str, Any] = {"cleanPodPolicy": "None", "backoffLimit": int(backoff_limit)}
    if active_deadline_seconds:
        run_policy["activeDeadlineSeconds"] = int(active_deadline_seconds)
    if ttl_seconds_after_finished is not None:
        run_policy["ttlSecondsAfterFinished"] = int(ttl_seconds_after_finished)
    spec: dict[str, Any] = {
        "runPolicy": run_policy,
        "nprocPerNode": str(resources.gpus) if resources.gpus else "1",
        "pytorchReplicaSpecs": replicas,
    }
    if elastic_min_workers is not None:
        if not 1 <= elastic_min_workers <= workers:
            raise ValueError(
                f"elastic_min_workers must be in [1, workers={workers}], got {elastic_min_workers}"
            )
        spec["elasticPolicy"] = {
            "minReplicas": int(elastic_min_workers),
            "maxReplicas": int(workers),
            "rdzvBackend": "c10d",
            "maxRestarts": max(int(backoff_limit), 1),
        }
    manifest = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": namespace, "labels": dict(pod_labels)},
        "spec": spec,
    }
    check_pytorchjob(manifest)
    return manifest


def check_pytorchjob(manifest: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` where the training operator would refuse ``manifest`` (its admission rules:
    DNS-1035 name, Master/Worker replica types, a container named ``pytorch`` with an image, one Master,
    ``nprocPerNode`` not given twice)."""
    name = manifest.get("metadata", {}).get("name", "")
    if not _DNS1035.match(name) or len(name) > 63:
        raise ValueError(f"PyTorchJob name {name!r} is not a DNS-1035 label (a-z, 0-9, '-', <= 63 chars)")
    spec = manifest.get("spec") or {}
    replicas = spec.get("pytorchReplicaSpecs")
    if not replicas:
        raise ValueError("PyTorchJob spec.pytorchReplicaSpecs is empty")
    for rtype, rspec in replicas.items():
        if rtype not in REPLICA_TYPES:
            raise ValueError(f"PyTorchReplicaType is {rtype!r} but must be one of {list(REPLICA_TYPES)}")
        containers = (rspec or {}).get("template", {}).get("spec", {}).get("containers") or []
        if not containers:
            raise ValueError(f"PyTorchJob {rtype}: containers definition expected")
        if any(not c.get("image") for c in containers):
            raise ValueError(f"PyTorchJob {rtype}: image is undefined in a container")
        if not any(c.get("name") == CONTAINER for c in containers):
            raise ValueError(f"PyTorchJob {rtype}: there is no container named {CONTAINER!r}")
        if rtype == "Master" and rspec.get("replicas", 1) != 1:
            raise ValueError("PyTorchJob: there must be exactly 1 Master replica")
    if (
        spec.get("nprocPerNode") is not None
        and (spec.get("elasticPolicy") or {}).get("nProcPerNode") is not None
    ):
        raise ValueError(".spec.elasticPolicy.nProcPerNode is deprecated, use .spec.nprocPerNode instead")
    cpp = (spec.get("runPolicy") or {}).get("cleanPodPolicy")
    if cpp is not None and cpp not in CLEAN_POD_POLICIES:
        raise ValueError(f"runPolicy.cleanPodPolicy must be one of {CLEAN_POD_POLICIES}, got {cpp!r}")


def job_condition(status: Mapping[str, Any] | None) -> tuple[str, str]:
    """(state, message) from a PyTorchJob ``status``: the last condition whose status is ``True``
    (``Created``, ``Running``, ``Restarting``, ``Succeeded``, ``Failed``), or ``("Pending", "")``."""
    conditions = [c for c in (status or {}).get("conditions") or [] if c.get("status") == "True"]
    if not conditions:
        return "Pending", ""
    last = conditions[-1]
    return str(last.get("type", "Pending")), str(last.get("message") or last.get("reason") or "")
