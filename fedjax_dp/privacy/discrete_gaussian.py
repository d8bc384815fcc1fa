"""Exact sampling from the discrete Gaussian distribution over the integers.

Thesis Section 5.2.2, Eq. (5.1): ``DG(mu, xi)`` has probability mass
``exp(-(x - mu)^2 / (2 xi^2)) / Z`` at every integer x, for a real mean mu and
a scale xi > 0. FL-SIGN-DP (thesis Alg. 9) has every client send
``DG(sign(delta), sqrt(n) sigma / sqrt(|K|))`` integers.

Algorithm (Canonne, Kamath and Steinke 2020, "The Discrete Gaussian for
Differential Privacy", Algorithms 2-3, extended to a real mean):

1. Write ``mu = floor(mu) + f`` with ``f`` in [0, 1) and sample
   ``Y ~ DG(f, xi)``; the result is ``floor(mu) + Y``.
2. Propose Y from the discrete Laplace distribution ``P(y) ~ exp(-|y|/t)``,
   ``t = floor(xi) + 1``: ``U`` uniform in {0..t-1} kept with probability
   ``exp(-U/t)``, ``V`` geometric with ``P(V >= k) = exp(-k)``,
   ``X = U + t V``, a random sign, and ``-0`` rejected (CKS20 Alg. 2).
3. Accept Y with probability ``exp(-gamma(y))`` where
   ``gamma(y) = g* - g(y) >= 0``, ``g(y) = |y|/t - (y - f)^2/(2 xi^2)`` and
   ``g*`` its maximum over the integers, so that the accepted Y has mass
   proportional to ``exp(-|y|/t) exp(g(y)) = exp(-(y - f)^2 / (2 xi^2))``.
   With ``c = xi^2 / t``: ``gamma(y) = (y - f - c)^2 / (2 xi^2) - m`` for
   y >= 0 and ``(|y| + f - c)^2 / (2 xi^2) + 2f/t - m`` for y < 0, m the
   smallest of these over the integers (at most four candidates). For f = 0
   this is CKS20 Alg. 3; taking the maximum over integers rather than reals
   keeps the acceptance rate high when xi is small and f is not.

All Bernoulli(exp(-a)) tests of steps 2 and 3 are one comparison ``E > a``
with an exponential variable ``E = -ln(W)`` read from the bits of a uniform
W: the count of leading zero bits gives the binary exponent of W exactly,
the following 22 bits its mantissa. When the first 9 bits are all zero
(probability 2^-9) only ``E > 9 ln 2`` is known; if ``a`` is larger, the
proposal is *pending* and a later pass compares a fresh exponential with
``a - 9 ln 2`` (memorylessness), so arbitrarily small acceptance
probabilities are exact. V, the geometric part, is ``floor(E)`` of another
word. A proposal costs three 32-bit words. Steps 2-3 are vectorised: every
element draws two proposals at once, then the (ever fewer) elements without
an accepted proposal are gathered into smaller buffers that draw four, then
eight at a time until none is left (:func:`_schedule`). Jittable and
vmappable; ``shape`` is static.

What "exact" means here. The structure is exact rejection sampling: the
support is all of Z (up to the cut-off below) and no continuous Gaussian is
rounded. The arithmetic is float32 and uint32 (no ``jax_enable_x64``):

* ``U`` is exactly uniform (a 32-bit word is rejected when it falls in the
  incomplete last block of size ``2^32 mod t``, and the proposal with it).
* Each acceptance exponent is computed in float32 with an absolute error
  below ~1e-6 for every outcome with a non-negligible chance (the relevant
  terms are ``(y - f - c)^2 / (2 xi^2)`` with ``|y - f - c|`` up to ~10 xi,
  and ``|y|, c`` are exact or within 0.06 for xi <= 1e6), and E has an
  absolute error below ~3e-6 (mantissa grid 2^-22, float32 rounding of
  ``(z+1) ln 2``); an absolute error a in an exponent is a relative error of
  about a in a probability. So every integer's probability is within a
  relative ~1e-5 of the exact DG pmf: a multiplicative error, the kind DP
  analyses tolerate (a pmf ratio error 1 + r moves epsilon by about 2r).
* Cut-off: the geometric V is read from one word; an all-zero word
  (probability 2^-32) rejects the proposal, so proposals with V >= 23
  (|y| >= 23 t) are never made. The DG mass lost is below e^-200.
* Valid for 0 < xi <= 2^22 and |mu| < 2^30 (sampled integers are int32). A
  scale outside (0, 2^22] is refused when it is a concrete value; a traced
  one (under ``jit``) cannot be checked and is clipped into
  [``_MIN_SCALE``, 2^22], so a caller that traces the scale bounds it first
  (FL-SIGN-DP's tables do: they are refused above about 6e5).

Throughput on this project's 2-core CPU: see ``benchmarks/discrete_gaussian.py``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

_LN2 = math.log(2.0)
_TAIL = 9 * _LN2  # E > _TAIL when a uniform starts with nine zero bits
_MAX_SCALE = float(2 ** 22)
# The smallest scale sampled: below it DG is the point mass at the nearest
# integer to within float32, and 1 / (2 xi^2) must stay finite (a scale of
# 1e-20 made every acceptance exponent NaN, and the sampler never ended).
_MIN_SCALE = 1e-15
_MIN_BUFFER = 64  # the last buffer size (see _schedule)
# Random 32-bit words per proposal: U, V, and the acceptance test (+ sign).
_WORDS = 3


class _State(NamedTuple):
  """Per-element sampler state (flat vectors).

  Attributes:
    y: The accepted (or pending) value.
    done: Accepted.
    pending: A proposal passed every test but the last, whose exponential
      variable E is known only to exceed 9 ln 2 (probability 2^-9) while the
      exponent to beat is larger; ``E - 9 ln 2`` is a fresh Exp(1)
      (memorylessness), drawn in a later pass against ``residual``.
    residual: The exponent still to beat for a pending proposal.
  """

  y: jax.Array
  done: jax.Array
  pending: jax.Array
  residual: jax.Array


def _exponential(word: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Exp(1) variables ``-ln(W)`` for a uniform W in (0, 1) from one word.

  W = 0.b1 b2 ... in binary with ``word`` its first 32 bits. With z <= 8
  leading zeros, ``W = 2^-(z+1) (1 + F)`` with F uniform in [0, 1) read from
  the next 22 bits (grid midpoint), so ``E = (z+1) ln 2 - ln(1 + F)`` in
  (0, 9 ln 2]. Nine leading zeros (probability 2^-9) mean ``E > 9 ln 2``, and
  then ``E - 9 ln 2`` is again Exp(1) (memorylessness). Bit 0 is never read.

  Returns:
    ``(E, tail)``: E float32 (meaningless where ``tail``), and whether W had
    nine leading zeros.
  """
  zeros = jax.lax.clz(word)
  top = jnp.left_shift(word, jnp.minimum(zeros, 8))  # leading one at bit 31
  frac = (((top & 0x7FFFFFFF) >> 9).astype(jnp.float32) + 0.5) * (2.0 ** -22)
  e = (zeros.astype(jnp.float32) + 1.0) * _LN2 - jnp.log1p(frac)
  return e, zeros >= 9


