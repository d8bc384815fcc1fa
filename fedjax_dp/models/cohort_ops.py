"""Convolution and max pooling that stay fast under ``vmap`` over a cohort.

Every client of a round trains its own copy of the model, so under ``vmap``
over the cohort a convolution's kernel differs per client. JAX's batching
rule turns that into one grouped convolution (a group per client), and the
convolutions of its reverse mode into transposed-layout convolutions; XLA's
CPU backend runs both an order of magnitude slower than plain convolutions
(measured in ``benchmarks/models.py``; docs/performance.md). The ops here
compute the same values but batch differently:

* :func:`conv`: a ``custom_vmap`` rule folds a shared kernel's cohort into
  the batch, and batches per-client kernels as the platform does best
  (:func:`cohort_batching`): on a CPU one client at a time (``lax.map``),
  elsewhere (``GPU_BATCHING``) as one batched matrix product over the
  cohort (every output position's receptive field gathered, then one
  product per client; JAX's own rule, a grouped convolution, has a slow
  backward pass on CUDA, jax-ml/jax#13800). Two more GPU ways
  (``BATCHINGS``): "patches" gathers the receptive fields with one 0/1
  convolution instead of a concatenation of slices, "grouped" runs the
  forward pass and the input gradient as grouped convolutions and only the
  kernel gradient as products. Lowered for CUDA they ask for the same
  products and far less data movement than "product"
  (``benchmarks/lowered_traffic.py``, before XLA's fusion); which runs
  fastest is for ``benchmarks/gpu_suite.sh`` to measure, not measured on a
  GPU so far. Its backward pass is
  two convolutions in the canonical NHWC / HWIO layout (the input gradient
  correlates with the flipped kernel, the kernel gradient is a convolution
  whose batch is the input channels), or, batched as products, the
  transposes of the forward product.
* :func:`max_pool`: non-overlapping windows as a reshape and a max, whose
  backward pass scatters to the saved position of each window's maximum,
  instead of ``reduce_window``'s select-and-scatter.

Both work for any number of spatial dimensions and compute what
``lax.conv_general_dilated`` and ``lax.reduce_window`` (``nn.Conv``,
``nn.max_pool``) compute. ``fedjax_dp.models.fast_apply`` puts them in
place of those primitives in any model's forward pass.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
from typing import Sequence

import jax
import jax.numpy as jnp
from jax import lax
from jax.custom_batching import custom_vmap

Padding = tuple[tuple[int, int], ...]


def canonical_dimension_numbers(spatial: int) -> lax.ConvDimensionNumbers:
  """NHWC inputs and outputs, HWIO kernels, for ``spatial`` spatial dims."""
  lhs = (0, spatial + 1) + tuple(range(1, spatial + 1))
  rhs = (spatial + 1, spatial) + tuple(range(spatial))
  return lax.ConvDimensionNumbers(lhs, rhs, lhs)


def _dilate(shape: Sequence[int], dilation: Sequence[int]) -> tuple[int, ...]:
  return tuple(0 if s == 0 else 1 + d * (s - 1) for s, d in zip(shape, dilation))


class ConvSpec(tuple):
  """Hashable (strides, padding, lhs dilation, rhs dilation, precision)."""

  __slots__ = ()

  def __new__(cls, strides, padding, lhs_dilation, rhs_dilation, precision=None):
    return super().__new__(cls, (tuple(strides), tuple(tuple(p) for p in padding),
                                 tuple(lhs_dilation), tuple(rhs_dilation), precision))

  strides = property(lambda self: self[0])
  padding = property(lambda self: self[1])
  lhs_dilation = property(lambda self: self[2])
  rhs_dilation = property(lambda self: self[3])
  precision = property(lambda self: self[4])


def _conv_raw(x: jax.Array, w: jax.Array, spec: ConvSpec) -> jax.Array:
  """One client's convolution, x (B, *spatial, C), w (*window, C, O)."""
  return lax.conv_general_dilated(x, w, spec.strides, spec.padding, spec.lhs_dilation,
                                  spec.rhs_dilation,
                                  dimension_numbers=canonical_dimension_numbers(x.ndim - 2),
                                  precision=spec.precision)


