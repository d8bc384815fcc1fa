"""Any model's forward pass, rewritten to train fast under a cohort ``vmap``.

:func:`trace` turns ``apply_fn(params, x)`` into a jaxpr (once per input
shape) and :func:`evaluate` runs it again equation by equation, binding
every primitive as it is except:

* convolutions (``conv_general_dilated`` without groups) run through
  :func:`fedjax_dp.models.cohort_ops.conv`, in the canonical layout; one
  whose input does not depend on the parameters (a model's first layer)
  skips its input gradient;
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
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend import core as jcore

from fedjax_dp.models import cohort_ops, fast_scan

_CALLS = ("jit", "pjit", "closed_call", "core_call")


@dataclasses.dataclass(frozen=True)
class Traced:
  """A model's forward pass for one input shape.

  Attributes:
    jaxpr: The closed jaxpr of ``apply_fn(params, x)``; its inputs are the
      parameters in ``names`` order, then x.
    names: Parameter names, in the model's flat order.
    dependent: The top-level variables computed from the parameters.
  """

  jaxpr: Any
  names: tuple[str, ...]
  dependent: frozenset


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
  key = (apply_fn, tuple(shapes), tuple(x.shape), jnp.dtype(x.dtype),
         jax.sharding.get_abstract_mesh())
  if key in _TRACES:
    return _TRACES[key]
  names = tuple(name for name, _ in shapes)

  def flat_apply(*args):
    return apply_fn(dict(zip(names, args[:-1])), args[-1])

  args = [jax.ShapeDtypeStruct(shape, jnp.float32) for _, shape in shapes]
  jaxpr = jax.make_jaxpr(flat_apply)(*args, jax.ShapeDtypeStruct(x.shape, x.dtype))
  if len(jaxpr.jaxpr.outvars) != 1:
    raise ValueError("the model's apply_fn must return one array of logits")
  dependent = _depends_on_params(jaxpr.jaxpr, [True] * len(names) + [False])
  traced = Traced(jaxpr, names, frozenset(dependent))
  if not any(isinstance(c, jax.core.Tracer) for c in jaxpr.consts):
    _TRACES[key] = traced
  return traced


def dense_sites(traced: Traced) -> tuple[DenseSite, ...]:
  """The dense layers a trainer may hold apart from the other parameters.

  A site is a top-level ``dot_general`` contracting the last axis of its
  input with axis 0 of a 2-D float32 parameter that no other equation (and
  not the output) uses: ``nn.Dense`` called once per forward pass.
  """
  jaxpr = traced.jaxpr.jaxpr
  params = dict(zip(jaxpr.invars[:len(traced.names)], traced.names))
  uses: dict[Any, int] = {}
  for eqn in jaxpr.eqns:
    for v in eqn.invars:
      if isinstance(v, jcore.Var):
        uses[v] = uses.get(v, 0) + 1
  for v in jaxpr.outvars:
    if isinstance(v, jcore.Var):
      uses[v] = uses.get(v, 0) + 1
  sites = []
  for i, eqn in enumerate(jaxpr.eqns):
    if eqn.primitive.name != "dot_general" or len(eqn.invars) != 2:
      continue
    lhs, rhs = eqn.invars
    if not isinstance(rhs, jcore.Var) or rhs not in params or uses[rhs] != 1:
      continue
    (contract, batch) = eqn.params["dimension_numbers"]
    if (rhs.aval.ndim != 2 or rhs.aval.dtype != jnp.float32 or tuple(batch[0]) or
        tuple(batch[1]) or tuple(contract[0]) != (lhs.aval.ndim - 1,) or
        tuple(contract[1]) != (0,) or eqn.params.get("preferred_element_type") not in
        (None, jnp.float32) or lhs.aval.dtype != jnp.float32):
      continue
    sites.append(DenseSite(i, params[rhs], tuple(rhs.aval.shape),
                           math.prod(lhs.aval.shape[:-1])))
  return tuple(sites)


def _depends_on_params(jaxpr, inputs: Sequence[bool]) -> set:
  """The top-level variables computed from the inputs flagged in ``inputs``."""
  dependent = {v for v, flag in zip(jaxpr.invars, inputs) if flag}
  for eqn in jaxpr.eqns:
    if any(isinstance(v, jcore.Var) and v in dependent for v in eqn.invars):
      dependent.update(eqn.outvars)
  return dependent


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
  """
  jaxpr = traced.jaxpr
  args = [params[name] if name in params else None for name in traced.names] + [x]
  return _eval(jaxpr.jaxpr, jaxpr.consts, args, traced.dependent, dense or {})[0]


