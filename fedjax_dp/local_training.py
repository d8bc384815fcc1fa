"""Local training of one client, on optax; the caller vmaps it over the cohort.

UAI 2021, Algorithm 5 (SGD) and Algorithm 2 (Topk-SGD): ``T_gd`` steps of an
optimiser with a batch of ``|B|`` examples drawn at random from the client's
data. Every scheme trains through :func:`local_train` with an optax
transformation: plain SGD (:func:`sgd`), momentum SGD with the buffer reset
each round (Fed-SMP Sec. 6.2), or Adam with fresh moments each round
(thesis Table 8.1: CIFAR-10, IMDB; :func:`optimizer`), and the learning
rate a traced value where it is scheduled per round. With a coordinate mask only the masked
coordinates move: UAI Algorithm 2 adds the step to the coordinates in T
only, which is the same as resetting the others after every step
(:func:`mask_updates`).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from fedjax_dp import keys

LossFn = Callable[[jax.Array, jax.Array, jax.Array], jax.Array]


def sgd(lr: float | jax.Array,
        momentum: float | jax.Array | None = None) -> optax.GradientTransformation:
  """The clients' optimiser: ``w -= lr * g``, or heavy-ball momentum.

  With momentum the step is ``v <- beta v + g; w <- w - lr v``
  (``optax.sgd``), the buffer starting from zero every round; a momentum of
  None or (a Python) 0 is plain SGD. Both may be traced values.
  """
  if momentum is None or (not isinstance(momentum, jax.Array) and momentum == 0):
    momentum = None
  return optax.sgd(lr, momentum=momentum)


# The clients' optimisers (``--local-optimizer``): SGD, optionally with
# heavy-ball momentum (the UAI paper, Fed-SMP), or Adam (thesis Table 8.1:
# CIFAR-10 and IMDB, Keras' Adam at eta 0.001).
OPTIMIZERS = ("sgd", "adam")
# Keras' Adam (the thesis used Keras 2.2.0, l.2298): beta_1 0.9, beta_2 0.999
# as optax's, epsilon K.epsilon() = 1e-7 (optax's default is 1e-8).
KERAS_ADAM_EPS = 1e-7


def optimizer(name: str, lr: float | jax.Array,
              momentum: float | jax.Array | None = None) -> optax.GradientTransformation:
  """The clients' optimiser called ``name`` (one of :data:`OPTIMIZERS`).

  Its state starts fresh every round (:func:`local_train`), so Adam's
  moments, like a momentum buffer, never carry over between rounds.

  Args:
    name: ``"sgd"`` (:func:`sgd`) or ``"adam"`` (``optax.adam`` with Keras'
      epsilon, :data:`KERAS_ADAM_EPS`).
    lr: The learning rate eta (may be traced; negative for gradient ascent).
    momentum: Heavy-ball beta, SGD only.

  Raises:
    ValueError: An unknown name, or momentum with Adam.
  """
  if name not in OPTIMIZERS:
    raise ValueError(f"unknown local optimizer {name!r}; choose one of "
                     f"{', '.join(OPTIMIZERS)}")
  if name == "sgd":
    return sgd(lr, momentum)
  if momentum is not None and (isinstance(momentum, jax.Array) or momentum != 0):
    raise ValueError("momentum applies to the sgd local optimizer, not adam")
  return optax.adam(lr, eps=KERAS_ADAM_EPS)


class _NoState(NamedTuple):
  pass


def mask_updates(mask: jax.Array) -> optax.GradientTransformation:
  """Zeroes the updates outside ``mask`` (UAI Algorithm 2: only T moves)."""
  def init(params):
    del params
    return _NoState()

  def update(updates, state, params=None):
    del params
    return jnp.where(mask, updates, 0.0), state

  return optax.GradientTransformation(init, update)


def sample_batch(key: jax.Array, num: int, batch_size: int,
                 count: jax.Array | None = None) -> jax.Array:
  """|B| distinct example indices of ``num`` (all of them, shuffled, if |B| >= num).

  With ``count`` (possibly traced), a client of ``count`` examples padded to
  ``num`` rows (``fedjax_dp.data.partitioning``): the indices below
  ``count`` come first, in the permutation's order, so the batch is drawn
  from the real examples and holds padding only when ``count < |B|`` (the
  loss ignores it). With ``count == num`` the batch is the one drawn without
  ``count``.
  """
  perm = jax.random.permutation(key, num)
  if count is not None:
    perm = perm[jnp.argsort(perm >= count, stable=True)]
  return perm[:min(batch_size, num)]


def loss_key(step_key: jax.Array) -> jax.Array:
  """The key of a local step's loss (its dropout), independent of the step's
  batch, which :func:`sample_batch` draws from ``step_key`` itself."""
  return keys.purpose(step_key, keys.STEP_LOSS)


def num_examples(y: jax.Array) -> jax.Array:
  """A client's number of real (non-padding, label >= 0) examples."""
  return jnp.sum(y >= 0)


