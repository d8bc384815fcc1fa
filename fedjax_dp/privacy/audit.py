"""Statistics of empirical privacy audits with canary clients.

Andrew et al. (ICLR 2024, "One-shot Empirical Privacy Estimation for Federated
Learning", Sections 3-4) insert canary clients whose update is a fixed random
unit direction ``u_j`` (clipped to S) and, after training, compare the cosines
of ``u_j`` with the released aggregate for inserted and held-out (never
inserted) canaries. This module holds the pure pieces of that audit:

* Canary directions that are never stored: ``u_j`` is a row of a randomized
  Hadamard matrix, ``u_j[k] = signs[k] H[rows[j], positions[k]] / sqrt(m)``
  (:class:`CanaryBasis`), so the dot products of all canaries with an
  m-vector cost one fast Walsh-Hadamard transform (:func:`canary_dots`).
* Andrew et al.'s epsilon estimate (:func:`estimate_epsilon`): the epsilon of
  the pair of Gaussians fitted to the two sets of statistics
  (:func:`gaussian_epsilon`, exact hockey-stick divergence).
* The one-run auditing lower bound of Steinke, Nasr and Jagielski (NeurIPS
  2023, "Privacy auditing with one (1) training run", Theorem 3.1):
  :func:`one_run_lower_bound`.
* The estimate's error, a bootstrap over the canaries
  (:func:`bootstrap_epsilon`, with the vectorized :func:`gaussian_epsilons`),
  and jax-privacy's ``CanaryScoreAuditor`` on the same statistics
  (:func:`jax_privacy_figures`). :func:`audit_figures` labels every figure a
  lower bound, an approximate bound or an estimate (:data:`FIGURE_KINDS`);
  only bounds decide a violation (:func:`decision_lower_bound`, jointly
  valid over all of them).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from scipy import special, stats

from fedjax_dp.privacy import bisection

# Largest epsilon searched; callers report a result equal to it as ">= EPS_CAP".
EPS_CAP = 1000.0
# Fractions of the m candidates guessed "inserted" by the one-run audit.
ONE_RUN_GUESS_FRACTIONS = (0.01, 0.05, 0.1, 0.25, 0.5)


def _next_power_of_two(n: int) -> int:
  return 1 << max(int(n) - 1, 0).bit_length()


@jax.jit
def fwht(x: jax.Array) -> jax.Array:
  """Unnormalized fast Walsh-Hadamard transform along the last axis.

  ``y[..., j] = sum_k H[j, k] x[..., k]`` with the Sylvester-ordered Hadamard
  matrix ``H[j, k] = (-1)^popcount(j & k)``; ``fwht(fwht(x)) = d' x``. One
  radix-2 butterfly per bit, O(d' log d') additions.

  Args:
    x: (..., d') array, d' a power of two.

  Returns:
    The (..., d') transform, same dtype.

  Raises:
    ValueError: If the last axis is not a power of two.
  """
  n = x.shape[-1]
  if n < 1 or n & (n - 1):
    raise ValueError(f"fwht needs a power-of-two last axis, got {n}.")
  batch = x.shape[:-1]
  h = 1
  while h < n:
    # Indices j and j + h of each 2h-block differ only in bit log2(h).
    y = x.reshape(batch + (n // (2 * h), 2, h))
    a, b = y[..., 0, :], y[..., 1, :]
    x = jnp.stack([a + b, a - b], axis=-2).reshape(batch + (n,))
    h *= 2
  return x


class CanaryBasis(NamedTuple):
  """The canary directions of Andrew et al. (ICLR 2024), as randomized Hadamard rows.

  Canary j's direction in the m-dimensional message space is
  ``u_j[k] = signs[k] H[rows[j], positions[k]] / sqrt(m)``, a unit vector with
  entries ``+-1/sqrt(m)``. Since ``H[r, p] H[r', p] = H[r ^ r', p]``,
  ``<u_i, u_j> = (1/m) sum_k H[rows[i] ^ rows[j], positions[k]]``: the mean of
  m values drawn without replacement from a balanced +-1 row, so 0 on average
  with variance ``(d' - m) / (m (d' - 1)) <= 1/m``.

  ``size`` (d') is not stored: it is derived from the static shapes,
  ``next_power_of_two(max(m, num_canaries + 1))``, the rule of
  :func:`canary_basis`. The tuple therefore holds arrays only and can be passed
  to jitted functions as an ordinary argument. Keep it whole: select canaries
  with the ``which`` argument of :func:`canary_directions`, or by indexing the
  output of :func:`canary_dots`, never by slicing ``rows`` (that can change d').

  Attributes:
    rows: (num_canaries,) int32 distinct Hadamard rows in [1, d').
    positions: (m,) int32 distinct positions in [0, d') of the m coordinates.
    signs: (m,) float32 random signs +-1.
  """
  rows: jax.Array
  positions: jax.Array
  signs: jax.Array

  @property
  def num_values(self) -> int:
    """m, the dimension of the message space."""
    return self.positions.shape[-1]

  @property
  def num_canaries(self) -> int:
    return self.rows.shape[-1]

  @property
  def size(self) -> int:
    """d', the order of the Hadamard matrix (a static python int)."""
    return _next_power_of_two(max(self.num_values, self.num_canaries + 1))


def canary_basis(key: jax.Array, num_values: int, num_canaries: int) -> CanaryBasis:
  """Draws the random Hadamard rows, positions and signs of the canaries.

  d' is the smallest power of two >= ``num_values`` and >= ``num_canaries + 1``.
  The rows are drawn without replacement from 1..d'-1 (never the constant row
  0), the positions are the first m entries of a random permutation of d'
  (a random injection of the m coordinates into d', which makes distinct
  canaries nearly orthogonal even when m < d'), and the signs are Rademacher.

  Args:
    key: PRNG key used for nothing else.
    num_values: m >= 1, the dimension of the message space.
    num_canaries: The number of canaries (>= 1).

  Returns:
    The :class:`CanaryBasis`.
  """
  if int(num_values) != num_values or num_values < 1:
    raise ValueError(f"num_values must be a positive int, got {num_values}.")
  if int(num_canaries) != num_canaries or num_canaries < 1:
    raise ValueError(f"num_canaries must be a positive int, got {num_canaries}.")
  num_values, num_canaries = int(num_values), int(num_canaries)
  size = _next_power_of_two(max(num_values, num_canaries + 1))
  if size > 2**30:
    raise ValueError(f"d' = {size} overflows the int32 Hadamard indices.")
  k_rows, k_positions, k_signs = jax.random.split(key, 3)
  rows = 1 + jax.random.choice(k_rows, size - 1, (num_canaries,), replace=False)
  positions = jax.random.permutation(k_positions, size)[:num_values]
  signs = jax.random.rademacher(k_signs, (num_values,), dtype=jnp.float32)
  return CanaryBasis(rows.astype(jnp.int32), positions.astype(jnp.int32), signs)


@jax.jit
def canary_signs(basis: CanaryBasis, which: jax.Array) -> jax.Array:
  """The canary directions as +-1 sign vectors, ``sqrt(m) u_{which}``.

  For schemes whose messages are sign vectors. Computed from the parity of
  ``rows & positions`` (``jax.lax.population_count``); nothing is stored
  beyond the output.

  Args:
    basis: The :class:`CanaryBasis`.
    which: Integer array of canary indices in [0, num_canaries).

  Returns:
    ``which.shape + (m,)`` int32 entries ``signs[k] H[rows[which], positions[k]]``.
  """
  rows = basis.rows[jnp.asarray(which)]
  parity = jax.lax.population_count(rows[..., None] & basis.positions) & 1
  return (1 - 2 * parity) * basis.signs.astype(jnp.int32)


@jax.jit
def canary_directions(basis: CanaryBasis, which: jax.Array) -> jax.Array:
  """The unit canary directions ``u_{which}`` of Andrew et al. (ICLR 2024, Sec. 3).

  Args:
    basis: The :class:`CanaryBasis`.
    which: Integer array of canary indices in [0, num_canaries).

  Returns:
    ``which.shape + (m,)`` float32 unit vectors with entries ``+-1/sqrt(m)``.
  """
  scale = 1.0 / math.sqrt(basis.num_values)
  return canary_signs(basis, which).astype(jnp.float32) * scale


@jax.jit
def canary_dots(basis: CanaryBasis, v: jax.Array) -> jax.Array:
  """``<u_j, v>`` for every canary j, with one fast Walsh-Hadamard transform.

  ``<u_j, v> = (1/sqrt(m)) sum_k H[rows[j], positions[k]] signs[k] v[k]`` is
  entry ``rows[j]`` of the transform of the d'-vector x with
  ``x[positions] = signs * v`` and zeros elsewhere.

  Args:
    basis: The :class:`CanaryBasis`.
    v: (..., m) vector(s) of the message space.

  Returns:
    (..., num_canaries) float32 dot products.
  """
  m = basis.num_values
  if v.shape[-1] != m:
    raise ValueError(f"v has {v.shape[-1]} values, the basis {m}.")
  x = jnp.zeros(v.shape[:-1] + (basis.size,), jnp.float32)
  x = x.at[..., basis.positions].set(basis.signs * v.astype(jnp.float32))
  return fwht(x)[..., basis.rows] * (1.0 / math.sqrt(m))


def _log_diff_exp(a: float, b: float) -> float:
  """``log(e^a - e^b)``, -inf when ``b >= a``."""
  if b >= a:
    return -math.inf
  return a + math.log1p(-math.exp(b - a))


def _log_std_normal_prob(kind: str, t1: float, t2: float) -> float:
  """log of the N(0, 1) probability of a region (see :func:`_loss_region`)."""
  log_cdf = lambda z: float(special.log_ndtr(z))
  log_sf = lambda z: float(special.log_ndtr(-z))
  if kind == "empty":
    return -math.inf
  if kind == "all":
    return 0.0
  if kind == "above":
    return log_sf(t1)
  if kind == "below":
    return log_cdf(t1)
  if kind == "outside":
    return float(np.logaddexp(log_cdf(t1), log_sf(t2)))
  # "inside": difference of the tail probabilities on the side of the interval.
  if t1 > 0:
    return _log_diff_exp(log_sf(t1), log_sf(t2))
  return _log_diff_exp(log_cdf(t2), log_cdf(t1))


def _loss_region(m: float, s: float, eps: float) -> tuple[str, float, float]:
  """``{y : log p(y)/q(y) > eps}`` for ``P = N(m, s^2)``, ``Q = N(0, 1)``.

  ``log p/q = a y^2 + b y + c0`` with ``a = (1 - 1/s^2)/2``, ``b = m/s^2`` and
  ``c0 = -log s - m^2/(2 s^2)``: a half-line (``a = 0``), the inside (``a < 0``)
  or the outside (``a > 0``) of the interval between the roots.

  Returns:
    ``(kind, t1, t2)``, kind one of "empty", "all", "above" (``y > t1``),
    "below" (``y < t1``), "inside" (``t1 < y < t2``), "outside".
  """
  a = 0.5 * (s - 1.0) * (s + 1.0) / (s * s)
  b = m / (s * s)
  c = -math.log(s) - m * m / (2.0 * s * s) - eps
  if a == 0.0:
    if b == 0.0:
      return ("all" if c > 0 else "empty"), 0.0, 0.0
    return ("above" if b > 0 else "below"), -c / b, 0.0
  disc = b * b - 4.0 * a * c
  if disc <= 0.0:
    return ("all" if a > 0 else "empty"), 0.0, 0.0
  # Numerically stable roots (no cancellation when a is tiny).
  half = -0.5 * (b + math.copysign(math.sqrt(disc), b))
  with np.errstate(divide="ignore", over="ignore"):
    r1 = float(np.float64(half) / a)
  r2 = c / half
  t1, t2 = min(r1, r2), max(r1, r2)
  return ("outside" if a > 0 else "inside"), t1, t2


def _log_hockey_stick(eps: float, mu_p: float, sd_p: float, mu_q: float,
                      sd_q: float) -> float:
  """``log H_eps(P || Q)`` for ``P = N(mu_p, sd_p^2)``, ``Q = N(mu_q, sd_q^2)``.

  ``H_eps(P || Q) = P(L > eps) - e^eps Q(L > eps)`` with ``L = log p/q``,
  evaluated after standardizing Q (the divergence is invariant under affine
  maps of x).
  """
  m, s = (mu_p - mu_q) / sd_q, sd_p / sd_q
  kind, t1, t2 = _loss_region(m, s, eps)
  log_q = _log_std_normal_prob(kind, t1, t2)
  if kind in ("empty", "all"):
    log_p = log_q
  else:
    with np.errstate(over="ignore"):
      u1, u2 = (t1 - m) / s, (t2 - m) / s
    log_p = _log_std_normal_prob(kind, u1, u2)
  return _log_diff_exp(log_p, eps + log_q)


def gaussian_epsilon(mu0: float, sd0: float, mu1: float, sd1: float,
                     delta: float) -> float:
  """The epsilon at delta of the pair ``P = N(mu1, sd1^2)``, ``Q = N(mu0, sd0^2)``.

  The smallest ``eps >= 0`` with ``max(H_eps(P||Q), H_eps(Q||P)) <= delta``,
  ``H_eps`` the hockey-stick divergence, as used by Andrew et al. (ICLR 2024,
  Section 4) to turn the fitted canary-cosine Gaussians into an epsilon. The
  privacy loss is quadratic in x, so ``H_eps`` is computed exactly from normal
  tail probabilities (in log space), then bisected (it decreases in eps). With
  equal variances this is the analytic Gaussian mechanism of Balle and Wang
  (ICML 2018, Theorem 8) with ``mu = |mu1 - mu0| / sd``:
  ``delta(eps) = Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu)``.

  Args:
    mu0: Mean of the held-out statistic (Q).
    sd0: Its standard deviation (>= 0).
    mu1: Mean of the inserted statistic (P).
    sd1: Its standard deviation (>= 0).
    delta: delta in (0, 1).

  Returns:
    epsilon in [0, EPS_CAP]; EPS_CAP means ">= EPS_CAP" (e.g. a zero standard
    deviation with distinct distributions, where epsilon is infinite).
  """
  if not 0 < delta < 1:
    raise ValueError(f"delta must be in (0, 1), got {delta}.")
  for name, value in (("mu0", mu0), ("mu1", mu1)):
    if not math.isfinite(value):
      raise ValueError(f"{name} must be finite, got {value}.")
  for name, value in (("sd0", sd0), ("sd1", sd1)):
    if not (math.isfinite(value) and value >= 0):
      raise ValueError(f"{name} must be a finite number >= 0, got {value}.")
  mu0, sd0, mu1, sd1 = float(mu0), float(sd0), float(mu1), float(sd1)
  if sd0 == 0 or sd1 == 0:
    # A point mass against any other distribution has an infinite privacy loss.
    return 0.0 if (sd0 == sd1 and mu0 == mu1) else EPS_CAP
  log_delta = math.log(delta)

  def ok(eps: float) -> bool:
    return max(_log_hockey_stick(eps, mu1, sd1, mu0, sd0),
               _log_hockey_stick(eps, mu0, sd0, mu1, sd1)) <= log_delta

  if ok(0.0):
    return 0.0
  if not ok(EPS_CAP):
    return EPS_CAP
  lo, hi = 0.0, 1.0
  while not ok(hi):
    lo, hi = hi, min(2.0 * hi, EPS_CAP)
  return bisection.bisect(ok, lo, hi, rel_tol=1e-12)[1]


def estimate_epsilon(inserted: np.ndarray, held_out: np.ndarray, delta: float) -> float:
  """Andrew et al.'s one-shot epsilon estimate (ICLR 2024, Sections 3-4).

  Fits a Gaussian (sample mean, sample standard deviation with ddof=1) to the
  statistics (e.g. cosines with the released aggregate) of the inserted and of
  the held-out canaries, and returns the epsilon of that pair of Gaussians,
  :func:`gaussian_epsilon`.

  Args:
    inserted: Statistics of the inserted canaries (>= 2 values).
    held_out: Statistics of the held-out canaries (>= 2 values).
    delta: delta in (0, 1).

  Returns:
    The estimate in [0, EPS_CAP] (EPS_CAP meaning ">= EPS_CAP").
  """
  inserted = np.asarray(inserted, np.float64).ravel()
  held_out = np.asarray(held_out, np.float64).ravel()
  if inserted.size < 2 or held_out.size < 2:
    raise ValueError(f"need >= 2 inserted and >= 2 held-out statistics, got "
                     f"{inserted.size} and {held_out.size}.")
  return gaussian_epsilon(float(held_out.mean()), float(held_out.std(ddof=1)),
                          float(inserted.mean()), float(inserted.std(ddof=1)), delta)


def one_run_p_value(m: int, r: int, v: int, eps: float, delta: float) -> float:
  """p-value of ``v`` correct guesses out of ``r`` under (eps, delta)-DP.

  Steinke, Nasr and Jagielski (NeurIPS 2023), Theorem 3.1: if each of the m
  candidates is inserted independently with probability 1/2 and the mechanism
  is (eps, delta)-DP, the number V of correct guesses among r satisfies
  ``P[V >= v] <= P[W >= v] + 2 m delta alpha(v)``, ``W ~ Binomial(r, q)``,
  ``q = e^eps / (1 + e^eps)`` and
  ``alpha(v) = max_{i=1..v} P[v > W >= v - i] / i``.

  Args:
    m: Number of candidate canaries.
    r: Number of guesses (abstentions excluded), ``0 <= r <= m``.
    v: Number of correct guesses, ``0 <= v <= r``.
    eps: epsilon >= 0 of the null hypothesis.
    delta: delta in [0, 1] of the null hypothesis.

  Returns:
    The p-value, at most 1.
  """
  if not 0 <= v <= r <= m:
    raise ValueError(f"need 0 <= v <= r <= m, got v={v}, r={r}, m={m}.")
  if v == 0:
    return 1.0
  q = float(special.expit(eps))
  beta = float(stats.binom.sf(v - 1, r, q))
  # Partial sums P[v > W >= v - i] = sum_{k=v-i}^{v-1} P[W = k], i = 1..v.
  tails = np.cumsum(stats.binom.pmf(np.arange(v - 1, -1, -1), r, q))
  alpha = float(np.max(tails / np.arange(1, v + 1)))
  return min(beta + 2.0 * m * delta * alpha, 1.0)


def _one_run_epsilon(m: int, r: int, v: int, delta: float, threshold: float) -> float:
  """The largest eps whose p-value is below ``threshold`` (0 when none is)."""
  rejected = lambda eps: one_run_p_value(m, r, v, eps, delta) < threshold
  if not rejected(0.0):
    return 0.0
  if rejected(EPS_CAP):
    return EPS_CAP
  # The last eps still rejected: the bound holds at the stated confidence.
  return bisection.bisect(lambda eps: not rejected(eps), 0.0, EPS_CAP, rel_tol=1e-9,
                          floor=1.0)[0]


def one_run_lower_bound(statistics: np.ndarray, inserted: np.ndarray, delta: float,
                        confidence: float = 0.95) -> dict:
  """The one-run auditing lower bound on epsilon (Steinke et al. 2023, Section 3).

  Valid only when each of the m candidate canaries was inserted independently
  with probability 1/2 (Steinke, Nasr and Jagielski, NeurIPS 2023, Theorem
  3.1); the held-out canaries of a fixed split do not qualify. The auditor
  ranks the candidates by statistic, guesses "inserted" for the k+ highest and
  "held out" for the k- lowest and abstains on the rest; r = k+ + k- guesses
  with v correct reject (eps, delta)-DP when :func:`one_run_p_value` is below
  ``1 - confidence``. The grid ``k+ = ONE_RUN_GUESS_FRACTIONS * m`` (at least
  1), ``k- in {0, k+}`` (pairs with ``k+ + k- > m`` and duplicates skipped) is
  tested with a Bonferroni correction over the pairs tested (10 for m >= 100).
  The p-value is assumed increasing in eps (bisection), as in the paper.

  Args:
    statistics: (m,) statistic per candidate, higher meaning "more inserted".
    inserted: (m,) bool, the true memberships.
    delta: delta in [0, 1) of the audited guarantee.
    confidence: Confidence level c in (0, 1) of the bound.

  Returns:
    ``{"epsilon_lower_bound": float, "confidence": c, "guesses": r,
    "correct": v}``, r and v those of the best pair (the first one tested when
    all bounds are 0). An ``epsilon_lower_bound`` of EPS_CAP means ">=".
  """
  statistics = np.asarray(statistics, np.float64)
  inserted = np.asarray(inserted)
  if statistics.ndim != 1 or statistics.shape != inserted.shape or statistics.size < 1:
    raise ValueError(f"statistics and inserted must be equal 1-D shapes, got "
                     f"{statistics.shape} and {inserted.shape}.")
  if inserted.dtype != bool:
    raise ValueError(f"inserted must be bool, got {inserted.dtype}.")
  if np.isnan(statistics).any():
    raise ValueError("statistics contain NaN.")
  if not 0 <= delta < 1:
    raise ValueError(f"delta must be in [0, 1), got {delta}.")
  if not 0 < confidence < 1:
    raise ValueError(f"confidence must be in (0, 1), got {confidence}.")
  m = statistics.size
  # Stable ranking: ties are broken by index, which does not depend on membership.
  ranked = inserted[np.argsort(statistics, kind="stable")]
  pairs = []
  for k_minus_equal in (False, True):
    for fraction in ONE_RUN_GUESS_FRACTIONS:
      k_plus = max(1, round(fraction * m))
      pair = (k_plus, k_plus if k_minus_equal else 0)
      if sum(pair) <= m and pair not in pairs:
        pairs.append(pair)
  threshold = (1.0 - confidence) / len(pairs)
  best = None
  for k_plus, k_minus in pairs:
    correct = int(ranked[m - k_plus:].sum()) + int((~ranked[:k_minus]).sum())
    guesses = k_plus + k_minus
    eps = _one_run_epsilon(m, guesses, correct, delta, threshold)
    if best is None or eps > best[0]:
      best = (eps, guesses, correct)
  return {"epsilon_lower_bound": best[0], "confidence": confidence,
          "guesses": best[1], "correct": best[2]}


# ------------------------------------------------------------------------------------
# The estimate's error (a bootstrap) and jax-privacy's figures beside ours.

# Bootstrap resamples of the estimate's intervals (basic: reported; percentile: kept).
BOOTSTRAP_SAMPLES = 1000


def _log_region_probs(has_roots: np.ndarray, a_zero: np.ndarray, t1: np.ndarray,
                      t2: np.ndarray, a_pos: np.ndarray, b_pos: np.ndarray) -> np.ndarray:
  """Vectorized :func:`_log_std_normal_prob` of the regions of :func:`_loss_region`:
  a half-line where ``a = 0`` (above ``t1`` when ``b > 0``), else outside
  (``a > 0``) or inside (``a < 0``) ``(t1, t2)``, all or nothing without roots."""
  with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
    lcdf1, lsf1 = special.log_ndtr(t1), special.log_ndtr(-t1)
    lcdf2, lsf2 = special.log_ndtr(t2), special.log_ndtr(-t2)
    outside = np.logaddexp(lcdf1, lsf2)
    # Inside (t1, t2): the difference of the tails on the interval's side.
    hi_right, lo_right = np.where(t1 > 0, lsf1, lcdf2), np.where(t1 > 0, lsf2, lcdf1)
    inside = np.where(lo_right < hi_right,
                      hi_right + np.log1p(-np.exp(np.minimum(lo_right - hi_right, 0.0))),
                      -np.inf)
    half_line = np.where(b_pos, lsf1, lcdf1)
  quad = np.where(has_roots, np.where(a_pos, outside, inside),
                  np.where(a_pos, 0.0, -np.inf))
  return np.where(a_zero, half_line, quad)


def _log_hockey_sticks(eps: np.ndarray, m: np.ndarray, s: np.ndarray) -> np.ndarray:
  """Vectorized :func:`_log_hockey_stick` for ``P = N(m, s^2)``, ``Q = N(0, 1)``.

  Same quadratic privacy-loss region as :func:`_loss_region`; the degenerate
  ``a = b = 0`` case (``P = Q``, where the divergence is 0) is handled by the
  caller.
  """
  a = 0.5 * (s - 1.0) * (s + 1.0) / (s * s)
  b = m / (s * s)
  c = -np.log(s) - m * m / (2.0 * s * s) - eps
  a_zero = a == 0.0
  safe_a = np.where(a_zero, 1.0, a)
  disc = b * b - 4.0 * safe_a * c
  has_roots = disc > 0.0
  half = -0.5 * (b + np.copysign(np.sqrt(np.maximum(disc, 0.0)), b))
  safe_half = np.where(half == 0.0, 1.0, half)
  with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
    r1, r2 = half / safe_a, c / safe_half
    line = -c / np.where(b == 0.0, 1.0, b)
  t1 = np.where(a_zero, line, np.minimum(r1, r2))
  t2 = np.where(a_zero, line, np.maximum(r1, r2))
  a_pos, b_pos = a > 0.0, b > 0.0
  log_q = _log_region_probs(has_roots, a_zero, t1, t2, a_pos, b_pos)
  with np.errstate(over="ignore", invalid="ignore"):
    u1, u2 = (t1 - m) / s, (t2 - m) / s
  log_p = _log_region_probs(has_roots, a_zero, u1, u2, a_pos, b_pos)
  log_q = log_q + eps
  with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
    out = log_p + np.log1p(-np.exp(np.minimum(log_q - log_p, 0.0)))
  return np.where(log_q < log_p, out, -np.inf)


def gaussian_epsilons(mu0: np.ndarray, sd0: np.ndarray, mu1: np.ndarray, sd1: np.ndarray,
                      delta: float) -> np.ndarray:
  """:func:`gaussian_epsilon` of many Gaussian pairs at once (numpy, vectorized).

  The same exact hockey-stick divergence of the two Gaussians (Andrew et al.,
  ICLR 2024, Section 4; Balle and Wang, ICML 2018, Theorem 8 for equal
  variances), bisected on all pairs together (60 halvings of [0, EPS_CAP],
  returning the end where the divergence is <= delta). It makes the
  bootstrap of :func:`estimate_epsilon` cheap (:func:`bootstrap_epsilon`).

  Args:
    mu0: Means of the held-out statistic (Q), any shape.
    sd0: Their standard deviations (>= 0).
    mu1: Means of the inserted statistic (P).
    sd1: Their standard deviations (>= 0).
    delta: delta in (0, 1).

  Returns:
    The epsilons in [0, EPS_CAP], the broadcast shape of the inputs.
  """
  if not 0 < delta < 1:
    raise ValueError(f"delta must be in (0, 1), got {delta}.")
  mu0, sd0, mu1, sd1 = np.broadcast_arrays(*(np.asarray(x, np.float64)
                                             for x in (mu0, sd0, mu1, sd1)))
  if not (np.isfinite(mu0).all() and np.isfinite(mu1).all()):
    raise ValueError("the means must be finite.")
  if not (np.isfinite(sd0).all() and np.isfinite(sd1).all() and (sd0 >= 0).all()
          and (sd1 >= 0).all()):
    raise ValueError("the standard deviations must be finite numbers >= 0.")
  point = (sd0 == 0) | (sd1 == 0)
  same = (mu0 == mu1) & (sd0 == sd1)
  safe0, safe1 = np.where(point, 1.0, sd0), np.where(point, 1.0, sd1)
  # P || Q standardized by Q, and Q || P standardized by P.
  m_pq, s_pq = (mu1 - mu0) / safe0, safe1 / safe0
  m_qp, s_qp = (mu0 - mu1) / safe1, safe0 / safe1
  log_delta = math.log(delta)

  def ok(eps):
    return np.maximum(_log_hockey_sticks(eps, m_pq, s_pq),
                      _log_hockey_sticks(eps, m_qp, s_qp)) <= log_delta

  lo, hi = np.zeros(mu0.shape), np.full(mu0.shape, EPS_CAP)
  for _ in range(60):
    mid = 0.5 * (lo + hi)
    good = ok(mid)
    hi, lo = np.where(good, mid, hi), np.where(good, lo, mid)
  eps = np.where(ok(np.zeros(mu0.shape)), 0.0, hi)
  eps = np.where(ok(np.full(mu0.shape, EPS_CAP)), eps, EPS_CAP)
  return np.where(same, 0.0, np.where(point, EPS_CAP, eps))


def bootstrap_epsilon(inserted: np.ndarray, held_out: np.ndarray, delta: float,
                      confidence: float = 0.95, num_samples: int = BOOTSTRAP_SAMPLES,
                      seed: int = 0) -> dict:
  """:func:`estimate_epsilon` with bootstrap intervals over the canaries.

  The inserted and the held-out statistics are each resampled with
  replacement (the two samples keep their sizes) and the estimate of Andrew
  et al. (ICLR 2024) is recomputed on each of ``num_samples`` resamples
  (Efron and Tibshirani 1993, "An Introduction to the Bootstrap"). With
  ``q_lo``, ``q_hi`` the ``(1 - c)/2`` and ``(1 + c)/2`` quantiles of the
  resampled estimates:

  * ``percentile_interval = [q_lo, q_hi]``, Efron's percentile interval
    (Ch. 13). The estimate is biased upwards (the two fitted variances'
    sampling error reads as privacy loss) and the resamples repeat the bias
    on top of it, so this interval sits too high.
  * ``interval = [max(0, 2 e - q_hi), 2 e - q_lo]``, the basic (reverse
    percentile) bootstrap interval (Davison and Hinkley 1997, "Bootstrap
    Methods and their Application", Sec. 5.2), ``e`` the estimate: it
    reflects the resamples' spread about ``e`` back. The resampled
    estimates are skewed upwards, so the interval reaches further below
    ``e`` than above it, toward the truth (``e`` is biased upwards). This is
    the interval the audit reports.

  Measured coverage at c = 0.95 (benchmarks/audit_coverage.py, record in
  benchmarks/records/issue59-audit-coverage): mu-GDP canaries, 2,000
  candidates, 1,000 draws per mu = 0.5, 1, 2, default 1,000 resamples. The
  basic interval covered the true epsilon in 96.0-96.1% of draws
  (Clopper-Pearson 95% interval 94.6-97.2% per mu, so consistent with the
  nominal 95%). It lay wholly above the truth in 2.3-2.5% of draws and
  wholly below it in 1.5-1.6%. The percentile interval covered the truth
  in 71.8-74.1% (wholly above in 26-28%, never below). Coverage is measured
  only in this setting: equal variances, both sides Gaussian. A few dozen
  draws cannot tell 90% coverage from 95%: at exactly 95%, 54 or fewer of
  60 draws cover 7.9% of the time.

  Both are intervals for an *estimate*: neither is a bound on epsilon, and
  neither can prove a violation (only a lower bound can).

  Args:
    inserted: Statistics of the inserted canaries (>= 2 values).
    held_out: Statistics of the held-out canaries (>= 2 values).
    delta: delta in (0, 1).
    confidence: c in (0, 1), the intervals' nominal coverage.
    num_samples: Bootstrap resamples (>= 1).
    seed: Seed of the resampling (numpy ``default_rng``), fixed so that a
      record is reproducible.

  Returns:
    ``{"estimate", "interval": [low, high], "percentile_interval": [low,
    high], "bootstrap_mean", "confidence", "samples"}``, epsilons in
    [0, EPS_CAP].
  """
  inserted = np.asarray(inserted, np.float64).ravel()
  held_out = np.asarray(held_out, np.float64).ravel()
  if not 0 < confidence < 1:
    raise ValueError(f"confidence must be in (0, 1), got {confidence}.")
  if int(num_samples) != num_samples or num_samples < 1:
    raise ValueError(f"num_samples must be a positive int, got {num_samples}.")
  estimate = estimate_epsilon(inserted, held_out, delta)
  rng = np.random.default_rng(seed)
  ins = inserted[rng.integers(0, inserted.size, (int(num_samples), inserted.size))]
  out = held_out[rng.integers(0, held_out.size, (int(num_samples), held_out.size))]
  eps = gaussian_epsilons(out.mean(1), out.std(1, ddof=1), ins.mean(1), ins.std(1, ddof=1),
                          delta)
  low, high = (float(x) for x in np.quantile(eps, [(1 - confidence) / 2,
                                                    (1 + confidence) / 2]))
  basic = [min(max(0.0, 2 * estimate - high), EPS_CAP), min(max(0.0, 2 * estimate - low),
                                                            EPS_CAP)]
  return {"estimate": estimate, "interval": basic, "percentile_interval": [low, high],
          "bootstrap_mean": float(eps.mean()), "confidence": confidence,
          "samples": int(num_samples)}


def jax_privacy_figures(inserted: np.ndarray, held_out: np.ndarray, delta: float,
                        confidence: float = 0.95) -> dict:
  """The figures of ``jax_privacy.auditing.CanaryScoreAuditor`` for these scores.

  The canary statistics are the auditor's scores (higher: more likely
  inserted). At significance ``1 - confidence``, each with its default
  threshold choice (Bonferroni over all thresholds):

  * ``clopper_pearson``: ``epsilon_clopper_pearson``, a lower bound from
    Clopper-Pearson intervals on the true- and false-positive rates at the
    best threshold (Jagielski et al., NeurIPS 2020; Nasr et al., IEEE S&P
    2021). It treats the canaries as independent trials, which the
    synthetic statistics are, and a run's canaries nearly are (they share
    the noise; nearly orthogonal directions).
  * ``one_run``: ``epsilon_one_run``, the lower bound of Steinke, Nasr and
    Jagielski (NeurIPS 2023), one-sided guesses (k- = 0).
  * ``one_run_fdp``: ``epsilon_one_run_fdp``, the one-run f-DP audit of
    Mahloujifar, Melis and Chaudhuri (2024, "Auditing f-Differential
    Privacy in One Run"), a lower bound.
  * ``gaussian_dp``: ``epsilon_from_gdp``, the epsilon of the mu-GDP
    mechanism fitted to the rates (Nasr et al., USENIX Security 2023;
    Andrew et al., ICLR 2024). An *estimate*, not a bound: it can exceed
    the true epsilon (2.84 against 1.99 on mu = 0.5 statistics, issue 49).

  Args:
    inserted: Statistics of the inserted canaries (>= 1 value).
    held_out: Statistics of the held-out canaries (>= 1 value).
    delta: delta in (0, 1).
    confidence: c in (0, 1).

  Returns:
    ``{"clopper_pearson", "one_run", "one_run_fdp", "gaussian_dp"}``, floats;
    None for a figure the auditor does not define at this confidence
    (``clopper_pearson`` and ``gaussian_dp`` need ``c > 0.5``).
  """
  from jax_privacy import auditing  # pylint: disable=import-outside-toplevel

  if not 0 < delta < 1:
    raise ValueError(f"delta must be in (0, 1), got {delta}.")
  if not 0 < confidence < 1:
    raise ValueError(f"confidence must be in (0, 1), got {confidence}.")
  auditor = auditing.CanaryScoreAuditor(np.asarray(inserted, np.float64).ravel(),
                                        np.asarray(held_out, np.float64).ravel())
  alpha = 1.0 - confidence
  two_sided_ok = alpha < 0.5  # the auditor's range for these two
  figures = {
      "clopper_pearson": auditor.epsilon_clopper_pearson(alpha, delta) if two_sided_ok
                         else None,
      "one_run": auditor.epsilon_one_run(alpha, delta),
      "one_run_fdp": auditor.epsilon_one_run_fdp(alpha, delta),
      "gaussian_dp": auditor.epsilon_from_gdp(alpha, delta) if two_sided_ok else None,
  }
  return {k: None if v is None else float(v) for k, v in figures.items()}


# What each figure of :func:`audit_figures` is: a lower bound on epsilon (at
# the stated confidence; it can prove a violation), an approximate bound (a
# lower bound only under an assumption a run does not meet: it cannot prove
# one) or an estimate (it cannot). Clopper-Pearson assumes independent trials,
# which the canaries of one run, sharing its noise, are not. The one-run f-DP
# audit tests the Gaussian-DP curve of the claimed (epsilon, delta) (its
# mu from jax-privacy's get_sigma_gaussian), which an (epsilon, delta)-DP
# mechanism need not meet: on randomized response, exactly (1, 0)-DP, it
# exceeded epsilon 1 in each of 10 draws at 95% (tests/privacy/test_audit_bounds.py).
FIGURE_KINDS = {
    "empirical_epsilon": "estimate",
    "epsilon_lower_bound": "bound",
    "jax_privacy_clopper_pearson": "approximate bound",
    "jax_privacy_one_run": "bound",
    "jax_privacy_one_run_fdp": "approximate bound",
    "jax_privacy_gaussian_dp": "estimate",
}
FIGURE_METHODS = {
    "empirical_epsilon": "Andrew et al. 2024: Gaussians fitted to the two samples; "
                         "basic bootstrap interval over the canaries",
    "epsilon_lower_bound": "Steinke, Nasr and Jagielski 2023, one run (this project)",
    "jax_privacy_clopper_pearson": "jax_privacy CanaryScoreAuditor.epsilon_clopper_pearson",
    "jax_privacy_one_run": "jax_privacy CanaryScoreAuditor.epsilon_one_run",
    "jax_privacy_one_run_fdp": "jax_privacy CanaryScoreAuditor.epsilon_one_run_fdp",
    "jax_privacy_gaussian_dp": "jax_privacy CanaryScoreAuditor.epsilon_from_gdp",
}
BOUNDS = tuple(k for k, v in FIGURE_KINDS.items() if v == "bound")


def lower_bounds(statistics: np.ndarray, inserted: np.ndarray, delta: float,
                 confidence: float) -> dict:
  """Every lower bound of :data:`BOUNDS` on these canaries, each at ``confidence``.

  Args:
    statistics: (m,) statistic per candidate, higher meaning "more inserted".
    inserted: (m,) bool, the true memberships (each drawn with probability
      1/2, as the one-run bounds need).
    delta: delta in (0, 1).
    confidence: c in (0, 1).

  Returns:
    ``{name: epsilon lower bound or None}`` for the names of :data:`BOUNDS`
    (EPS_CAP meaning ">=").
  """
  statistics = np.asarray(statistics, np.float64)
  inserted = np.asarray(inserted)
  ours = one_run_lower_bound(statistics, inserted, delta, confidence)
  theirs = jax_privacy_figures(statistics[inserted], statistics[~inserted], delta,
                               confidence)
  out = {"epsilon_lower_bound": ours["epsilon_lower_bound"]}
  out.update({f"jax_privacy_{k}": v for k, v in theirs.items()
              if f"jax_privacy_{k}" in BOUNDS})
  return out


def audit_figures(statistics: np.ndarray, inserted: np.ndarray, delta: float,
                  confidence: float = 0.95, *, bootstrap_samples: int = BOOTSTRAP_SAMPLES,
                  seed: int = 0) -> dict:
  """Every figure of one canary statistic, each labelled by its kind (:data:`FIGURE_KINDS`).

  ``empirical_epsilon`` (Andrew et al., ICLR 2024) with its bootstrap
  intervals (:func:`bootstrap_epsilon`); the one-run lower bound of Steinke,
  Nasr and Jagielski (NeurIPS 2023, :func:`one_run_lower_bound`); and the
  figures of jax-privacy's ``CanaryScoreAuditor`` (:func:`jax_privacy_figures`).
  Only a figure of kind "bound" can prove that a mechanism is less private
  than claimed; an "estimate" can exceed the true epsilon of a correct one,
  and so can an "approximate bound" (Clopper-Pearson's in a run, whose
  canaries are not independent trials there; the one-run f-DP figure, which
  holds for a Gaussian-DP mechanism only).

  Args:
    statistics: (m,) statistic per candidate, higher meaning "more inserted".
    inserted: (m,) bool, the true memberships (>= 2 of each).
    delta: delta in (0, 1).
    confidence: c in (0, 1): of the bounds and of the intervals.
    bootstrap_samples: Resamples of the estimate's intervals.
    seed: Seed of the bootstrap.

  Returns:
    ``{name: {"value", "kind", "method", "confidence"}}`` for the names of
    :data:`FIGURE_KINDS` (their kinds); ``empirical_epsilon`` also has
    ``interval``, ``percentile_interval``, ``bootstrap_mean`` and
    ``bootstrap_samples``, ``epsilon_lower_bound`` the ``guesses`` and
    ``correct`` guesses behind it. Values are
    floats in [0, EPS_CAP], or None where a method is undefined at c.
  """
  statistics = np.asarray(statistics, np.float64)
  inserted = np.asarray(inserted)
  if inserted.dtype != bool or statistics.shape != inserted.shape:
    raise ValueError("inserted must be a bool array shaped like statistics.")
  inside, outside = statistics[inserted], statistics[~inserted]
  boot = bootstrap_epsilon(inside, outside, delta, confidence, bootstrap_samples, seed)
  ours = one_run_lower_bound(statistics, inserted, delta, confidence)
  theirs = jax_privacy_figures(inside, outside, delta, confidence)
  values = {"empirical_epsilon": boot["estimate"],
            "epsilon_lower_bound": ours["epsilon_lower_bound"],
            **{f"jax_privacy_{k}": v for k, v in theirs.items()}}
  figures = {}
  for name, kind in FIGURE_KINDS.items():
    value = values[name]
    figures[name] = {"value": None if value is None else _capped(value), "kind": kind,
                     "method": FIGURE_METHODS[name], "confidence": confidence}
  figures["empirical_epsilon"].update(
      interval=boot["interval"], percentile_interval=boot["percentile_interval"],
      bootstrap_mean=boot["bootstrap_mean"], bootstrap_samples=boot["samples"])
  figures["epsilon_lower_bound"].update(guesses=ours["guesses"], correct=ours["correct"])
  return figures


def _capped(value: float) -> float:
  """A finite float for the record: EPS_CAP stands for ">= EPS_CAP" (and inf)."""
  value = float(value)
  return min(value, EPS_CAP) if not math.isnan(value) else value


def decision_lower_bound(samples: dict, delta: float, confidence: float = 0.95) -> dict:
  """The lower bound that decides a violation: the largest of all bounds, jointly valid.

  Each figure of :data:`BOUNDS` on each statistic (threat model) of the run
  is a lower bound on the same mechanism's epsilon; the largest of k of them,
  each at confidence c, holds only at ``1 - k (1 - c)``. Here each is
  computed at ``1 - (1 - c) / k`` (Bonferroni), so the largest holds at
  confidence c: a run violates its claim epsilon, at confidence c, when this
  value exceeds it. Estimates never enter.

  Args:
    samples: ``{name: (statistics, inserted)}``, the run's statistics (one
      per threat model) with the candidates' memberships.
    delta: delta in (0, 1).
    confidence: c in (0, 1), of the decision.

  Returns:
    ``{"value", "confidence": c, "per_bound_confidence", "bounds": k,
    "source": "<statistic>/<bound>"}``, value in [0, EPS_CAP].
  """
  if not samples:
    raise ValueError("need at least one statistic.")
  k = len(BOUNDS) * len(samples)
  each = 1.0 - (1.0 - confidence) / k
  best, source = 0.0, None
  for name, (statistics, inserted) in samples.items():
    for bound, value in lower_bounds(statistics, inserted, delta, each).items():
      if value is not None and (source is None or value > best):
        best, source = _capped(value), f"{name}/{bound}"
  return {"value": best, "confidence": confidence, "per_bound_confidence": each,
          "bounds": k, "source": source}
