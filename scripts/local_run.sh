#!/usr/bin/env bash
# The training pipeline on a local kind cluster (`make local-run`; `make local-down` deletes the cluster).
#
#   scripts/local_run.sh [up]   kind cluster → Kubeflow Pipelines, training operator, MLflow (manifests/) →
#                               images built and loaded → PyTorchJob check → pipeline run (small Taobao config)
#   scripts/local_run.sh down   stop the port-forwards and delete the cluster
#
# Needs docker (with a reachable engine), kind, kubectl, network access to GitHub and the image registries
# (the Kubeflow bases and images are fetched), and `make install` done (.venv/bin/recpipe). Settings:
#   KIND_CLUSTER=recpipe  KFP_PORT=8080  MLFLOW_PORT=5000  LOCAL_RUN_ROWS=200000
#   LOCAL_RUN_CONFIG=configs/din_taobao_small.yaml  LOCAL_RUN_TIMEOUT=3600 (seconds the run may take)
#   LOCAL_RUN_CUDA_IMAGE=alias|build   alias (default): the train step's CUDA image tag is pointed, inside the
#       cluster only, at the CPU image (kind has no GPU; the CUDA image is many GB); build: build and load it.
set -euo pipefail
cd "$(dirname "$0")/.."

CLUSTER=${KIND_CLUSTER:-recpipe}
CONTEXT=kind-$CLUSTER
NODE=$CLUSTER-control-plane
KFP_PORT=${KFP_PORT:-8080}
MLFLOW_PORT=${MLFLOW_PORT:-5000}
ROWS=${LOCAL_RUN_ROWS:-200000}
CONFIG=${LOCAL_RUN_CONFIG:-configs/din_taobao_small.yaml}
RUN_TIMEOUT=${LOCAL_RUN_TIMEOUT:-3600}
CUDA_MODE=${LOCAL_RUN_CUDA_IMAGE:-alias}
PY=${PY:-.venv/bin/python}
STATE=runs/kind
PIDS=$STATE/port-forward.pids
WORKSPACE=/var/local/recpipe-workspace # hostPath of manifests/overlays/kind/workspace-volume.yaml
MLFLOW_IN_CLUSTER=http://mlflow.mlflow.svc.cluster.local:5000
IMAGE_UID=10001 # the images' non-root user

say() { printf '\n==> %s\n' "$*"; }
die() {
  echo "local-run: $*" >&2
  exit 1
}
k() { kubectl --context "$CONTEXT" "$@"; }

