"""CLI device setup: one XLA CPU device per core unless told otherwise (issue 6)."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from fedjax_dp import host_devices
from xla_env import xla_flags

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("argv,count", [
    (["--cpu-devices", "3"], 3), (["--rounds", "2", "--cpu-devices=5"], 5),
    ([], None), (["--cpu-devices", "0"], None), (["--cpu-devices", "x"], None),
    (["--cpu-devices"], None),
])
def test_count_from_argv(argv, count):
  assert host_devices.count_from_argv(argv) == count


def test_configure_sets_the_flag_once_and_an_explicit_flag_wins(monkeypatch):
  monkeypatch.delitem(sys.modules, "jax")  # as if JAX had not started yet
  monkeypatch.setenv("XLA_FLAGS", "--xla_foo=1")
  assert host_devices.configure(["--cpu-devices", "3"]) == 3
  assert os.environ["XLA_FLAGS"] == "--xla_foo=1 " + host_devices.FLAG + "=3"
  assert host_devices.configure(["--cpu-devices", "5"]) is None  # already set: kept
  assert os.environ["XLA_FLAGS"].endswith("=3")
  monkeypatch.delenv("XLA_FLAGS")
  assert host_devices.configure([]) == host_devices.default_count()
  assert 1 <= host_devices.default_count() <= host_devices.DEFAULT_MAX


def test_configure_does_nothing_once_jax_runs(monkeypatch):
  import jax  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
  monkeypatch.setenv("XLA_FLAGS", "")
  assert host_devices.configure(["--cpu-devices", "3"]) is None
  assert os.environ["XLA_FLAGS"] == ""


_CPUINFO = """processor	: 0
vendor_id	: AuthenticAMD
cpu family	: 25
model		: 17
model name	: AMD EPYC
flags		: fpu sse2 avx avx2 avx512f avx512bw

processor	: 1
model name	: another
"""


@pytest.mark.parametrize("text,name", [
    (_CPUINFO, "AMD EPYC (family 25, model 17, AVX-512)"),
    (_CPUINFO.replace(" avx512f avx512bw", ""), "AMD EPYC (family 25, model 17, AVX2)"),
    ("model name\t: Some CPU\n", "Some CPU"),  # no numbers, no flags
    ("processor\t: 0\nfeatures\t: fp asimd\n", ""),  # no model name (ARM)
])
def test_cpu_name_tells_processors_of_one_name_apart(text, name):
  assert host_devices.cpu_name(text) == name


class _Device:
  def __init__(self, platform, kind):
    self.platform, self.device_kind = platform, kind


@pytest.mark.parametrize("devices,name", [
    ([_Device("cpu", "cpu")] * 2, "2 cpu device(s)"),
    ([_Device("gpu", "NVIDIA H200")], "1 gpu device(s) (NVIDIA H200)"),
    ([_Device("gpu", "NVIDIA H100"), _Device("gpu", "NVIDIA A100")],
     "2 gpu device(s) (NVIDIA A100, NVIDIA H100)"),
])
def test_devices_name_names_an_accelerator_model(devices, name):
  assert host_devices.devices_name(devices) == name


@pytest.mark.parametrize("cpu_count, usable, name", [
    (2, 2, "2 cores"), (2, 1, "2 cores (1 usable)"), (64, 2, "64 cores (2 usable)"),
    (1, 2, "2 cores"),  # os.cpu_count() lowered below the affinity (-X cpu_count)
])
def test_cores_name_names_the_usable_cores_when_fewer(monkeypatch, cpu_count, usable, name):
  monkeypatch.setattr(os, "cpu_count", lambda: cpu_count)
  monkeypatch.setattr(host_devices, "usable_cores", lambda: usable)
  assert host_devices.cores_name() == name


def test_sweep_creates_and_shards_over_the_cpu_devices_asked_for(tmp_path):
  env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=xla_flags())  # no device count
  out = tmp_path / "out"
  proc = subprocess.run(
      [sys.executable, str(ROOT / "experiments" / "sweep.py"), "--dataset", "medical-synth",
       "--schemes", "FL-TOP-DP", "--ratio", "0.005", "--rounds", "1", "--num-clients", "30",
       "--samples-per-client", "10", "--clients-per-round", "4", "--local-steps", "1",
       "--clip", "1", "--cpu-devices", "3", "--test-size", "100", "--out", str(out),
       "--quiet"],
      capture_output=True, text=True, env=env, timeout=300, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  results = json.loads((out / "results.json").read_text())
  assert results["config"]["cpu_devices"] == 3
  run = results["runs"][0]
  assert run["devices"] == 3 and run["capacity"] % 3 == 0
  assert 0 < run["epsilon"] < float("inf")


# The child pins itself before fedjax_dp and JAX start (as `taskset` would).
_COUNT_DEVICES = ("import os, sys; os.sched_setaffinity(0, map(int, sys.argv[1:])); "
                  "from fedjax_dp import host_devices; host_devices.configure([]); "
                  "import jax; print(host_devices.machine()); print(jax.device_count())")


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity off Linux")
def test_a_process_pinned_to_one_core_makes_one_device_and_unpinned_one_a_core():
  """What docs/cli.md's pinned campaign queues rely on: a process pinned to
  one core (``taskset -c 0``) makes one XLA CPU device without --cpu-devices,
  and one allowed every core makes one per core (two or more here, where the
  machine has them, so that the pinned count is not one by accident). The
  pinned process's machine line names its one usable core, so that its
  records tell it from an unpinned one."""
  cores = sorted(os.sched_getaffinity(0))
  env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=xla_flags())  # no device count

  def devices(pin):
    proc = subprocess.run([sys.executable, "-c", _COUNT_DEVICES, *map(str, sorted(pin))],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    machine, count = proc.stdout.strip().splitlines()[-2:]
    usable = f" ({len(pin)} usable)" if len(pin) < os.cpu_count() else ""
    assert f", {os.cpu_count()} cores{usable}, " in machine, machine
    return int(count)

  assert devices({cores[0]}) == 1
  assert devices(set(cores)) == min(len(cores), host_devices.DEFAULT_MAX)