def _conv_dx_raw(g: jax.Array, w: jax.Array, in_spatial: tuple[int, ...],
                 spec: ConvSpec) -> jax.Array:
  """Input gradient: g correlated with the flipped kernel, in/out swapped in memory."""
  nd = g.ndim - 2
  window = _dilate(w.shape[:nd], spec.rhs_dilation)
  out = _dilate(g.shape[1:-1], spec.strides)
  dilated_in = _dilate(in_spatial, spec.lhs_dilation)
  before = [k - lo - 1 for k, (lo, _) in zip(window, spec.padding)]
  after = [i + k - 1 - o - b for i, k, o, b in zip(dilated_in, window, out, before)]
  flipped = jnp.flip(w, tuple(range(nd))).swapaxes(nd, nd + 1)
  return lax.conv_general_dilated(g, flipped, spec.lhs_dilation, list(zip(before, after)),
                                  spec.strides, spec.rhs_dilation,
                                  dimension_numbers=canonical_dimension_numbers(nd),
                                  precision=spec.precision)


def _conv_dw_raw(x: jax.Array, g: jax.Array, window: tuple[int, ...],
                 spec: ConvSpec) -> jax.Array:
  """Kernel gradient: a convolution of x with g, x's channels as the batch."""
  nd = x.ndim - 2
  out = _dilate(g.shape[1:-1], spec.strides)
  dilated_in = _dilate(x.shape[1:-1], spec.lhs_dilation)
  dilated_window = _dilate(window, spec.rhs_dilation)
  pads = [(lo, o - i + k - lo - 1)
          for (lo, _), o, i, k in zip(spec.padding, out, dilated_in, dilated_window)]
  spatial = tuple(range(1, nd + 1))
  lhs = x.transpose((nd + 1,) + spatial + (0,))  # (C, *spatial, B)
  rhs = g.transpose(spatial + (0, nd + 1))  # (*spatial, B, O)
  dw = lax.conv_general_dilated(lhs, rhs, spec.rhs_dilation, pads, spec.lhs_dilation,
                                spec.strides, dimension_numbers=canonical_dimension_numbers(nd),
                                precision=spec.precision)
  return dw.transpose(spatial + (0, nd + 1))  # (*window, C, O)


