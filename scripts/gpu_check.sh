#!/usr/bin/env bash
# The GPU check (`make gpu-check`): the gpu-marked tests, then the vectorised-cells table on CUDA.
# Budget: under 8 minutes on one GPU (tests about 3, tables about 3). Output goes to stdout and to
# gpu-check.log; paste the tables into benchmarks/RESULTS.md. Exits non-zero when a test fails or no
# CUDA device is visible (the tests would only skip).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
LOG=${GPU_CHECK_LOG:-gpu-check.log}
exec > >(tee "$LOG") 2>&1

"$PYTHON" - <<'PY'
import sys, torch
if not torch.cuda.is_available():
    sys.exit("gpu-check: no CUDA device visible (torch.cuda.is_available() is False)")
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}")
PY
date -u
echo "== gpu-marked tests"
timeout 300 "$PYTHON" -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py tests/test_stacked_fitness.py
echo "== vectorised cells on cuda: toy (2-D ring, 64-128-128 MLPs), 50 batches per generation"
timeout 150 "$PYTHON" benchmarks/vectorized.py --device cuda --workload toy --threads 0 --rounds 1 \
    --cells 1 4 9 16 --generations 2 --batches 50
echo "== vectorised cells on cuda: MNIST MLPs (the paper's), 50 batches per generation"
timeout 150 "$PYTHON" benchmarks/vectorized.py --device cuda --workload mnist --threads 0 --rounds 1 \
    --cells 1 4 9 16 --generations 2 --batches 50
date -u
