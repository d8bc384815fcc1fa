"""Any model's forward pass, rewritten to train fast under a cohort ``vmap``.

:func:`trace` turns ``apply_fn(params, x)`` into a jaxpr (once per input
shape) and :func:`evaluate` runs it again equation by equation, binding
every primitive as it is except:

* convolutions (``conv_general_dilated`` without groups) run through
  :func:`fedjax_dp.models.cohort_ops.conv`, in the canonical layout; its
  backward pass computes the gradients asked for only (a model's first
  layer, whose input is data, skips its input gradient);
* max pooling over tiling windows (``reduce_window_max``, as ``nn.max_pool``
  with stride = window) runs through :func:`cohort_ops.max_pool`;
* loops (``scan``, e.g. ``nn.RNN``) run through
  :func:`fedjax_dp.models.fast_scan.scan`: their products with
  loop-invariant kernels take the kernels' gradients after the loop;
* optionally, the products of the inputs with chosen dense kernels
  (:func:`dense_sites`) are computed by a caller's function: the factored
  and sparse dense layers of ``fedjax_dp.models.fast_train``.

The values are those of ``apply_fn`` (the same primitives on the same
numbers); only the batching under ``vmap`` and the backward pass's layout
differ. Nested calls (``jit`` inside the model) are evaluated the same way;
other higher-order primitives (``custom_jvp`` of ``relu``, ``while``,
``cond``) are bound unchanged, and so is every equation inside a loop's
body but the products above.

Every read of the jaxpr (primitive names, equation parameters) goes through
:mod:`fedjax_dp.jax_internals`, which knows each supported JAX's layout. An
equation it cannot read on the JAX at hand is bound unchanged; one that
cannot even be bound makes :func:`fast_apply` run the model's own
``apply_fn`` (and ``fast_train`` the plain training): one
``jax_internals.FastPathWarning`` per primitive, never a crash.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_dp import jax_internals as jxi
from fedjax_dp.models import cohort_ops, fast_scan


@dataclasses.dataclass(frozen=True)
class Traced:
  """A model's forward pass for one input shape.

  Attributes:
    jaxpr: The closed jaxpr of ``apply_fn(params, x)``; its inputs are the
      parameters in ``names`` order, then x.
    names: Parameter names, in the model's flat order.
  """

  jaxpr: Any
  names: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class DenseSite:
  """A dense layer ``lhs @ kernel`` whose kernel is used nowhere else.

  Attributes:
    eqn: Index of its ``dot_general`` among the jaxpr's top-level equations.
    name: The kernel's parameter name.
    shape: The kernel's (in, out) shape.
    rows: Rows of ``lhs`` per forward pass (batch times any other leading
      axes, e.g. sequence positions).
  """

  eqn: int
  name: str
  shape: tuple[int, int]
  rows: int


_TRACES: dict[tuple, Traced] = {}


def trace(apply_fn: Callable, shapes: Sequence[tuple[str, tuple[int, ...]]],
          x: jax.ShapeDtypeStruct | jax.Array) -> Traced:
  """The jaxpr of ``apply_fn`` for float32 parameters ``shapes`` and input x.

  Kept per (function, shapes, input shape, abstract mesh) unless the
  function closes over traced values (then they belong to the current trace
  only). The mesh is in the key because a jaxpr traced inside ``shard_map``
  (the round's clients, a sharded evaluation) types its values on the
  mesh's manual axes: replayed outside it (a scheme's server training in
  the same process) it failed with "Mesh for all inputs should be equal".
  """
  key = (apply_fn, tuple(shapes), tuple(x.shape), jnp.dtype(x.dtype), jxi.abstract_mesh())
  if key in _TRACES:
    return _TRACES[key]
  names = tuple(name for name, _ in shapes)

  def flat_apply(*args):
    return apply_fn(dict(zip(names, args[:-1])), args[-1])

  args = [jax.ShapeDtypeStruct(shape, jnp.float32) for _, shape in shapes]
  jaxpr = jxi.make_jaxpr(flat_apply, *args, jax.ShapeDtypeStruct(x.shape, x.dtype))
  body, consts = jxi.open_jaxpr(jaxpr)
  if len(body.outvars) != 1:
    raise ValueError("the model's apply_fn must return one array of logits")
  traced = Traced(jaxpr, names)
  if not any(jxi.is_tracer(c) for c in consts):
    _TRACES[key] = traced
  return traced


def dense_sites(traced: Traced) -> tuple[DenseSite, ...]:
  """The dense layers a trainer may hold apart from the other parameters.

  A site is a top-level ``dot_general`` contracting the last axis of its
  input with axis 0 of a 2-D float32 parameter that no other equation (and
  not the output) uses: ``nn.Dense`` called once per forward pass.
  """
  jaxpr, _ = jxi.open_jaxpr(traced.jaxpr)
  params = dict(zip(jaxpr.invars[:len(traced.names)], traced.names))
  uses: dict[Any, int] = {}
  for eqn in jaxpr.eqns:
    for v in eqn.invars:
      if jxi.is_var(v):
        uses[v] = uses.get(v, 0) + 1
  for v in jaxpr.outvars:
    if jxi.is_var(v):
      uses[v] = uses.get(v, 0) + 1
  sites = []
  for i, eqn in enumerate(jaxpr.eqns):
    if jxi.primitive_name(eqn) != "dot_general" or len(eqn.invars) != 2:
      continue
    lhs, rhs = eqn.invars
    if not jxi.is_var(rhs) or rhs not in params or uses[rhs] != 1:
      continue
    try:
      dims = jxi.dot_general(eqn)
    except jxi.Unsupported as e:  # not a site: the kernel trains as the client's own
      jxi.warn_fallback(e, "binding it unchanged")
      continue
    if (rhs.aval.ndim != 2 or rhs.aval.dtype != jnp.float32 or dims.batch != ((), ()) or
        dims.contract != ((lhs.aval.ndim - 1,), (0,)) or
        dims.preferred_element_type not in (None, jnp.float32) or
        lhs.aval.dtype != jnp.float32):
      continue
    sites.append(DenseSite(i, params[rhs], tuple(rhs.aval.shape),
                           math.prod(lhs.aval.shape[:-1])))
  return tuple(sites)


def evaluate(traced: Traced, params: Mapping[str, jax.Array], x: jax.Array,
             dense: Mapping[int, Callable[[jax.Array], jax.Array]] | None = None) -> jax.Array:
  """``apply_fn(params, x)`` through the cohort ops (module docstring).

  Args:
    traced: From :func:`trace` for x's shape.
    params: The parameters by name (a site's kernel may be absent when
      ``dense`` computes its product).
    x: The input batch.
    dense: Optional ``{site.eqn: fn}``; ``fn(lhs)`` replaces ``lhs @ kernel``.

  Returns:
    The logits.

  Raises:
    jax_internals.Unsupported: An equation that cannot be bound on this JAX
      (:func:`fast_apply` then runs the model's own ``apply_fn``).
  """
  jaxpr, consts = jxi.open_jaxpr(traced.jaxpr)
  args = [params[name] if name in params else None for name in traced.names] + [x]
  return _eval(jaxpr, consts, args, dense or {})[0]


def _conv(eqn, lhs, rhs):
  """A conv_general_dilated equation through :func:`cohort_ops.conv`, or None."""
  p = jxi.conv(eqn)
  if (p.feature_group_count != 1 or p.batch_group_count != 1 or
      p.preferred_element_type not in (None, lhs.dtype) or lhs.dtype != rhs.dtype or
      isinstance(p.padding, str)):
    return None
  lhs_spec, rhs_spec, out_spec = p.specs
  # transpose(perm) puts a spec's axes in canonical order: perm[i] = spec axis at i
  to_nhwc = (lhs_spec[0],) + tuple(lhs_spec[2:]) + (lhs_spec[1],)
  to_hwio = tuple(rhs_spec[2:]) + (rhs_spec[1], rhs_spec[0])
  out = cohort_ops.conv(_transpose(lhs, to_nhwc), _transpose(rhs, to_hwio),
                        p.window_strides, p.padding, p.lhs_dilation, p.rhs_dilation,
                        p.precision)
  # out is NHWC; out_spec names where N, C, spatial go
  from_nhwc = np.argsort((out_spec[0],) + tuple(out_spec[2:]) + (out_spec[1],))
  return _transpose(out, tuple(int(i) for i in from_nhwc))


def _transpose(a, perm):
  return a if tuple(perm) == tuple(range(a.ndim)) else a.transpose(perm)


def _eval(jaxpr, consts, args, dense) -> list:
  env: dict[Any, Any] = {}

  def read(v):
    return jxi.read_atom(env, v)

  env.update(zip(jaxpr.constvars, consts))
  env.update(zip(jaxpr.invars, args))
  for i, eqn in enumerate(jaxpr.eqns):
    try:
      out = _fast_eqn(i, eqn, read, dense)
    except jxi.Unsupported as e:  # a layout this JAX changed: the plain primitive
      jxi.warn_fallback(e, "binding it unchanged")
      out = None
    if out is None:
      out = jxi.bind(eqn, [read(v) for v in eqn.invars])
    env.update(zip(eqn.outvars, out))
  return [read(v) for v in jaxpr.outvars]


def _fast_eqn(i, eqn, read, dense) -> list | None:
  """One equation through the cohort ops, or None to bind it as it is."""
  name = jxi.primitive_name(eqn)
  if i in dense:
    return [dense[i](read(eqn.invars[0]))]
  if name == "conv_general_dilated":
    lhs, rhs = (read(v) for v in eqn.invars)
    conv = _conv(eqn, lhs, rhs)
    return None if conv is None else [conv]
  if name == "reduce_window_max":
    (operand,) = (read(v) for v in eqn.invars)
    p = jxi.reduce_window(eqn)
    if (all(d == 1 for d in p.base_dilation) and all(d == 1 for d in p.window_dilation) and
        cohort_ops.pool_fits(operand.shape, p.window_dimensions, p.window_strides,
                             p.padding)):
      return [cohort_ops.max_pool(operand, p.window_dimensions)]
    return None
  if name == "scan":
    return fast_scan.scan(eqn, [read(v) for v in eqn.invars], jxi.bind)
  body = jxi.call_body(eqn)
  if body is not None:
    inner, inner_consts = body
    return _eval(inner, inner_consts, [read(v) for v in eqn.invars], {})
  return None


def fast_apply(apply_fn: Callable,
               shapes: Sequence[tuple[str, tuple[int, ...]]]) -> Callable:
  """``apply_fn`` through the cohort ops: the same logits, fast under ``vmap``.

  Args:
    apply_fn: ``apply_fn(params, x) -> logits`` of a model whose
      parameters are float32 arrays named and shaped as ``shapes``.
    shapes: The model's (name, shape) pairs.

  Returns:
    ``fn(params, x)`` computing ``apply_fn(params, x)``; ``apply_fn`` itself
    (after a ``jax_internals.FastPathWarning``) where an equation cannot be
    replayed on the JAX at hand.
  """
  shapes = tuple(shapes)

  def fn(params, x):
    try:
      return evaluate(trace(apply_fn, shapes, x), params, x)
    except jxi.Unsupported as e:  # an equation this JAX cannot replay: the plain model
      jxi.warn_fallback(e, "running the model's own apply_fn")
      return apply_fn(params, x)

  return fn
