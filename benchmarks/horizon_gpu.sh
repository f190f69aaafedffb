#!/usr/bin/env bash
# The horizon sweep's MNIST runs side by side on a lent GPU machine (issue 35): one single-process
# horizon.py run per (configuration, seed), all at once, each training until its horizons or until
# DEADLINE seconds, then scoring the horizons it reached into one shared log. Meant for the device tool:
#
#   EVOGAN_COMMIT=<hash> OUT=<dir> bash benchmarks/horizon_gpu.sh
#
# The machine's python3 has torch; the packages it lacks come as wheels in .whl/ (see
# /work/.library/device/README.md). Output: $OUT/logs/horizon/<commit>.jsonl (horizon.py's lines, written as each horizon is scored), $OUT/jobs.log (every
# job's output), $OUT/gpu-tests.log (the gpu-marked tests, run beside the jobs as a correctness check).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT to the folder for the results}
DEADLINE=${DEADLINE:-420}
PYTHON=${PYTHON:-python3}
HORIZONS=${HORIZONS:-5000 10000 20000}  # steps per cell; BATCHES per generation (the demo's 50)
BATCHES=${BATCHES:-50}
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
if [ -d .whl ] && [ "$PYTHON" = python3 ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || exit 1
    export PYTHONPATH=/tmp/site:$PWD
else
    export PYTHONPATH=$PWD
fi
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader || true
$PYTHON -c '
import torch, evogan.engine.run, evogan_gan.problem, deap.tools, zmq, pydantic, torch_fidelity, mlxtend
print("torch", torch.__version__, "cuda", torch.cuda.is_available())' || exit 1

# Can the stacked backend train on CUDA? Two tiny generations decide; the looped one is the fallback.
backend=run.vectorize=false
if timeout 120 $PYTHON -m evogan run recipes/demo.toml --plain --set run.workers=1 --set run.generations=2 \
    --set problem.batches_per_generation=2 --set run.vectorize=true --set run.samples_every=0 \
    --set run.output_dir='"/tmp/probe"' >"$OUT/probe.log" 2>&1; then
    backend=run.vectorize=true
fi
echo "backend: $backend"

(nice -n 10 timeout 400 $PYTHON -m pytest -m gpu -q -rs -p no:cacheprovider tests/test_gpu.py \
    tests/test_stacked_fitness.py tests/test_precision.py >"$OUT/gpu-tests.log" 2>&1; echo "exit $?" >>"$OUT/gpu-tests.log") &

fade='problem.pairing={use="neighbour_share", generator_share=0.67, discriminator_share=0.67, fade="cosine", fade_until=0.5}'
mkdir -p /tmp/jobs
job() {  # CONFIG SEED [SET...]: one horizon.py run in the background
    local config=$1 seed=$2
    shift 2
    # shellcheck disable=SC2086  # HORIZONS is a list
    timeout "$((DEADLINE + 150))" $PYTHON benchmarks/horizon.py --of grid_size --grids 2x2 --horizons $HORIZONS --batches "$BATCHES" --configs "$config" \
        --seeds "$seed" --deadline "$DEADLINE" --log-dir "$OUT/logs" --output-dir /tmp/runs \
        --set "$backend" "$@" >"/tmp/jobs/$config-$seed-$#.log" 2>&1 &
}
# grid-2x2 without --pairing is the demo's recipe as shipped (g_neighbourhood)
for seed in 1 2 3; do
    job grid-2x2 "$seed"
    job independent-2x2 "$seed"
    job lone-steps "$seed"
    job grid-2x2 "$seed" "$fade"
done
job lone-flops-2x2 1
wait
for f in /tmp/jobs/*.log; do echo "=== $f"; cat "$f"; done >"$OUT/jobs.log"
grep -h "seed .* at .* steps" /tmp/jobs/*.log
tail -3 "$OUT/gpu-tests.log"
