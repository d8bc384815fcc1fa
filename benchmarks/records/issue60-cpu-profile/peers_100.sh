#!/usr/bin/env bash
# After the clip count's cap: benchmarks/peers.py at 100 clients, our three
# schemes and pfl's fastest setting (2 processes x 1 thread) with and without
# DP, best of 3 rounds, in one call from a clean checkout at /tmp/peers-cap
# (the commit named in the records); the reproduction jobs paused (SIGSTOP,
# always SIGCONT after); cpu_monitor.py logs the other processes' CPU seconds.
set -u
trap 'pkill -CONT -f "reproduce.py queue"; [ -n "${MON:-}" ] && kill $MON 2>/dev/null' EXIT
trap 'exit 130' INT TERM
RECORDS=$(cd "$(dirname "$0")" && pwd)
cd /tmp/peers-cap
export PYTHONPATH=/tmp/peers-cap FEDJAX_DP_DATA=/work/shared/data
pkill -STOP -f "reproduce.py queue"
sleep 15
python3 "$RECORDS/../issue60-peers-pfl/cpu_monitor.py" "$RECORDS/monitor-peers-100.log" & MON=$!
uptime
/work/main/.venv/bin/python benchmarks/peers.py --clients-per-round 100 --repeats 3 \
  --cases FL-STD,FL-STD-DP,FL-TOP-DP,pfl-multiproc,pfl-dp-multiproc --out "$RECORDS/peers-100.jsonl"
uptime
