#!/usr/bin/env bash
# The GPU check (`make gpu-check`): the gpu-marked tests, then the vectorised-cells tables on CUDA.
# Budget: under 8 minutes on one GPU (tests about 3, tables about 4). Output goes to stdout and to
# gpu-check.log. The last line is the verdict, the one line to copy into benchmarks/RESULTS.md ("GPU check")
# with the tables:
#   gpu-check: PASS on <device> (torch <v>, CUDA <v>) <UTC date>
#   gpu-check: FAIL on <device> (...) <UTC date>: <each step that failed>
#   gpu-check: FAIL: no CUDA device visible (torch <v>, CUDA <v>) <UTC date>
# Exit status 0 on PASS only. Until a PASS is recorded, run.vectorize = "auto" stays looped on CUDA
# (evogan.recipe.AUTO_VECTORIZES_ON).
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
LOG=${GPU_CHECK_LOG:-gpu-check.log}
exec > >(tee "$LOG") 2>&1

stamp() { date -u +"%Y-%m-%d %H:%M UTC"; }

# Line 1: versions; line 2: the device, only when CUDA is visible.
if ! info=$("$PYTHON" -c '
import torch
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}")
if torch.cuda.is_available():
    print(f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}")
'); then
    echo "gpu-check: FAIL: $PYTHON cannot import torch ($(stamp))"
    exit 1
fi
versions=$(sed -n 1p <<<"$info")
device=$(sed -n 2p <<<"$info")
if [ -z "$device" ]; then
    echo "gpu-check: FAIL: no CUDA device visible ($versions) $(stamp)"
    exit 1
fi
echo "$device, $versions, $(stamp)"

failed=()
step() {  # NAME COMMAND...: run one step; a non-zero exit is remembered for the verdict
    local name=$1
    shift
    echo "== $name"
    "$@" || failed+=("$name (exit $?)")
}

tests_out=$(mktemp)
trap 'rm -f "$tests_out"' EXIT
step "gpu-marked tests" timeout 300 "$PYTHON" -m pytest -m gpu -q -rs -p no:cacheprovider \
    tests/test_gpu.py tests/test_stacked_fitness.py tests/test_precision.py --junitxml="$tests_out"
# A PASS means every gpu-marked test ran: one skipped on a GPU machine is a failure of the check.
if grep -q '<skipped' "$tests_out"; then
    failed+=("gpu-marked tests skipped some")
fi
step "vectorised cells on cuda: toy (2-D ring, 64-128-128 MLPs), 50 batches per generation" \
    timeout 150 "$PYTHON" benchmarks/vectorized.py --device cuda --workload toy --threads 0 --rounds 1 \
    --cells 1 4 9 16 --generations 2 --batches 50
step "vectorised cells on cuda: MNIST MLPs (the paper's), 50 batches per generation" \
    timeout 150 "$PYTHON" benchmarks/vectorized.py --device cuda --workload mnist --threads 0 --rounds 1 \
    --cells 1 4 9 16 --generations 2 --batches 50
# Mixed precision (issue 27): the MNIST MLPs in bf16 (looped against vectorised) and fp16 (looped only),
# beside the fp32 rows above.
for precision in bf16 fp16; do
    step "mixed precision on cuda: MNIST MLPs in $precision, 50 batches per generation" \
        timeout 90 "$PYTHON" benchmarks/vectorized.py --device cuda --workload mnist --threads 0 --rounds 1 \
        --cells 1 4 16 --generations 2 --batches 50 --precision "$precision"
done

if [ ${#failed[@]} -eq 0 ]; then
    echo "gpu-check: PASS on $device ($versions) $(stamp)"
    exit 0
fi
joined=$(printf '%s; ' "${failed[@]}")
echo "gpu-check: FAIL on $device ($versions) $(stamp): ${joined%; }"
exit 1
