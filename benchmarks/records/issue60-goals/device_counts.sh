#!/usr/bin/env bash
# Every round's time (round_times.py: FL-STD, 100 clients, 10 rounds a call)
# under four layouts of the 2 cores, alternating, twice: 2 XLA CPU devices
# (the default), 4, 2 with single-threaded Eigen ops, 3; the reproduction
# jobs paused (always resumed after). Run from a checkout of the commit.
set -u
trap 'pkill -CONT -f "reproduce.py queue"' EXIT
trap 'exit 130' INT TERM
RECORDS=$(cd "$(dirname "$0")" && pwd)
export FEDJAX_DP_DATA=/work/shared/data
pkill -STOP -f "reproduce.py queue"; sleep 3
for i in 1 2; do
  for c in "d2=--xla_force_host_platform_device_count=2" "d4=--xla_force_host_platform_device_count=4" \
           "d2noeigen=--xla_force_host_platform_device_count=2 --xla_cpu_multi_thread_eigen=false" \
           "d3=--xla_force_host_platform_device_count=3"; do
    XLA_FLAGS="${c#*=}" python "$RECORDS/../issue60-cpu-profile/round_times.py" "${c%%=*}" 10 FL-STD >> "$RECORDS/device-counts.jsonl"
  done
done
