"""A flat-vector view of model parameters.

Every compression operator, clip and noise in the simulator works on one flat
float32 vector of the model's n weights (UAI 2021, Section 3: ``|w| = n``).
A :class:`FlatModel` keeps the parameter layout as static (name, shape) pairs
so that ``unflatten`` is a few free slices and reshapes inside ``jit``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

Params = dict[str, jax.Array]


@dataclasses.dataclass(frozen=True)
class FlatModel:
  """A model whose parameters live in one flat vector.

  Attributes:
    name: Human-readable model name.
    shapes: Ordered (parameter name, shape) pairs; the flat vector is their
      concatenation in this order.
    init_fn: ``init_fn(key) -> Params`` drawing the initial parameters.
    apply_fn: ``apply_fn(params, x) -> logits`` for a batch ``x``.
    loss_name: ``"softmax_ce"`` (multi-class) or ``"sigmoid_ce"`` (binary).
    eval_apply_fn: Optional faster ``apply_fn`` for one model on a large
      batch (evaluation); must compute the same function.
    local_update_fn: Optional faster local training,
      ``local_update_fn(model, w, x, y, key, *, steps, batch_size, lr,
      grad_mask, grad_indices, only_indices, momentum, optimizer) -> w_end -
      w``; must
      compute what :meth:`local_update` computes without it (see
      ``fedjax_dp.models.fast_train``).
    train_apply_fn: Optional training-mode forward pass
      ``train_apply_fn(params, x, key) -> logits`` (dropout); local training
      through :meth:`local_update` uses it, evaluation and the server's
      public-data steps use ``apply_fn``.
  """

  name: str
  shapes: tuple[tuple[str, tuple[int, ...]], ...]
  init_fn: Callable[[jax.Array], Params]
  apply_fn: Callable[[Params, jax.Array], jax.Array]
  loss_name: str = "softmax_ce"
  eval_apply_fn: Callable[[Params, jax.Array], jax.Array] | None = None
  local_update_fn: Callable[..., jax.Array] | None = None
  train_apply_fn: Callable[[Params, jax.Array, jax.Array], jax.Array] | None = None

  @property
  def num_params(self) -> int:
    """Number of weights n."""
    return sum(math.prod(s) for _, s in self.shapes)

  def unflatten(self, flat: jax.Array) -> Params:
    """Splits a flat vector of size n into named parameter arrays."""
    params, offset = {}, 0
    for name, shape in self.shapes:
      size = math.prod(shape)
      params[name] = flat[offset:offset + size].reshape(shape)
      offset += size
    return params

  def flatten(self, params: Params) -> jax.Array:
    """Concatenates named parameters into one flat float32 vector."""
    return jnp.concatenate(
        [jnp.ravel(params[name]).astype(jnp.float32) for name, _ in self.shapes])

  def init(self, key: jax.Array) -> jax.Array:
    """Returns the initial weights w0 as a flat vector."""
    return self.flatten(self.init_fn(key))

  def logits(self, flat: jax.Array, x: jax.Array) -> jax.Array:
    """Model output for a batch, from flat weights."""
    return self.apply_fn(self.unflatten(flat), x)

  def loss(self, flat: jax.Array, x: jax.Array, y: jax.Array) -> jax.Array:
    """Mean cross-entropy of the batch (softmax or sigmoid), padding ignored."""
    return cross_entropy(self.logits(flat, x), y, self.loss_name)

  def train_loss(self, flat: jax.Array, x: jax.Array, y: jax.Array,
                 key: jax.Array) -> jax.Array:
    """:meth:`loss` of the training-mode forward pass (``train_apply_fn``)."""
    fn = self.train_apply_fn
    logits = (self.apply_fn(self.unflatten(flat), x) if fn is None
              else fn(self.unflatten(flat), x, key))
    return cross_entropy(logits, y, self.loss_name)

  def eval_logits(self, flat: jax.Array, x: jax.Array) -> jax.Array:
    """Model output through ``eval_apply_fn`` when the model has one."""
    fn = self.eval_apply_fn or self.apply_fn
    return fn(self.unflatten(flat), x)

  def local_update(self, w: jax.Array, x: jax.Array, y: jax.Array, key: jax.Array, *,
                   steps: int, batch_size: int, lr: float,
                   grad_mask: jax.Array | None = None,
                   grad_indices: jax.Array | None = None,
                   only_indices: bool = False,
                   momentum: float | None = None,
                   optimizer: str = "sgd") -> jax.Array:
    """One client's update ``w_end - w`` after local training from w.

    ``local_training.local_sgd(self.loss, w, x, y, key, ...) - w`` (same batches for
    the same key; heavy-ball ``momentum`` as there), or the same steps of
    ``local_training.optimizer(optimizer, lr)`` (Adam), through ``local_update_fn``
    when the model has one.
    Written for one client; the round vmaps it over the cohort.
    ``grad_indices`` (optional) lists the True entries of ``grad_mask``,
    sorted, for a ``local_update_fn`` that can use them; with
    ``only_indices`` the result is the update on them alone,
    ``update[grad_indices]``.
    """
    if only_indices and grad_indices is None:
      raise ValueError("only_indices needs grad_indices")
    if self.local_update_fn is not None:
      return self.local_update_fn(self, w, x, y, key, steps=steps, batch_size=batch_size,
                                  lr=lr, grad_mask=grad_mask, grad_indices=grad_indices,
                                  only_indices=only_indices, momentum=momentum,
                                  optimizer=optimizer)
    from fedjax_dp import local_training  # pylint: disable=import-outside-toplevel
    keyed = self.train_apply_fn is not None
    update = local_training.local_train(self.train_loss if keyed else self.loss, w, x, y, key,
                                steps=steps, batch_size=batch_size,
                                optimizer=local_training.optimizer(optimizer, lr, momentum),
                                grad_mask=grad_mask, loss_takes_key=keyed) - w
    return update[grad_indices] if only_indices else update

  def predict(self, flat: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(class predictions, scores) of a batch, from one forward pass.

    Binary models predict 1 when the logit is positive and score with the
    logit (for AUROC); multi-class models predict the argmax and score with
    the softmax.
    """
    logits = self.eval_logits(flat, x)
    if self.loss_name == "sigmoid_ce":
      return (logits[..., 0] > 0).astype(jnp.int32), logits[..., 0]
    return jnp.argmax(logits, axis=-1).astype(jnp.int32), jax.nn.softmax(logits)


