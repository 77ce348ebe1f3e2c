#!/usr/bin/env bash
# Build recpipe's container images, tagged with the image constants of components/image.py:
#   cpu     ghcr.io/recpipe/recpipe:<version>         images/cpu/Dockerfile
#   cuda    ghcr.io/recpipe/recpipe-cuda:<version>    images/cuda/Dockerfile
#   mlflow  ghcr.io/recpipe/recpipe-mlflow:<version>  images/mlflow/Dockerfile (the tracking server)
#
#   scripts/build_images.sh [cpu] [cuda] [mlflow]   (default: cpu and mlflow; `make images`)
#   scripts/build_images.sh --print-tags            (one line: IMAGE CUDA_IMAGE MLFLOW_IMAGE)
#   scripts/build_images.sh --print-engine          (docker or podman, set up as a build would; no build)
#
# The engine: docker when its daemon answers and BuildKit (buildx) is there, else podman. Where neither is
# installed and this is a root shell with apt-get (a fresh machine of this kind), podman is installed first
# (scripts/container_engine.sh). With podman, when the Dockerfile's base image cannot be pulled (no registry
# is reachable), the base is made offline: Debian bookworm by debootstrap, its Python 3.11 as a venv on PATH,
# imported as localhost/recpipe-offline-base; `podman build --from` puts it in the place of python:3.11-slim.
# The build's pip reads the host's pip configuration (merged into one /etc/pip.conf; its CA bundle and local
# indexes mounted read-only under /tmp), so it reaches the same package index the host does. The Dockerfiles are not changed: only the base and the
# package index are substituted, and the image's label org.opencontainers.image.base.name says which base.
# The CUDA image is not in the default set: no CUDA base and no CUDA wheel index can be reached here.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}

tags() {
  "$PY" -c 'from components.image import CUDA_IMAGE, IMAGE
name, version = IMAGE.rsplit(":", 1)
print(IMAGE, CUDA_IMAGE, f"{name}-mlflow:{version}")'
}

if [[ ${1:-} == --print-tags ]]; then
  tags
  exit 0
fi

# shellcheck source=scripts/container_engine.sh
source scripts/container_engine.sh
ENGINE=$(engine_select) || exit 1
if [[ ${1:-} == --print-engine ]]; then
  echo "$ENGINE"
  exit 0
fi

read -r IMAGE CUDA_IMAGE MLFLOW_IMAGE < <(tags)
VERSION=${IMAGE##*:}
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(cpu mlflow)

bases() { # every stage's base image of a Dockerfile, in order, leaving out earlier stages' names
  awk 'toupper($1) == "FROM" {
    for (i = 2; i <= NF; i++) if ($i !~ /^--/) break
    if (!($i in stage)) print $i
    if (toupper($(i + 1)) == "AS") stage[$(i + 2)] = 1
  }' "$1"
}

for target in "${targets[@]}"; do
  case $target in
    cpu) tag=$IMAGE ;;
    cuda) tag=$CUDA_IMAGE ;;
    mlflow) tag=$MLFLOW_IMAGE ;;
    *) echo "unknown image '$target' (cpu, cuda, mlflow)" >&2; exit 2 ;;
  esac
  dockerfile=images/$target/Dockerfile
  mapfile -t all_bases < <(bases "$dockerfile")
  base=${all_bases[0]}
  start=$SECONDS
  echo "==> $tag ($dockerfile, $ENGINE)"
  if [[ $ENGINE == docker ]]; then
    # BuildKit reads images/<kind>/Dockerfile.dockerignore, which keeps the context to what the image copies.
    DOCKER_BUILDKIT=1 docker build -f "$dockerfile" --build-arg "RECPIPE_VERSION=$VERSION" \
      --label "org.opencontainers.image.base.name=$base" -t "$tag" .
  else
    # `--from` replaces the first stage's base only: every other base must be there or pullable.
    for other in "${all_bases[@]:1}"; do
      podman image exists "$other" || timeout 120 podman pull -q "$other" >/dev/null 2>&1 || {
        echo "make images: the $target image's base $other cannot be pulled (no registry reachable?) and is not" \
          "made offline (only python:3.11 bases are). Build the $target image where a registry is reachable." >&2
        exit 1
      }
    done
    from=$(podman_base_for "$base" "$target")
    # --format docker keeps HEALTHCHECK (the OCI format drops it), as docker build does.
    build_args=(-f "$dockerfile" --ignorefile "$dockerfile.dockerignore" --network host --format docker
      --build-arg "RECPIPE_VERSION=$VERSION" --label "org.opencontainers.image.base.name=$from")
    [[ $from == "$base" ]] || build_args+=(--from "$from")
    pipconf=$(mktemp /tmp/recpipe-build-pip.XXXXXX.conf)
    mapfile -t mounts < <(host_pip_mounts "$pipconf")
    podman build "${build_args[@]}" "${mounts[@]}" -t "$tag" .
    rm -f "$pipconf"
  fi
  echo "==> $tag built in $((SECONDS - start)) s"
done
