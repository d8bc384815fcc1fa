"""Rounds/s and clients/s of the jitted round, per scheme, on this machine.

Measures the paper setting (CNN of 1,663,370 weights, T_gd = 5 steps of
|B| = 10) with a fixed cohort of ``--clients`` slots, after one warm-up call
that compiles; evaluation of the 10,000 test images is timed separately.

  python benchmarks/round_speed.py --schemes FL-TOP-DP FL-STD-DP --clients 100 --json

It runs the round on one device (no sharding); benchmarks/throughput.py is
the current benchmark (one CPU device per core, the per-stage split and the
PyTorch loop).
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from benchmarks.common import load_paper_data, machine as describe_machine, paper_round  # noqa: E402
from fedjax_dp import simulation  # noqa: E402


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--schemes", nargs="+", default=["FL-TOP-DP", "FL-STD-DP"])
  p.add_argument("--ratio", type=float, default=0.005)
  p.add_argument("--clients", type=int, default=100)
  p.add_argument("--rounds", type=int, default=3, help="timed rounds per scheme")
  p.add_argument("--json", action="store_true", help="one JSON line per scheme")
  args = p.parse_args()

  data, test_x, _ = load_paper_data()
  model, _, state0 = paper_round(args.schemes[0], args.clients, args.ratio)
  w0 = state0.weights
  machine = describe_machine()

  eval_fn = simulation.make_eval_fn(model)
  tx = jnp.asarray(test_x)
  jax.block_until_ready(eval_fn(w0, tx))
  t = time.perf_counter()
  jax.block_until_ready(eval_fn(w0, tx))
  eval_s = time.perf_counter() - t

  for name in args.schemes:
    model, cfg, state = paper_round(name, args.clients, args.ratio)
    fn = simulation.make_rounds_fn(model, cfg, 1)
    t = time.perf_counter()
    state, _ = fn(state, data, jax.random.PRNGKey(2), jnp.int32(1))
    jax.block_until_ready(state)
    compile_s = time.perf_counter() - t
    t = time.perf_counter()
    for r in range(args.rounds):
      state, _ = fn(state, data, jax.random.PRNGKey(2), jnp.int32(r + 2))
    jax.block_until_ready(state)
    per_round = (time.perf_counter() - t) / args.rounds
    rec = {"scheme": name, "ratio": args.ratio, "clients_per_round": args.clients,
           "seconds_per_round": per_round, "rounds_per_sec": 1 / per_round,
           "clients_per_sec": args.clients / per_round,
           "first_call_seconds": compile_s, "eval_seconds": eval_s, "machine": machine}
    if args.json:
      print(json.dumps(rec))
    else:
      print(f"{name:12s} r={args.ratio:g}: {rec['clients_per_sec']:.1f} clients/s, "
            f"{per_round:.2f} s/round ({args.clients} clients), first call "
            f"{compile_s:.1f} s, eval {eval_s:.2f} s [{machine}]")


if __name__ == "__main__":
  main()
