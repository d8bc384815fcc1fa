"""Shared setup of the round benchmarks: the paper's Fashion-MNIST setting.

The paper's Fashion-MNIST clients (UAI 2021 Table 5: 6,000 clients of 10
images), a description of the machine, and the timing and FLOP helpers of
``throughput.py`` and ``models.py`` (best-of timings, XLA's FLOP count, the
float32 matmul rate). It imports JAX: scripts import it after
``host_devices.configure()``.
"""

from __future__ import annotations

import argparse
import os
import time

import jax
import jax.numpy as jnp

from fedjax_dp import host_devices, options, sharding, simulation
from fedjax_dp.cli.types import OneLineParser  # noqa: F401  (the benchmarks' parser)
from fedjax_dp.data import load_federated

NUM_CLIENTS = 6000


def load_paper_data(num_clients: int = NUM_CLIENTS):
  """(ClientData of ``num_clients`` clients, test images, test labels).

  The data set has 6,000 clients of 10 images; a larger federation (a cohort
  of 10,000 sampled without replacement needs one) repeats them: client i
  holds client i mod 6,000's images. Throughput does not depend on which
  images a client holds; accuracy from such a federation means nothing.
  """
  fed, test_x, test_y = load_federated("fashion-mnist", NUM_CLIENTS, 10, seed=0)
  x, y = jnp.asarray(fed.x), jnp.asarray(fed.y)
  if num_clients > NUM_CLIENTS:
    ids = jnp.arange(num_clients) % NUM_CLIENTS
    x, y = x[ids], y[ids]
  return simulation.ClientData(x, y), test_x, test_y


def machine() -> str:
  """A one-line description of the host and JAX backend."""
  return host_devices.machine()


def best_seconds(fn, repeats: int) -> float:
  """Smallest wall time of ``repeats`` calls of ``fn`` (which blocks)."""
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return min(times)


def lowered_flops(fn, *args) -> float | None:
  """Floating-point operations of one call of jitted ``fn`` (XLA's cost analysis).

  Counted on the program as lowered, before the backend compiles it: a GPU
  backend hands convolutions and products to cuDNN / cuBLAS custom calls
  that its compiled program's cost analysis does not count (an H200 run
  read 0.4 GFLOP for evaluating 10,000 images whose forward pass is 212.5
  GFLOP), while the lowered count is the same on every platform.
  """
  cost = fn.lower(*args).cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  flops = (cost or {}).get("flops")
  return None if flops is None or flops <= 0 else float(flops)


def matmul_gflops(mesh, size: int = 2048, repeats: int = 5) -> float:
  """GFLOP/s of float32 (size x size) matmuls, one per device of ``mesh``.

  The machine's dense compute rate, for scale: evaluation's GFLOP/s is
  compared with it.
  """
  devices = sharding.mesh_size(mesh)
  a = jnp.ones((devices, size, size), jnp.float32)
  if mesh is not None:
    a = jax.device_put(a, jax.sharding.NamedSharding(
        mesh, jax.sharding.PartitionSpec(sharding.AXIS)))
  fn = jax.jit(lambda x: jnp.einsum("bij,bjk->bik", x, x))
  jax.block_until_ready(fn(a))
  return 2 * devices * size ** 3 / best_seconds(lambda: jax.block_until_ready(fn(a)),
                                                repeats) / 1e9


def check_out(parser: argparse.ArgumentParser, out: str | None) -> None:
  """Refuses, in one line before anything is measured, an ``--out`` file that
  could not be written: its folder missing, a folder itself, or read-only."""
  if out is None:
    return
  folder = os.path.dirname(out) or "."
  if not os.path.isdir(folder):
    parser.error(f"--out: folder {folder!r} does not exist")
  if os.path.isdir(out):
    parser.error(f"--out {out} is a folder; give a file")
  if not os.access(out if os.path.exists(out) else folder, os.W_OK):
    parser.error(f"--out {out} cannot be written")


#: The longest wait a benchmark gives its subprocesses: subprocess holds the
#: timeout in milliseconds as an int32 (OverflowError past it).
MAX_TIMEOUT = options.INT_MAX // 1000


def timeout_seconds(text: str) -> int:
  """A subprocess timeout: an int of seconds in [1, :data:`MAX_TIMEOUT`]
  (raises ValueError; ``flag_types.flagged`` names the flag)."""
  value = options.positive_int(text)
  if value > MAX_TIMEOUT:
    raise ValueError(f"must be at most {MAX_TIMEOUT} (seconds), got {text}")
  return value
