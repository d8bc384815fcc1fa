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

from fedjax_dp import jax_internals as jxi

Bind = Callable[[Any, list], list]


def _is_float(x) -> bool:
  return jnp.issubdtype(jnp.result_type(x), jnp.floating)


def _sites(body, invariant: set) -> list[int]:
  """Body equations ``lhs @ W``: W 2-D loop-invariant, lhs varying, last axis
  contracted with W's first."""
  sites = []
  for i, eqn in enumerate(body.eqns):
    if jxi.primitive_name(eqn) != "dot_general" or len(eqn.invars) != 2:
      continue
    lhs, rhs = eqn.invars
    if not jxi.is_var(rhs) or rhs not in invariant or (jxi.is_var(lhs) and lhs in invariant):
      continue
    try:
      dims = jxi.dot_general(eqn)
    except jxi.Unsupported as e:  # not a site: the product is bound as it is
      jxi.warn_fallback(e, "binding it unchanged")
      continue
    if (rhs.aval.ndim == 2 and rhs.aval.dtype == jnp.float32 and
        lhs.aval.dtype == jnp.float32 and dims.batch == ((), ()) and
        dims.contract == ((lhs.aval.ndim - 1,), (0,)) and
        dims.preferred_element_type in (None, jnp.float32)):
      sites.append(i)
  return sites


def _runs_once(eqn, invariant: set) -> bool:
  """Whether a body equation is loop-invariant: computed once, before the loop."""
  return bool(eqn.outvars) and all(v in invariant for v in eqn.outvars)


def _sole_reads(body, sites: list[int], invariant: set) -> list[int]:
  """The sites whose kernel no other step of the loop reads, nor the body
  returns. The loop reads the kernels' values with their gradients stopped
  (taken after the loop, from the sites alone); another read in the loop
  (``h @ W.T``, ``W[i]``) would lose its share of W's gradient, so a kernel
  read there leaves its sites bound as they are. Loop-invariant equations
  (computed once, before the stop) keep theirs."""
  kernels = {body.eqns[i].invars[1] for i in sites}
  elsewhere = {v for v in body.outvars if jxi.is_var(v) and v in kernels}
  for i, eqn in enumerate(body.eqns):
    if i not in sites and not _runs_once(eqn, invariant):
      elsewhere.update(v for v in eqn.invars if jxi.is_var(v) and v in kernels)
  return [i for i in sites if body.eqns[i].invars[1] not in elsewhere]


def _invariant(body, num_consts: int) -> set:
  """Body variables computed from the loop's constants alone."""
  invariant = set(body.constvars) | set(body.invars[:num_consts])
  for eqn in body.eqns:
    if not jxi.has_effects(eqn) and all(not jxi.is_var(v) or v in invariant
                                        for v in eqn.invars):
      invariant.update(eqn.outvars)
  return invariant


