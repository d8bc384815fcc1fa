#!/usr/bin/env bash
# Issue 60's goals at 100 clients, twice: benchmarks/peers.py, our three
# schemes and pfl's fastest setting (2 processes x 1 thread) with and without
# DP, best of 3 rounds a case, each call from a clean checkout of the commit
# named in the records (CHECKOUT, default /tmp/before); the reproduction jobs
# paused (SIGSTOP, always SIGCONT after); cpu_monitor.py logs the other
# processes' CPU seconds.
set -u
trap 'pkill -CONT -f "reproduce.py queue"; [ -n "${MON:-}" ] && kill $MON 2>/dev/null' EXIT
trap 'exit 130' INT TERM
RECORDS=$(cd "$(dirname "$0")" && pwd)
cd "${CHECKOUT:-/tmp/before}"
export PYTHONPATH=$PWD FEDJAX_DP_DATA=/work/shared/data
pkill -STOP -f "reproduce.py queue"
sleep 15
for call in 1 2; do
  python3 "$RECORDS/../issue60-peers-pfl/cpu_monitor.py" "$RECORDS/monitor-peers-100-call$call.log" & MON=$!
  uptime
  /work/main/.venv/bin/python benchmarks/peers.py --clients-per-round 100 --repeats 3 \
    --cases FL-STD,FL-STD-DP,FL-TOP-DP,pfl-multiproc,pfl-dp-multiproc --out "$RECORDS/peers-100.jsonl"
  kill $MON; MON=
  uptime
done
