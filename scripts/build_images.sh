#!/usr/bin/env bash
# Build recpipe's container images with docker, tagged with the image constants of components/image.py:
#   cpu     ghcr.io/recpipe/recpipe:<version>         images/cpu/Dockerfile
#   cuda    ghcr.io/recpipe/recpipe-cuda:<version>    images/cuda/Dockerfile
#   mlflow  ghcr.io/recpipe/recpipe-mlflow:<version>  images/mlflow/Dockerfile (the tracking server)
#
#   scripts/build_images.sh [cpu] [cuda] [mlflow]   (default: all three; `make images`)
#   scripts/build_images.sh --print-tags            (one line: IMAGE CUDA_IMAGE MLFLOW_IMAGE)
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

if ! command -v docker >/dev/null 2>&1; then
  echo "make images: docker not found. Install Docker Engine (https://docs.docker.com/engine/install/) and retry." >&2
  exit 1
fi
if ! docker info >/dev/null 2>&1; then
  echo "make images: no Docker engine is reachable ('docker info' failed). Start the Docker daemon (or point" >&2
  echo "DOCKER_HOST at one) and retry. Without an engine, only the offline checks run: pytest tests/images." >&2
  exit 1
fi

read -r IMAGE CUDA_IMAGE MLFLOW_IMAGE < <(tags)
VERSION=${IMAGE##*:}
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(cpu cuda mlflow)

# BuildKit reads images/<kind>/Dockerfile.dockerignore, which keeps the context to what the image copies.
export DOCKER_BUILDKIT=1
for target in "${targets[@]}"; do
  case $target in
    cpu) tag=$IMAGE ;;
    cuda) tag=$CUDA_IMAGE ;;
    mlflow) tag=$MLFLOW_IMAGE ;;
    *) echo "unknown image '$target' (cpu, cuda, mlflow)" >&2; exit 2 ;;
  esac
  echo "==> $tag (images/$target/Dockerfile)"
  docker build -f "images/$target/Dockerfile" --build-arg "RECPIPE_VERSION=$VERSION" -t "$tag" .
done
