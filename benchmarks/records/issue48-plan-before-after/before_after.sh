#!/usr/bin/env bash
# Rounds/s of one scheme per family, before (75d87d9) and after issue 48, alternating.
set -u
. /work/venv311/bin/activate
export FEDJAX_DP_DATA=/work/shared/data
out=/work/bench/before_after.jsonl
: > "$out"
for pair in 1 2; do
  for tree in /work/before /work/main; do
    python /work/bench/run_tree.py "$tree" --scheme FL-TOP-DP,FL-CS-DP,FL-SIGN-DP,Fed-SMP-randk,CDP-LQ \
      --clients-per-round 20 --no-torch --no-eval --repeats 2 --split-max-clients 0 --json 2>/dev/null \
      | grep '^{' | python -c "
import json,sys
for l in sys.stdin:
  r=json.loads(l); print(json.dumps({'tree':'$tree','pair':$pair,'scheme':r['scheme'],'rounds_per_sec':r['rounds_per_sec'],'compile_s':r['seconds']['compile'],'machine':r['machine']}))" >> "$out"
  done
done
echo done >> /work/bench/before_after.done
