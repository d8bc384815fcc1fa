"""Recurrent layers (``scan``) whose weight gradients are one product per loop.

Reverse-mode JAX differentiates ``lax.scan`` by a backward loop that adds
each step's weight gradient ``h_t^T g_t`` into a running sum. Under ``vmap``
over a cohort that sum is every client's own copy of the weights, read and
written at every step of the sequence (an LSTM-256 layer: 1 MB a client,
80 times a window), and the loop runs memory-bound at a fraction of the
matrix-product rate. :func:`scan` computes the same values and gradients
another way: the products of the loop body with a loop-invariant 2-D
operand (the cell's kernels) take a zero "probe" added to their outputs,
the backward loop returns each step's output gradient for the probes
(stacked, as for any per-step input), and the kernel's gradient is one
matrix product after the loop, ``H^T G`` over all steps and rows. The
loop-invariant part of the body (e.g. flax's concatenation of the gates'
kernels) is computed once, before the loop.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
from jax.extend import core as jcore

Bind = Callable[[Any, list], list]


def _is_float(x) -> bool:
  return jnp.issubdtype(jnp.result_type(x), jnp.floating)


def _sites(body, invariant: set) -> list[int]:
  """Body equations ``lhs @ W``: W 2-D loop-invariant, lhs varying, last axis
  contracted with W's first."""
  sites = []
  for i, eqn in enumerate(body.eqns):
    if eqn.primitive.name != "dot_general" or len(eqn.invars) != 2:
      continue
    lhs, rhs = eqn.invars
    if not isinstance(rhs, jcore.Var) or rhs not in invariant or (
        isinstance(lhs, jcore.Var) and lhs in invariant):
      continue
    contract, batch = eqn.params["dimension_numbers"]
    if (rhs.aval.ndim == 2 and rhs.aval.dtype == jnp.float32 and
        lhs.aval.dtype == jnp.float32 and not tuple(batch[0]) and not tuple(batch[1]) and
        tuple(contract[0]) == (lhs.aval.ndim - 1,) and tuple(contract[1]) == (0,) and
        eqn.params.get("preferred_element_type") in (None, jnp.float32)):
      sites.append(i)
  return sites


def _invariant(body, num_consts: int) -> set:
  """Body variables computed from the loop's constants alone."""
  invariant = set(body.constvars) | set(body.invars[:num_consts])
  for eqn in body.eqns:
    if not eqn.effects and all(not isinstance(v, jcore.Var) or v in invariant
                               for v in eqn.invars):
      invariant.update(eqn.outvars)
  return invariant


def scan(eqn, invals: list, bind: Bind) -> list | None:
  """A ``scan`` equation evaluated with its weight gradients hoisted.

  Args:
    eqn: The ``scan`` equation.
    invals: Its operands (constants, initial carry, per-step inputs).
    bind: ``bind(eqn, values) -> outputs`` for the body's other equations.

  Returns:
    The scan's outputs, or None when its body has no such product (the
    caller binds the equation as it is).
  """
  p = eqn.params
  closed, num_consts, num_carry = p["jaxpr"], p["num_consts"], p["num_carry"]
  body = closed.jaxpr
  invariant = _invariant(body, num_consts)
  sites = _sites(body, invariant)
  if not sites or p.get("_split_transpose", False):
    return None
  site_set = set(sites)
  hoisted = [e for e in body.eqns if e.outvars and all(v in invariant for v in e.outvars)]
  looped = [(i, e) for i, e in enumerate(body.eqns)
            if not (e.outvars and all(v in invariant for v in e.outvars))]
  length = p["length"]

  def read(env, v):
    return v.val if isinstance(v, jcore.Literal) else env[v]

  def hoist(consts):
    env = dict(zip(body.constvars, closed.consts))
    env.update(zip(body.invars[:num_consts], consts))
    for e in hoisted:
      env.update(zip(e.outvars, bind(e, [read(env, v) for v in e.invars])))
    return env

  def weights(consts):
    env = hoist(consts)
    return [env[body.eqns[i].invars[1]] for i in sites]

  def run(consts, init, xs, probes):
    """The loop with probes on the sites; returns (outputs, stacked site inputs)."""
    env0 = hoist(consts)
    for i in sites:  # the kernels' gradients are taken after the loop
      rhs = body.eqns[i].invars[1]
      env0[rhs] = jax.lax.stop_gradient(env0[rhs])

    def step(carry, inputs):
      x_t, probe_t = inputs
      env = dict(env0)
      env.update(zip(body.invars[num_consts:num_consts + num_carry], carry))
      env.update(zip(body.invars[num_consts + num_carry:], x_t))
      seen = []
      for i, e in looped:
        args = [read(env, v) for v in e.invars]
        if i in site_set:
          k = sites.index(i)
          out = [bind(e, args)[0] + probe_t[k]]
          seen.append(args[0])
        else:
          out = bind(e, args)
        env.update(zip(e.outvars, out))
      outs = [read(env, v) for v in body.outvars]
      return outs[:num_carry], (outs[num_carry:], seen)

    carry, (ys, seen) = jax.lax.scan(step, init, (xs, probes), length=length,
                                     reverse=p["reverse"], unroll=p["unroll"])
    return list(carry) + list(ys), seen

  consts_in = invals[:num_consts]
  init_in = invals[num_consts:num_consts + num_carry]
  xs_in = invals[num_consts + num_carry:]
  probe_shapes = [(length,) + tuple(body.eqns[i].outvars[0].aval.shape) for i in sites]
  diff = [_is_float(v) for v in invals]

  def split(values):
    return (values[:num_consts], values[num_consts:num_consts + num_carry],
            values[num_consts + num_carry:])

  @jax.custom_vjp
  def loop(*values):
    consts, init, xs = split(list(values))
    return run(consts, init, xs, [jnp.zeros(s, jnp.float32) for s in probe_shapes])[0]

  def loop_fwd(*values):
    values = list(values)

    def differentiable(dvals, probes):
      full = _merge(values, dvals, diff)
      consts, init, xs = split(full)
      return run(consts, init, xs, probes)

    dvals = [v for v, d in zip(values, diff) if d]
    probes = [jnp.zeros(s, jnp.float32) for s in probe_shapes]
    outs, vjp, seen = jax.vjp(differentiable, dvals, probes, has_aux=True)
    dconsts = [v for v, d in zip(values[:num_consts], diff) if d]

    def site_weights(dconsts):
      return weights(_merge(values[:num_consts], dconsts, diff[:num_consts]))

    _, vjp_weights = jax.vjp(site_weights, dconsts)
    return outs, (vjp, vjp_weights, seen)

  def loop_bwd(res, cts):
    vjp, vjp_weights, seen = res
    d_vals, d_probes = vjp(list(cts))
    d_w = [jnp.einsum("...i,...o->io", a, g) for a, g in zip(seen, d_probes)]
    (d_consts,) = vjp_weights(d_w)
    n_const = sum(diff[:num_consts])
    d_vals = [a + b for a, b in zip(d_vals[:n_const], d_consts)] + list(d_vals[n_const:])
    it = iter(d_vals)
    return tuple(next(it) if d else None for d in diff)

  loop.defvjp(loop_fwd, loop_bwd)
  del consts_in, init_in, xs_in
  return loop(*invals)


def _merge(values: list, dvals: list, diff: list) -> list:
  """``values`` with its differentiable entries replaced by ``dvals``, in order."""
  it = iter(dvals)
  return [next(it) if d else v for v, d in zip(values, diff)]
