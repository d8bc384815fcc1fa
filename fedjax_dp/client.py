"""Local training of one client; the caller vmaps it over the cohort.

UAI 2021, Algorithm 5 (SGD) and Algorithm 2 (Topk-SGD): ``T_gd`` steps of SGD
with a batch of ``|B|`` examples drawn at random from the client's data. With
a coordinate mask, only the masked coordinates move: UAI Algorithm 2 adds the
step to the coordinates in T only, which is the same as resetting the others
to their starting values after every step.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

LossFn = Callable[[jax.Array, jax.Array, jax.Array], jax.Array]


def local_sgd(loss_fn: LossFn, w_start: jax.Array, x: jax.Array, y: jax.Array,
              key: jax.Array, *, steps: int, batch_size: int, lr: float,
              grad_mask: jax.Array | None = None) -> jax.Array:
  """Runs ``steps`` SGD steps on one client's data.

  Args:
    loss_fn: ``loss_fn(w, xb, yb)``, mean loss of a batch at flat weights w.
    w_start: (n,) starting weights.
    x: (samples, ...) the client's examples.
    y: (samples,) labels.
    key: The client's training key for this round.
    steps: T_gd.
    batch_size: |B|; each step draws |B| distinct examples at random (all of
      them, in random order, when |B| >= |D_k|).
    lr: eta.
    grad_mask: Optional (n,) bool; coordinates outside it stay exactly at
      ``w_start`` (UAI Algorithm 2).

  Returns:
    (n,) weights after local training.
  """
  num = x.shape[0]
  take = min(batch_size, num)

  def step(w, step_key):
    batch = jax.random.permutation(step_key, num)[:take]
    g = jax.grad(loss_fn)(w, x[batch], y[batch])
    if grad_mask is not None:
      g = jnp.where(grad_mask, g, 0.0)
    return w - lr * g, None

  w, _ = jax.lax.scan(step, w_start, jax.random.split(key, steps))
  return w


def accumulated_abs_gradients(loss_fn: LossFn, w0: jax.Array, x: jax.Array,
                              y: jax.Array, *, steps: int, lr: float) -> jax.Array:
  """Sum over ``steps`` full-batch SGD steps of |gradient|, per weight.

  UAI 2021, Section 3.1: starting from w0 the server runs T_init SGD
  iterations on the public batch and accumulates the absolute gradient of
  every weight; the Top-K set T holds the K largest.

  Args:
    loss_fn: As in :func:`local_sgd`.
    w0: (n,) initial weights.
    x: The public batch.
    y: Its labels.
    steps: T_init.
    lr: eta.

  Returns:
    (n,) accumulated absolute gradients.
  """
  def step(carry, _):
    w, acc = carry
    g = jax.grad(loss_fn)(w, x, y)
    return (w - lr * g, acc + jnp.abs(g)), None

  (_, acc), _ = jax.lax.scan(step, (w0, jnp.zeros_like(w0)), None, length=steps)
  return acc


def local_momentum_sgd(loss_fn: LossFn, w_start: jax.Array, x: jax.Array, y: jax.Array,
                       key: jax.Array, *, steps: int, batch_size: int,
                       lr: float | jax.Array, momentum: float,
                       velocity: jax.Array | None = None) -> jax.Array:
  """Runs ``steps`` steps of momentum SGD on one client's data.

  Fed-SMP paper, Sec. 6.2: clients train with local momentum SGD, and the
  momentum buffer is re-initialised at the start of every round (a client's
  buffer would be stale by the time it is sampled again). The step is the
  heavy-ball form ``v <- beta v + g; w <- w - eta v``; with ``beta = 0`` it
  is :func:`local_sgd` exactly (same batches for the same key).

  Args:
    loss_fn: As in :func:`local_sgd`.
    w_start: (n,) starting weights (the round's global model).
    x: (samples, ...) the client's examples.
    y: (samples,) labels.
    key: The client's training key for this round.
    steps: Local steps.
    batch_size: |B|, drawn as in :func:`local_sgd`.
    lr: eta (may be traced, e.g. decayed per round).
    momentum: beta in [0, 1).
    velocity: Initial buffer; None (the default, and what every scheme
      uses) starts from zero, i.e. the momentum is reset each round.

  Returns:
    (n,) weights after local training.
  """
  num = x.shape[0]
  take = min(batch_size, num)
  v0 = jnp.zeros_like(w_start) if velocity is None else velocity

  def step(carry, step_key):
    w, v = carry
    batch = jax.random.permutation(step_key, num)[:take]
    g = jax.grad(loss_fn)(w, x[batch], y[batch])
    v = momentum * v + g
    return (w - lr * v, v), None

  (w, _), _ = jax.lax.scan(step, (w_start, v0), jax.random.split(key, steps))
  return w
