"""Discrete Gaussian samplers side by side: alias tables, rejection, normal.

Samples/s on this machine, in one run, of

* the fixed-scale alias-table sampler (``fedjax_dp.privacy.dg_table``, what
  FL-SIGN-DP's round uses), with its table build time;
* the exact rejection sampler (``fedjax_dp.privacy.sample_discrete_gaussian``,
  real means, the reference);
* ``jax.random.normal`` and raw threefry words, for scale.

Cases: scales 0.5 to 1e5 with ``--size`` samples, and FL-SIGN-DP's client
vector (n = 1,663,370 integers ``DG(+-1, sqrt(n) sigma / sqrt(|K|))`` with
sigma = 1.54, |K| = 100: scale ~ 199). Each function is compiled once and
timed as the best of ``--repeats`` calls with fresh keys. The threefry hash
is lowered unrolled (``fedjax_dp.fast_prng``), as in every round.

  python benchmarks/discrete_gaussian.py --json
"""

from __future__ import annotations

import json
import math
import os
import time

import jax
import jax.numpy as jnp

from common import OneLineParser, machine  # benchmarks/common.py
from fedjax_dp import fast_prng
from fedjax_dp.cli import types as flag_types  # imports no JAX
from fedjax_dp.privacy import dg_table, sample_discrete_gaussian

PAPER_N = 1_663_370


def _rate(fn, size: int, repeats: int) -> tuple[float, float]:
  """(compile seconds, samples per second of the best call)."""
  start = time.perf_counter()
  jax.block_until_ready(fn(jax.random.PRNGKey(0)))
  compile_s = time.perf_counter() - start
  best = math.inf
  for i in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn(jax.random.PRNGKey(i + 1)))
    best = min(best, time.perf_counter() - start)
  return compile_s, size / best


SCALES = (0.5, 3.5, 199.0, 1e3, 1e5)


def cases(size: int, scales=SCALES, paper_vector: bool = True
          ) -> list[tuple[str, int, float, bool]]:
  """(name, samples per call, scale, FL-SIGN-DP's +-1 means)."""
  out = [(f"DG(0, {s:g})", size, s, False) for s in scales]
  if paper_vector:
    scale = math.sqrt(PAPER_N) * 1.54 / math.sqrt(100)
    out.append((f"FL-SIGN-DP client vector DG(+-1, {scale:.0f}), n = {PAPER_N:,}",
                PAPER_N, scale, True))
  return out


def measure(size: int, repeats: int, scales=SCALES, paper_vector: bool = True,
            samplers=("table", "rejection")) -> list[dict]:
  """One record per (case, sampler), then normal and threefry words."""
  fast_prng.use_unrolled_threefry()
  where = machine()
  rows = []
  for name, num, scale, signed in cases(size, scales, paper_vector):
    means = jnp.where(jnp.arange(num) % 2 == 0, 1, -1) if signed else 0
    for sampler in samplers:
      build_s = None
      if sampler == "table":
        start = time.perf_counter()
        table = dg_table.discrete_gaussian_table(scale)
        build_s = time.perf_counter() - start
        fn = jax.jit(lambda k, t=table, m=means, z=num: m + dg_table.sample_table(k, t, (z,)))
      else:
        fn = jax.jit(lambda k, s=scale, m=means, z=num:
                     m + sample_discrete_gaussian(k, 0.0, s, (z,)))
      compile_s, rate = _rate(fn, num, repeats)
      rows.append({"case": name, "sampler": sampler, "samples_per_s": rate,
                   "compile_s": compile_s, "table_build_s": build_s, "machine": where})
      jax.clear_caches()
  for name, fn in (("jax.random.normal", jax.jit(lambda k: jax.random.normal(k, (size,)))),
                   ("threefry uint32 words",
                    jax.jit(lambda k: jax.random.bits(k, (size,), jnp.uint32)))):
    compile_s, rate = _rate(fn, size, repeats)
    rows.append({"case": name, "sampler": "continuous" if "normal" in name else "bits",
                 "samples_per_s": rate, "compile_s": compile_s, "table_build_s": None,
                 "machine": where})
  return rows


def main(argv: list[str] | None = None) -> None:
  p = OneLineParser(description=__doc__.splitlines()[0])
  p.add_argument("--size", type=flag_types.positive("--size", int), default=1_000_000,
                 help="samples per call")
  p.add_argument("--repeats", type=flag_types.positive("--repeats", int), default=3)
  p.add_argument("--scales", default=",".join(f"{s:g}" for s in SCALES),
                 help="comma-separated scales xi (default %(default)s)")
  p.add_argument("--no-paper-vector", action="store_true",
                 help="skip FL-SIGN-DP's paper-CNN client vector")
  p.add_argument("--json", action="store_true", help="one JSON line per row")
  args = p.parse_args(argv)
  try:
    scales = tuple(float(s) for s in args.scales.split(","))
  except ValueError:
    p.error(f"--scales must be comma-separated numbers, got {args.scales!r}")
  if not all(0 < s <= 6e5 for s in scales):
    p.error(f"--scales must lie in (0, 6e5], got {args.scales}")
  rows = measure(args.size, args.repeats, scales, not args.no_paper_vector)
  normal = next(r["samples_per_s"] for r in rows if r["case"] == "jax.random.normal")
  for r in rows:
    r["ratio_to_normal"] = r["samples_per_s"] / normal
    if args.json:
      print(json.dumps(r))
      continue
    build = "" if r["table_build_s"] is None else f", table built in {r['table_build_s']:.2f} s"
    print(f"{r['case']:52s} {r['sampler']:10s} {r['samples_per_s'] / 1e6:8.2f} M/s "
          f"({r['ratio_to_normal']:.2f}x normal; compile {r['compile_s']:.1f} s{build})")
  if not args.json:
    print(f"machine: {rows[0]['machine']}, load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
  main()