def _geometric(word: jax.Array) -> tuple[jax.Array, jax.Array]:
  """V with ``P(V >= k) = exp(-k)`` as ``floor(-ln W)`` from one word.

  The bits after the leading one of ``word`` form the mantissa (at least 16
  bits for V <= 10, where the discrete Laplace proposal can still be
  accepted). A zero word (probability 2^-32, V >= 23) is reported invalid and
  the proposal rejected: proposals of 23 t and beyond are never made, a
  cut-off of DG mass below e^-200.

  Returns:
    ``(V, valid)``, V int32.
  """
  zeros = jax.lax.clz(word)
  top = jnp.left_shift(word, jnp.minimum(zeros, 31))  # leading one at bit 31
  frac = (((top & 0x7FFFFFFF) >> 7).astype(jnp.float32) + 0.5) * (2.0 ** -24)
  e = (zeros.astype(jnp.float32) + 1.0) * _LN2 - jnp.log1p(frac)
  return jnp.floor(e).astype(jnp.int32), word != 0


def _gamma_pos(y, f, c, inv2var):
  """Acceptance exponent before the integer minimum, for y >= 0."""
  return jnp.square(y - f - c) * inv2var


def _gamma_neg(a, f, c, t, inv2var):
  """Acceptance exponent before the integer minimum, for y = -a < 0."""
  return jnp.square(a + f - c) * inv2var + 2.0 * f / t