def _patches(x: jax.Array, window: tuple[int, ...], spec: ConvSpec) -> jax.Array:
  """Every output position's receptive field: (B, *out, prod(window) * C).

  The entries are ordered window offset first, then channel, as a (*window,
  C, O) kernel reshaped to (-1, O) orders its rows. Built from one pad (the
  input dilation and padding; negative padding crops) and one strided slice
  per window offset: data movement only, so exact on every platform.
  """
  cfg = [(0, 0, 0)] + [(lo, hi, d - 1) for (lo, hi), d in zip(spec.padding, spec.lhs_dilation)]
  padded = lax.pad(x, jnp.zeros((), x.dtype), cfg + [(0, 0, 0)])
  inner = padded.shape[1:-1]
  out = [max((size - k) // s + 1, 0) for size, k, s in
         zip(inner, _dilate(window, spec.rhs_dilation), spec.strides)]
  columns = []
  for offset in itertools.product(*(range(k) for k in window)):
    start = [o * d for o, d in zip(offset, spec.rhs_dilation)]
    limit = [b + (n - 1) * s + 1 for b, n, s in zip(start, out, spec.strides)]
    columns.append(lax.slice(padded, [0, *start, 0], [padded.shape[0], *limit, padded.shape[-1]],
                             [1, *spec.strides, 1]))
  return jnp.concatenate(columns, axis=-1)


def _conv_product(x: jax.Array, w: jax.Array, spec: ConvSpec) -> jax.Array:
  """:func:`_conv_raw` as a matrix product of :func:`_patches` with the kernel."""
  nd = x.ndim - 2
  return jnp.einsum("...f,fo->...o", _patches(x, w.shape[:nd], spec),
                    w.reshape(-1, w.shape[-1]), precision=spec.precision)


def _conv_dx_product(g: jax.Array, w: jax.Array, in_spatial: tuple[int, ...],
                     spec: ConvSpec) -> jax.Array:
  """:func:`_conv_dx_raw` as the transpose of :func:`_conv_product` in x."""
  x = jax.ShapeDtypeStruct((g.shape[0],) + in_spatial + (w.shape[-2],), g.dtype)
  return jax.linear_transpose(lambda x: _conv_product(x, w, spec), x)(g)[0]


def _conv_dw_product(x: jax.Array, g: jax.Array, window: tuple[int, ...],
                     spec: ConvSpec) -> jax.Array:
  """:func:`_conv_dw_raw` as the product of the patches with g (all positions summed)."""
  dw = _fields_times_grad(_patches(x, window, spec), g, spec)
  return dw.reshape(window + (x.shape[-1], g.shape[-1]))


def _fields_times_grad(cols: jax.Array, g: jax.Array, spec: ConvSpec) -> jax.Array:
  """(F, O): the receptive fields ``cols`` (..., F) times the output gradient
  ``g`` (..., O), summed over every batch element and output position."""
  return jnp.einsum("...f,...o->fo", cols.reshape(-1, cols.shape[-1]),
                    g.reshape(-1, g.shape[-1]), precision=spec.precision)


# Name scope of the convolutions with a 0/1 kernel that gather receptive
# fields (data movement, not products; benchmarks/lowered_traffic.py counts
# them apart by it).
PATCHES_SCOPE = "cohort_patches"


def _patches_by_conv(x: jax.Array, window: tuple[int, ...], spec: ConvSpec) -> jax.Array:
  """:func:`_patches` as one convolution with a 0/1 kernel: (B, *out, C * prod(window)).

  The entries are ordered channel first, then window offset (as
  ``lax.conv_general_dilated_patches`` orders them). At the highest
  precision, so that every entry is a copy of one input (a TF32 or bf16
  pass would round it): data movement, exact on every platform. Its
  transpose, the receptive fields' sum back onto the input, is a transposed
  convolution with the same kernel, not a sum of scattered slices.
  """
  with jax.named_scope(PATCHES_SCOPE):
    return lax.conv_general_dilated_patches(
        x, window, spec.strides, spec.padding, spec.lhs_dilation, spec.rhs_dilation,
        dimension_numbers=canonical_dimension_numbers(x.ndim - 2),
        precision=lax.Precision.HIGHEST)


def _channel_major(w: jax.Array) -> jax.Array:
  """A (*window, C, O) kernel as (C * prod(window), O), the rows in
  :func:`_patches_by_conv`'s order."""
  nd = w.ndim - 2
  return w.transpose((nd,) + tuple(range(nd)) + (nd + 1,)).reshape(-1, w.shape[-1])


def _conv_patches(x: jax.Array, w: jax.Array, spec: ConvSpec) -> jax.Array:
  """:func:`_conv_raw` as a matrix product of :func:`_patches_by_conv` with the kernel."""
  nd = x.ndim - 2
  return jnp.einsum("...f,fo->...o", _patches_by_conv(x, w.shape[:nd], spec), _channel_major(w),
                    precision=spec.precision)


def _conv_dx_patches(g: jax.Array, w: jax.Array, in_spatial: tuple[int, ...],
                     spec: ConvSpec) -> jax.Array:
  """:func:`_conv_dx_raw` as the transpose of :func:`_conv_patches` in x: a
  product, then the patch convolution's transpose."""
  x = jax.ShapeDtypeStruct((g.shape[0],) + in_spatial + (w.shape[-2],), g.dtype)
  return jax.linear_transpose(lambda x: _conv_patches(x, w, spec), x)(g)[0]


def _conv_dw_patches(x: jax.Array, g: jax.Array, window: tuple[int, ...],
                     spec: ConvSpec) -> jax.Array:
  """:func:`_conv_dw_raw` as the product of :func:`_patches_by_conv` with g."""
  dw = _fields_times_grad(_patches_by_conv(x, window, spec), g, spec)
  nd = x.ndim - 2  # rows (C, *window) back to (*window, C)
  dw = dw.reshape((x.shape[-1],) + window + (g.shape[-1],))
  return dw.transpose(tuple(range(1, nd + 1)) + (0, nd + 1))


# How per-client kernels are batched over the cohort:
# * "map": lax.map, one client at a time (the CPU's way);
# * "vmap": JAX's own batching rule, all three convolutions grouped (a group
#   per client; the kernel gradient a grouped convolution whose window is
#   the output gradient);
# * "product": receptive fields gathered by a pad and one strided slice per
#   window offset (concatenated), times each client's kernel: one batched
#   matrix product; the gradients its transposes (a sum of shifted slices);
# * "patches": as "product", the receptive fields gathered by one
#   convolution with a 0/1 kernel (lax.conv_general_dilated_patches), the
#   input gradient's sum back by its transposed convolution;
# * "grouped": the forward pass and the input gradient grouped convolutions
#   (as "vmap"), the kernel gradient products of "patches"' receptive fields.
# "auto" is "map" on a CPU and GPU_BATCHING elsewhere, chosen when the
# program is lowered.
BATCHINGS = ("auto", "map", "vmap", "product", "patches", "grouped")
GPU_BATCHING = "product"
_batching = "auto"


def batching() -> str:
  """The cohort batching in force (one of ``BATCHINGS``)."""
  return _batching


@contextlib.contextmanager
def cohort_batching(mode: str):
  """Batch per-client convolution kernels with ``mode`` (one of ``BATCHINGS``)
  in what is traced inside the block.

  The default, "auto", picks per platform when the program is lowered.
  Jitted functions traced before keep their batching: call
  ``jax.clear_caches()`` when switching between compiled programs
  (``benchmarks/throughput.py --batching`` compares the modes side by side).
  """
  global _batching  # pylint: disable=global-statement
  if mode not in BATCHINGS:
    raise ValueError(f"cohort batching must be one of {', '.join(BATCHINGS)}, got {mode!r}")
  before, _batching = _batching, mode
  try:
    yield
  finally:
    _batching = before


def _per_client(raw, others: dict, folds_batch: bool):
  """``raw(a, b)`` whose ``vmap`` batches a per-client ``b`` as :data:`_batching` says.

  ``others`` maps batchings to one client's computation of what ``raw``
  computes, batched by ``vmap`` (e.g. "product": as matrix products); the
  batchings it lacks ("vmap", the ones missing) batch ``raw`` itself. With
  ``folds_batch``, a batched ``a`` (the examples) and an unbatched ``b``
  (a shared kernel) fold the cohort into the batch axis: one large op.
  """
  fn = custom_vmap(raw)

  @fn.def_vmap
  def rule(axis_size, in_batched, a, b):
    a_batched, b_batched = in_batched
    if folds_batch and a_batched and not b_batched:
      out = fn(a.reshape((-1,) + a.shape[2:]), b)
      out = out.reshape((axis_size, -1) + out.shape[1:])
      return out, True
    axes = (0 if a_batched else None, 0 if b_batched else None)

    def one_at_a_time(a, b):
      if a_batched and b_batched:
        return lax.map(lambda t: fn(*t), (a, b))
      if a_batched:
        return lax.map(lambda ai: fn(ai, b), a)
      return lax.map(lambda bi: fn(a, bi), b)

    def batched(mode):
      return one_at_a_time if mode == "map" else jax.vmap(others.get(mode, raw), axes)

    if _batching == "auto":
      out = lax.platform_dependent(a, b, cpu=batched("map"), default=batched(GPU_BATCHING))
    else:
      out = batched(_batching)(a, b)
    return out, True

  return fn


@functools.lru_cache(maxsize=None)
def _conv_op(spec: ConvSpec, in_spatial: tuple[int, ...], window: tuple[int, ...]):
  """The custom-VJP, custom-batched convolution for one static setting."""
  fwd = _per_client(lambda x, w: _conv_raw(x, w, spec), {
      "product": lambda x, w: _conv_product(x, w, spec),
      "patches": lambda x, w: _conv_patches(x, w, spec)}, folds_batch=True)
  dx = _per_client(lambda g, w: _conv_dx_raw(g, w, in_spatial, spec), {
      "product": lambda g, w: _conv_dx_product(g, w, in_spatial, spec),
      "patches": lambda g, w: _conv_dx_patches(g, w, in_spatial, spec)}, folds_batch=True)
  dw_patches = lambda x, g: _conv_dw_patches(x, g, window, spec)
  dw = _per_client(lambda x, g: _conv_dw_raw(x, g, window, spec), {
      "product": lambda x, g: _conv_dw_product(x, g, window, spec),
      "patches": dw_patches, "grouped": dw_patches}, folds_batch=False)

  @jax.custom_vjp
  def op(x, w):
    return fwd(x, w)

  def op_fwd(x, w):
    # ``perturbed``: whether the operand's gradient is asked for (a model's
    # input layer trains with x unperturbed: data). dx needs w, dw needs x;
    # the residual of a gradient not asked for is None, and so is that
    # gradient (zero, never computed).
    return fwd(x.value, w.value), (x.value if w.perturbed else None,
                                   w.value if x.perturbed else None)

  def op_bwd(res, g):
    x, w = res
    if isinstance(g, jax.custom_derivatives.SymbolicZero):  # the output is not used
      return None, None
    return None if w is None else dx(g, w), None if x is None else dw(x, g)

  op.defvjp(op_fwd, op_bwd, symbolic_zeros=True)
  return op


def conv(x: jax.Array, w: jax.Array, strides: Sequence[int], padding: Padding,
         lhs_dilation: Sequence[int] | None = None, rhs_dilation: Sequence[int] | None = None,
         precision=None) -> jax.Array:
  """``lax.conv_general_dilated`` in NHWC / HWIO / NHWC with cohort batching.

  Args:
    x: (batch, *spatial, in) inputs.
    w: (*window, in, out) kernel.
    strides: Window strides.
    padding: (low, high) padding of each spatial dimension.
    lhs_dilation: Input dilation (transposed convolution); default 1.
    rhs_dilation: Kernel dilation; default 1.
    precision: As for ``lax.conv_general_dilated``.

  Returns:
    (batch, *out_spatial, out). Its VJP computes only the gradients asked
    for: a model's input layer, whose x is data, skips the input gradient.
  """
  nd = x.ndim - 2
  spec = ConvSpec(strides, padding, lhs_dilation or (1,) * nd, rhs_dilation or (1,) * nd,
                  precision)
  return _conv_op(spec, tuple(x.shape[1:-1]), tuple(w.shape[:nd]))(x, w)


def _windows(x: jax.Array, window: tuple[int, ...]) -> jax.Array:
  """x with every window's entries on one last axis: (*x.shape / window, prod(window))."""
  shape = []
  for size, k in zip(x.shape, window):
    shape += [size // k, k]
  nd = x.ndim
  inner = tuple(range(1, 2 * nd, 2))
  outer = tuple(range(0, 2 * nd, 2))
  return x.reshape(shape).transpose(outer + inner).reshape(
      tuple(shape[a] for a in outer) + (-1,))


def _unwindows(w: jax.Array, window: tuple[int, ...]) -> jax.Array:
  """Inverse of :func:`_windows`."""
  nd = len(window)
  outer = w.shape[:nd]
  inter = w.reshape(outer + tuple(window))
  perm = [axis for pair in zip(range(nd), range(nd, 2 * nd)) for axis in pair]
  return inter.transpose(perm).reshape(tuple(o * k for o, k in zip(outer, window)))


@functools.lru_cache(maxsize=None)
def _pool_op(window: tuple[int, ...]):
  @jax.custom_vjp
  def op(x):
    return jnp.max(_windows(x, window), axis=-1)

  def op_fwd(x):
    xs = _windows(x, window)
    first = jnp.argmax(xs, axis=-1)  # the first maximum, as select_and_scatter picks it
    return jnp.take_along_axis(xs, first[..., None], axis=-1)[..., 0], first

  def op_bwd(first, g):
    size = math.prod(window)
    hit = jax.nn.one_hot(first, size, dtype=g.dtype)
    return (_unwindows(hit * g[..., None], window),)

  op.defvjp(op_fwd, op_bwd)
  return op


def pool_fits(shape: Sequence[int], window: Sequence[int], strides: Sequence[int],
              padding: Sequence[tuple[int, int]]) -> bool:
  """Whether :func:`max_pool` computes this ``reduce_window_max``: windows
  that tile the input exactly (stride = window, no padding)."""
  return (tuple(window) == tuple(strides) and all(p == (0, 0) for p in map(tuple, padding))
          and all(s % k == 0 for s, k in zip(shape, window)))


def max_pool(x: jax.Array, window: Sequence[int]) -> jax.Array:
  """Max over non-overlapping windows (one size per axis of x, 1 to skip one).

  Equal to ``lax.reduce_window(x, -inf, lax.max, window, window, "VALID")``
  where every axis is a multiple of its window, and so is its gradient: all
  of it to the first maximum of a window (in row-major order), as JAX's
  select-and-scatter gives it. The forward pass keeps which entry that is,
  so the backward pass never compares recomputed values (XLA may recompute
  the pooled input in another fusion, with other round-off).
  """
  if not pool_fits(x.shape, window, window, [(0, 0)] * x.ndim):
    raise ValueError(f"max_pool needs windows {tuple(window)} that tile {x.shape}")
  return _pool_op(tuple(window))(x)


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


@functools.lru_cache(maxsize=None)
def sparse_product(out_dim: int):
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