def local_train(loss_fn: LossFn, w_start: jax.Array, x: jax.Array, y: jax.Array,
                key: jax.Array, *, steps: int, batch_size: int,
                optimizer: optax.GradientTransformation,
                grad_mask: jax.Array | None = None,
                loss_takes_key: bool = False,
                gradients_at_start: bool = False) -> jax.Array:
  """Runs ``steps`` optimiser steps on one client's data.

  Args:
    loss_fn: ``loss_fn(w, xb, yb)``, mean loss of a batch at flat weights w.
    w_start: (n,) starting weights.
    x: (samples, ...) the client's examples.
    y: (samples,) labels; -1 marks padding rows (never in a batch unless the
      client holds fewer than |B| examples; the loss ignores them).
    key: The client's training key for this round (one sub-key per step).
    steps: T_gd.
    batch_size: |B| (:func:`sample_batch`).
    optimizer: An optax transformation, e.g. :func:`sgd`; its state starts
      fresh (a client's momentum is reset every round).
    grad_mask: Optional (n,) bool; coordinates outside it stay exactly at
      ``w_start`` (UAI Algorithm 2).
    loss_takes_key: ``loss_fn(w, xb, yb, key)`` draws randomness (dropout):
      each step passes :func:`loss_key` of its key, the batch still coming
      from the step's key.
    gradients_at_start: Every step's gradient is taken at ``w_start``, not
      at the weights the steps reached (the thesis' gradient ascent, l.1632:
      ``w_l = w_{l-1} + eta grad f(D; w)`` at the received model w).

  Returns:
    (n,) weights after local training.
  """
  if grad_mask is not None:
    optimizer = optax.chain(mask_updates(grad_mask), optimizer)
  num, count = x.shape[0], num_examples(y)

  def step(carry, step_key):
    w, opt_state = carry
    batch = sample_batch(step_key, num, batch_size, count)
    extra = (loss_key(step_key),) if loss_takes_key else ()
    g = jax.grad(loss_fn)(w_start if gradients_at_start else w, x[batch], y[batch], *extra)
    updates, opt_state = optimizer.update(g, opt_state, w)
    return (optax.apply_updates(w, updates), opt_state), None

  (w, _), _ = jax.lax.scan(step, (w_start, optimizer.init(w_start)),
                           jax.random.split(key, steps))
  return w


def local_sgd(loss_fn: LossFn, w_start: jax.Array, x: jax.Array, y: jax.Array,
              key: jax.Array, *, steps: int, batch_size: int, lr: float | jax.Array,
              momentum: float | None = None,
              grad_mask: jax.Array | None = None,
              loss_takes_key: bool = False) -> jax.Array:
  """:func:`local_train` with :func:`sgd` (momentum SGD for ``momentum > 0``)."""
  return local_train(loss_fn, w_start, x, y, key, steps=steps, batch_size=batch_size,
                     optimizer=sgd(lr, momentum), grad_mask=grad_mask,
                     loss_takes_key=loss_takes_key)


def batch_gradient(loss_fn: LossFn, w: jax.Array, x: jax.Array, y: jax.Array,
                   key: jax.Array, batch_size: int) -> jax.Array:
  """The gradient of one random mini-batch (signSGD, thesis Sec. 4.1.1)."""
  batch = sample_batch(key, x.shape[0], batch_size, num_examples(y))
  return jax.grad(loss_fn)(w, x[batch], y[batch])


def accumulated_abs_gradients(loss_fn: LossFn, w0: jax.Array, x: jax.Array,
                              y: jax.Array, *, steps: int, lr: float) -> jax.Array:
  """Sum over ``steps`` full-batch SGD steps of |gradient|, per weight.

  UAI 2021, Section 3.1: starting from w0 the server runs T_init SGD
  iterations on the public batch and accumulates the absolute gradient of
  every weight; the Top-K set T holds the K largest.

  Args:
    loss_fn: As in :func:`local_train`.
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