def _min_gamma(f, c, t, inv2var):
  """The smallest acceptance exponent over the integers (at most 4 candidates)."""
  yp = jnp.floor(f + c)
  an = jnp.maximum(jnp.floor(c - f), 1.0)
  return jnp.minimum(
      jnp.minimum(_gamma_pos(yp, f, c, inv2var), _gamma_pos(yp + 1.0, f, c, inv2var)),
      jnp.minimum(_gamma_neg(an, f, c, t, inv2var),
                  _gamma_neg(an + 1.0, f, c, t, inv2var)))


def _attempt(key: jax.Array, frac: jax.Array, scale: jax.Array, state: _State,
             proposals: int) -> _State:
  """Tries ``proposals`` proposals for each element not yet accepted.

  Proposals are taken in order: an element ends at its first proposal that
  is accepted or becomes pending. A pending element first tests a fresh
  exponential against its residual exponent.

  Args:
    key: PRNG key.
    frac: (B,) float32 fractional means f in [0, 1).
    scale: (B,) float32 xi > 0.
    state: The elements' state (done elements are left unchanged).
    proposals: Attempts per element (static).

  Returns:
    The new state.
  """
  num = frac.shape[0]
  words = jax.random.bits(key, (_WORDS, num, proposals), jnp.uint32)
  f = frac[:, None]
  xi = scale[:, None]
  t_int = jnp.floor(xi).astype(jnp.int32) + 1
  t = t_int.astype(jnp.float32)
  t_u = t_int.astype(jnp.uint32)

  # U uniform in {0..t-1}: reject the top (2^32 mod t) words, then mod t.
  rem = (jnp.zeros_like(t_u) - t_u) % t_u  # (2^32 - t) mod t = 2^32 mod t
  u_ok = words[0] <= jnp.uint32(0xFFFFFFFF) - rem
  u = (words[0] % t_u).astype(jnp.int32)
  v, v_ok = _geometric(words[1])
  e, tail = _exponential(words[2])
  negative = (words[2] & 1) == 1  # bit 0 is not read by _exponential
  x = u + t_int * v
  y = jnp.where(negative, -x, x)

  c = xi * (xi / t)
  inv2var = 0.5 / jnp.square(xi)
  xf = x.astype(jnp.float32)
  gamma = jnp.where(negative, _gamma_neg(xf, f, c, t, inv2var),
                    _gamma_pos(xf, f, c, inv2var)) - _min_gamma(f, c, t, inv2var)
  # Bernoulli(exp(-U/t)) and Bernoulli(exp(-gamma)) in one test E > a.
  a = u.astype(jnp.float32) / t + gamma
  proposed = u_ok & v_ok & ~(negative & (x == 0))
  accept = proposed & jnp.where(tail, a < _TAIL, e > a)
  undecided = proposed & tail & (a >= _TAIL)
  ends = accept | undecided
  first = jnp.argmax(ends, axis=1)[:, None]
  pick = lambda arr: jnp.take_along_axis(arr, first, axis=1)[:, 0]
  any_end = jnp.any(ends, axis=1)
  new_done = any_end & pick(accept)
  new_pending = any_end & pick(undecided)
  new_y = pick(y)
  new_residual = pick(a) - _TAIL

  # A pending element decides with the first proposal's exponential instead.
  e0, tail0 = e[:, 0], tail[:, 0]
  res = state.residual
  pend_done = jnp.where(tail0, res < _TAIL, e0 > res)
  pend_again = tail0 & (res >= _TAIL)

  active = ~state.done
  was_pending = state.pending
  done = state.done | (active & jnp.where(was_pending, pend_done, new_done))
  pending = active & jnp.where(was_pending, pend_again, new_pending)
  y_out = jnp.where(active & ~was_pending & (new_done | new_pending), new_y, state.y)
  residual = jnp.where(active & was_pending, res - _TAIL,
                       jnp.where(active & new_pending, new_residual, state.residual))
  return _State(y_out, done, pending, residual)


