"""How many XLA CPU devices the command-line entry points create (issue 6).

XLA:CPU runs the small convolutions of one client on few threads, so a cohort
sharded over one CPU device per core (``fedjax_dp.sharding``) trains faster
than on one device (docs/performance.md measures it). The count is an ``XLA_FLAGS`` setting that must be made before
JAX starts, so scripts call :func:`configure` before they import JAX. It has
no effect on a GPU, whose devices are the GPUs. This module imports no JAX.
"""

from __future__ import annotations

import os
import sys

FLAG = "--xla_force_host_platform_device_count"
OPTION = "--cpu-devices"
# Default cap: a cohort's slots are padded to a multiple of the device count,
# and more devices than this were never measured.
DEFAULT_MAX = 8


def usable_cores() -> int:
  """The cores this process may run on (its affinity; all of them where the
  system does not say)."""
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:  # not Linux
    return os.cpu_count() or 1


def default_count() -> int:
  """One device per core this process may use, at most ``DEFAULT_MAX``."""
  return max(1, min(usable_cores(), DEFAULT_MAX))


# The most CPU devices --cpu-devices creates (XLA aborts, in many lines,
# past what it can create).
MAX_COUNT = 1024


def parse_count(text: str) -> int:
  """``--cpu-devices``' value: an int in [1, :data:`MAX_COUNT`] (every
  script's flag parses it, ``fedjax_dp.cli.types.flagged``).

  Raises:
    ValueError: One line (the flag's message without its name).
  """
  try:
    count = int(text)
  except ValueError:
    count = None
  if count is None or not 1 <= count <= MAX_COUNT:
    raise ValueError(f"must be an int in [1, {MAX_COUNT}], got {text!r}")
  return count


def count_from_argv(argv: list[str]) -> int | None:
  """The value of ``--cpu-devices N`` / ``--cpu-devices=N`` in argv.

  Returns:
    The count, or None when the option is absent or not an int in [1,
    :data:`MAX_COUNT`] (the script's argparse then reports a bad value with
    its one-line error, :func:`parse_count`).
  """
  value = None
  for i, arg in enumerate(argv):
    if arg.startswith(OPTION + "="):
      value = arg.split("=", 1)[1]
    elif arg == OPTION and i + 1 < len(argv):
      value = argv[i + 1]
  try:
    return None if value is None else parse_count(value)
  except ValueError:
    return None


def configure(argv: list[str] | None = None) -> int | None:
  """Sets the CPU device count from argv (default: one per core) before JAX starts.

  An explicit ``XLA_FLAGS=--xla_force_host_platform_device_count=N`` wins, and
  nothing is changed once JAX is imported (it would have no effect).

  Args:
    argv: Command-line arguments (default ``sys.argv[1:]``).

  Returns:
    The count set, or None when nothing was set.
  """
  flags = os.environ.get("XLA_FLAGS", "")
  if FLAG in flags or "jax" in sys.modules:
    return None
  count = count_from_argv(sys.argv[1:] if argv is None else argv) or default_count()
  os.environ["XLA_FLAGS"] = f"{flags} {FLAG}={count}".strip()
  return count



def cpu_name(cpuinfo: str) -> str:
  """The processor as /proc/cpuinfo's text names it: model name, family and
  model numbers, and the widest x86 vector extension.

  VMs often report a bare "AMD EPYC" for processors of different speed; the
  numbers and the vector width tell them apart.
  """
  fields = {}
  for line in cpuinfo.splitlines():
    key, sep, value = line.partition(":")
    if sep and key.strip() not in fields:  # the first processor's
      fields[key.strip()] = value.strip()
  name = fields.get("model name", "")
  detail = [f"{label} {fields[key]}" for label, key in (("family", "cpu family"),
                                                        ("model", "model")) if key in fields]
  flags = fields.get("flags", "").split()
  vector = next((v for v, flag in (("AVX-512", "avx512f"), ("AVX2", "avx2"), ("AVX", "avx"))
                 if flag in flags), None)
  detail += [vector] if vector else []
  return f"{name} ({', '.join(detail)})" if name and detail else name


def machine() -> str:
  """One line naming the host: CPU model, cores, load, JAX devices.

  ``Intel Xeon (family 6, model 207, AVX-512), 2 cores (1 usable), load 1.9,
  1 cpu device(s)``: the cores this process may use are named when its
  affinity (``taskset``, a container's cpuset) leaves it fewer than the
  machine has (:func:`cores_name`), since a pinned run's pace and numbers
  differ from an unpinned one's with as many devices (docs/performance.md,
  "Two runs side by side").

  Imports JAX (call it after :func:`configure`); recorded with benchmark and
  reproduction results, which name the machine they were measured on.
  """
  import platform  # pylint: disable=import-outside-toplevel

  import jax  # pylint: disable=import-outside-toplevel

  cpu = platform.processor() or platform.machine()
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      cpu = cpu_name(f.read()) or cpu
  except OSError:
    pass
  load = f", load {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else ""
  return f"{cpu}, {cores_name()}{load}, {devices_name(jax.devices())}"


def cores_name() -> str:
  """The machine's cores, and those its affinity leaves this process when
  fewer (``2 cores (1 usable)``). A CPU time quota (``docker --cpus``) is
  not an affinity and is not shown."""
  usable = usable_cores()
  # Python 3.13's -X cpu_count / PYTHON_CPU_COUNT can make os.cpu_count() smaller.
  cores = max(os.cpu_count() or 1, usable)
  return f"{cores} cores" + (f" ({usable} usable)" if usable < cores else "")


def devices_name(devices) -> str:
  """``2 cpu device(s)``, or with an accelerator its model too:
  ``1 gpu device(s) (NVIDIA H200)``, since a run's pace and float rounding
  depend on it."""
  first = devices[0]
  kinds = sorted({d.device_kind for d in devices}) if first.platform != "cpu" else []
  return f"{len(devices)} {first.platform} device(s)" + (f" ({', '.join(kinds)})" if kinds else "")
