# recpipe — every target installs what it needs first (stamp file in .venv).
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
RUNS ?= runs

.PHONY: install run test test-fast lint format bench clean

install: $(STAMP)

# torch 2.13.0 (CPU wheel), then fbgemm-gpu-cpu / torchrec with --no-deps: torchrec declares the CUDA
# fbgemm-gpu, which would overwrite the CPU library and fail to load.
$(STAMP): pyproject.toml requirements/lock.txt
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --disable-pip-version-check "pip==24.3.1"
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q --no-deps fbgemm-gpu-cpu==1.8.0 torchrec==1.8.0
	$(PIP) install -q -r requirements/lock.txt
	$(PIP) install -q --no-deps --no-build-isolation -e .
	$(PY) -c "import torch, fbgemm_gpu, torchrec, pyarrow, kfp, mlflow; print('recpipe deps ok: torch', torch.__version__, 'torchrec', torchrec.__version__)"
	touch $(STAMP)

# What only the tests need (requirements/test.txt: moto's S3 server), pinned within the lock; not in the images.
TEST_STAMP := $(VENV)/.installed-test
$(TEST_STAMP): $(STAMP) requirements/test.txt
	$(PIP) install -q -r requirements/test.txt -c requirements/lock.txt
	touch $(TEST_STAMP)

# The whole pipeline on the embedded default: kfp.local runs every step as a subprocess, training uses
# torchrun CPU ranks (gloo), MLflow is $(RUNS)/mlflow.db; 1M generated Taobao rows, ~2-5 minutes on 2 cores.
# Exit 3 (the gate rejected the model: a normal outcome of a second run) is not a failure of make.
run: $(STAMP)
	$(VENV)/bin/recpipe run --runs $(RUNS) || test $$? -eq 3

# The suite runs in TEST_WORKERS processes (pytest-xdist), each test file in one of them (its module fixtures
# built once), files with a slow test first (tests/conftest.py); TEST_WORKERS=0 runs it in this process. Three
# on CI's 2 cores: many tests wait on a subprocess, a server or a pipeline step, and a third worker computes
# meanwhile (tests/tracking + tests/stages: 159 s with 2, 124 s with 3; the whole suite used at most ~12 GB of
# the 24). The 30 slowest setups and tests are listed at the end (where the 20-minute budget goes).
TEST_WORKERS ?= 3
test: $(TEST_STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=30 tests

test-fast: $(TEST_STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "not slow" tests

lint: $(STAMP)
	$(VENV)/bin/ruff check recpipe components pipelines tests benchmarks images manifests
	$(VENV)/bin/ruff format --check recpipe components pipelines tests benchmarks images manifests

format: $(STAMP)
	$(VENV)/bin/ruff check --fix recpipe components pipelines tests benchmarks
	$(VENV)/bin/ruff format recpipe components pipelines tests benchmarks

clean:
	rm -rf $(RUNS) .pytest_cache

# ---- Images, containers and the kind cluster (images/, manifests/, scripts/; docs/deploy.md) ----
# `images` builds ghcr.io/recpipe/recpipe{,-mlflow}:<version> (tags from components/image.py) with docker
# (BuildKit) or podman, installing podman first on a fresh machine of this kind, and from a base made offline
# when the Dockerfile's base cannot be pulled (scripts/build_images.sh; `scripts/build_images.sh cuda` for the
# CUDA image, which needs a registry). `run-containers` is `make run` with every step in its image
# (`recpipe run --runner containers`). `container-test` checks the built images (hygiene) and runs a short
# pipeline in containers; its last line is `containers: build_s=… run_s=… steps_in_containers=N/N`.
# `local-run` creates a kind cluster, installs Kubeflow Pipelines, the training operator and MLflow from
# manifests/, loads the images and runs the pipeline on the small Taobao config; `local-down` deletes it.
.PHONY: images run-containers container-test local-run local-down
images: $(STAMP)
	scripts/build_images.sh

run-containers: $(STAMP)
	$(VENV)/bin/recpipe run --runner containers --runs $(RUNS)/containers || test $$? -eq 3

container-test: $(STAMP)
	scripts/container_test.sh

local-run: $(STAMP)
	scripts/local_run.sh up

local-down:
	scripts/local_run.sh down
