"""Fast local training of any model for a whole cohort.

Computes what ``local_training.local_sgd(model.loss, w, x, y, key, ...) - w``
computes (same batches for the same key, same SGD or heavy-ball steps, same
masking), for any :class:`~fedjax_dp.models.flat.FlatModel` whose
``apply_fn`` JAX can trace (every ``from_flax`` model), written so that
``vmap`` over the clients becomes work a CPU does well:

* The forward pass runs through :mod:`fedjax_dp.models.fast_apply`:
  convolutions one client at a time in the canonical layout, max pooling
  with a reshaped backward pass.
* Large dense kernels (:func:`fast_apply.dense_sites`, at least
  ``FACTOR_MIN_SIZE`` weights, e.g. the paper CNN's 1,605,632-weight layer)
  keep the *global* weights for every client. Without a mask, a client's
  kernel after s steps is ``W - lr * sum_t A_t^T D_t`` (A_t the layer's
  inputs at step t, D_t its output gradients), so
  ``a @ W_k = a @ W - lr * (a @ A^T) @ D``: one large product with the
  shared W for the whole cohort, and no client holds a copy of the layer.
  Each step multiplies by the whole history (steps x rows), so beyond
  ``FACTORED_MAX_ROWS`` history rows the kernels are per-client copies
  instead (``dense_form``). With heavy-ball momentum the history rows are
  weighted by how far each step's gradient has moved the weights since.
* With a gradient mask (FL-TOP, UAI Alg. 2) of at most ``SPARSE_MAX``
  indices, the large kernels move only on T: a vector on T next to the
  shared W (:func:`cohort_ops.sparse_product`); otherwise every parameter
  is the client's own after the first step (which still uses the shared
  weights).

The result equals the generic path's up to float32 round-off (the factored
sums run in another order); ``tests/models/test_fast_train.py`` checks it. A model
whose forward pass this JAX cannot replay (``jax_internals.Unsupported``)
trains on the plain path instead, after one
``jax_internals.FastPathWarning`` naming the primitive.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from fedjax_dp import local_training
from fedjax_dp import jax_internals as jxi
from fedjax_dp.models import cohort_ops, fast_apply
from fedjax_dp.models.flat import cross_entropy

# Smallest dense kernel held apart from the clients' own parameters (smaller
# ones cost less as per-client copies than as a history or gathers).
FACTOR_MIN_SIZE = 65536

# Most history rows (steps x the layer's rows per step) trained in factored
# form: the factored form's cost grows with the square of the steps, the
# per-client copies' with the steps. benchmarks/local_training.py runs both
# side by side; their times, and why 300 rows (thesis Table 8.1) stay
# factored: docs/performance.md, "Long local training: the dense layer's two
# forms".
FACTORED_MAX_ROWS = 1000

# Largest |T| for which a masked dense kernel is held sparse (gather/scatter
# cost grows with |T|; a per-client copy of the layer does not).
SPARSE_MAX = 16384

DENSE_FORMS = ("auto", "factored", "per-client")


class _Client(NamedTuple):
  """One client's local training, shared by the three forms.

  Attributes:
    traced: The forward pass for one mini-batch.
    loss_name: The model's loss.
    batch: ``batch(step_key) -> (x, y)``, the step's mini-batch.
    lr: eta.
    beta: Heavy-ball momentum, or None.
    step_keys: (steps, 2) the steps' keys.
  """

  traced: fast_apply.Traced
  loss_name: str
  batch: Callable
  lr: float | jax.Array
  beta: float | jax.Array | None
  step_keys: jax.Array

  def loss(self, params, xb, yb, dense=None):
    logits = fast_apply.evaluate(self.traced, params, xb, dense)
    return cross_entropy(logits, yb, self.loss_name)


def local_update(model, w: jax.Array, x: jax.Array, y: jax.Array, key: jax.Array, *,
                 steps: int, batch_size: int, lr: float | jax.Array,
                 grad_mask: jax.Array | None = None,
                 grad_indices: jax.Array | None = None,
                 only_indices: bool = False,
                 momentum: float | jax.Array | None = None,
                 optimizer: str = "sgd",
                 dense_form: str = "auto") -> jax.Array:
  """``local_sgd(model.loss, w, ...) - w`` for any traceable model, computed fast.

  Args:
    model: A :class:`~fedjax_dp.models.flat.FlatModel`.
    w: (n,) starting weights, the round's global model.
    x: (samples, ...) one client's examples.
    y: (samples,) labels, -1 for padding.
    key: The client's training key (batches as ``local_training.local_sgd``).
    steps: T_gd.
    batch_size: |B|.
    lr: eta.
    grad_mask: Optional (n,) bool; coordinates outside it do not move.
    grad_indices: Optional sorted, distinct indices of the True entries of
      ``grad_mask``; with at most ``SPARSE_MAX`` of them the large kernels
      move as vectors on those indices.
    only_indices: Return the update on ``grad_indices`` only.
    momentum: Optional heavy-ball momentum beta (``local_training.sgd``), without a
      mask only.
    optimizer: ``"sgd"``, or ``"adam"``: Adam's step is not linear in the
      gradients, so nothing is factored; each client trains its own copy of
      the weights (``local_training.local_train``) through the rewritten forward
      pass (per-client convolutions and pooling, as above).
    dense_form: Without a mask, how the large kernels train: ``factored``
      (shared weights and the steps' history), ``per-client`` (a copy per
      client) or ``auto``: factored up to ``FACTORED_MAX_ROWS`` history rows,
      else per-client.

  Returns:
    (n,) the client's update w_end - w, or its values on ``grad_indices``.

  Raises:
    ValueError: ``momentum`` with a ``grad_mask``, ``only_indices`` without
      ``grad_indices``, an unknown ``dense_form``, or a model with a
      ``train_apply_fn`` (dropout: trained by ``local_training.local_sgd``).
  """
  beta = _checked(model, grad_mask, grad_indices, only_indices, momentum, dense_form)

  def plain():
    w_end = local_training.local_train(model.loss, w, x, y, key, steps=steps, batch_size=batch_size,
                               optimizer=local_training.optimizer(optimizer, lr, momentum),
                               grad_mask=grad_mask)
    return (w_end - w)[grad_indices] if only_indices else w_end - w

  if optimizer != "sgd":
    return plain()
  try:
    return _sgd_update(model, w, x, y, key, steps, batch_size, lr, grad_mask, grad_indices,
                       only_indices, beta, dense_form)
  except jxi.Unsupported as e:  # a construct this JAX changed: the plain path
    jxi.warn_fallback(e, "training the model on the plain path")
    return plain()


def _sgd_update(model, w, x, y, key, steps, batch_size, lr,  # pylint: disable=too-many-arguments
                grad_mask, grad_indices, only_indices, beta, dense_form) -> jax.Array:
  """:func:`local_update`'s SGD through the rewritten forward pass."""
  num = x.shape[0]
  take = min(batch_size, num)
  count = local_training.num_examples(y)

  def batch(step_key):  # as local_training.local_train's batches
    idx = local_training.sample_batch(step_key, num, take, count)
    return x[idx], y[idx]

  traced = fast_apply.trace(model.apply_fn, model.shapes,
                            jax.ShapeDtypeStruct((take,) + x.shape[1:], x.dtype))
  sites = tuple(s for s in fast_apply.dense_sites(traced)
                if math.prod(s.shape) >= FACTOR_MIN_SIZE)
  c = _Client(traced, model.loss_name, batch, lr, beta, jax.random.split(key, steps))
  params = model.unflatten(w)
  if grad_mask is not None:
    if sites and grad_indices is not None and grad_indices.shape[0] <= SPARSE_MAX:
      return _sparse_masked_update(c, model, params, model.unflatten(grad_mask), sites,
                                   grad_indices, only_indices)
    delta = _per_client_update(c, params, model.unflatten(grad_mask))
  else:
    if dense_form == "auto":
      history = max((steps * s.rows for s in sites), default=0)
      dense_form = "factored" if history <= FACTORED_MAX_ROWS else "per-client"
    if sites and dense_form == "factored":
      delta = _factored_update(c, params, sites)
    else:
      delta = _per_client_update(c, params, None)
  flat = model.flatten(delta)
  return flat[grad_indices] if only_indices else flat


