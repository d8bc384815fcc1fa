"""Fast local training of the paper CNN for a whole cohort.

Computes the same update as ``client.local_sgd(paper_cnn().loss, ...)`` (same
batches for the same key, same SGD steps, same masking) but is written so
that ``vmap`` over clients turns it into the work a CPU does well:

* Convolutions are native (``lax.conv``), one client at a time. ``vmap`` of a
  convolution whose weights differ per client would become a grouped
  convolution, which XLA runs an order of magnitude slower; a
  ``custom_vmap`` rule maps them over the clients instead (:func:`conv5x5`).
  The backward pass is two more native convolutions: the input gradient
  correlates with the flipped kernel, the kernel gradient is a convolution
  whose batch is the input channels (no im2col patches, which XLA copies
  slowly).
* Max pooling, bias and ReLU are one op with a hand-written backward
  (:func:`pool_bias_relu`): ``relu(maxpool(z) + b) == maxpool(relu(z + b))``
  exactly, and the gradient splits ties as JAX's ``reduce_max`` does.
* The 1,605,632-weight dense layer keeps the *global* weights for every
  client: a client's weights after s steps are ``W - lr * sum_t A_t^T D_t``
  (A_t its activations, D_t the output gradients of step t, 10 rows each), so
  ``x @ W_k = x @ W - lr * (x @ A^T) @ D``. ``x @ W`` over all clients is one
  large matrix product, and no client ever holds a 6.4 MB copy of the layer.
  Each step multiplies by the whole history (steps x |B| rows), so this
  form's cost grows with the square of the steps: beyond
  ``FACTORED_MAX_ROWS`` rows (long local training, thesis Table 8.3's 3,000
  steps, or pooled attackers) each client holds its own copy of the layer
  instead (``dense_form``; ``benchmarks/local_training.py`` times both).
  With a gradient mask (FL-TOP, UAI Alg. 2) the masked update has no such
  factorisation: for a small T (at most ``SPARSE_MAX`` entries, e.g. r =
  0.5%) only the layer's entries in T move, held as a vector next to the
  shared W (gathers and scatters); for a larger T the layer is per client
  after the first step (which still uses the shared weights).

All of it is plain JAX: the same function runs without ``vmap`` (one client)
and under nested ``vmap``.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
from jax.custom_batching import custom_vmap

from fedjax_dp import client
from fedjax_dp.models.flat import cross_entropy

_DN = ("NHWC", "HWIO", "NHWC")
_PAD = ((0, 0), (2, 2), (2, 2), (0, 0))

# Largest |T| for which a masked dense layer is held sparse (gather/scatter
# cost grows with |T|; a per-client copy of the layer does not).
SPARSE_MAX = 16384

# Most history rows (steps x |B|) trained with the dense layer in factored
# form. benchmarks/local_training.py, both forms side by side on a 2-core
# EPYC (docs/performance.md): per-client copies take 1.74x the factored time
# at 100 clients x 5 steps (50 rows), 0.84x at 100 x 30 (300 rows: kept
# factored, the gain within a loaded machine's noise), 0.59x at 1 x 200 and
# 0.48x at 10 x 300 (thesis Table 8.3's reduced setting, 3,000 rows).
FACTORED_MAX_ROWS = 1000
DENSE_FORMS = ("auto", "factored", "per-client")

# Parameters every client holds itself (57,738 of the 1,663,370 weights).
SMALL = ("conv1_w", "conv1_b", "conv2_w", "conv2_b", "dense1_b", "dense2_w", "dense2_b")


def _conv_raw(x: jax.Array, w: jax.Array) -> jax.Array:
  """5x5 'same' convolution, x (B, H, W, C), w (5, 5, C, O)."""
  return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=_DN)


def _conv_dx_raw(g: jax.Array, w: jax.Array) -> jax.Array:
  """Input gradient: correlation of g (B, H, W, O) with the flipped kernel."""
  return _conv_raw(g, jnp.flip(w, (0, 1)).transpose(0, 1, 3, 2))


def _conv_dw_raw(x: jax.Array, g: jax.Array) -> jax.Array:
  """Kernel gradient ``dw[i,j,c,o] = sum_{b,y,x} xpad[b,y+i,x+j,c] g[b,y,x,o]``.

  A 'valid' convolution of the padded input, its channels as the batch and
  its examples as the features, with g as a (H, W, B, O) kernel.
  """
  lhs = jnp.pad(x, _PAD).transpose(3, 1, 2, 0)  # (C, H+4, W+4, B)
  rhs = g.transpose(1, 2, 0, 3)  # (H, W, B, O)
  out = jax.lax.conv_general_dilated(lhs, rhs, (1, 1), "VALID", dimension_numbers=_DN)
  return out.transpose(1, 2, 0, 3)  # (5, 5, C, O)


def _per_client(raw):
  """``raw(a, b)`` whose ``vmap`` runs one client at a time (``lax.map``)."""
  fn = custom_vmap(raw)

  @fn.def_vmap
  def rule(axis_size, in_batched, a, b):
    a_batched, b_batched = in_batched
    if a_batched and not b_batched:  # shared weights (e.g. the first step)
      out = jax.lax.map(lambda ai: fn(ai, b), a)
    elif b_batched and not a_batched:
      out = jax.lax.map(lambda bi: fn(a, bi), b)
    else:
      out = jax.lax.map(lambda t: fn(*t), (a, b))
    del axis_size
    return out, True

  return fn


_conv = _per_client(_conv_raw)
_conv_dx = _per_client(_conv_dx_raw)
_conv_dw = _per_client(_conv_dw_raw)


@jax.custom_vjp
def conv5x5(x: jax.Array, w: jax.Array) -> jax.Array:
  """5x5 'same' convolution (NHWC, HWIO) with per-client batching under vmap."""
  return _conv(x, w)


def _conv5x5_fwd(x, w):
  return _conv(x, w), (x, w)


def _conv5x5_bwd(res, g):
  x, w = res
  return _conv_dx(g, w), _conv_dw(x, g)


conv5x5.defvjp(_conv5x5_fwd, _conv5x5_bwd)


@jax.custom_vjp
def conv5x5_input(x: jax.Array, w: jax.Array) -> jax.Array:
  """:func:`conv5x5` for the data layer: no input gradient is computed (zero)."""
  return _conv(x, w)


def _conv5x5_input_bwd(res, g):
  x, w = res
  return jnp.zeros_like(x), _conv_dw(x, g)


conv5x5_input.defvjp(_conv5x5_fwd, _conv5x5_input_bwd)


def _corners(z: jax.Array) -> list[jax.Array]:
  """The four entries of every 2x2 window, as strided slices (no reductions)."""
  return [z[:, i::2, j::2, :] for i in (0, 1) for j in (0, 1)]


def _interleave(parts: list[jax.Array]) -> jax.Array:
  """Inverse of :func:`_corners`: four (B, H, W, C) arrays to (B, 2H, 2W, C)."""
  b, h, w, c = parts[0].shape
  rows = [jnp.stack(parts[2 * i:2 * i + 2], axis=3) for i in (0, 1)]  # (B, H, W, 2, C)
  return jnp.stack(rows, axis=2).reshape(b, 2 * h, 2 * w, c)


@jax.custom_vjp
def pool_bias_relu(z: jax.Array, b: jax.Array) -> jax.Array:
  """``relu(maxpool2x2(z) + b)``, equal to ``maxpool2x2(relu(z + b))``.

  Max and ReLU commute and adding a per-channel bias commutes with the max
  (rounding is monotone), so the values are those of the usual order; the
  gradient splits ties equally among the maxima, as JAX's ``reduce_max``.
  """
  a, b_, c, d = _corners(z)
  return jax.nn.relu(jnp.maximum(jnp.maximum(a, b_), jnp.maximum(c, d)) + b)


def _pbr_fwd(z, b):
  out = pool_bias_relu(z, b)
  return out, (z, b, out)


def _pbr_bwd(res, g):
  z, b, out = res
  corners = _corners(z)
  m = jnp.maximum(jnp.maximum(corners[0], corners[1]), jnp.maximum(corners[2], corners[3]))
  gm = jnp.where(out > 0, g, 0.0)  # ReLU: zero gradient at 0, as jax.nn.relu
  hits = [(corner == m).astype(z.dtype) for corner in corners]
  share = gm / (hits[0] + hits[1] + hits[2] + hits[3])
  return _interleave([hit * share for hit in hits]), jnp.sum(gm, axis=(0, 1, 2)).astype(b.dtype)


pool_bias_relu.defvjp(_pbr_fwd, _pbr_bwd)


def _sparse_raw(a, v, rows, cols, out_dim):
  """``z[b, j] = sum_t a[b, rows_t] v_t [cols_t == j]`` for one client."""
  return jnp.zeros((a.shape[0], out_dim), a.dtype).at[:, cols].add(a[:, rows] * v)


def _sparse_grads_raw(a, v, g, rows, cols):  # pylint: disable=too-many-arguments
  """(da, dv) of :func:`_sparse_raw` for the output gradient g."""
  dv = jnp.sum(a[:, rows] * g[:, cols], axis=0)
  da = jnp.zeros(a.shape, a.dtype).at[:, rows].add(g[:, cols] * v)
  return da, dv


def _cohort_major(a):
  """(K, B, D) -> (D, K, B): the gathered axis leading, rows contiguous."""
  return a.transpose(2, 0, 1)


def _sparse_product(out_dim: int):
  """``product(a, v, rows, cols)``: the sparse layer ``a @ E(v)`` and its VJP.

  E is zero off (rows, cols) and v on them. Under ``vmap`` over clients (a
  and v batched, the indices shared) the gathers and scatters move whole
  rows of (D, clients * batch) arrays instead of single numbers.
  """
  fwd_op = custom_vmap(lambda a, v, rows, cols: _sparse_raw(a, v, rows, cols, out_dim))
  grads_op = custom_vmap(_sparse_grads_raw)

  def batched(axis_size, in_batched, *args):
    return [x if b else jnp.broadcast_to(x, (axis_size,) + x.shape)
            for x, b in zip(args, in_batched)]

  @fwd_op.def_vmap
  def _fwd_rule(axis_size, in_batched, a, v, rows, cols):
    if in_batched[2] or in_batched[3]:  # per-client indices: one client at a time
      out = jax.lax.map(lambda t: fwd_op(*t), tuple(batched(axis_size, in_batched, a, v,
                                                             rows, cols)))
      return out, True
    a, v = batched(axis_size, in_batched[:2], a, v)
    picked = _cohort_major(a)[rows] * v.T[:, :, None]  # (T, K, B)
    z = jnp.zeros((out_dim,) + picked.shape[1:], a.dtype).at[cols].add(picked)
    return z.transpose(1, 2, 0), True

  @grads_op.def_vmap
  def _grads_rule(axis_size, in_batched, a, v, g, rows, cols):
    if in_batched[3] or in_batched[4]:
      out = jax.lax.map(lambda t: grads_op(*t), tuple(batched(axis_size, in_batched, a, v,
                                                               g, rows, cols)))
      return out, (True, True)
    a, v, g = batched(axis_size, in_batched[:3], a, v, g)
    g_cols = _cohort_major(g)[cols]  # (T, K, B)
    dv = jnp.sum(_cohort_major(a)[rows] * g_cols, axis=2).T
    da = jnp.zeros((a.shape[2],) + g_cols.shape[1:], a.dtype).at[rows].add(
        g_cols * v.T[:, :, None])
    return (da.transpose(1, 2, 0), dv), (True, True)

  @jax.custom_vjp
  def product(a, v, rows, cols):
    return fwd_op(a, v, rows, cols)

  def fwd(a, v, rows, cols):
    return fwd_op(a, v, rows, cols), (a, v, rows, cols)

  def bwd(res, g):
    a, v, rows, cols = res
    da, dv = grads_op(a, v, g, rows, cols)
    return da, dv, None, None

  product.defvjp(fwd, bwd)
  return product


def features(small: dict, x: jax.Array) -> jax.Array:
  """The two convolution blocks: (B, 28, 28, 1) images to (B, 3136)."""
  h = pool_bias_relu(conv5x5_input(x, small["conv1_w"].reshape(5, 5, 1, 32)),
                     small["conv1_b"])
  h = pool_bias_relu(conv5x5(h, small["conv2_w"].reshape(5, 5, 32, 64)), small["conv2_b"])
  return h.reshape(h.shape[0], -1)


def _offset(model, name: str) -> int:
  """Position of parameter ``name`` in the flat vector."""
  offset = 0
  for key, shape in model.shapes:
    if key == name:
      return offset
    offset += math.prod(shape)
  raise KeyError(name)


def _head(small: dict, z3: jax.Array) -> jax.Array:
  return jax.nn.relu(z3) @ small["dense2_w"] + small["dense2_b"]


def _cross_entropy(logits: jax.Array, y: jax.Array) -> jax.Array:
  return cross_entropy(logits, y, "softmax_ce")


def cnn_local_update(model, w: jax.Array, x: jax.Array, y: jax.Array, key: jax.Array, *,
                     steps: int, batch_size: int, lr: float,
                     grad_mask: jax.Array | None = None,
                     grad_indices: jax.Array | None = None,
                     only_indices: bool = False,
                     momentum: float | None = None,
                     dense_form: str = "auto") -> jax.Array:
  """``local_sgd(model.loss, w, ...) - w`` for the paper CNN, computed fast.

  Args:
    model: The paper CNN (``fedjax_dp.models.paper_cnn``).
    w: (n,) starting weights, the round's global model.
    x: (samples, 28, 28, 1) float images of one client.
    y: (samples,) labels.
    key: The client's training key (batches as ``client.local_sgd``).
    steps: T_gd.
    batch_size: |B|.
    lr: eta.
    grad_mask: Optional (n,) bool; coordinates outside it do not move.
    grad_indices: Optional sorted, distinct indices of the True entries of
      ``grad_mask``. With at most ``SPARSE_MAX`` of them the dense layer's
      moving weights are held as a vector on those indices (gather and
      scatter instead of a per-client copy of the layer).
    only_indices: Return the update on ``grad_indices`` only.
    momentum: Optional heavy-ball momentum beta (``client.sgd``: ``v <- beta
      v + g; w <- w - lr v``, the buffer starting at zero); without a mask
      only (Fed-SMP trains the full model, then sparsifies).
    dense_form: Without a mask, how the dense layer trains: ``factored``
      (shared weights and the steps' history), ``per-client`` (a copy per
      client, no momentum) or ``auto``: factored up to ``FACTORED_MAX_ROWS``
      history rows or with momentum, else per-client. The same update either
      way, up to float32 round-off.

  Returns:
    (n,) the client's update w_end - w, or its values on ``grad_indices``.

  Raises:
    ValueError: ``momentum`` with a ``grad_mask`` or ``dense_form="per-client"``,
      or an unknown ``dense_form``.
  """
  beta = None if momentum is None or momentum == 0 else momentum
  if beta is not None and grad_mask is not None:
    raise ValueError("momentum is supported without grad_mask only")
  if dense_form not in DENSE_FORMS:
    raise ValueError(f"unknown dense_form {dense_form!r}; choose one of {', '.join(DENSE_FORMS)}")
  if beta is not None and dense_form == "per-client":
    raise ValueError("momentum needs the factored dense layer")
  params = model.unflatten(w)
  num = x.shape[0]
  take = min(batch_size, num)
  masks = None if grad_mask is None else model.unflatten(grad_mask)

  count = client.num_examples(y)

  def batch(step_key):  # as client.local_train's batches
    idx = client.sample_batch(step_key, num, take, count)
    return x[idx], y[idx]

  def sgd(p, g):
    if masks is not None:
      g = {k: jnp.where(masks[k], g[k], 0.0) for k in g}
    return {k: p[k] - lr * g[k] for k in p}

  c = _Client({k: params[k] for k in SMALL}, params["dense1_w"], batch, sgd, lr, take,
              jax.random.split(key, steps))
  if dense_form == "auto":
    long = beta is None and steps * take > FACTORED_MAX_ROWS
    dense_form = "per-client" if long else "factored"
  if masks is None and dense_form == "factored":
    delta = _factored_update(c, beta)
  elif masks is not None and grad_indices is not None and grad_indices.shape[0] <= SPARSE_MAX:
    return _sparse_masked_update(c, model, grad_indices, only_indices)
  else:
    delta = _per_client_update(c)
  flat = model.flatten(delta)
  return flat[grad_indices] if only_indices else flat


class _Client(NamedTuple):
  """One client's local training, shared by the three dense-layer forms.

  Attributes:
    small0: The starting small parameters (``SMALL``).
    w3: The global dense layer (1,605,632 weights).
    batch: ``batch(step_key) -> (x, y)``, the step's mini-batch.
    sgd: ``sgd(params, grads) -> params`` (masked where the scheme masks).
    lr: eta.
    take: Batch size.
    step_keys: (steps, 2) the steps' keys.
  """

  small0: dict
  w3: jax.Array
  batch: Callable
  sgd: Callable
  lr: float | jax.Array
  take: int
  step_keys: jax.Array


def _factored_update(c: _Client, beta: float | None) -> dict:
  """No mask: the dense layer in factored form (module docstring).

  Rows [t*take, (t+1)*take) of (a_hist, d_hist) hold step t's activations
  and -lr * output gradients. With momentum beta, step u's gradient has moved
  the weights of step t > u by c(t - u) = (1 - beta^(t - u)) / (1 - beta)
  times its own step, so the history rows are weighted by c when they enter
  step t.
  """
  steps, take, w3 = c.step_keys.shape[0], c.take, c.w3
  row_step = jnp.arange(steps * take) // take

  def weight(t):
    """c(t - u) for every history row u < t, 0 for the rows not yet written."""
    ahead = (t - row_step).astype(w3.dtype)
    return jnp.where(row_step < t, (1 - beta ** ahead) / (1 - beta), 0.0)

  def loss(small, probe, a_hist, d_hist, t, xb, yb):
    a3 = features(small, xb)
    z3 = a3 @ w3 + small["dense1_b"] + probe
    if a_hist is not None:
      mix = a3 @ a_hist.T
      z3 = z3 + (mix if beta is None else mix * weight(t)) @ d_hist
    return _cross_entropy(_head(small, z3), yb), a3

  def step(small, vel, a_hist, d_hist, t, step_key):
    xb, yb = c.batch(step_key)
    probe = jnp.zeros((take, w3.shape[1]), w3.dtype)
    (g, g_z3), a3 = jax.grad(loss, argnums=(0, 1), has_aux=True)(
        small, probe, a_hist, d_hist, t, xb, yb)
    if beta is not None:  # the small parameters' own momentum buffer
      vel = {k: beta * vel[k] + g[k] for k in g}
      g = vel
    return c.sgd(small, g), vel, a3, -c.lr * g_z3

  vel0 = {k: jnp.zeros_like(v) for k, v in c.small0.items()}
  small, vel, a3, d3 = step(c.small0, vel0, None, None, 0, c.step_keys[0])
  if steps > 1:
    a_hist = jnp.zeros((steps * take, w3.shape[0]), w3.dtype).at[:take].set(a3)
    d_hist = jnp.zeros((steps * take, w3.shape[1]), w3.dtype).at[:take].set(d3)

    def body(carry, inp):
      small, vel, a_hist, d_hist = carry
      t, step_key = inp
      small, vel, a3, d3 = step(small, vel, a_hist, d_hist, t, step_key)
      a_hist = jax.lax.dynamic_update_slice_in_dim(a_hist, a3, t * take, 0)
      d_hist = jax.lax.dynamic_update_slice_in_dim(d_hist, d3, t * take, 0)
      return (small, vel, a_hist, d_hist), None

    (small, _, a3, d3), _ = jax.lax.scan(body, (small, vel, a_hist, d_hist),
                                         (jnp.arange(1, steps), c.step_keys[1:]))
  delta = {k: small[k] - c.small0[k] for k in SMALL}
  delta["dense1_w"] = a3.T @ (d3 if beta is None else weight(steps)[:, None] * d3)
  return delta


def _sparse_masked_update(c: _Client, model, grad_indices: jax.Array,
                          only_indices: bool) -> jax.Array:
  """A small mask T: the dense layer moves only on T,
  ``x @ W_k = x @ W + scatter(x[:, i_T] v)``; returns the flat update (or
  its values on T)."""
  w3 = c.w3
  offset = _offset(model, "dense1_w")
  size = w3.shape[0] * w3.shape[1]
  inside = (grad_indices >= offset) & (grad_indices < offset + size)
  local = jnp.where(inside, grad_indices - offset, 0)
  rows, cols = local // w3.shape[1], local % w3.shape[1]
  keep = inside.astype(w3.dtype)
  product = _sparse_product(w3.shape[1])

  def loss(small, v, xb, yb):
    a3 = features(small, xb)
    z3 = a3 @ w3 + small["dense1_b"] + product(a3, keep * v, rows, cols)
    return _cross_entropy(_head(small, z3), yb)

  def step(carry, step_key):
    small, v = carry
    xb, yb = c.batch(step_key)
    g, g_v = jax.grad(loss, argnums=(0, 1))(small, v, xb, yb)
    return (c.sgd(small, g), v - c.lr * keep * g_v), None

  v0 = jnp.zeros(grad_indices.shape, w3.dtype)
  (small, v), _ = jax.lax.scan(step, (c.small0, v0), c.step_keys)
  if only_indices:  # the update on T, without the n-vector
    rest = jnp.concatenate([jnp.ravel(small[k] - c.small0[k]) for k, _ in model.shapes
                            if k != "dense1_w"])
    at = jnp.where(grad_indices < offset, grad_indices, grad_indices - size)
    return jnp.where(inside, v, rest[jnp.clip(at, 0, rest.shape[0] - 1)])
  delta = {k: small[k] - c.small0[k] for k in SMALL}
  delta["dense1_w"] = jnp.zeros((size,), w3.dtype).at[local].add(keep * v).reshape(w3.shape)
  return model.flatten(delta)


def _per_client_update(c: _Client) -> dict:
  """A large mask or a long training: the dense layer is the client's own
  after the first step (which still uses the shared weights)."""
  def loss(p, xb, yb):
    z3 = features(p, xb) @ p["dense1_w"] + p["dense1_b"]
    return _cross_entropy(_head(p, z3), yb)

  def step(p, step_key):
    xb, yb = c.batch(step_key)
    return c.sgd(p, jax.grad(loss)(p, xb, yb)), None

  start = dict(c.small0, dense1_w=c.w3)
  p, _ = step(start, c.step_keys[0])
  if c.step_keys.shape[0] > 1:
    p, _ = jax.lax.scan(step, p, c.step_keys[1:])
  return {k: p[k] - start[k] for k in start}
