"""Times the paper CNN's local training in both forms of its dense layer.

Example (thesis Table 8.3's reduced backdoor setting: 10 clients, 300 steps):

  python benchmarks/local_training.py --clients 10 --steps 300 --samples 600

``fedjax_dp.models.fast_train.local_update`` trains the paper CNN's
1,605,632-weight dense layer either factored (the shared weights and the steps' history,
whose cost grows with the square of the steps) or as a copy per client;
``auto`` picks by ``FACTORED_MAX_ROWS``. This runs the same vmapped cohort
(random images, same keys) in each form side by side and prints the
median wall seconds per call, their ratio to the first form, and the
largest difference between the forms' updates (float32 round-off, which
SGD amplifies over many steps).
"""

from __future__ import annotations

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
from fedjax_dp.models import cnn, fast_train


def main(argv: list[str] | None = None) -> int:
  p = OneLineParser(description=__doc__.splitlines()[0])
  p.add_argument("--clients", type=flag_types.positive("--clients", int), default=10,
                 help="clients trained under vmap")
  p.add_argument("--steps", type=flag_types.positive("--steps", int), default=300, help="T_gd")
  p.add_argument("--batch-size", type=flag_types.positive("--batch-size", int), default=10,
                 help="|B|")
  p.add_argument("--samples", type=flag_types.positive("--samples", int), default=600,
                 help="examples per client")
  p.add_argument("--lr", type=flag_types.positive("--lr"), default=0.05, help="eta")
  p.add_argument("--forms", nargs="+", choices=fast_train.DENSE_FORMS,
                 default=["factored", "per-client"], help="dense-layer forms to time")
  p.add_argument("--repeats", type=flag_types.positive("--repeats", int), default=2)
  p.add_argument("--seed", type=flag_types.flagged("--seed", options.seed), default=0)
  p.add_argument("--json", action="store_true", help="one JSON line only")
  args = p.parse_args(argv)
  model = cnn.paper_cnn()
  w = model.init(jax.random.PRNGKey(args.seed))
  rng = np.random.default_rng(args.seed)
  x = jnp.asarray(rng.random((args.clients, args.samples, 28, 28, 1), np.float32))
  y = jnp.asarray(rng.integers(0, 10, (args.clients, args.samples)))
  # The next seed, wrapped at 2**63 (PRNGKey's limit).
  train_key = jax.random.PRNGKey((args.seed + 1) % options.SEED_LIMIT)
  train_keys = jax.random.split(train_key, args.clients)
  results, updates = {}, {}
  for form in args.forms:
    fn = jax.jit(jax.vmap(lambda xk, yk, kk, form=form: fast_train.local_update(
        model, w, xk, yk, kk, steps=args.steps, batch_size=args.batch_size, lr=args.lr,
        dense_form=form)))
    start = time.perf_counter()
    updates[form] = np.asarray(jax.block_until_ready(fn(x, y, train_keys)))
    first = time.perf_counter() - start
    walls = []
    for _ in range(args.repeats):
      start = time.perf_counter()
      jax.block_until_ready(fn(x, y, train_keys))
      walls.append(time.perf_counter() - start)
    results[form] = {"seconds_per_call": statistics.median(walls),
                     "first_call_seconds": first}
  base = args.forms[0]
  for form in args.forms:
    results[form]["time_over_" + base] = (results[form]["seconds_per_call"]
                                          / results[base]["seconds_per_call"])
    results[form]["max_abs_diff_from_" + base] = float(
        np.abs(updates[form] - updates[base]).max())
  out = {"clients": args.clients, "steps": args.steps, "batch_size": args.batch_size,
         "samples": args.samples, "history_rows": args.steps * min(args.batch_size,
                                                                   args.samples),
         "factored_max_rows": fast_train.FACTORED_MAX_ROWS,
         "max_abs_update": float(np.abs(updates[base]).max()), "forms": results,
         "machine": host_devices.machine()}
  if args.json:
    print(json.dumps(out))
  else:
    print(json.dumps(out, indent=1))
  return 0


if __name__ == "__main__":
  sys.exit(main())
