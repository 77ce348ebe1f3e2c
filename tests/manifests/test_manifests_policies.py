"""What the rendered manifests must hold beyond schema validity: no secret value, limits and a non-root user
on every container, images tied to the package version, least-privilege RBAC, NetworkPolicies that let only
the pipeline reach MLflow and only MLflow reach its stores, and the names and keys the pipeline reads."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from manifest_tools import (
    MANIFESTS,
    PIPELINE_NAMESPACE,
    check_pod_policy,
    containers,
    ingress_allowed,
    kubectl,
    local_kustomizations,
    name,
    pod_specs,
    render,
)

import recpipe
from components.image import CUDA_IMAGE, IMAGE

pytestmark = pytest.mark.skipif(kubectl() is None, reason="kubectl is not installed (nothing is installed)")

PLACEHOLDER = "REPLACE_ME"
SECRETS = MANIFESTS / "secrets"
APPLIED = [p for p in local_kustomizations() if p != SECRETS]  # what `kubectl apply -k` may be given
IDS = [str(p.relative_to(MANIFESTS)) for p in APPLIED]
MLFLOW_IMAGE = f"ghcr.io/recpipe/recpipe-mlflow:{recpipe.__version__}"
OUR_IMAGES = {IMAGE, CUDA_IMAGE, MLFLOW_IMAGE}
SENSITIVE_ENV = re.compile(r"PASSWORD|TOKEN|SECRET|ACCESS_KEY|ACCESS_ID")


def _all(directory) -> tuple[dict[str, Any], ...]:
    return render(directory)


def _by_kind(resources, kind: str) -> list[dict[str, Any]]:
    return [r for r in resources if r["kind"] == kind]


# ---- Secrets -------------------------------------------------------------------------------------------


def test_secret_templates_hold_placeholders_only():
    secrets = _by_kind(_all(SECRETS), "Secret")
    assert secrets, "manifests/secrets renders no Secret"
    for s in secrets:
        assert "data" not in s, f"{name(s)}: base64 data would hide a value; use stringData placeholders"
        assert s["stringData"], name(s)
        real = {k: v for k, v in s["stringData"].items() if v != PLACEHOLDER}
        assert not real, f"{name(s)} carries values other than {PLACEHOLDER}: {sorted(real)}"


@pytest.mark.parametrize("directory", APPLIED, ids=IDS)
def test_applied_kustomizations_carry_no_secret_and_no_literal_credential(directory):
    resources = _all(directory)
    assert not _by_kind(resources, "Secret"), "Secrets are created by hand, never applied from git"
    for r in resources:
        for where, pod in pod_specs(r):
            for c in containers(pod):
                for env in c.get("env") or []:
                    if SENSITIVE_ENV.search(env["name"]):
                        assert "secretKeyRef" in env.get("valueFrom", {}), (
                            f"{where} {c['name']}: {env['name']} must come from a Secret"
                        )


def _secret_keys() -> dict[tuple[str, str], set[str]]:
    return {
        (s["metadata"]["namespace"], s["metadata"]["name"]): set(s["stringData"])
        for s in _by_kind(_all(SECRETS), "Secret")
    }


def test_every_secret_reference_has_a_template():
    """The names and keys the manifests and the pipeline read exist in manifests/secrets, in the namespace
    they are read from: the templates are the documentation of what to create."""
    templates = _secret_keys()
    refs: set[tuple[str, str, str]] = set()
    for directory in APPLIED:
        for r in _all(directory):
            ns = r["metadata"].get("namespace")
            for _, pod in pod_specs(r):
                for c in containers(pod):
                    for env in c.get("env") or []:
                        ref = env.get("valueFrom", {}).get("secretKeyRef")
                        if ref:
                            refs.add((ns, ref["name"], ref["key"]))
    from recpipe.launch.secrets import SECRETS

    # The one table the pipeline's steps and the PyTorchJob's pods read their Secrets from.
    for secret, keys in SECRETS.items():
        refs |= {(PIPELINE_NAMESPACE, secret, k) for k in keys}
    missing = sorted(r for r in refs if r[2] not in templates.get((r[0], r[1]), set()))
    assert not missing, f"Secret keys read but not templated in manifests/secrets: {missing}"
    assert (PIPELINE_NAMESPACE, "recpipe-mlflow") in templates


# ---- Containers ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("directory", APPLIED, ids=IDS)
def test_every_container_has_requests_limits_and_runs_as_non_root(directory):
    pods = [(where, pod) for r in _all(directory) for where, pod in pod_specs(r)]
    for where, pod in pods:
        check_pod_policy(where, pod)  # the PyTorchJob pods recpipe builds: test_pytorchjob_pods.py


@pytest.mark.parametrize("directory", APPLIED, ids=IDS)
def test_images_are_pinned_and_ours_match_the_package_version(directory):
    for r in _all(directory):
        for where, pod in pod_specs(r):
            for c in containers(pod):
                image = c["image"]
                repo, _, tag = image.rpartition(":")
                assert repo and "/" not in tag and tag not in ("", "latest"), f"{where}: {image} unpinned"
                if image.startswith("ghcr.io/recpipe/"):
                    assert image in OUR_IMAGES, f"{where}: {image} is not one of {sorted(OUR_IMAGES)}"
                assert c.get("imagePullPolicy") == "IfNotPresent", f"{where}: {image}"


def test_checks_run_the_pipeline_images():
    cpu = _by_kind(_all(MANIFESTS / "checks" / "base"), "PyTorchJob")
    gpu = _by_kind(_all(MANIFESTS / "checks" / "gpu"), "PyTorchJob")
    assert {c["image"] for r in cpu for _, p in pod_specs(r) for c in containers(p)} == {IMAGE}
    assert {c["image"] for r in gpu for _, p in pod_specs(r) for c in containers(p)} == {CUDA_IMAGE}
    assert {c["image"] for c in _mlflow_pod()["containers"] + _mlflow_pod()["initContainers"]} == {
        MLFLOW_IMAGE
    }


def test_env_references_point_at_variables_defined_before():
    """$(VAR) in an env value is expanded by the kubelet only from variables listed earlier."""
    for directory in APPLIED:
        for r in _all(directory):
            for where, pod in pod_specs(r):
                for c in containers(pod):
                    seen: set[str] = set()
                    for env in c.get("env") or []:
                        for ref in re.findall(r"\$\((\w+)\)", env.get("value") or ""):
                            assert ref in seen, f"{where} {c['name']}: {env['name']} uses $({ref})"
                        seen.add(env["name"])


# ---- MLflow --------------------------------------------------------------------------------------------


def _mlflow_pod(directory=MANIFESTS / "base") -> dict[str, Any]:
    (d,) = [
        r for r in _all(directory) if r["kind"] == "Deployment" and r["metadata"]["name"] == "mlflow-server"
    ]
    return d["spec"]["template"]["spec"]


def test_mlflow_server_runs_basic_auth_against_postgres_and_minio():
    pod = _mlflow_pod()
    (server,) = pod["containers"]
    assert server["args"][0] == "serve"  # recpipe_mlflow_server serve → mlflow server --app-name basic-auth
    env = {e["name"]: e for e in server["env"]}
    assert env["MLFLOW_BACKEND_STORE_URI"]["value"].startswith("postgresql://mlflow:$(POSTGRES_PASSWORD)@")
    assert env["MLFLOW_AUTH_DATABASE_URI"]["value"].endswith("/mlflow_auth")
    assert env["MLFLOW_ARTIFACTS_DESTINATION"]["value"] == "s3://mlflow-artifacts"
    assert "--serve-artifacts" in server["args"]  # clients upload through MLflow, never to MinIO
    assert env["MLFLOW_AUTH_DEFAULT_PERMISSION"]["value"] == "READ"
    hosts = env["MLFLOW_SERVER_ALLOWED_HOSTS"]["value"].split(",")
    assert "mlflow.mlflow.svc.cluster.local:5000" in hosts and "localhost:*" in hosts
    (init,) = pod["initContainers"]
    assert init["args"] == ["ensure-bucket"]
    # The database that holds the auth app's users is created on first start.
    (cm,) = [r for r in _all(MANIFESTS / "base") if r["metadata"]["name"] == "mlflow-postgres-init"]
    assert "CREATE DATABASE mlflow_auth" in "".join(cm["data"].values())


def test_network_policies_let_only_the_pipeline_reach_mlflow_and_only_mlflow_reach_its_stores():
    for directory in (MANIFESTS / "overlays" / "kind", MANIFESTS / "overlays" / "gpu"):
        resources = _all(directory)
        policies = _by_kind(resources, "NetworkPolicy")
        labels = {
            r["metadata"]["name"]: r["spec"]["template"]["metadata"]["labels"]
            for r in resources
            if r["kind"] in ("Deployment", "StatefulSet") and r["metadata"]["namespace"] == "mlflow"
        }
        server, postgres, minio = labels["mlflow-server"], labels["mlflow-postgres"], labels["mlflow-minio"]

        def allowed(target, port, src_ns, src_labels, policies=policies):
            return ingress_allowed(policies, "mlflow", target, src_ns, src_labels, port)

        any_pod = {"app": "anything"}
        assert allowed(server, 5000, PIPELINE_NAMESPACE, any_pod)  # KFP steps and PyTorchJob pods
        assert allowed(server, 5000, "ingress-nginx", any_pod)
        assert not allowed(server, 5000, "default", any_pod)
        assert not allowed(server, 5000, "mlflow", postgres)
        assert not allowed(server, 8080, PIPELINE_NAMESPACE, any_pod)
        assert allowed(postgres, 5432, "mlflow", server)
        assert not allowed(postgres, 5432, PIPELINE_NAMESPACE, any_pod)
        assert not allowed(postgres, 5432, "mlflow", minio)
        assert allowed(minio, 9000, "mlflow", server)
        assert not allowed(minio, 9000, PIPELINE_NAMESPACE, any_pod)
        assert not allowed(minio, 9000, "mlflow", postgres)
        # Without the default deny, a pod added later would be open to all.
        assert not allowed({"app.kubernetes.io/name": "new"}, 80, "default", any_pod)


def test_mlflow_namespace_enforces_the_restricted_pod_security_standard():
    (ns,) = [r for r in _all(MANIFESTS / "base") if r["kind"] == "Namespace"]
    assert ns["metadata"]["name"] == "mlflow"
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    for r in _all(MANIFESTS / "base"):
        for where, pod in pod_specs(r):
            assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault", where


# ---- The pipeline's namespace --------------------------------------------------------------------------


def test_pipeline_runner_may_only_launch_pytorchjobs_and_read_pods_in_its_namespace():
    resources = _all(MANIFESTS / "base")
    assert not [r for r in resources if r["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    (role,) = _by_kind(resources, "Role")
    assert role["metadata"]["namespace"] == PIPELINE_NAMESPACE
    grants = {
        (group, resource): sorted(rule["verbs"])
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert grants == {
        ("kubeflow.org", "pytorchjobs"): sorted(["create", "get", "list", "watch", "delete"]),
        ("", "pods"): ["get", "list", "watch"],
        ("", "pods/log"): ["get"],
    }
    (binding,) = _by_kind(resources, "RoleBinding")
    assert binding["metadata"]["namespace"] == PIPELINE_NAMESPACE
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    # KFP standalone runs every step as pipeline-runner in its own namespace.
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "pipeline-runner", "namespace": PIPELINE_NAMESPACE}
    ]


def test_workspace_claim_is_the_pipelines_and_binds_on_kind():
    from pipelines.training_pipeline import training_pipeline

    default_pvc = training_pipeline.component_spec.inputs["workspace_pvc"].default
    for directory in (MANIFESTS / "base", MANIFESTS / "overlays" / "gpu", MANIFESTS / "overlays" / "kind"):
        (pvc,) = _by_kind(_all(directory), "PersistentVolumeClaim")
        assert (pvc["metadata"]["name"], pvc["metadata"]["namespace"]) == (default_pvc, PIPELINE_NAMESPACE)
        assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    kind = _all(MANIFESTS / "overlays" / "kind")
    (pvc,), (pv,) = _by_kind(kind, "PersistentVolumeClaim"), _by_kind(kind, "PersistentVolume")
    assert pvc["spec"]["volumeName"] == pv["metadata"]["name"]
    assert pvc["spec"]["storageClassName"] == pv["spec"]["storageClassName"]
    assert pv["spec"]["claimRef"] == {"namespace": PIPELINE_NAMESPACE, "name": default_pvc}
    assert "ReadWriteMany" in pv["spec"]["accessModes"]
    assert pv["spec"]["capacity"]["storage"] == pvc["spec"]["resources"]["requests"]["storage"]


# ---- GPU -----------------------------------------------------------------------------------------------


def test_gpu_overlay_placement_is_what_the_pipeline_and_the_gpu_check_use():
    resources = _all(MANIFESTS / "overlays" / "gpu")
    (placement,) = [r for r in resources if r["metadata"]["name"] == "recpipe-gpu-placement"]
    node_selector = json.loads(placement["data"]["node_selector"])
    tolerations = json.loads(placement["data"]["tolerations"])
    # The values are valid as the pipeline's parameters (the PyTorchJob builder checks them).
    from recpipe.launch.pytorchjob import JobResources, Placement, build_pytorchjob

    job = build_pytorchjob(
        "j",
        PIPELINE_NAMESPACE,
        CUDA_IMAGE,
        ["true"],
        2,
        JobResources(gpus=8),
        Placement(node_selector, tolerations),
    )
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"] == node_selector
    # The GPU check lands where training does.
    for r in _by_kind(_all(MANIFESTS / "checks" / "gpu"), "PyTorchJob"):
        for where, pod in pod_specs(r):
            assert pod["nodeSelector"] == node_selector and pod["tolerations"] == tolerations, where
            (c,) = pod["containers"]
            assert c["resources"]["limits"][placement["data"]["accelerator_type"]] == 1, where
    # MLflow and its stores stay off GPU nodes.
    gpu_label = next(iter(node_selector))
    for r in resources:
        for where, pod in pod_specs(r):
            terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            assert {"key": gpu_label, "operator": "DoesNotExist"} in terms["nodeSelectorTerms"][0][
                "matchExpressions"
            ], where
    (quota,) = _by_kind(resources, "ResourceQuota")
    assert quota["metadata"]["namespace"] == PIPELINE_NAMESPACE
    assert "requests.nvidia.com/gpu" in quota["spec"]["hard"]


def test_overlays_change_sizes_not_names():
    """The overlays resize and place; every resource of the base exists under the same name in each."""
    base = {name(r) for r in _all(MANIFESTS / "base")}
    for overlay in ("kind", "gpu"):
        names = {name(r) for r in _all(MANIFESTS / "overlays" / overlay)}
        assert base <= names, f"overlays/{overlay} lacks {sorted(base - names)}"

    # kind asks for less than the base on every container it resizes.
    def requested_mib(directory) -> dict[str, float]:
        units = {"Mi": 1, "Gi": 1024, "Ti": 1024 * 1024}
        return {
            f"{where}/{c['name']}": float(q[:-2]) * units[q[-2:]]
            for r in _all(directory)
            for where, pod in pod_specs(r)
            for c in containers(pod)
            for q in [c["resources"]["requests"]["memory"]]
        }

    base_mib, kind_mib = requested_mib(MANIFESTS / "base"), requested_mib(MANIFESTS / "overlays" / "kind")
    assert all(kind_mib[k] <= v for k, v in base_mib.items()), (base_mib, kind_mib)
    assert sum(kind_mib.values()) < sum(base_mib.values()) / 2


def test_scoring_server_serves_the_champion_of_the_configs_model():
    """``recpipe serve`` (recpipe's scoring server, MLflow's protocol) for ``models:/<registered model>@champion``
    with one torch thread per worker: the production config's model in the base and the gpu overlay, the small
    config's on kind (make local-run); every argument one ``recpipe serve`` reads."""
    from recpipe.cli.main import build_parser
    from recpipe.config import load_config

    for directory, config in (("base", "din_taobao.yaml"), ("overlays/gpu", "din_taobao.yaml"),
                              ("overlays/kind", "din_taobao_small.yaml")):  # fmt: skip
        resources = _all(MANIFESTS / directory)
        (dep,) = [r for r in _by_kind(resources, "Deployment") if r["metadata"]["name"] == "recpipe-scoring"]
        assert dep["metadata"]["namespace"] == PIPELINE_NAMESPACE  # its pods may reach MLflow
        (c,) = dep["spec"]["template"]["spec"]["containers"]
        assert c["image"] == IMAGE and c["command"] == ["recpipe", "serve"]
        parsed = build_parser().parse_args(["serve", *c["args"]])
        model = load_config(f"configs/{config}").registered_model_name
        assert parsed.model == f"models:/{model}@champion" and parsed.server == "recpipe"
        assert (parsed.host, parsed.port, parsed.threads) == ("0.0.0.0", 8080, 1)
        env = {e["name"]: e for e in c["env"]}
        assert env["MLFLOW_TRACKING_URI"]["value"] == "http://mlflow.mlflow.svc.cluster.local:5000"
        assert env["MLFLOW_TRACKING_TOKEN"]["valueFrom"]["secretKeyRef"] == {
            "name": "recpipe-mlflow",
            "key": "token",
        }
        (svc,) = [r for r in _by_kind(resources, "Service") if r["metadata"]["name"] == "recpipe-scoring"]
        labels = dep["spec"]["template"]["metadata"]["labels"]
        assert svc["spec"]["selector"].items() <= labels.items()
        assert [p["port"] for p in svc["spec"]["ports"]] == [8080]