def _schedule(num: int, max_levels: int | None = None) -> list[tuple[int, int]]:
  """Static (buffer size, proposals per element) of the levels.

  All elements try 2 proposals (about 27% remain at the typical acceptance
  rate of 0.48); a buffer of 30% of them tries 4 (2% remain), one of 1/32
  tries 8 (0.01% remain), then buffers of 1/2048 and 64 try 8 until none is
  left. Each buffer holds what the level before typically leaves, so each
  level usually runs once; at lower acceptance rates (0.3 for xi < 1) a level
  repeats, which costs time, never correctness.
  """
  levels = [(num, 2)]
  for size, proposals in ((-(-num * 3 // 10), 4), (-(-num // 32), 8),
                          (-(-num // 2048), 8), (_MIN_BUFFER, 8)):
    size = min(num, max(_MIN_BUFFER, size))
    if size < levels[-1][0]:
      levels.append((size, proposals))
  return levels[:max_levels]


def _sample_fraction(key: jax.Array, frac: jax.Array, scale: jax.Array,
                     max_levels: int | None = None) -> jax.Array:
  """``DG(frac_i, scale_i)`` for a flat vector, frac in [0, 1).

  Level k works on a buffer of gathered unfinished elements and repeats until
  no more remain than the next level's buffer holds, so the work stays about
  proportional to the number of proposals whatever the acceptance rate.
  """
  num = frac.shape[0]
  state = _State(jnp.zeros((num,), jnp.int32), jnp.zeros((num,), bool),
                 jnp.zeros((num,), bool), jnp.zeros((num,), jnp.float32))

  def refill(state, pass_key, size, proposals):
    """Tries (up to) ``size`` unfinished elements again."""
    if size == num:
      return _attempt(pass_key, frac, scale, state, proposals)
    idx = jnp.nonzero(~state.done, size=size, fill_value=num)[0]
    safe = jnp.minimum(idx, num - 1)
    sub = _State(*(s[safe] for s in state))
    sub = sub._replace(done=sub.done | (idx >= num))  # fill slots stay put
    sub = _attempt(pass_key, frac[safe], scale[safe], sub, proposals)
    return _State(*(s.at[idx].set(n, mode="drop") for s, n in zip(state, sub)))

  levels = _schedule(num, max_levels)
  for level, (size, proposals) in enumerate(levels):
    level_key = jax.random.fold_in(key, level)
    target = levels[level + 1][0] if level + 1 < len(levels) else 0
    if level == 0 and len(levels) > 1:  # all unfinished: one full pass
      state = refill(state, jax.random.fold_in(level_key, 0), size, proposals)
      continue

    def cond(carry, target=target):
      return jnp.sum(~carry[0].done) > target

    def body(carry, size=size, proposals=proposals, level_key=level_key):
      state, i = carry
      return refill(state, jax.random.fold_in(level_key, i), size, proposals), i + 1

    state, _ = jax.lax.while_loop(cond, body, (state, jnp.int32(0)))
  return state.y


def sample_discrete_gaussian(key: jax.Array, mean: jax.Array | float,
                             sigma: jax.Array | float,
                             shape: tuple[int, ...] | None = None,
                             max_levels: int | None = None) -> jax.Array:
  """Samples the discrete Gaussian ``DG(mean, sigma)`` over the integers.

  Thesis Eq. (5.1); the sampler of Canonne, Kamath and Steinke 2020 extended
  to real means (see the module docstring for the algorithm and for what
  exact means in float32). Jittable (``shape`` static) and vmappable.

  Args:
    key: PRNG key, used for nothing else.
    mean: Real mean(s) mu, broadcastable to ``shape``; |mu| < 2^30.
    sigma: Scale(s) xi, broadcastable to ``shape``; 0 < xi <= 2^22 (the
      variance of DG is close to xi^2 for xi >= 1, smaller below). A traced
      scale is clipped into that range (the module docstring).
    shape: Output shape; default the broadcast shape of mean and sigma.
    max_levels: Compile fewer of the buffer levels (:func:`_schedule`): the
      same distribution, about 2.5x less to compile with 2, some more passes.

  Returns:
    int32 samples of the given shape.

  Raises:
    ValueError: A concrete sigma outside (0, 2^22] (one line).
  """
  _check_scale(sigma)
  mean = jnp.asarray(mean, jnp.float32)
  sigma = jnp.asarray(sigma, jnp.float32)
  if shape is None:
    shape = jnp.broadcast_shapes(mean.shape, sigma.shape)
  shape = tuple(int(d) for d in shape)
  size = int(np.prod(shape, dtype=np.int64))
  if size == 0:
    return jnp.zeros(shape, jnp.int32)
  mean = jnp.broadcast_to(mean, shape).reshape(-1)
  sigma = jnp.broadcast_to(sigma, shape).reshape(-1)
  base = jnp.floor(mean)
  frac = mean - base  # exact in float32
  y = _sample_fraction(key, frac, jnp.clip(sigma, _MIN_SCALE, _MAX_SCALE), max_levels)
  return (base.astype(jnp.int32) + y).reshape(shape)


def _check_scale(sigma) -> None:
  """Refuses a concrete scale outside (0, 2^22]: clipped, it would sample
  another distribution (above, one of less noise than asked for)."""
  try:
    values = np.asarray(sigma, np.float64)
  except jax.errors.TracerArrayConversionError:
    return  # traced: clipped (module docstring)
  if values.size and not (np.all(values > 0) and np.all(values <= _MAX_SCALE)):
    bad = values[~((values > 0) & (values <= _MAX_SCALE))].flat[0]
    raise ValueError(f"discrete Gaussian sigma must be in (0, 2^22], got {bad:g}")


def discrete_gaussian_pmf(support: np.ndarray, mean: float, sigma: float) -> np.ndarray:
  """The exact DG(mean, sigma) pmf on ``support`` (float64, numpy).

  The normaliser is a direct sum over mean +- (40 sigma + 10) for sigma <= 2,
  else the Jacobi theta series of thesis App. 8.1.1,
  ``Z = sqrt(2 pi) sigma (1 + 2 sum_k exp(-2 pi^2 sigma^2 k^2) cos(2 pi k mean))``,
  whose terms beyond the first are below 1e-34 there.

  Args:
    support: Integers at which to evaluate.
    mean: mu.
    sigma: xi > 0.

  Returns:
    The probabilities, shaped like ``support``.
  """
  if sigma <= 2:
    half = int(math.ceil(40 * sigma + 10))
    center = int(math.floor(mean))
    grid = np.arange(center - half, center + half + 1, dtype=np.float64)
    log_z = np.logaddexp.reduce(-np.square(grid - mean) / (2 * sigma * sigma))
  else:
    k = np.arange(1, 4, dtype=np.float64)
    theta = 1 + 2 * np.sum(np.exp(-2 * math.pi ** 2 * sigma ** 2 * k ** 2)
                           * np.cos(2 * math.pi * k * mean))
    log_z = math.log(math.sqrt(2 * math.pi) * sigma * theta)
  x = np.asarray(support, np.float64)
  return np.exp(-np.square(x - mean) / (2 * sigma * sigma) - log_z)
