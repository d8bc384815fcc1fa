"""Server-side work on public data: Top-K scores; calibration constants.

UAI 2021, Section 3.1: the server accumulates |gradient| per weight over
T_init SGD steps from w0 on its public batch and keeps the K largest.
Section 4: the clip norm S is the norm of the compressed update of one
public-data round, the median over 100 random subsets for random-subset
schemes (each scheme's ``calibrate_clip`` applies this to its own encoder).
"""

from __future__ import annotations

import functools

import jax

from fedjax_dp import client
from fedjax_dp.models import FlatModel

NUM_CALIBRATION_SUBSETS = 100  # UAI 2021, Section 4


def topk_scores(model: FlatModel, w0: jax.Array, x: jax.Array, y: jax.Array,
                steps: int, lr: float) -> jax.Array:
  """Accumulated |grad| over T_init public-data steps (UAI Sec. 3.1)."""
  fn = jax.jit(functools.partial(client.accumulated_abs_gradients, model.loss,
                                 steps=steps, lr=lr))
  return fn(w0, x, y)
