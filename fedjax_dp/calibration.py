"""Server-side work on public data: Top-K scores and clip calibration.

UAI 2021, Section 3.1: the server accumulates |gradient| per weight over
T_init SGD steps from w0 on its public batch and keeps the K largest.
Section 4: the clip norm S is the norm of the compressed update of one
public-data round, the median over 100 random subsets for random-subset
schemes; :func:`public_clip_norm` applies this rule to any scheme's encoder.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_dp import client, keys
from fedjax_dp.models import FlatModel

NUM_CALIBRATION_SUBSETS = 100  # UAI 2021, Section 4


def topk_scores(model: FlatModel, w0: jax.Array, x: jax.Array, y: jax.Array,
                steps: int, lr: float) -> jax.Array:
  """Accumulated |grad| over T_init public-data steps (UAI Sec. 3.1)."""
  fn = jax.jit(functools.partial(client.accumulated_abs_gradients, model.loss,
                                 steps=steps, lr=lr))
  return fn(w0, x, y)


def public_clip_norm(setup_key: jax.Array, message: Callable[[jax.Array, Any], jax.Array],
                     plan: Any = None,
                     random_plan: Callable[[jax.Array], Any] | None = None) -> float:
  """S: the norm of one public-data round's message (UAI Sec. 4).

  Args:
    setup_key: The run's setup key (``SetupData.key``).
    message: ``message(train_key, plan)``: the scheme's compressed update of
      one round of local training from w0 on the public data.
    plan: The plan of a fixed encoder (Top-K set, DCT operator, ...).
    random_plan: For schemes whose plan is a random subset:
      ``random_plan(key)`` draws one; S is then the median over
      ``NUM_CALIBRATION_SUBSETS`` of them.

  Returns:
    S as a Python float.
  """
  train_key, subset_key = jax.random.split(keys.purpose(setup_key, keys.SETUP_CALIBRATION))
  if random_plan is None:
    return float(jax.jit(lambda p: jnp.linalg.norm(message(train_key, p)))(plan))
  subset_keys = jax.random.split(subset_key, NUM_CALIBRATION_SUBSETS)
  norms = jax.jit(jax.vmap(
      lambda k: jnp.linalg.norm(message(train_key, random_plan(k)))))(subset_keys)
  return float(np.median(np.asarray(norms)))
