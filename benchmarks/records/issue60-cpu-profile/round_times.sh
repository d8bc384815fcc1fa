#!/usr/bin/env bash
# Every round's time, alternating BEFORE (/tmp/prof-wt, the commit before the
# count's cap in sharding.shard_privatize) and AFTER (this tree): round_times.py, FL-STD, 100 clients, 10 rounds
# a call, twice each; the reproduction jobs paused (always resumed after).
set -u
trap 'pkill -CONT -f "reproduce.py queue"' EXIT
trap 'exit 130' INT TERM
RECORDS=$(cd "$(dirname "$0")" && pwd)
AFTER=$(cd "$RECORDS/../../.." && pwd)
export FEDJAX_DP_DATA=/work/shared/data
pkill -STOP -f "reproduce.py queue"
sleep 10
for i in 1 2; do
  for side in before after; do
    tree=/tmp/prof-wt; [ $side = after ] && tree=$AFTER
    (cd "$tree" && PYTHONPATH="$tree" /work/main/.venv/bin/python \
      "$RECORDS/round_times.py" $side 10 "${SCHEME:-FL-STD}") >> "$RECORDS/round-times.jsonl"
    uptime
  done
done
