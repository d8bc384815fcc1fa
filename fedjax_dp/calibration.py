"""Server-side work on public data: Top-K scores and clip calibration.

UAI 2021, Section 3.1: the server accumulates |gradient| per weight over
T_init SGD steps from w0 on its public batch and keeps the K largest.
Section 4: the clip norm S is the norm of the compressed update of one
public-data round, the median over 100 random subsets for random-subset
schemes; :func:`public_clip_norm` applies this rule to any scheme's encoder.
Thesis Sec. 5.2.6 (footnote 4) sets FL-STD-DP's S instead to the median of
the N clients' update norms in an extra initialization round:
:func:`initial_update_norms` gives those norms.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_dp import local_training, keys
from fedjax_dp.data import ClientData, as_float
from fedjax_dp.models import FlatModel

NUM_CALIBRATION_SUBSETS = 100  # UAI 2021, Section 4


def topk_scores(model: FlatModel, w0: jax.Array, x: jax.Array, y: jax.Array,
                steps: int, lr: float) -> jax.Array:
  """Accumulated |grad| over T_init public-data steps (UAI Sec. 3.1)."""
  fn = jax.jit(functools.partial(local_training.accumulated_abs_gradients, model.loss,
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


def initial_update_norms(model: FlatModel, w0: jax.Array, data: ClientData, key: jax.Array, *,
                         steps: int, batch_size: int, lr: float,
                         chunk: int = 50) -> np.ndarray:
  """Every client's ||w_end - w0||_2 after one round of local SGD from w0.

  Thesis Sec. 5.2.6, footnote 4: for FL-STD-DP "the server computes the
  median L_2-norm value over N L_2-norm values received during an
  additional initialization round" (S 1.73 on MNIST, 2.15 on
  Fashion-MNIST); ``np.median`` of the result is that S for this simulator.
  The rule reads every client's raw update, so it is not itself private.

  Args:
    model: The model.
    w0: (n,) the initial weights.
    data: The clients' data (:class:`~fedjax_dp.data.ClientData`).
    key: Training key; client i trains with ``fold_in(key, i)``.
    steps: T_gd.
    batch_size: |B|.
    lr: The local learning rate.
    chunk: Clients trained together (vmapped); the last chunk is padded.

  Returns:
    (num_clients,) float64 norms, in client order.
  """
  num = data.y.shape[0]
  norm = jax.jit(jax.vmap(lambda x, y, i: jnp.linalg.norm(model.local_update(
      w0, as_float(x), y, jax.random.fold_in(key, i), steps=steps, batch_size=batch_size,
      lr=lr))))
  norms = []
  for start in range(0, num, chunk):
    ids = np.minimum(np.arange(start, start + chunk), num - 1)  # pad with the last client
    norms.append(np.asarray(norm(data.x[ids], data.y[ids], jnp.asarray(ids)))[:num - start])
  return np.concatenate(norms).astype(np.float64)
