#!/usr/bin/env bash
# The GPU throughput suite (issue 41): one prepared script for a lent GPU.
#
#   bash benchmarks/gpu_suite.sh prepare   # here, on the CPU machine, once
#   bash benchmarks/gpu_suite.sh run       # there: device run, carry .whl and .gpu-data
#
# `prepare` downloads the wheels the device image lacks (dp-accounting and
# dm-tree, for its Python 3.12) into .whl/ and copies Fashion-MNIST into
# .gpu-data/ (both ignored by git; about 31 MB together, under the 64 MiB a
# call carries). `run` installs the wheels into /tmp/site, then times, in
# this order (the most telling first, each step under its own deadline so a
# slow one cannot eat the next), records appended to $OUT/throughput.jsonl:
#
#   1. FL-STD-DP at 100 clients with each cohort batching of the per-client
#      convolutions (map, vmap, product; fedjax_dp.models.cohort_ops), beside
#      the PyTorch per-client loop on the same card;
#   2. FL-STD, FL-STD-DP, FL-TOP-DP, FL-SIGN-DP, FL-CS-DP at 1,000 clients;
#   3. FL-STD-DP and FL-TOP-DP at 100 and 10,000 clients (10,000 repeats the
#      data's 6,000 clients; no stage split: it would hold every update);
#   4. the same CNN as a flax module (models.from_flax) at 100 and 1,000;
#   5. FL-STD-DP at 1,000 clients in one piece (the default trains and sums
#      them 128 at a time: simulation.default_chunk);
#   6. a profiler trace of one FL-TOP-DP round of 1,000 clients
#      ($OUT/profile.tgz; open it with TensorBoard's or XProf's trace viewer).
#
# About 7 minutes on an H100 or H200 (estimated; step deadlines sum to 470 s).
# The command for the device tool (timeout_s 600):
#   bash benchmarks/gpu_suite.sh run   with carry [".whl", ".gpu-data"]
# Then copy $OUT's throughput.jsonl to benchmarks/records/ under a dated name.
# GPU_SUITE_DRY_RUN=1 prints the benchmark commands instead of running them
# (tests/test_gpu_suite.py checks that each one parses).
set -u
cd "$(dirname "$0")/.."

WHEELS="dp-accounting==0.6.0 dm-tree==0.1.9"

prepare() {
  set -e
  mkdir -p .whl .gpu-data
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl $WHEELS
  cp -r "${FEDJAX_DP_DATA:-../shared/data}/fashion-mnist" .gpu-data/
  du -sh .whl .gpu-data
}

step() {  # step SECONDS ARGS...: one throughput.py run under a deadline
  local limit=$1; shift
  if [ -n "${GPU_SUITE_DRY_RUN:-}" ]; then
    echo "benchmarks/throughput.py $*"
    return
  fi
  echo "== $(date -u +%T) throughput.py $* (deadline ${limit} s)" | tee -a "$LOG"
  timeout --signal=INT --kill-after=10 "$limit" \
    python3 benchmarks/throughput.py --out "$OUT/throughput.jsonl" "$@" 2>&1 | tee -a "$LOG"
}

run() {
  OUT=${OUT:-/tmp/gpu-suite}
  LOG=$OUT/log.txt
  mkdir -p "$OUT"
  if [ -z "${GPU_SUITE_DRY_RUN:-}" ]; then
    if [ -d .whl ]; then
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
      export PYTHONPATH=/tmp/site
    fi
    export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
    export FEDJAX_DP_DATA=${FEDJAX_DP_DATA:-$PWD/.gpu-data} FEDJAX_DP_NO_DOWNLOAD=1
    { nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
      python3 -c "import jax, flax, torch; print('jax', jax.__version__, jax.devices(),
        'flax', flax.__version__, 'torch', torch.__version__)"; } 2>&1 | tee "$LOG"
  fi
  local common=(--repeats 2 --json)
  step 90 --scheme FL-STD-DP --clients-per-round 100 --batching map,vmap,product "${common[@]}"
  step 130 --scheme FL-STD,FL-STD-DP,FL-TOP-DP,FL-SIGN-DP,FL-CS-DP --clients-per-round 1000 \
    --no-torch "${common[@]}"
  step 100 --scheme FL-STD-DP,FL-TOP-DP --clients-per-round 100,10000 --no-torch "${common[@]}"
  step 60 --model paper-cnn-flax --scheme FL-STD-DP --clients-per-round 100,1000 --no-torch \
    "${common[@]}"
  step 40 --scheme FL-STD-DP --clients-per-round 1000 --client-chunk 1000 --no-torch \
    "${common[@]}"
  step 50 --scheme FL-TOP-DP --clients-per-round 1000 --no-torch --repeats 1 --json \
    --profile /tmp/gpu-suite-profile
  if [ -z "${GPU_SUITE_DRY_RUN:-}" ] && [ -d /tmp/gpu-suite-profile ]; then
    tar -czf "$OUT/profile.tgz" -C /tmp gpu-suite-profile
  fi
}

case "${1:-}" in
  prepare) prepare ;;
  run) run ;;
  *) echo "usage: bash benchmarks/gpu_suite.sh prepare|run" >&2; exit 2 ;;
esac
