#!/usr/bin/env bash
# How the records here were measured (issue 60: where a CPU round's time goes):
# a clean checkout of the commit named in the records at /tmp/prof-wt (the
# shared tree held another engineer's uncommitted changes), the project's .venv.
# Per scheme, one throughput.py call (100 clients, paper CNN, no evaluation,
# best of 3 rounds) with a profiled round and its HLO, then trace_summary.py on
# that trace with the matmul rate the call measured. Before each call wait (at
# most 5 min) until no other non-niced process has used more than 20% of a core
# for about 30 s; pause the two reproduction jobs (SIGSTOP; always SIGCONT
# after); cpu_monitor.py logs every other process's CPU seconds meanwhile.
set -u
trap 'pkill -CONT -f "reproduce.py queue"; [ -n "${MON:-}" ] && kill $MON 2>/dev/null' EXIT
trap 'exit 130' INT TERM
RECORDS=$(cd "$(dirname "$0")" && pwd)
MONITOR="$RECORDS/../issue60-peers-pfl/cpu_monitor.py"
cd /tmp/prof-wt
export PYTHONPATH=/tmp/prof-wt FEDJAX_DP_DATA=/work/shared/data
PY=/work/main/.venv/bin/python
wait_quiet() {
  local quiet=0 tries=0
  while [ $quiet -lt 4 ] && [ $tries -lt 40 ]; do
    busy=$(top -bn2 -d 2 | awk '/^top -/{n++} n==2 && $1 ~ /^[0-9]+$/ && $4 == 0 && $9 > 20 {print $1}' | head -1)
    if [ -z "$busy" ]; then quiet=$((quiet + 1)); else quiet=0; fi
    tries=$((tries + 1))
    sleep 4
  done
}
for scheme in FL-STD FL-STD-DP FL-TOP-DP; do
  wait_quiet
  echo "== $scheme at $(date +%T)"
  pkill -STOP -f "reproduce.py queue"
  sleep 10
  rm -rf "/tmp/prof-$scheme" "/tmp/mon-$scheme.log"
  python3 "$MONITOR" "/tmp/mon-$scheme.log" throughput.py trace_summary.py & MON=$!
  $PY benchmarks/throughput.py --scheme "$scheme" --clients-per-round 100 --no-torch --no-eval \
    --repeats 3 --profile "/tmp/prof-$scheme" --out "$RECORDS/throughput.jsonl"
  rc=$?
  kill $MON; MON=
  pkill -CONT -f "reproduce.py queue"
  [ $rc -eq 0 ] || exit $rc
  echo "== $scheme: other processes' CPU $(grep '^total' "/tmp/mon-$scheme.log" | tail -1 | cut -d' ' -f2) s"
  matmul=$(tail -1 "$RECORDS/throughput.jsonl" | $PY -c 'import json, sys; print(json.load(sys.stdin)["matmul_gflops_per_sec"])')
  $PY benchmarks/trace_summary.py "/tmp/prof-$scheme" --matmul-gflops "$matmul" --cores 2 --top 10 \
    --out "$RECORDS/profile.jsonl"
  cp "/tmp/mon-$scheme.log" "$RECORDS/monitor-$scheme.log"
done
