#!/usr/bin/env bash
# The prepared GPU check (issue 20; docs/gpu_check.md): DIN attention jagged vs padded, the dense archs of
# MultiTowerDIN and DLRM through AOTInductor for CUDA, TensorRT where it imports; plain torch only (no
# torchrec, fbgemm-gpu, numpy), recpipe not installed. Results: $OUT/gpu_check.json, gpu_check.log,
# nvidia-smi.txt ($OUT unset: runs/gpu_check). Stops itself after 470 s (the check's own budget is 420 s).
#
#   scripts/gpu_check.sh                     on the device machine (its python3 with torch+CUDA)
#   scripts/gpu_check.sh --device cpu --tiny the CPU dry run (tests/benchmarks/test_gpu_check.py runs it)
#
# Settings: PYTHON (default: the first of .venv/bin/python, python3, python that imports torch); extra
# arguments go to benchmarks/gpu_check.py (--help lists them). Exit codes: 0 all ran, 1 a section failed,
# 2 refused to start (the reason is printed and in the JSON), 124 stopped by the time limit.
set -uo pipefail
cd "$(dirname "$0")/.."

OUT=${OUT:-runs/gpu_check}
mkdir -p "$OUT"
PY=${PYTHON:-}
if [[ -z $PY ]]; then
  for candidate in .venv/bin/python python3 python; do
    if "$candidate" -c "import torch" >/dev/null 2>&1; then
      PY=$candidate
      break
    fi
  done
fi
if [[ -z $PY ]]; then
  echo "gpu_check: refusing to start: no python with torch found (.venv/bin/python, python3, python); set PYTHON" >&2
  exit 2
fi
if command -v nvidia-smi >/dev/null; then
  nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1
fi
timeout -k 10 470 "$PY" benchmarks/gpu_check.py --out "$OUT" "$@"
