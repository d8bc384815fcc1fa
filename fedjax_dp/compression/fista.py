"""BPDN / LASSO decoder: FISTA and ISTA, jitted, over all chunks at once.

Thesis Eq. (2.4): the FL-CS server reconstructs the update from its
compressed measurements y by

  s* = argmin_s 1/2 ||y - A s||_2^2 + lambda ||s||_1,

chunk by chunk (Sec. 4.1.4, "Scalable Reconstruction"). The thesis uses
OWL-QN; we use the proximal-gradient methods ISTA and FISTA (Beck & Teboulle,
2009), which solve the same convex problem:

  z_k     = s_k + (t_{k-1} - 1) / t_k (s_k - s_{k-1})   (FISTA; ISTA: z_k = s_k)
  s_{k+1} = soft(z_k + tau A^T (y - A z_k), tau lambda),

with step tau = 1/||A||^2 (optionally with gradient restart: t is reset to 1
when the momentum points uphill). For the FL-CS operator the rows of every chunk's
matrix are orthonormal, so ||A|| <= 1 and tau = 1 (padding slots, which hold
no weight, are kept at zero by a mask: that drops columns, ||A|| stays <= 1).

All P chunks are one chunk-domain array; each step costs one ``forward`` and one
``adjoint`` pass over all of them. The loop is a ``lax.while_loop`` that stops
after ``max_iters`` steps or when the relative change of the iterate,
``||s_{k+1} - s_k|| / ||s_{k+1}||``, is at most ``tol`` (checked every
second step: the loop runs two steps per trip, see ``two_steps``); it starts from a
given point (the previous round's solution: warm start) and returns the
number of steps taken.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from fedjax_dp.errors import ConfigError

SOLVERS = ("fista", "ista")


class BPDNResult(NamedTuple):
  """A decoder's output.

  Attributes:
    solution: The minimiser estimate, shaped like the starting point.
    iterations: Steps taken (int32 scalar).
    change: Relative change of the last step (float32 scalar).
  """

  solution: jax.Array
  iterations: jax.Array
  change: jax.Array


def soft_threshold(x: jax.Array, threshold: float | jax.Array) -> jax.Array:
  """The proximal operator of ``threshold * ||.||_1``."""
  return jnp.sign(x) * jnp.maximum(jnp.abs(x) - threshold, 0.0)


def check_params(lam: float, max_iters: int, tol: float, solver: str = "fista") -> None:
  """Raises a one-line ``ConfigError`` naming the bad decoder setting
  (``lam``, ``max_iters``, ``tol`` or ``decoder``, as FL-CS's fields are
  called; the command line writes its flag instead).

  >>> check_params(1e-5, 0, 0.0)
  Traceback (most recent call last):
  ...
  fedjax_dp.errors.ConfigError: max_iters must be an int >= 1 (decoder steps), got 0
  """
  if not lam >= 0:
    raise ConfigError("lam", f"must be >= 0 (lambda), got {lam}")
  if int(max_iters) != max_iters or max_iters < 1:
    raise ConfigError("max_iters", f"must be an int >= 1 (decoder steps), got {max_iters}")
  if not tol >= 0:
    raise ConfigError("tol", f"must be >= 0 (decoder tolerance), got {tol}")
  if solver not in SOLVERS:
    raise ConfigError("decoder", f"{solver!r} is unknown; choose one of {', '.join(SOLVERS)}")


def solve_bpdn(forward: Callable[[jax.Array], jax.Array],
               adjoint: Callable[[jax.Array], jax.Array], y: jax.Array,
               init: jax.Array, lam: float | jax.Array, *, max_iters: int,
               tol: float = 0.0, mask: jax.Array | None = None,
               step_size: float = 1.0, solver: str = "fista",
               restart: bool = False) -> BPDNResult:
  """Solves ``min_s 1/2 ||y - A s||^2 + lam ||s||_1`` by FISTA or ISTA.

  Thesis Eq. (2.4) (the BPDN decoder D of FL-CS, Alg. 4 line 11).

  Args:
    forward: s -> A s (e.g. ``ChunkedDCT.forward`` on its chunk domain).
    adjoint: r -> A^T r.
    y: Measurements, shaped like ``forward``'s output.
    init: Starting point (warm start), shaped like ``adjoint``'s output.
    lam: The L1 weight lambda >= 0.
    max_iters: Step limit (static).
    tol: Stop once ``||s_{k+1} - s_k|| <= tol ||s_{k+1}||``, checked after
      every second step; 0 runs ``max_iters`` steps (unless the iterate stops
      moving exactly).
    mask: Optional 0/1 array like ``init``: coordinates that are not
      unknowns (padding) are held at zero.
    step_size: tau; at most 1 / ||A||^2 (1 for orthonormal rows).
    solver: "fista" (accelerated) or "ista".
    restart: FISTA only: reset the momentum whenever it points uphill
      (gradient restart, O'Donoghue & Candes 2015); same fixed point, usually
      fewer steps to a given tolerance.

  Returns:
    A :class:`BPDNResult`.

  Raises:
    ValueError: For max_iters < 1, tol < 0, an unknown solver, or lam < 0
      (lam is checked when it is a Python number).
  """
  check_params(lam if isinstance(lam, (int, float)) else 0.0, max_iters, tol, solver)
  dtype = init.dtype
  if mask is not None:
    init = init * mask
  prox_grad = _prox_grad_step(forward, adjoint, y, jnp.asarray(lam, dtype),
                              jnp.asarray(step_size, dtype), mask,
                              accelerate=solver == "fista", restart=restart)

  def one_step(carry):
    k, s, z, t, _ = carry
    s_next, z_next, t_next = prox_grad(s, z, t)
    return k + 1, s_next, z_next, t_next, _relative_change(s_next, s)

  def two_steps(carry):
    # Two steps per trip: the first writes s_{k+1} over z_k and z_{k+1} over
    # s_k, the second swaps them back, so XLA updates both big buffers in
    # place; with one step per trip it copies both every step (slower on the
    # paper CNN: docs/performance.md, "Figures behind the code's choices").
    # The tolerance is checked after the second step.
    k, s, z, t, _ = carry
    s_mid, z_mid, t_mid = prox_grad(s, z, t)
    s_next, z_next, t_next = prox_grad(s_mid, z_mid, t_mid)
    return k + 2, s_next, z_next, t_next, _relative_change(s_next, s_mid)

  def more_pairs(carry):
    k, _, _, _, change = carry
    return (k + 2 <= max_iters) & (change > tol)

  carry = (jnp.int32(0), init, init, jnp.ones((), dtype), jnp.asarray(jnp.inf, dtype))
  carry = jax.lax.while_loop(more_pairs, two_steps, carry)
  # An odd step budget ends with one single step.
  carry = jax.lax.cond((carry[0] < max_iters) & (carry[4] > tol), one_step, lambda c: c,
                       carry)
  k, s, _, _, change = carry
  return BPDNResult(s, k, change)


def _prox_grad_step(forward, adjoint, y, lam, tau, mask, *, accelerate: bool,
                    restart: bool):
  """One proximal-gradient step (s_k, z_k, t_k) -> (s_{k+1}, z_{k+1}, t_{k+1})."""

  def step(s, z, t):
    v = z + tau * adjoint(y - forward(z))
    s_next = soft_threshold(v, tau * lam)
    if mask is not None:
      s_next = s_next * mask
    if not accelerate:
      return s_next, s_next, t
    if restart:  # gradient restart: momentum points uphill -> drop it
      t = jnp.where(jnp.sum((z - s_next) * (s_next - s)) > 0, 1.0, t)
    t_next = 0.5 * (1.0 + jnp.sqrt(1.0 + 4.0 * t * t))
    beta = (t - 1.0) / t_next
    return s_next, (1.0 + beta) * s_next - beta * s, t_next

  return step


def _relative_change(s_next: jax.Array, s: jax.Array) -> jax.Array:
  """||s_next - s|| / ||s_next|| (0 when both are 0, inf when only s_next is)."""
  diff = jnp.sqrt(jnp.sum(jnp.square(s_next - s)))
  size = jnp.sqrt(jnp.sum(jnp.square(s_next)))
  return jnp.where(size > 0, diff / jnp.maximum(size, jnp.finfo(s.dtype).tiny),
                   jnp.where(diff > 0, jnp.inf, 0.0))


def kkt_violation(forward: Callable[[jax.Array], jax.Array],
                  adjoint: Callable[[jax.Array], jax.Array], y: jax.Array,
                  s: jax.Array, lam: float, mask: jax.Array | None = None) -> jax.Array:
  """How far ``s`` is from optimal for Eq. (2.4), in units of lambda.

  Optimality: with g = A^T (y - A s), ``g_i = lam sign(s_i)`` where
  s_i != 0 and ``|g_i| <= lam`` where s_i = 0. Returns the largest violation
  max_i dist(g_i, lam * d|s_i|) over the unknowns (0 at the optimum).
  """
  g = adjoint(y - forward(s))
  on = jnp.abs(g - lam * jnp.sign(s))
  off = jnp.maximum(jnp.abs(g) - lam, 0.0)
  viol = jnp.where(s != 0, on, off)
  if mask is not None:
    viol = viol * mask
  return jnp.max(viol)
