#!/usr/bin/env bash
# How the records here were measured (issue 60: FL-TOP-DP's first local step on
# the shared weights). "before": a clean checkout of the commit before the
# change at /tmp/before-wt; "after": the working tree with the change. One
# throughput.py call each (100 clients, paper CNN, no evaluation, best of 3
# rounds), FL-TOP-DP before/after alternating twice, then FL-STD-DP after, the
# two reproduction jobs paused (SIGSTOP; always SIGCONT after).
set -u
trap 'pkill -CONT -f "reproduce.py queue"' EXIT
trap 'exit 130' INT TERM
RECORDS=$(cd "$(dirname "$0")" && pwd)
PY=/work/main/.venv/bin/python
export FEDJAX_DP_DATA=/work/shared/data
pkill -STOP -f "reproduce.py queue"
sleep 10
call() {  # tree, scheme, label
  echo "== $3 $2 at $(date +%T), load $(cut -d' ' -f1 /proc/loadavg)"
  (cd "$1" && PYTHONPATH="$1" $PY benchmarks/throughput.py --scheme "$2" --clients-per-round 100 \
     --no-torch --no-eval --repeats 3 --json) | tail -1 | sed "s/^{/{\"tree\": \"$3\", /" \
     >> "$RECORDS/throughput.jsonl"
}
for i in 1 2; do
  call /tmp/before-wt FL-TOP-DP before
  call /work/main FL-TOP-DP after
done
call /work/main FL-STD-DP after