def _checked(model, grad_mask, grad_indices, only_indices, momentum, dense_form):
  """:func:`local_update`'s arguments checked; returns the momentum beta or None."""
  beta = None if momentum is None or (not isinstance(momentum, jax.Array)
                                      and momentum == 0) else momentum
  if beta is not None and grad_mask is not None:
    raise ValueError("the fast path trains momentum without a grad_mask only; the plain "
                     "path (from_flax(..., fast=False)) trains both")
  if only_indices and grad_indices is None:
    raise ValueError("only_indices needs grad_indices")
  if dense_form not in DENSE_FORMS:
    raise ValueError(f"unknown dense_form {dense_form!r}; choose one of {', '.join(DENSE_FORMS)}")
  if model.train_apply_fn is not None:
    raise ValueError(f"{model.name} has a training-mode forward pass (dropout), which the "
                     "fast path does not run; train it without local_update_fn")
  return beta


def _sgd(c: _Client, p: dict, g: dict, vel: dict | None):
  """One (heavy-ball) SGD step on a dict of parameters; returns (p, vel)."""
  if c.beta is not None:
    vel = {k: c.beta * vel[k] + g[k] for k in g}
    g = vel
  return {k: p[k] - c.lr * g[k] for k in p}, vel


def _factored_update(c: _Client, params: dict, sites) -> dict:
  """No mask: the large kernels in factored form (module docstring).

  Rows [t*r, (t+1)*r) of a site's (a_hist, d_hist) hold step t's inputs of
  the layer and -lr * its output gradients (r rows a step). With momentum
  beta, step u's gradient has moved the weights of step t > u by
  c(t - u) = (1 - beta^(t - u)) / (1 - beta) times its own step, so the
  history rows are weighted by c when they enter step t.
  """
  steps, beta = c.step_keys.shape[0], c.beta
  shared = {s.name: params[s.name] for s in sites}
  small0 = {k: v for k, v in params.items() if k not in shared}

  def weight(t, rows):
    """c(t - u) for every history row u < t, 0 for the rows not yet written."""
    row_step = jnp.arange(steps * rows) // rows
    ahead = (t - row_step).astype(jnp.float32)
    return jnp.where(row_step < t, (1 - beta ** ahead) / (1 - beta), 0.0)

  def loss(small, probes, hists, t, xb, yb):
    seen = {}

    def product(site):
      def fn(lhs):
        a = lhs.reshape(-1, site.shape[0])
        z = a @ shared[site.name] + probes[site.name]
        if hists is not None:
          a_hist, d_hist = hists[site.name]
          mix = a @ a_hist.T
          z = z + (mix if beta is None else mix * weight(t, site.rows)) @ d_hist
        seen[site.name] = a
        return z.reshape(lhs.shape[:-1] + (site.shape[1],))
      return fn

    value = c.loss(small, xb, yb, {s.eqn: product(s) for s in sites})
    return value, seen

  def step(small, vel, hists, t, step_key):
    xb, yb = c.batch(step_key)
    probes = {s.name: jnp.zeros((s.rows, s.shape[1]), jnp.float32) for s in sites}
    (g, g_out), seen = jax.grad(loss, argnums=(0, 1), has_aux=True)(
        small, probes, hists, t, xb, yb)
    small, vel = _sgd(c, small, g, vel)
    return small, vel, seen, {k: -c.lr * v for k, v in g_out.items()}

  vel0 = {k: jnp.zeros_like(v) for k, v in small0.items()}
  small, vel, a_now, d_now = step(small0, vel0, None, 0, c.step_keys[0])
  if steps == 1:  # the history is the step's own rows (jaxlib 0.11.2's XLA:CPU crashed
    # compiling zeros wholly overwritten by .at[].set in a cohort sharded over CPU devices)
    hists = {s.name: (a_now[s.name], d_now[s.name]) for s in sites}
  else:
    hists = {s.name: (jnp.zeros((steps * s.rows, s.shape[0]), jnp.float32).at[:s.rows].set(
        a_now[s.name]), jnp.zeros((steps * s.rows, s.shape[1]), jnp.float32).at[:s.rows].set(
            d_now[s.name])) for s in sites}
  if steps > 1:
    rows = {s.name: s.rows for s in sites}

    def body(carry, inp):
      small, vel, hists = carry
      t, step_key = inp
      small, vel, a_now, d_now = step(small, vel, hists, t, step_key)
      hists = {k: (jax.lax.dynamic_update_slice_in_dim(a, a_now[k], t * rows[k], 0),
                   jax.lax.dynamic_update_slice_in_dim(d, d_now[k], t * rows[k], 0))
               for k, (a, d) in hists.items()}
      return (small, vel, hists), None

    (small, _, hists), _ = jax.lax.scan(body, (small, vel, hists),
                                        (jnp.arange(1, steps), c.step_keys[1:]))
  delta = {k: small[k] - small0[k] for k in small0}
  for s in sites:
    a_hist, d_hist = hists[s.name]
    if beta is not None:
      d_hist = weight(steps, s.rows)[:, None] * d_hist
    delta[s.name] = a_hist.T @ d_hist
  return delta


