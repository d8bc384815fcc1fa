"""XLA_FLAGS for the tests' subprocesses: the suite's own flags (tests/conftest.py)
with the device count a test chooses, or none (the command's --cpu-devices sets it)."""

import os

DEVICE_COUNT = "--xla_force_host_platform_device_count"


def xla_flags(devices: int | None = None) -> str:
  flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith(DEVICE_COUNT)]
  if devices is not None:
    flags.append(f"{DEVICE_COUNT}={devices}")
  return " ".join(flags)