def test_the_mlflow_ingress_serves_tls_only():
    (ingress,) = _by_kind(_all(MANIFESTS / "base"), "Ingress")
    hosts = {rule["host"] for rule in ingress["spec"]["rules"]}
    (tls,) = ingress["spec"]["tls"]
    assert set(tls["hosts"]) == hosts and tls["secretName"] == "mlflow-tls"
    assert ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/force-ssl-redirect"] == "true"


def test_mlflow_reaches_minio_with_its_own_bucket_scoped_user():
    resources = _all(MANIFESTS / "base")
    keys_of = {
        name(r): {
            (e["valueFrom"]["secretKeyRef"]["name"], e["valueFrom"]["secretKeyRef"]["key"])
            for _, pod in pod_specs(r)
            for c in containers(pod)
            for e in c.get("env") or []
            if "secretKeyRef" in e.get("valueFrom", {})
        }
        for r in resources
        if list(pod_specs(r))
    }
    root = {("mlflow-minio", "root-user"), ("mlflow-minio", "root-password")}
    (server,) = [n for n in keys_of if n.endswith("/mlflow-server")]
    assert not keys_of[server] & root, "the MLflow server must not hold MinIO's root credentials"
    assert {("mlflow-minio", "mlflow-user"), ("mlflow-minio", "mlflow-password")} <= keys_of[server]
    (minio,) = [r for r in resources if r["kind"] == "StatefulSet" and name(r).endswith("mlflow-minio")]
    (pod,) = [p for _, p in pod_specs(minio)]
    (provision,) = [c for c in pod["containers"] if c["name"] == "mlflow-user"]
    script = provision["args"][0]
    resources_in_policy = set(re.findall(r"arn:aws:s3:::[^\"]+", script))
    assert resources_in_policy == {"arn:aws:s3:::mlflow-artifacts", "arn:aws:s3:::mlflow-artifacts/*"}
    assert 'mc admin policy attach local mlflow-artifacts --user "$MLFLOW_USER"' in script
    # Only pods in namespace mlflow read root credentials: MinIO itself.
    holders = {n for n, keys in keys_of.items() if keys & root}
    assert holders == {name(minio)}, holders
