"""What a masked scheme could save on the paper CNN's convolutions (issue 60).

FL-TOP and the FL-BAS family train only the coordinates T (UAI Alg. 2).
The round computes each convolution's whole weight gradient and masks it.
Two savings are possible in principle:

* the weight gradient only at T's entries of a kernel: one dot product of a
  patch column and an output-gradient column per entry (a gather), instead
  of one (patch x output channel) matrix product for the whole kernel;
* no input gradient below the lowest layer that holds a coordinate of T.

This times, for the paper CNN's second convolution (5x5, 32 -> 64 channels,
on 14x14 inputs, 80% of the model's multiply-adds), one local step's pieces
under ``vmap`` over a cohort, side by side in one process: the forward
pass, the input gradient, the whole weight gradient, and the weight
gradient gathered at ``--entries`` random entries of the kernel (FL-TOP's
T at r = 0.5% holds 2,837 of its 51,200 weights, at 1% 4,869;
``--entries`` takes a list). It also prints how many of T's coordinates
each layer holds, which decides whether any input gradient can be skipped.

  python benchmarks/masked_gradients.py --clients 10 --entries 2837,4869 --json
"""

from __future__ import annotations

import json
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

# benchmarks/common.py
import common  # noqa: E402
from fedjax_dp import options
from fedjax_dp.cli import types as flag_types  # imports no JAX

# The paper CNN's second convolution: 5x5 SAME on 14x14x32 inputs, 64 outputs.
SHAPE = dict(height=14, width=14, cin=32, cout=64, window=5)


def _conv(x, k):
  return jax.lax.conv_general_dilated(x, k, (1, 1), "SAME",
                                      dimension_numbers=("NHWC", "HWIO", "NHWC"))


def pieces(entries: int, key: jax.Array):
  """The jitted, client-vmapped pieces: ``forward``, ``input_grad``,
  ``weight_grad`` (whole) and ``gathered`` (at ``entries`` kernel entries)."""
  s = SHAPE
  rows = s["window"] * s["window"] * s["cin"]
  pick = jax.random.choice(key, rows * s["cout"], (entries,), replace=False)
  r, c = pick // s["cout"], pick % s["cout"]

  def forward(x, k):
    return _conv(x, k)

  def input_grad(x, k, g):
    return jax.vjp(lambda x_: _conv(x_, k), x)[1](g)[0]

  def weight_grad(x, k, g):
    return jax.vjp(lambda k_: _conv(x, k_), k)[1](g)[0]

  def gathered(x, k, g):
    del k
    patches = jax.lax.conv_general_dilated_patches(
        x, (s["window"], s["window"]), (1, 1), "SAME",
        dimension_numbers=("NHWC", "HWIO", "NHWC"))  # (B, H, W, cin * 25), channel-major
    # conv_general_dilated_patches orders a patch (cin, kh, kw); HWIO's rows are (kh, kw, cin).
    perm = np.arange(rows).reshape(s["cin"], s["window"], s["window"]).transpose(1, 2, 0)
    p = patches.reshape(-1, rows)[:, perm.ravel()]
    return jnp.sum(p[:, r] * g.reshape(-1, s["cout"])[:, c], axis=0)

  v = lambda f: jax.jit(jax.vmap(f))
  return {"forward": v(forward), "input_grad": v(input_grad),
          "weight_grad": v(weight_grad), "gathered": v(gathered), "picked": (r, c)}


def measure(clients: int, batch: int, entries: list[int], repeats: int, seed: int) -> dict:
  """Best-of-``repeats`` seconds of each piece, and the gathered entries'
  largest difference from the whole gradient's (float32 round-off)."""
  s = SHAPE
  key = jax.random.PRNGKey(seed)
  kx, kk, kg, kp = jax.random.split(key, 4)
  x = jax.random.normal(kx, (clients, batch, s["height"], s["width"], s["cin"]))
  k = 0.05 * jax.random.normal(kk, (clients, s["window"], s["window"], s["cin"], s["cout"]))
  g = jax.random.normal(kg, (clients, batch, s["height"], s["width"], s["cout"]))
  out = {"clients": clients, "batch": batch, "conv": SHAPE, "seconds": {}, "max_abs_diff": {}}
  whole = None
  for i, n in enumerate(entries):
    fns = pieces(n, jax.random.fold_in(kp, i))
    names = ("forward", "input_grad", "weight_grad") if i == 0 else ()
    for name in names:
      args = (x, k) if name == "forward" else (x, k, g)
      fn = fns[name]
      jax.block_until_ready(fn(*args))
      out["seconds"][name] = common.best_seconds(
          lambda fn=fn, args=args: jax.block_until_ready(fn(*args)), repeats)
    if whole is None:
      whole = fns["weight_grad"](x, k, g).reshape(clients, -1, s["cout"])
    fn = fns["gathered"]
    got = jax.block_until_ready(fn(x, k, g))
    out["seconds"][f"gathered_{n}"] = common.best_seconds(
        lambda fn=fn: jax.block_until_ready(fn(x, k, g)), repeats)
    r, c = fns["picked"]
    out["max_abs_diff"][f"gathered_{n}"] = float(jnp.max(jnp.abs(got - whole[:, r, c])))
  return out


def _positive_ints(text: str) -> list[int]:
  values = [int(v) for v in text.split(",")]
  if any(v < 1 for v in values):
    raise ValueError(text)
  return values


def main(argv: list[str] | None = None) -> int:
  p = common.OneLineParser(description=__doc__.splitlines()[0])
  p.add_argument("--clients", type=flag_types.positive("--clients", int), default=10,
                 help="clients under vmap")
  p.add_argument("--batch-size", type=flag_types.positive("--batch-size", int), default=10,
                 help="|B|")
  p.add_argument("--entries", default="2837,4869",
                 help="comma-separated kernel entries to gather (of 51,200)")
  p.add_argument("--repeats", type=flag_types.positive("--repeats", int), default=5)
  p.add_argument("--seed", type=flag_types.flagged("--seed", options.seed), default=0)
  p.add_argument("--json", action="store_true", help="one JSON line only")
  args = p.parse_args(argv)
  try:
    entries = _positive_ints(args.entries)
  except ValueError:
    p.error(f"--entries must be positive integers, got {args.entries!r}")
  limit = SHAPE["window"] ** 2 * SHAPE["cin"] * SHAPE["cout"]
  if any(e > limit for e in entries):
    p.error(f"--entries: the kernel has {limit} weights")
  rec = measure(args.clients, args.batch_size, entries, args.repeats, args.seed)
  rec.update(machine=common.machine(), jax=jax.__version__,
             load=[round(v, 2) for v in os.getloadavg()])
  if args.json:
    print(json.dumps(rec))
    return 0
  base = rec["seconds"]["weight_grad"]
  for name, sec in rec["seconds"].items():
    print(f"{name:>16}  {sec * 1e3:8.2f} ms  {sec / base:5.2f}x the whole weight gradient")
  print(f"machine: {rec['machine']}, load {rec['load']}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
