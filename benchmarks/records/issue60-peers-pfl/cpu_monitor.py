"""Logs the CPU seconds of processes other than the benchmark's, every 2 s, until killed.

  python3 cpu_monitor.py LOG   # measure.sh: the "total" line is the others' CPU seconds so far
  python3 cpu_monitor.py LOG throughput.py trace_summary.py   # these are the benchmark's own
"""
import os, sys, time
OURS = tuple(sys.argv[2:]) or ("peers.py", "pfl_worker.py", "torch.distributed.run")
OURS += ("cpu_monitor.py",)
tick = os.sysconf("SC_CLK_TCK")
def snapshot():
  out = {}
  for pid in os.listdir("/proc"):
    if not pid.isdigit():
      continue
    try:
      stat = open(f"/proc/{pid}/stat").read()
      cmd = open(f"/proc/{pid}/cmdline").read().replace("\0", " ")
    except OSError:
      continue
    fields = stat.rsplit(")", 1)[1].split()
    out[int(pid)] = ((int(fields[11]) + int(fields[12])) / tick, cmd)
  return out
foreign = 0.0
prev = snapshot()
log = open(sys.argv[1], "a")
while True:
  time.sleep(2)
  cur = snapshot()
  for pid, (cpu, cmd) in cur.items():
    if pid in prev and not any(o in cmd for o in OURS):
      d = cpu - prev[pid][0]
      if d > 0.2:
        foreign += d
        log.write(f"{time.strftime('%H:%M:%S')} {d:.1f}s {pid} {cmd[:100]}\n")
  log.write(f"total {foreign:.1f}\n")
  log.flush()
  prev = cur
