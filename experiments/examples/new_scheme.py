"""A new scheme, your own flax model and your own arrays, in one file.

The scheme is FedAvg with QSGD quantization (Alistarh et al. 2017): each
client sends its update quantized to ``levels`` levels per coordinate with
unbiased stochastic rounding, ``||u|| sign(u_i) xi_i / levels`` with
``xi_i`` in {0, ..., levels}; the server averages. A value costs
ceil(log2(2 levels + 1)) bits up (plus one float per message, not counted).
It is registered with one line and runs through the same round, accounting
and record as every built-in scheme.

  python experiments/examples/new_scheme.py --rounds 5

Everything a scheme needs is the ``Scheme`` interface
(``fedjax_dp/schemes/base.py``): declared traits and pure functions.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from fedjax_dp import local_training, data, models, schemes, simulation

# The most levels: xi / levels is exact in float32 (a 24-bit significand) up to
# 2**24 levels, and a value then costs 26 bits, near an unquantized float's 32.
MAX_LEVELS = 2 ** 24


@dataclasses.dataclass(frozen=True)
class QSGDScheme(schemes.Scheme):
  """FedAvg with QSGD-quantized updates (non-private)."""

  name: str = "FedAvg-QSGD"
  levels: int = 4
  reference: str = "Alistarh et al. 2017 (QSGD); FedAvg, McMahan et al. 2017"

  @property
  def traits(self) -> schemes.Traits:
    bits = math.ceil(math.log2(2 * self.levels + 1))
    return schemes.Traits(dp=False, uses_ratio=False, upstream_bits=bits)

  def validate(self, num_params: int, ratio: float) -> None:
    if not 1 <= self.levels <= MAX_LEVELS:
      raise ValueError(f"levels must be >= 1 and <= 2**24, got {self.levels}")

  def num_kept(self, num_params: int, ratio: float) -> int:
    return num_params

  def num_downstream(self, num_params: int, ratio: float) -> int:
    return num_params

  def setup(self, setup_data: schemes.SetupData):
    return jnp.zeros((0,), jnp.int32)  # no server state

  def calibrate_clip(self, setup_data: schemes.SetupData, state) -> float:
    return 1.0  # not a DP scheme: never clipped

  def round_plan(self, state, key, num_params, num_kept):
    return None  # nothing shared but the model

  def client_message(self, model, w, plan, x, y, key, local):
    train_key, round_key = jax.random.split(key)
    w_end = local_training.local_sgd(model.loss, w, x, y, train_key, steps=local.steps,
                             batch_size=local.batch_size, lr=local.lr)
    u = w_end - w
    norm = jnp.linalg.norm(u)
    scaled = jnp.abs(u) / jnp.maximum(norm, 1e-12) * self.levels
    lower = jnp.floor(scaled)
    # Round up with probability (scaled - lower): E[xi] = scaled (unbiased).
    xi = lower + jax.random.bernoulli(round_key, scaled - lower).astype(u.dtype)
    return norm * jnp.sign(u) * xi / self.levels

  def server_update(self, w, state, mean, plan):
    return w + mean, state


class UserMLP(nn.Module):
  """A small MLP of the user's, on 20 features."""

  @nn.compact
  def __call__(self, x):
    x = nn.relu(nn.Dense(32)(x))
    return nn.Dense(3)(x)


def user_arrays(seed: int = 0, num: int = 6000):
  """Three Gaussian blobs in 20 dimensions: the user's own (x, y)."""
  rng = np.random.default_rng(seed)
  centres = rng.normal(size=(3, 20)) * 1.5
  y = rng.integers(0, 3, size=num)
  x = (centres[y] + rng.normal(size=(num, 20))).astype(np.float32)
  return x, y.astype(np.int32)


class _Parser(argparse.ArgumentParser):
  def error(self, message):  # one line and exit code 2, without argparse's usage block
    self.exit(2, f"new_scheme.py: error: {message}\n")


def main(argv: list[str] | None = None) -> int:
  p = _Parser(description=__doc__.splitlines()[0])
  p.add_argument("--rounds", type=int, default=5)
  p.add_argument("--levels", type=int, default=4)
  args = p.parse_args(argv)
  # Checked before the scheme is registered: registering reads its traits,
  # whose bits (log2(2 levels + 1)) need levels >= 1.
  if not 1 <= args.levels <= MAX_LEVELS:
    p.error(f"--levels must be >= 1 and <= 2**24, got {args.levels}")

  scheme = schemes.register(QSGDScheme(levels=args.levels))  # the one registry line
  model = models.from_flax(UserMLP(), jnp.zeros((1, 20)), loss="softmax_ce")
  x, y = user_arrays()
  train = data.partition(x[:5000], y[:5000], num_clients=250, samples_per_client=20, seed=0)
  test, public = (x[5000:], y[5000:]), (x[:10], y[:10])
  cfg = simulation.RunConfig.of(rounds=args.rounds, clients_per_round=25, local_steps=5,
                             batch_size=10, lr=0.1, devices=1)
  try:
    record = simulation.run(model, schemes.get_scheme(scheme.name), train, test, public, cfg)
  except ValueError as e:
    print(f"new_scheme.py: error: {e}", file=sys.stderr)
    return 2
  print(json.dumps({k: record[k] for k in ("scheme", "best_accuracy", "best_round",
                                           "upstream_bits", "upstream_kb", "num_params")}))
  return 0


if __name__ == "__main__":
  sys.exit(main())
