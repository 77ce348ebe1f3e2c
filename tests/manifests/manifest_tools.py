"""Rendering kustomizations with ``kubectl kustomize`` and walking what they hold (pod specs, containers,
NetworkPolicies), for the manifest tests. Nothing is installed: without kubectl the tests skip."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
UPSTREAM = MANIFESTS / "upstream"
# The Kubernetes release of the kind node image (manifests/kind/cluster.yaml), whose schemas validate.
K8S_VERSION = "1.33.0"
PIPELINE_NAMESPACE = "kubeflow"
WORKLOAD_TEMPLATE_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"}


def kubectl() -> str | None:
    """kubectl on PATH or in /usr/local/bin, or None."""
    return shutil.which("kubectl") or (
        "/usr/local/bin/kubectl" if Path("/usr/local/bin/kubectl").is_file() else None
    )


def local_kustomizations() -> list[Path]:
    """Every kustomization under manifests/ except the remote bases of manifests/upstream."""
    return sorted(p.parent for p in MANIFESTS.rglob("kustomization.yaml") if UPSTREAM not in p.parents)


@cache
def render(directory: Path) -> tuple[dict[str, Any], ...]:
    """``kubectl kustomize directory`` as a tuple of resources."""
    exe = kubectl()
    assert exe, "kubectl is needed to render kustomizations"
    out = subprocess.run([exe, "kustomize", str(directory)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"kubectl kustomize {directory.relative_to(ROOT)} failed:\n{out.stderr}"
    return tuple(d for d in yaml.safe_load_all(out.stdout) if d)


def name(resource: Mapping[str, Any]) -> str:
    meta = resource.get("metadata", {})
    ns = meta.get("namespace")
    return f"{resource['kind']}/{ns + '/' if ns else ''}{meta.get('name')}"


def pod_specs(resource: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, pod spec) for every pod a resource creates: workloads, CronJobs, Pods, PyTorchJob replicas."""
    kind, spec = resource["kind"], resource.get("spec") or {}
    if kind in WORKLOAD_TEMPLATE_KINDS:
        yield name(resource), spec["template"]["spec"]
    elif kind == "CronJob":
        yield name(resource), spec["jobTemplate"]["spec"]["template"]["spec"]
    elif kind == "Pod":
        yield name(resource), spec
    elif kind == "PyTorchJob":
        for rtype, replica in spec["pytorchReplicaSpecs"].items():
            yield f"{name(resource)}[{rtype}]", replica["template"]["spec"]


def containers(pod: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    yield from pod.get("initContainers") or []
    yield from pod.get("containers") or []


def check_pod_policy(where: str, pod: Mapping[str, Any]) -> None:
    """The policy every pod we run follows, hand-written or built (PyTorchJob replicas): no service-account
    token, requests and limits for CPU and memory, non-root, no privilege escalation, no capabilities."""
    pod_sc = pod.get("securityContext") or {}
    assert pod.get("automountServiceAccountToken") is False, (
        f"{where}: no API access needed, so no service-account token"
    )
    for c in containers(pod):
        what = f"{where} container {c['name']}"
        res = c.get("resources") or {}
        for kind in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(res.get(kind) or {}), f"{what}: {kind} cpu and memory"
        sc = c.get("securityContext") or {}
        assert sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is True, f"{what}: runAsNonRoot"
        uid = sc.get("runAsUser", pod_sc.get("runAsUser"))
        assert uid is None or uid > 0, f"{what}: runAsUser {uid}"
        assert sc.get("allowPrivilegeEscalation") is False, f"{what}: allowPrivilegeEscalation"
        assert sc.get("capabilities", {}).get("drop") == ["ALL"], f"{what}: drop all capabilities"
        assert not sc.get("privileged"), what


def _selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    assert not selector.get("matchExpressions"), "the evaluator knows matchLabels only"
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def ingress_allowed(
    policies: list[Mapping[str, Any]],
    target_ns: str,
    target_labels: Mapping[str, str],
    source_ns: str,
    source_labels: Mapping[str, str],
    port: int,
) -> bool:
    """Whether NetworkPolicies let a pod (source_ns, source_labels) open TCP ``port`` on a pod
    (target_ns, target_labels), as the API defines it: a pod selected by no ingress policy takes anything;
    otherwise some rule of a selecting policy must match both the peer and the port. Namespaces carry
    only their automatic label kubernetes.io/metadata.name."""
    source_ns_labels = {"kubernetes.io/metadata.name": source_ns}
    selecting = [
        p
        for p in policies
        if p["metadata"].get("namespace") == target_ns
        and "Ingress" in (p["spec"].get("policyTypes") or ["Ingress"])
        and _selects(p["spec"].get("podSelector") or {}, target_labels)
    ]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get("ingress") or []:
            ports = rule.get("ports")
            if ports and not any(p.get("port") == port and p.get("protocol", "TCP") == "TCP" for p in ports):
                continue
            peers = rule.get("from")
            if not peers:
                return True
            for peer in peers:
                if "ipBlock" in peer:
                    continue
                ns_sel, pod_sel = peer.get("namespaceSelector"), peer.get("podSelector")
                ns_ok = _selects(ns_sel, source_ns_labels) if ns_sel is not None else source_ns == target_ns
                pod_ok = _selects(pod_sel, source_labels) if pod_sel is not None else True
                if ns_ok and pod_ok:
                    return True
    return False