class _Loop:
  """A ``scan`` equation split into its loop-invariant part and its steps.

  Attributes:
    layout: The ``scan`` equation's body and operand counts.
    bind: Binds the body's equations.
    sites: Indices of the body's products with a loop-invariant kernel.
    hoisted: The body's loop-invariant equations, computed once.
    looped: (index, equation) of the others, computed every step.
    probe_shapes: (steps, *output) of each site's probe.
  """

  def __init__(self, layout: jxi.ScanLayout, bind: Bind, sites: list[int], invariant: set):
    self.layout, self.bind, self.sites = layout, bind, sites
    self.body = layout.body
    self.num_consts, self.num_carry = layout.num_consts, layout.num_carry
    once = [_runs_once(e, invariant) for e in self.body.eqns]
    self.hoisted = [e for e, o in zip(self.body.eqns, once) if o]
    self.looped = [(i, e) for i, (e, o) in enumerate(zip(self.body.eqns, once)) if not o]
    self.probe_shapes = [(layout.length,) + tuple(self.body.eqns[i].outvars[0].aval.shape)
                         for i in sites]

  def split(self, values: list) -> tuple[list, list, list]:
    """(constants, initial carry, per-step inputs) of the scan's operands."""
    c, k = self.num_consts, self.num_consts + self.num_carry
    return values[:c], values[c:k], values[k:]

  def hoist(self, consts: list) -> dict:
    """The loop-invariant values, computed once from the constants."""
    env = dict(zip(self.body.constvars, self.layout.consts))
    env.update(zip(self.body.invars[:self.num_consts], consts))
    for e in self.hoisted:
      env.update(zip(e.outvars, self.bind(e, [jxi.read_atom(env, v) for v in e.invars])))
    return env

  def weights(self, consts: list) -> list:
    """The sites' kernels."""
    env = self.hoist(consts)
    return [env[self.body.eqns[i].invars[1]] for i in self.sites]

  def zero_probes(self) -> list:
    return [jnp.zeros(s, jnp.float32) for s in self.probe_shapes]

  def run(self, values: list, probes: list) -> tuple[list, list]:
    """The loop with probes added to the sites' products; returns (the
    scan's outputs, each site's inputs stacked over the steps)."""
    consts, init, xs = self.split(values)
    env0 = self.hoist(consts)
    for i in self.sites:  # the kernels' gradients are taken after the loop
      rhs = self.body.eqns[i].invars[1]
      env0[rhs] = jax.lax.stop_gradient(env0[rhs])
    site_of = {i: k for k, i in enumerate(self.sites)}
    carry_vars = self.body.invars[self.num_consts:self.num_consts + self.num_carry]
    x_vars = self.body.invars[self.num_consts + self.num_carry:]

    def step(carry, inputs):
      x_t, probe_t = inputs
      env = dict(env0)
      env.update(zip(carry_vars, carry))
      env.update(zip(x_vars, x_t))
      seen = []
      for i, e in self.looped:
        args = [jxi.read_atom(env, v) for v in e.invars]
        out = self.bind(e, args)
        if i in site_of:
          out = [out[0] + probe_t[site_of[i]]]
          seen.append(args[0])
        env.update(zip(e.outvars, out))
      outs = [jxi.read_atom(env, v) for v in self.body.outvars]
      return outs[:self.num_carry], (outs[self.num_carry:], seen)

    p = self.layout
    carry, (ys, seen) = jax.lax.scan(step, init, (xs, probes), length=p.length,
                                     reverse=p.reverse, unroll=p.unroll)
    return list(carry) + list(ys), seen


def scan(eqn, invals: list, bind: Bind) -> list | None:
  """A ``scan`` equation evaluated with its weight gradients hoisted.

  Args:
    eqn: The ``scan`` equation.
    invals: Its operands (constants, initial carry, per-step inputs).
    bind: ``bind(eqn, values) -> outputs`` for the body's other equations.

  Returns:
    The scan's outputs, or None when its body has no such product (the
    caller binds the equation as it is).

  Raises:
    jax_internals.Unsupported: The equation cannot be read on this JAX
      (the caller binds it as it is).
  """
  layout = jxi.scan_layout(eqn)
  invariant = _invariant(layout.body, layout.num_consts)
  sites = _sole_reads(layout.body, _sites(layout.body, invariant), invariant)
  if not sites or layout.split_transpose:
    return None
  return _hoisted_gradients(_Loop(layout, bind, sites, invariant), invals)


def _hoisted_gradients(loop: _Loop, invals: list) -> list:
  """``loop`` run with a VJP whose kernel gradients are ``H^T G`` after it."""
  diff = [_is_float(v) for v in invals]  # integer operands get no cotangent
  diff_consts = diff[:loop.num_consts]

  @jax.custom_vjp
  def run(*values):
    return loop.run(list(values), loop.zero_probes())[0]

  def run_fwd(*values):
    values = list(values)
    dvals = [v for v, d in zip(values, diff) if d]
    outs, vjp, seen = jax.vjp(lambda dv, probes: loop.run(_merge(values, dv, diff), probes),
                              dvals, loop.zero_probes(), has_aux=True)
    consts = values[:loop.num_consts]
    _, vjp_weights = jax.vjp(lambda dc: loop.weights(_merge(consts, dc, diff_consts)),
                             [v for v, d in zip(consts, diff_consts) if d])
    return outs, (vjp, vjp_weights, seen)

  def run_bwd(res, cts):
    vjp, vjp_weights, seen = res
    d_vals, d_probes = vjp(list(cts))
    (d_consts,) = vjp_weights([jnp.einsum("...i,...o->io", a, g)
                               for a, g in zip(seen, d_probes)])
    n = sum(diff_consts)
    d_vals = [a + b for a, b in zip(d_vals[:n], d_consts)] + list(d_vals[n:])
    it = iter(d_vals)
    return tuple(next(it) if d else None for d in diff)

  run.defvjp(run_fwd, run_bwd)
  return run(*invals)


def _merge(values: list, dvals: list, diff: list) -> list:
  """``values`` with its differentiable entries replaced by ``dvals``, in order."""
  it = iter(dvals)
  return [next(it) if d else v for v, d in zip(values, diff)]
