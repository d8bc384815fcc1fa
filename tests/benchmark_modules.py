"""A benchmark script imported as a module (tests call its functions in
process instead of starting an interpreter). Importing one runs its
``host_devices.configure()``, which does nothing once JAX is imported."""

import importlib.util
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def load(name: str):
  """``benchmarks/<name>.py`` as a fresh module (its sibling common.py importable)."""
  spec = importlib.util.spec_from_file_location(f"{name}_benchmark",
                                                ROOT / "benchmarks" / f"{name}.py")
  sys.path.insert(0, str(ROOT / "benchmarks"))
  try:
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
  finally:
    sys.path.remove(str(ROOT / "benchmarks"))
  return module