def cross_entropy(logits: jax.Array, y: jax.Array, loss_name: str) -> jax.Array:
  """Mean cross-entropy over a batch's real rows.

  Rows labelled -1 are padding (``fedjax_dp.data.partitioning``) and count
  for nothing; a batch without real rows has loss 0.

  Args:
    logits: (batch, classes) logits, or (batch, 1) for ``"sigmoid_ce"``.
    y: (batch,) integer labels, -1 for padding.
    loss_name: ``"softmax_ce"`` or ``"sigmoid_ce"`` (binary).
  """
  real = y >= 0
  label = jnp.maximum(y, 0)
  if loss_name == "sigmoid_ce":
    z = logits[..., 0]
    per_example = (jnp.maximum(z, 0) - z * label.astype(z.dtype) +
                   jnp.log1p(jnp.exp(-jnp.abs(z))))
  else:
    per_example = -jnp.take_along_axis(jax.nn.log_softmax(logits), label[:, None],
                                       axis=-1)[:, 0]
  return (jnp.sum(jnp.where(real, per_example, 0.0)) /
          jnp.maximum(jnp.sum(real), 1).astype(per_example.dtype))


def glorot_uniform(key: jax.Array, shape: tuple[int, ...], fan_in: int,
                   fan_out: int) -> jax.Array:
  """Keras' default kernel initialiser (the papers used Keras 2.2)."""
  limit = np.sqrt(6.0 / (fan_in + fan_out))
  return jax.random.uniform(key, shape, jnp.float32, -limit, limit)
