"""Times the FL-CS decoder (FISTA over chunked DCT) at the paper's scale.

Example (the paper CNN, r = 5%, 100 FISTA steps):

  python benchmarks/cs_decoder.py --num-params 1663370 --ratio 0.05 \\
      --chunks 200 --iters 100 --json

The signal is a sparse vector (``--spikes`` nonzeros per chunk, update-sized
values); its measurements y = C(x) are decoded from zero (``--tol 0``: exactly
``--iters`` steps). Prints seconds per decode (wall clock, median of
``--repeats``) and the process CPU time, which is what the decode costs on a
quiet machine when the host is shared; the relative reconstruction error
||D(C(x)) - x|| / ||x||; and the KKT violation of the decoded point in units
of lambda (0 at the exact BPDN solution).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_dp import host_devices, options
from fedjax_dp.cli import types as flag_types  # imports no JAX
from common import OneLineParser  # benchmarks/common.py
from fedjax_dp.compression import dct_cs, fista

PROG = "cs_decoder.py"


def _check_ranges(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
  """Refuses, in one line naming the flag, a numeric flag out of its range
  (the counts and the seed are refused as they parse)."""
  if args.chunks > args.num_params:
    p.error(f"--chunks {args.chunks} exceeds --num-params {args.num_params}")
  if not 0 < args.ratio <= 1:
    p.error(f"--ratio must be in (0, 1], got {args.ratio}")
  for name in ("tol", "lam"):  # finite in float32, the decoder's precision
    if not 0 <= getattr(args, name) <= options.FLOAT32_MAX:
      p.error(f"--{name} must be finite and >= 0, got {getattr(args, name)}")
  if not 0 < args.spikes <= 1:
    p.error(f"--spikes must be in (0, 1] (nonzeros per kept coefficient), got {args.spikes}")


def main(argv: list[str] | None = None) -> int:
  p = OneLineParser(prog=PROG, description=__doc__.splitlines()[0])
  # Counts reach jitted code as int32 (the permutation's and chunks' indices, the steps).
  p.add_argument("--num-params", type=flag_types.positive("--num-params", int),
                 default=1_663_370, help="n (paper CNN)")
  p.add_argument("--ratio", type=float, default=0.05, help="r")
  p.add_argument("--chunks", type=flag_types.positive("--chunks", int), default=200, help="P")
  p.add_argument("--iters", type=flag_types.positive("--iters", int), default=100,
                 help="decoder steps (max)")
  p.add_argument("--tol", type=float, default=0.0, help="stopping tolerance (0: all steps)")
  p.add_argument("--lam", type=float, default=1e-5, help="lambda")
  p.add_argument("--solver", choices=fista.SOLVERS, default="fista")
  p.add_argument("--restart", action="store_true", help="FISTA gradient restart")
  p.add_argument("--method", choices=dct_cs.METHODS, default="auto", help="DCT path")
  p.add_argument("--spikes", type=float, default=0.05,
                 help="nonzeros of the test signal per kept coefficient (default 0.05)")
  p.add_argument("--repeats", type=flag_types.positive("--repeats", int), default=3)
  p.add_argument("--seed", type=flag_types.flagged("--seed", options.seed), default=0)
  p.add_argument("--json", action="store_true", help="one JSON line only")
  args = p.parse_args(argv)
  _check_ranges(p, args)
  try:
    fista.check_params(args.lam, args.iters, args.tol, args.solver)
    op = dct_cs.make_operator(jax.random.PRNGKey(args.seed), args.num_params, args.ratio,
                              args.chunks, args.method)
  except ValueError as e:
    print(f"{PROG}: error: {e}", file=sys.stderr)
    return 2

  rng = np.random.default_rng(args.seed)
  k = max(1, int(round(args.spikes * op.num_values)))
  x = np.zeros(args.num_params, np.float32)
  x[rng.choice(args.num_params, k, replace=False)] = (
      rng.choice([-1.0, 1.0], k) * (1.0 + rng.random(k)) * 1e-2)
  x = jnp.asarray(x)
  encode = jax.jit(lambda o, v: o.encode(v).reshape(o.chunks, o.coeffs))
  y = jax.block_until_ready(encode(op, x))
  start = time.perf_counter()
  for _ in range(args.repeats):
    jax.block_until_ready(encode(op, x))
  encode_s = (time.perf_counter() - start) / args.repeats

  @jax.jit
  def decode(o, measurements):
    init = jnp.zeros(o.domain_shape, jnp.float32)
    return fista.solve_bpdn(o.forward, o.adjoint, measurements, init, args.lam,
                            max_iters=args.iters, tol=args.tol, mask=o.mask,
                            solver=args.solver, restart=args.restart)

  res = jax.block_until_ready(decode(op, y))  # compile
  walls, cpus = [], []
  for _ in range(args.repeats):
    w0, c0 = time.perf_counter(), time.process_time()
    res = jax.block_until_ready(decode(op, y))
    walls.append(time.perf_counter() - w0)
    cpus.append(time.process_time() - c0)
  x_hat = op.from_chunks(res.solution)
  rel_err = float(jnp.linalg.norm(x_hat - x) / jnp.linalg.norm(x))
  viol = float(fista.kkt_violation(op.forward, op.adjoint, y, res.solution, args.lam,
                                   op.mask)) / args.lam if args.lam > 0 else None
  out = {
      "num_params": args.num_params, "ratio": args.ratio, "chunks": args.chunks,
      "coeffs_per_chunk": op.coeffs, "chunk_len": op.chunk_len, "method": op.method,
      "solver": args.solver + ("+restart" if args.restart else ""), "lam": args.lam,
      "max_iters": args.iters, "tol": args.tol, "iterations": int(res.iterations),
      "seconds_per_decode": statistics.median(walls),
      "cpu_seconds_per_decode": statistics.median(cpus),
      "seconds_per_iteration": statistics.median(walls) / max(int(res.iterations), 1),
      "encode_seconds": encode_s, "signal_nonzeros": k,
      "relative_error": rel_err, "kkt_violation_over_lambda": viol,
      "machine": host_devices.machine(),
  }
  if args.json:
    print(json.dumps(out))
  else:
    for key, value in out.items():
      print(f"{key:>26}: {value}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