def _sparse_masked_update(c: _Client, model, params: dict,  # pylint: disable=too-many-arguments
                          masks: dict, sites, grad_indices: jax.Array,
                          only_indices: bool) -> jax.Array:
  """A small mask T: each large kernel moves only on T,
  ``a @ W_k = a @ W + scatter(a[:, rows_T] v)``; returns the flat update
  (or its values on T)."""
  offsets = _offsets(model)
  shared = {s.name: params[s.name] for s in sites}
  small0 = {k: v for k, v in params.items() if k not in shared}
  on_site = {}
  for s in sites:
    start, size = offsets[s.name], math.prod(s.shape)
    inside = (grad_indices >= start) & (grad_indices < start + size)
    local = jnp.where(inside, grad_indices - start, 0)
    on_site[s.name] = (inside.astype(jnp.float32), local // s.shape[1], local % s.shape[1])
  keep = sum(k for k, _, _ in on_site.values())

  def loss(small, v, xb, yb):
    def product(site):
      inside, rows, cols = on_site[site.name]
      op = cohort_ops.sparse_product(site.shape[1])

      def fn(lhs):
        a = lhs.reshape(-1, site.shape[0])
        z = a @ shared[site.name] + op(a, inside * v, rows, cols)
        return z.reshape(lhs.shape[:-1] + (site.shape[1],))
      return fn

    return c.loss(small, xb, yb, {s.eqn: product(s) for s in sites})

  def step(carry, step_key):
    small, v = carry
    xb, yb = c.batch(step_key)
    g, g_v = jax.grad(loss, argnums=(0, 1))(small, v, xb, yb)
    g = {k: jnp.where(masks[k], g[k], 0.0) for k in g}
    return ({k: small[k] - c.lr * g[k] for k in small}, v - c.lr * keep * g_v), None

  v0 = jnp.zeros(grad_indices.shape, jnp.float32)
  (small, v), _ = jax.lax.scan(step, (small0, v0), c.step_keys)
  if only_indices:  # the update on T, without the n-vector
    rest = jnp.concatenate([jnp.ravel(small[k] - small0[k]) for k, _ in model.shapes
                            if k not in shared])
    at = grad_indices
    for s in sites:  # positions in `rest`: skip the kernels before each index
      start, size = offsets[s.name], math.prod(s.shape)
      at = at - jnp.where(grad_indices >= start + size, size, 0)
    return jnp.where(keep > 0, v, rest[jnp.clip(at, 0, rest.shape[0] - 1)])
  delta = {k: small[k] - small0[k] for k in small0}
  for s in sites:
    inside, rows, cols = on_site[s.name]
    delta[s.name] = jnp.zeros(s.shape, jnp.float32).at[rows, cols].add(inside * v)
  return model.flatten(delta)


def _per_client_update(c: _Client, params: dict, masks: dict | None) -> dict:
  """Every parameter the client's own after the first step (which still
  uses the shared weights)."""
  def step(carry, step_key):
    p, vel = carry
    xb, yb = c.batch(step_key)
    g = jax.grad(c.loss)(p, xb, yb)
    if masks is not None:
      g = {k: jnp.where(masks[k], g[k], 0.0) for k in g}
    return _sgd(c, p, g, vel), None

  vel0 = {k: jnp.zeros_like(v) for k, v in params.items()}
  carry, _ = step((params, vel0), c.step_keys[0])
  if c.step_keys.shape[0] > 1:
    carry, _ = jax.lax.scan(step, carry, c.step_keys[1:])
  return {k: carry[0][k] - params[k] for k in params}


def _offsets(model) -> dict[str, int]:
  """Each parameter's position in the flat vector."""
  offsets, offset = {}, 0
  for name, shape in model.shapes:
    offsets[name] = offset
    offset += math.prod(shape)
  return offsets
