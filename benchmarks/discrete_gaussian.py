"""Throughput of the exact discrete Gaussian sampler on this machine.

Samples/s of ``fedjax_dp.privacy.sample_discrete_gaussian`` (compiled once
per shape, timed over ``--repeats`` calls with fresh keys) for scales from
0.1 to 1e6, plus FL-SIGN-DP's case: one client's DG(sign, sqrt(n) sigma /
sqrt(|K|)) vector for the paper CNN (n = 1,663,370, sigma = 1.54,
|K| = 100, scale ~ 199). Also the rate of the Gaussian JAX sampler and of
raw threefry bits for scale.

  python benchmarks/discrete_gaussian.py --json
"""

import argparse
import json
import math
import os
import platform
import time

import jax
import jax.numpy as jnp

from fedjax_dp.privacy import sample_discrete_gaussian


def _rate(fn, size: int, repeats: int) -> tuple[float, float]:
  """(compile seconds, samples per second)."""
  start = time.perf_counter()
  jax.block_until_ready(fn(jax.random.PRNGKey(0)))
  compile_s = time.perf_counter() - start
  start = time.perf_counter()
  for i in range(repeats):
    jax.block_until_ready(fn(jax.random.PRNGKey(i + 1)))
  return compile_s, size * repeats / (time.perf_counter() - start)


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--size", type=int, default=1_000_000, help="samples per call")
  p.add_argument("--repeats", type=int, default=3)
  p.add_argument("--json", action="store_true", help="one JSON line per case")
  args = p.parse_args()
  machine = (f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
             f"{jax.devices()[0].platform}, load {os.getloadavg()[0]:.1f}")
  n = 1_663_370
  fl_sign_dp_scale = math.sqrt(n) * 1.54 / math.sqrt(100)
  cases = [(f"DG(0.3, {s:g})", args.size, 0.3, s) for s in (0.1, 1.0, 10.0, 1e3, 1e6)]
  cases.append((f"FL-SIGN-DP client vector DG(+-1, {fl_sign_dp_scale:.0f}), n = {n}", n,
                None, fl_sign_dp_scale))
  for name, size, mean, scale in cases:
    if mean is None:
      signs = jnp.where(jnp.arange(size) % 2 == 0, 1.0, -1.0)
      fn = jax.jit(lambda k, s=scale, m=signs: sample_discrete_gaussian(k, m, s))
    else:
      fn = jax.jit(lambda k, m=mean, s=scale, z=size: sample_discrete_gaussian(k, m, s, (z,)))
    compile_s, rate = _rate(fn, size, args.repeats)
    row = {"case": name, "samples_per_s": rate, "compile_s": compile_s, "machine": machine}
    print(json.dumps(row) if args.json else
          f"{name:55s} {rate / 1e6:7.2f} M samples/s  (compile {compile_s:.1f} s)", flush=True)
  for name, fn in (("jax.random.normal (continuous, for scale)",
                    jax.jit(lambda k: jax.random.normal(k, (args.size,)))),
                   ("threefry uint32 words (for scale)",
                    jax.jit(lambda k: jax.random.bits(k, (args.size,), jnp.uint32)))):
    compile_s, rate = _rate(fn, args.size, args.repeats)
    row = {"case": name, "samples_per_s": rate, "compile_s": compile_s, "machine": machine}
    print(json.dumps(row) if args.json else f"{name:55s} {rate / 1e6:7.2f} M/s", flush=True)
  if not args.json:
    print(f"machine: {machine}")


if __name__ == "__main__":
  main()
