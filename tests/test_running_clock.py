"""fedjax_dp.running_clock: a stopped process's pause is left out of the
seconds it ran, and nothing is left out of a process that ran throughout.

A child process (the module loaded from its file: no JAX to import) reads
the clock, is stopped by SIGSTOP for 3 s or not, and reports."""

import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

MODULE = pathlib.Path(__file__).resolve().parents[1] / "fedjax_dp" / "running_clock.py"

CHILD = f"""
import importlib.util, sys, time
spec = importlib.util.spec_from_file_location("running_clock", {str(MODULE)!r})
clock = importlib.util.module_from_spec(spec)
spec.loader.exec_module(clock)
clock.start(tick=0.1, gap=1.0)
ran0, wall0 = clock.now(), time.monotonic()
print("ready", flush=True)
sys.stdin.readline()
time.sleep(0.5)  # the thread wakes after the process continues
print(clock.now() - ran0, time.monotonic() - wall0, clock.stopped_seconds(), flush=True)
"""


def _child(stop_seconds: float) -> tuple[float, float, float]:
  proc = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True)
  try:
    assert proc.stdout.readline().strip() == "ready"
    if stop_seconds:
      os.kill(proc.pid, signal.SIGSTOP)
      time.sleep(stop_seconds)
      os.kill(proc.pid, signal.SIGCONT)
    else:
      time.sleep(1.5)
    out, _ = proc.communicate("go\n", timeout=60)
  finally:
    proc.kill()
  ran, wall, stopped = map(float, out.split())
  return ran, wall, stopped


def test_a_stop_is_left_out_of_the_seconds_the_process_ran():
  ran, wall, stopped = _child(3.0)
  assert wall >= 3.5
  assert 2.5 <= stopped <= wall, (ran, wall, stopped)
  assert ran == pytest.approx(wall - stopped, abs=0.05)
  assert ran < 1.5  # it ran for about the 0.5 s it slept after continuing


def test_a_process_that_ran_throughout_loses_no_second():
  ran, wall, stopped = _child(0.0)
  assert wall >= 2.0
  assert stopped == 0.0
  assert ran == pytest.approx(wall, abs=0.05)
