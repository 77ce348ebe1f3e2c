"""Every local kustomization renders with ``kubectl kustomize`` and every resource it renders is valid offline:
built-in kinds against the Kubernetes schemas that ``kubernetes_validate`` ships (strict: an unknown field,
which the API server would drop or refuse, is an error), custom resources against the CRDs kept in
``manifests/crds`` (jsonschema) with their pod templates against Kubernetes' own PodTemplateSpec."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from manifest_tools import (
    K8S_VERSION,
    MANIFESTS,
    ROOT,
    UPSTREAM,
    kubectl,
    local_kustomizations,
    name,
    render,
)

pytestmark = pytest.mark.skipif(kubectl() is None, reason="kubectl is not installed (nothing is installed)")

KUSTOMIZATIONS = local_kustomizations()
IDS = [str(p.relative_to(MANIFESTS)) for p in KUSTOMIZATIONS]


def _crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) → openAPIV3Schema of every CRD in manifests/crds."""
    schemas = {}
    for path in sorted((MANIFESTS / "crds").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        spec = crd["spec"]
        for version in spec["versions"]:
            schemas[(f"{spec['group']}/{version['name']}", spec["names"]["kind"])] = version["schema"][
                "openAPIV3Schema"
            ]
    return schemas


CRDS = _crd_schemas()


def validate(resource: dict[str, Any]) -> list[str]:
    """Every error of one resource, as 'Kind/ns/name: path: message'."""
    key = (resource["apiVersion"], resource["kind"])
    if key in CRDS:
        validator = jsonschema.Draft7Validator(CRDS[key])
        errors = [
            f"{name(resource)}: {'/'.join(map(str, e.path))}: {e.message}"
            for e in validator.iter_errors(resource)
        ]
        # The repo's CRD keeps only part of the PodSpec; the pod templates get Kubernetes' full schema.
        for rtype, replica in (resource.get("spec", {}).get("pytorchReplicaSpecs") or {}).items():
            template = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": rtype.lower()}}
            template["template"] = replica.get("template", {})
            errors += [f"{name(resource)}[{rtype}]: {e}" for e in validate(template)]
        return errors
    try:
        kubernetes_validate.validate(resource, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        return [f"{name(resource)}: {'/'.join(map(str, e.path))}: {e.message}"]
    except kubernetes_validate.SchemaNotFoundError:
        return [
            f"{name(resource)}: no schema for {key} (neither Kubernetes {K8S_VERSION} nor manifests/crds)"
        ]
    return []


def test_the_expected_kustomizations_exist():
    assert set(IDS) >= {
        "base",
        "base/mlflow",
        "base/pipeline",
        "overlays/kind",
        "overlays/gpu",
        "secrets",
        "checks/base",
        "checks/gpu",
    }, IDS


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=IDS)
def test_renders_and_every_resource_is_valid(directory: Path):
    resources = render(directory)
    assert resources, f"{directory} renders nothing"
    errors = [e for r in resources for e in validate(r)]
    assert not errors, "\n".join(errors)
    names = [name(r) for r in resources]
    assert len(names) == len(set(names)), f"duplicate resources in {directory}: {names}"


def test_validation_catches_what_the_api_server_would_refuse_or_drop():
    deployment = copy.deepcopy(
        next(r for r in render(MANIFESTS / "overlays" / "kind") if r["kind"] == "Deployment")
    )
    typo = copy.deepcopy(deployment)
    container = typo["spec"]["template"]["spec"]["containers"][0]
    container["resoures"] = container.pop("resources")  # a typo kubectl would reject
    assert "resoures" in "\n".join(validate(typo))
    wrong_type = copy.deepcopy(deployment)
    wrong_type["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "5000"
    assert "containerPort" in "\n".join(validate(wrong_type))

    job = copy.deepcopy(next(r for r in render(MANIFESTS / "checks" / "base") if r["kind"] == "PyTorchJob"))
    job["spec"]["nprocPerNode"] = 1  # the CRD says string
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["securityContext"][
        "runAsNonRot"
    ] = True  # caught by the PodTemplateSpec schema
    messages = "\n".join(validate(job))
    assert "nprocPerNode" in messages and "runAsNonRot" in messages, messages


def test_remote_bases_are_pinned_to_release_tags_and_kept_apart():
    """The Kubeflow bases are fetched from GitHub: each pinned to a tag (never a branch), and only in
    manifests/upstream, which the tests do not render (no Git host is reachable here)."""
    remote = re.compile(r"^github\.com/kubeflow/[\w.-]+/[\w/.-]+\?ref=(v?\d+\.\d+\.\d+)$")
    pins = {}
    for path in sorted(UPSTREAM.rglob("kustomization.yaml")):
        k = yaml.safe_load(path.read_text())
        for resource in k["resources"]:
            m = remote.match(resource)
            assert m, f"{path.relative_to(ROOT)}: {resource!r} is not a tag-pinned kubeflow base"
            pins[resource.split("?")[0]] = m.group(1)
    assert set(pins) == {
        "github.com/kubeflow/pipelines/manifests/kustomize/cluster-scoped-resources",
        "github.com/kubeflow/pipelines/manifests/kustomize/env/platform-agnostic",
        "github.com/kubeflow/training-operator/manifests/overlays/standalone",
    }, pins
    kfp = {v for k, v in pins.items() if "/pipelines/" in k}
    assert len(kfp) == 1, f"both KFP bases must be the same release: {kfp}"
    # The backend release matches the SDK's minor version (kfp in requirements/lock.txt).
    lock = (ROOT / "requirements" / "lock.txt").read_text()
    sdk = re.search(r"^kfp==(\d+\.\d+)\.", lock, re.M).group(1)
    assert kfp.pop().startswith(sdk + "."), f"KFP backend {pins} vs SDK {sdk}"
    for path in KUSTOMIZATIONS:
        text = (path / "kustomization.yaml").read_text()
        assert "github.com" not in text and "?ref=" not in text, f"{path}: remote base outside upstream/"


def test_kind_cluster_config():
    cluster = yaml.safe_load((MANIFESTS / "kind" / "cluster.yaml").read_text())
    assert (cluster["kind"], cluster["apiVersion"]) == ("Cluster", "kind.x-k8s.io/v1alpha4")
    assert cluster["name"] == "recpipe"
    (node,) = cluster["nodes"]  # one node: the hostPath behind the RWX workspace is shared by every pod
    assert node["role"] == "control-plane"
    image, tag = node["image"].rsplit(":", 1)
    assert image == "kindest/node" and re.fullmatch(r"v\d+\.\d+\.\d+(@sha256:[0-9a-f]{64})?", tag), tag
    # The schemas the tests validate against are those of the node's Kubernetes minor version.
    assert tag[1:].rsplit(".", 1)[0] == K8S_VERSION.rsplit(".", 1)[0]
