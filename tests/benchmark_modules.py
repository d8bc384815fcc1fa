"""A benchmark script imported as a module (tests call its functions in
process instead of starting an interpreter). Importing one runs its
``host_devices.configure()``, which does nothing once JAX is imported."""

import functools
import importlib.util
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
# common.matmul_gflops's (size x size) product, in the benchmarks the tests
# import: the machine's matmul rate only scales a record (no test asserts its
# value), and 256 runs the same jitted product, device placement and timing as
# the default 2048, in 0.07 s instead of 2 s a call (every measure() calls it).
MATMUL_SIZE = 256


def _small_matmul() -> None:
  """benchmarks/common.py (the module the scripts import as ``common``) with
  its matmul measured at MATMUL_SIZE; a script loaded after binds this one."""
  import common  # pylint: disable=import-outside-toplevel  (benchmarks/ is on sys.path)
  if not isinstance(common.matmul_gflops, functools.partial):
    common.matmul_gflops = functools.partial(common.matmul_gflops, size=MATMUL_SIZE)


def load(name: str):
  """``benchmarks/<name>.py`` as a fresh module (its sibling common.py importable)."""
  spec = importlib.util.spec_from_file_location(f"{name}_benchmark",
                                                ROOT / "benchmarks" / f"{name}.py")
  sys.path.insert(0, str(ROOT / "benchmarks"))
  try:
    _small_matmul()
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
  finally:
    sys.path.remove(str(ROOT / "benchmarks"))
  return module