check_tools() {
  local missing=()
  if ! command -v docker >/dev/null 2>&1; then
    missing+=("docker: not found. Install Docker Engine: https://docs.docker.com/engine/install/")
  elif ! docker info >/dev/null 2>&1; then
    missing+=("docker: the client is here but no Docker engine is reachable ('docker info' failed). Start the daemon or set DOCKER_HOST.")
  fi
  command -v kind >/dev/null 2>&1 ||
    missing+=("kind: not found. Install it: https://kind.sigs.k8s.io/docs/user/quick-start/#installation")
  command -v kubectl >/dev/null 2>&1 ||
    missing+=("kubectl: not found. Install it: https://kubernetes.io/docs/tasks/tools/")
  [[ -x .venv/bin/recpipe ]] || missing+=(".venv/bin/recpipe: not found. Run 'make install' first.")
  if [[ ${#missing[@]} -gt 0 ]]; then
    echo "local-run cannot start:" >&2
    printf '  - %s\n' "${missing[@]}" >&2
    exit 1
  fi
}

stop_port_forwards() {
  [[ -f $PIDS ]] || return 0
  local pid
  while read -r pid; do
    # Only our own kubectl port-forward processes (a PID may have been reused since).
    if [[ -n $pid ]] && ps -p "$pid" -o args= 2>/dev/null | grep -q "port-forward"; then
      kill "$pid" 2>/dev/null || true
    fi
  done <"$PIDS"
  rm -f "$PIDS"
}

port_forward() { # namespace service local-port remote-port
  nohup kubectl --context "$CONTEXT" -n "$1" port-forward "svc/$2" "$3:$4" >"$STATE/port-forward-$2.log" 2>&1 &
  echo $! >>"$PIDS"
}

wait_http() { # url seconds
  local deadline=$((SECONDS + $2))
  until curl -fsS -o /dev/null "$1" 2>/dev/null; do
    ((SECONDS < deadline)) || die "no answer from $1 after $2s"
    sleep 2
  done
}

random_hex() { "$PY" -c "import secrets, sys; print(secrets.token_hex(int(sys.argv[1])))" "$1"; }

create_secrets() {
  # Created once with generated values, never overwritten (the MLflow user's password is the token).
  if ! k -n mlflow get secret mlflow-postgres >/dev/null 2>&1; then
    k -n mlflow create secret generic mlflow-postgres --from-literal=password="$(random_hex 24)"
  fi
  if ! k -n mlflow get secret mlflow-minio >/dev/null 2>&1; then
    k -n mlflow create secret generic mlflow-minio --from-literal=root-user=mlflow \
      --from-literal=root-password="$(random_hex 24)" --from-literal=mlflow-user=mlflow-server \
      --from-literal=mlflow-password="$(random_hex 24)"
  fi
  if ! k -n mlflow get secret mlflow-server >/dev/null 2>&1; then
    k -n mlflow create secret generic mlflow-server --from-literal=admin-password="$(random_hex 16)" \
      --from-literal=flask-secret-key="$(random_hex 32)" --from-literal=pipeline-token="$(random_hex 32)"
  fi
  local token
  token=$(k -n mlflow get secret mlflow-server -o jsonpath='{.data.pipeline-token}' | base64 -d)
  k -n kubeflow create secret generic recpipe-mlflow --from-literal=token="$token" \
    --dry-run=client -o yaml | k apply -f - >/dev/null
  # recpipe-odps and recpipe-object-store are optional for the pipeline; this run reads generated data.
}

load_images() {
  local image cuda_image mlflow_image
  read -r image cuda_image mlflow_image < <(scripts/build_images.sh --print-tags)
  if [[ $CUDA_MODE == build ]]; then
    scripts/build_images.sh cpu cuda mlflow
    kind load docker-image --name "$CLUSTER" "$image" "$cuda_image" "$mlflow_image"
  else
    scripts/build_images.sh cpu mlflow
    kind load docker-image --name "$CLUSTER" "$image" "$mlflow_image"
    echo "LOCAL_RUN_CUDA_IMAGE=alias: $cuda_image → $image inside the kind node only (no GPU here)"
    docker exec "$NODE" ctr -n k8s.io images tag --force "$image" "$cuda_image" >/dev/null
  fi
}

up() {
  check_tools
  mkdir -p "$STATE"
  say "kind cluster $CLUSTER"
  if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
    echo "exists"
  else
    kind create cluster --name "$CLUSTER" --config manifests/kind/cluster.yaml --wait 5m
  fi
  docker exec "$NODE" sh -c "mkdir -p $WORKSPACE && chown $IMAGE_UID:$IMAGE_UID $WORKSPACE && chmod 0775 $WORKSPACE"

  say "images"
  load_images

  say "Kubeflow Pipelines (manifests/upstream/kubeflow-pipelines)"
  k apply -k manifests/upstream/kubeflow-pipelines/cluster-scoped
  k wait --for condition=established --timeout=120s crd/applications.app.k8s.io
  k apply -k manifests/upstream/kubeflow-pipelines/platform-agnostic

  say "training operator (manifests/upstream/training-operator)"
  k apply --server-side --force-conflicts -k manifests/upstream/training-operator
  k wait --for condition=established --timeout=120s crd/pytorchjobs.kubeflow.org

  say "recpipe: MLflow, PostgreSQL, MinIO, RBAC, workspace (manifests/overlays/kind)"
  k apply -k manifests/overlays/kind
  create_secrets

  say "waiting until everything is ready"
  k -n mlflow rollout status statefulset/mlflow-postgres --timeout=10m
  k -n mlflow rollout status statefulset/mlflow-minio --timeout=10m
  k -n mlflow rollout status deployment/mlflow-server --timeout=15m
  k -n kubeflow wait deployment --all --for=condition=Available --timeout=20m
  k -n kubeflow wait pvc/recpipe-workspace --for=jsonpath='{.status.phase}'=Bound --timeout=2m

  say "PyTorchJob check: two pods all-reduce over gloo (manifests/checks/base)"
  k -n kubeflow delete pytorchjob recpipe-ddp-check --ignore-not-found --wait=true
  k apply -k manifests/checks/base
  if ! k -n kubeflow wait pytorchjob/recpipe-ddp-check --for=condition=Succeeded --timeout=10m; then
    k -n kubeflow logs -l training.kubeflow.org/job-name=recpipe-ddp-check --tail=50 || true
    die "the PyTorchJob check failed: the training operator cannot run the pipeline's distributed jobs"
  fi
  k -n kubeflow logs -l training.kubeflow.org/job-name=recpipe-ddp-check --tail=5 || true

  say "port-forwards: KFP localhost:$KFP_PORT, MLflow localhost:$MLFLOW_PORT"
  stop_port_forwards
  port_forward kubeflow ml-pipeline-ui "$KFP_PORT" 80
  port_forward mlflow mlflow "$MLFLOW_PORT" 5000
  wait_http "http://localhost:$KFP_PORT/apis/v2beta1/healthz" 120
  wait_http "http://localhost:$MLFLOW_PORT/health" 120

  say "submitting the pipeline ($CONFIG, $ROWS generated Taobao rows, CPU)"
  local out run_id
  out=$(.venv/bin/recpipe pipeline submit --host "http://localhost:$KFP_PORT" --experiment recpipe-kind \
    --run-name "kind-$(date +%Y%m%d-%H%M%S)" \
    --param "config=$CONFIG" \
    --param "data_source=synthetic:taobao?rows=$ROWS" \
    --param workers=1 --param gpus_per_worker=0 \
    --param backends=jit,onnx,rtp \
    --param "mlflow_uri=$MLFLOW_IN_CLUSTER")
  echo "$out"
  run_id=$(sed -n 's/^submitted run //p' <<<"$out")
  [[ -n $run_id ]] || die "could not read the run id from the submit output"

  say "waiting for run $run_id (up to ${RUN_TIMEOUT}s)"
  local status=0
  "$PY" - "http://localhost:$KFP_PORT" "$run_id" "$RUN_TIMEOUT" <<'PY' || status=$?
import sys

import kfp

host, run_id, timeout = sys.argv[1], sys.argv[2], float(sys.argv[3])
run = kfp.Client(host=host).wait_for_run_completion(run_id, timeout=timeout, sleep_duration=10)
print(f"run {run_id}: {run.state}")
if run.error:
    print(f"error: {run.error}")
sys.exit(0 if run.state == "SUCCEEDED" else 1)
PY

  cat <<EOF

Kubeflow Pipelines UI  http://localhost:$KFP_PORT/#/runs/details/$run_id
MLflow UI              http://localhost:$MLFLOW_PORT   (user admin, password:
                       kubectl --context $CONTEXT -n mlflow get secret mlflow-server -o jsonpath='{.data.admin-password}' | base64 -d)
The port-forwards keep running in the background; 'make local-down' stops them and deletes the cluster.
EOF
  return "$status"
}

down() {
  stop_port_forwards
  if ! command -v kind >/dev/null 2>&1; then
    die "kind: not found, so there is no kind cluster to delete"
  fi
  if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
    kind delete cluster --name "$CLUSTER"
  else
    echo "no kind cluster named $CLUSTER"
  fi
}

case ${1:-up} in
  up) up ;;
  down) down ;;
  check-tools) check_tools && echo "docker, kind, kubectl and .venv/bin/recpipe are ready" ;;
  *)
    echo "usage: $0 [up|down|check-tools]" >&2
    exit 2
    ;;
esac
