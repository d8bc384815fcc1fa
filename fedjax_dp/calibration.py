"""Server-side setup on public data: the Top-K set and the clip norm S.

UAI 2021, Section 4: the server runs one local round (T_gd SGD steps from w0)
on the public batch and sets S to the L2 norm of the resulting compressed
update. For schemes whose subset is random, it repeats this for 100 random
subsets and takes the median of the norms.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_dp import client
from fedjax_dp.compression import masks
from fedjax_dp.models import FlatModel
from fedjax_dp.schemes import MaskedScheme

NUM_CALIBRATION_SUBSETS = 100  # UAI 2021, Section 4


def topk_scores(model: FlatModel, w0: jax.Array, x: jax.Array, y: jax.Array,
                steps: int, lr: float) -> jax.Array:
  """Accumulated |grad| over T_init public-data steps (UAI Sec. 3.1)."""
  fn = jax.jit(functools.partial(client.accumulated_abs_gradients, model.loss,
                                 steps=steps, lr=lr))
  return fn(w0, x, y)


def calibrate_clip_norm(model: FlatModel, scheme: MaskedScheme, w0: jax.Array,
                        fixed: jax.Array, k: int, x: jax.Array, y: jax.Array,
                        key: jax.Array, *, steps: int, batch_size: int,
                        lr: float) -> float:
  """The clip norm S the server derives from public data (UAI Sec. 4).

  Args:
    model: The model.
    scheme: The scheme whose compressed update is measured.
    w0: Initial weights.
    fixed: The scheme's setup subset (Top-K), ignored for random schemes.
    k: K.
    x: Public batch images.
    y: Public batch labels.
    key: Setup key for the local batches and the random subsets.
    steps: T_gd.
    batch_size: |B|.
    lr: eta.

  Returns:
    S as a Python float.
  """
  n = w0.shape[0]
  train_key, subset_key = jax.random.split(key)
  train = functools.partial(client.local_sgd, model.loss, steps=steps,
                            batch_size=batch_size, lr=lr)
  if scheme.selection != "random":
    indices = None if scheme.selection == "full" else fixed
    w1 = jax.jit(lambda w: train(w, x, y, train_key,
                                 grad_mask=scheme.grad_mask(indices, n)))(w0)
    update = scheme.compress(w1 - w0, indices)
    return float(jnp.linalg.norm(update))

  subset_keys = jax.random.split(subset_key, NUM_CALIBRATION_SUBSETS)

  @jax.jit
  def norms():
    subsets = jax.vmap(lambda kk: masks.random_indices(kk, n, k))(subset_keys)
    if scheme.reset:
      # Each random subset constrains its own local training.
      w1 = jax.vmap(lambda idx: train(w0, x, y, train_key,
                                      grad_mask=masks.indices_to_mask(idx, n)))(subsets)
      deltas = w1 - w0
      return jax.vmap(lambda d, idx: jnp.linalg.norm(d[idx]))(deltas, subsets)
    delta = train(w0, x, y, train_key) - w0
    return jax.vmap(lambda idx: jnp.linalg.norm(delta[idx]))(subsets)

  return float(np.median(np.asarray(norms())))
