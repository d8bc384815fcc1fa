#!/usr/bin/env bash
# Issue 60: on a quiet machine, does one process with 2 XLA CPU devices lose
# time to the devices' imbalance (one device's thread waits in the final
# all-reduce while the other trains alone) that two processes of one device
# each recover? benchmarks/processes.py, FL-TOP-DP and FL-STD-DP, 100 clients,
# layouts alternating, the two reproduction jobs paused (SIGSTOP; SIGCONT after).
set -u
trap 'pkill -CONT -f "reproduce.py queue"' EXIT
trap 'exit 130' INT TERM
RECORDS=$(cd "$(dirname "$0")" && pwd)
cd /work/main && . .venv/bin/activate && export FEDJAX_DP_DATA=/work/shared/data
pkill -STOP -f "reproduce.py queue"
sleep 10
for scheme in FL-TOP-DP FL-STD-DP; do
  echo "== $scheme at $(date +%T), load $(cut -d' ' -f1 /proc/loadavg)"
  python benchmarks/processes.py --clients-per-round 100 --repeats 3 --alternations 2 \
    --scheme "$scheme" --json >> "$RECORDS/processes.jsonl"
done
