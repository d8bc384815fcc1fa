#!/usr/bin/env bash
# The GPU suite (issues 41, 47): one device call that measures everything.
#
#   bash benchmarks/gpu_suite.sh prepare   # here, on the CPU machine, before the call
#   bash benchmarks/gpu_suite.sh plan      # here: the steps, their deadlines, their sum
#   bash benchmarks/gpu_suite.sh run       # there: the device tool's command
#
# The device tool's call: command 'bash benchmarks/gpu_suite.sh run',
# timeout_s 600, carry [".whl", ".gpu-data"]. What it measures, in order, and
# what comes back in $OUT: benchmarks/gpu_suite.py's docstring, `plan`, and
# docs/performance.md ("On a GPU"). Then copy $OUT's throughput.jsonl and
# models.jsonl to benchmarks/records/ under dated names.
#
# `prepare` downloads the wheels the device image lacks (dp-accounting and
# dm-tree, for its Python 3.12) into .whl/ (pfl-research's into .whl/pfl/),
# copies Fashion-MNIST and MNIST's training split (the server's public batch)
# into .gpu-data/ (both ignored by git; about 40 MB together, under the 64 MiB
# a call carries with the working tree), and records the commit and a digest of the sources in
# .gpu-data/source.json (the device has no .git: its env step compares).
# `run` installs the wheels into /tmp/site and runs gpu_suite.py's suite,
# which ends within 570 s of this script's start.
# GPU_SUITE_DRY_RUN=1 makes `run` print the plan and run nothing.
set -u
export GPU_SUITE_T0=${GPU_SUITE_T0:-$(date +%s.%N)}
cd "$(dirname "$0")/.."

WHEELS="dp-accounting==0.6.0 dm-tree==0.1.9"
# pfl-research for the pfl step (benchmarks/peers.py --pfl-torch shared): pfl and
# what its pins need beyond the image's packages, in .whl/pfl (not installed into
# /tmp/site: pfl's dp-accounting<0.6 goes into its own environment on the device).
PFL_WHEELS="pfl==0.6.0 dp-accounting==0.5.1 prv-accountant==0.2.0 multiprocess==0.70.19
  dill==0.4.1 absl-py==1.4.0 attrs==23.2.0 mpmath==1.3.0 packaging==25.0 wheel==0.45.1
  wrapt==2.5.2"

prepare() {
  set -e
  mkdir -p .whl/pfl .gpu-data/mnist
  local platforms=(--only-binary=:all: --python-version 3.12 --implementation cp
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
  python3 -m pip download -q --no-deps "${platforms[@]}" -d .whl $WHEELS
  # shellcheck disable=SC2086
  python3 -m pip download -q --no-deps "${platforms[@]}" -d .whl/pfl $PFL_WHEELS
  local data=${FEDJAX_DP_DATA:-../shared/data}
  cp -r "$data/fashion-mnist" .gpu-data/
  cp "$data"/mnist/train-*-idx?-ubyte.gz .gpu-data/mnist/
  python3 benchmarks/gpu_suite.py prepare-identity
  du -sh .whl .gpu-data
  local total
  total=$( (git ls-files -z; git ls-files -z --others --exclude-standard) |
           du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
  total=$((total + $(du -sb .whl | cut -f1) + $(du -sb .gpu-data | cut -f1)))
  echo "the call carries about $((total / 1048576)) MiB (the limit: 64 MiB)"
  [ "$total" -le $((64 * 1048576)) ] || { echo "over 64 MiB" >&2; exit 1; }
}

run() {
  if [ -n "${GPU_SUITE_DRY_RUN:-}" ]; then
    exec python3 benchmarks/gpu_suite.py plan
  fi
  export OUT=${OUT:-/tmp/gpu-suite}
  mkdir -p "$OUT"
  if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site
  fi
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
  export FEDJAX_DP_DATA=${FEDJAX_DP_DATA:-$PWD/.gpu-data} FEDJAX_DP_NO_DOWNLOAD=1
  exec python3 benchmarks/gpu_suite.py run
}

case "${1:-}" in
  prepare) prepare ;;
  plan) exec python3 benchmarks/gpu_suite.py plan ;;
  run) run ;;
  *) echo "usage: bash benchmarks/gpu_suite.sh prepare|plan|run" >&2; exit 2 ;;
esac
