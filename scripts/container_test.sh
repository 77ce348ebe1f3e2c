#!/usr/bin/env bash
# `make container-test`: build the images (cached after the first time: scripts/build_images.sh), then
# tests/images/test_built_images.py on them: image hygiene (uid 10001, read-only root, version = tag, installed
# packages = the lock, size, no caches or build tools) and a short pipeline with every step in its image.
# The last line: containers: build_s=<s> run_s=<s> steps_in_containers=<started>/<tasks>
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}

start=$SECONDS
scripts/build_images.sh cpu mlflow
build_s=$((SECONDS - start))

report=$(mktemp /tmp/recpipe-container-test.XXXXXX.json)
trap 'rm -f "$report"' EXIT
RECPIPE_CONTAINER_REPORT=$report "$PY" -m pytest -q -p no:cacheprovider tests/images/test_built_images.py

"$PY" - "$report" "$build_s" <<'EOF'
import json
import sys

path, build_s = sys.argv[1], sys.argv[2]
try:
    r = json.load(open(path))
except ValueError:
    sys.exit("container-test: the pipeline test wrote no report (was it skipped?)")
print(f"containers: build_s={build_s} run_s={r['run_s']:.0f} steps_in_containers={r['started']}/{r['tasks']}")
EOF
