"""Shared fixtures: the real data, loaded once per session."""

import atexit
import os
import pathlib
import shutil
import tempfile

_SHARED = pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "data"
os.environ.setdefault("FEDJAX_DP_DATA", str(_SHARED))
os.environ.setdefault("FEDJAX_DP_NO_DOWNLOAD", "1")

# One persistent XLA compilation cache for the whole run: many tests compile
# the same programs (the paper CNN's round and evaluation), and the pytest-xdist
# workers and the CLI tests' subprocesses inherit this environment. Set before
# jax is imported; a cache the caller chose is kept, the run's own is removed.
# Every program is kept, however quick to compile: the small ones recur too
# (the golden and attack tests: 114 s against 122 s at a 0.5 s threshold,
# means of three runs each, 2-core AMD EPYC, 2026-11-30).
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
  _CACHE = tempfile.mkdtemp(prefix="fedjax_dp_tests_xla_")
  os.environ["JAX_COMPILATION_CACHE_DIR"] = _CACHE
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
  atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)

# XLA:CPU compiles faster for the suite, which is mostly compilation of small
# programs; none of these flags changes a result (the golden records pass
# unchanged with them), only how fast the code is built and runs:
# - no LLVM optimisation passes (golden, simulation and CLI tests: 183 s ->
#   128 s on 2 cores; the long runs execute a little slower);
# - on jaxlib 0.10, XLA's loop emitters instead of its newer fusion emitters
#   (a paper-CNN round compiles in 1.3 s instead of 4.0 s; the golden tests
#   take 130 instead of 187 CPU s); jaxlib 0.11 removed the flag (and aborts
#   on an unknown one), so newer JAX compiles its default way;
# - the module compiled in one piece rather than split for parallel codegen,
#   which the 2 cores cannot use beside the 2 test workers.
# The xdist workers and the scripts' subprocesses inherit them (a test that
# sets XLA_FLAGS for a subprocess appends to these); flags the caller chose
# are kept. Everything else (the device count, the programs) is what users run.
def _suite_xla_flags(flags: str) -> str:
  from importlib import metadata  # pylint: disable=import-outside-toplevel
  jaxlib = tuple(int(p) for p in metadata.version("jaxlib").split(".")[:2])
  chosen = {"xla_backend_optimization_level": "0",
            "xla_cpu_parallel_codegen_split_count": "1"}
  if jaxlib < (0, 11):
    chosen["xla_cpu_use_fusion_emitters"] = "false"
  return " ".join([flags, *(f"--{k}={v}" for k, v in chosen.items() if k not in flags)]).strip()


os.environ["XLA_FLAGS"] = _suite_xla_flags(os.environ.get("XLA_FLAGS", ""))

import jax.numpy as jnp  # noqa: E402  (after the cache's and XLA's environment)
import pytest  # noqa: E402


@pytest.fixture(scope="session")
def small_federation():
  """600 real Fashion-MNIST clients of 10 images, the test set, 10 MNIST images."""
  from fedjax_dp import simulation
  from fedjax_dp.data import load_federated, public_batch
  fed, test_x, test_y = load_federated("fashion-mnist", 600, 10, seed=0)
  data = simulation.ClientData(jnp.asarray(fed.x), jnp.asarray(fed.y))
  return data, (test_x[:2000], test_y[:2000]), public_batch(10, seed=0)


@pytest.fixture(scope="session")
def cnn():
  from fedjax_dp.models import paper_cnn
  return paper_cnn()


def pytest_addoption(parser):
  parser.addoption("--update-golden", action="store_true",
                   help="rewrite tests/golden/*.json from the current code")