def _bind(eqn, invals):
  params = eqn.primitive.get_bind_params(eqn.params)
  subfuns = ()
  if isinstance(params, tuple):  # jax < 0.7: (subfuns, params)
    subfuns, params = params
  out = eqn.primitive.bind(*subfuns, *invals, **params)
  return out if eqn.primitive.multiple_results else [out]


def _conv(eqn, lhs, rhs, input_grad: bool):
  """A conv_general_dilated equation through :func:`cohort_ops.conv`, or None."""
  p = eqn.params
  if (p["feature_group_count"] != 1 or p["batch_group_count"] != 1 or
      p.get("preferred_element_type") not in (None, lhs.dtype) or lhs.dtype != rhs.dtype or
      isinstance(p["padding"], str)):
    return None
  lhs_spec, rhs_spec, out_spec = p["dimension_numbers"]
  # transpose(perm) puts a spec's axes in canonical order: perm[i] = spec axis at i
  to_nhwc = (lhs_spec[0],) + tuple(lhs_spec[2:]) + (lhs_spec[1],)
  to_hwio = tuple(rhs_spec[2:]) + (rhs_spec[1], rhs_spec[0])
  out = cohort_ops.conv(_transpose(lhs, to_nhwc), _transpose(rhs, to_hwio),
                        p["window_strides"], p["padding"], p["lhs_dilation"],
                        p["rhs_dilation"], p["precision"], input_grad)
  # out is NHWC; out_spec names where N, C, spatial go
  from_nhwc = np.argsort((out_spec[0],) + tuple(out_spec[2:]) + (out_spec[1],))
  return _transpose(out, tuple(int(i) for i in from_nhwc))


def _transpose(a, perm):
  return a if tuple(perm) == tuple(range(a.ndim)) else a.transpose(perm)


def _eval(jaxpr, consts, args, dependent, dense) -> list:
  env: dict[Any, Any] = {}

  def read(v):
    return v.val if isinstance(v, jcore.Literal) else env[v]

  env.update(zip(jaxpr.constvars, consts))
  env.update(zip(jaxpr.invars, args))
  for i, eqn in enumerate(jaxpr.eqns):
    name = eqn.primitive.name
    out = None
    if i in dense:
      out = [dense[i](read(eqn.invars[0]))]
    elif name == "conv_general_dilated":
      lhs, rhs = (read(v) for v in eqn.invars)
      grad_in = isinstance(eqn.invars[0], jcore.Var) and eqn.invars[0] in dependent
      conv = _conv(eqn, lhs, rhs, grad_in)
      out = None if conv is None else [conv]
    elif name == "reduce_window_max":
      (operand,) = (read(v) for v in eqn.invars)
      p = eqn.params
      if (all(d == 1 for d in p["base_dilation"]) and
          all(d == 1 for d in p["window_dilation"]) and
          cohort_ops.pool_fits(operand.shape, p["window_dimensions"], p["window_strides"],
                               p["padding"])):
        out = [cohort_ops.max_pool(operand, p["window_dimensions"])]
    elif name == "scan":
      out = fast_scan.scan(eqn, [read(v) for v in eqn.invars], _bind)
    elif name in _CALLS and "jaxpr" in eqn.params:
      inner = eqn.params["jaxpr"]
      closed = isinstance(inner, jcore.ClosedJaxpr)
      inner_jaxpr = inner.jaxpr if closed else inner
      inner_consts = inner.consts if closed else ()
      flags = [isinstance(v, jcore.Var) and v in dependent for v in eqn.invars]
      out = _eval(inner_jaxpr, inner_consts, [read(v) for v in eqn.invars],
                  _depends_on_params(inner_jaxpr, flags), {})
    if out is None:
      out = _bind(eqn, [read(v) for v in eqn.invars])
    env.update(zip(eqn.outvars, out))
  return [read(v) for v in jaxpr.outvars]


def fast_apply(apply_fn: Callable,
               shapes: Sequence[tuple[str, tuple[int, ...]]]) -> Callable:
  """``apply_fn`` through the cohort ops: the same logits, fast under ``vmap``.

  Args:
    apply_fn: ``apply_fn(params, x) -> logits`` of a model whose
      parameters are float32 arrays named and shaped as ``shapes``.
    shapes: The model's (name, shape) pairs.

  Returns:
    ``fn(params, x)`` computing ``apply_fn(params, x)``.
  """
  shapes = tuple(shapes)

  def fn(params, x):
    return evaluate(trace(apply_fn, shapes, x), params, x)

  return fn
