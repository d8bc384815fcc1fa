"""The analytical Gaussian mechanism (Balle and Wang, ICML 2018).

Poster (seed 001), "Our Solution", and its ref. [4]: the perturbation is
shaped as the Gaussian ``N(0, sigma^2 I)`` of the *analytical* Gaussian
mechanism, whose calibration holds for every epsilon (the classical bound
``sigma >= Delta sqrt(2 ln(1.25/delta)) / epsilon`` needs epsilon < 1).

Balle and Wang, Theorem 8: ``f(x) + N(0, sigma^2 I)`` with L2 sensitivity
Delta is (epsilon, delta)-DP if and only if

  ``Phi(Delta/(2 sigma) - epsilon sigma/Delta)
    - e^epsilon Phi(-Delta/(2 sigma) - epsilon sigma/Delta) <= delta``.

The left side, :func:`delta_for_epsilon`, is the exact privacy profile of the
Gaussian mechanism (the same curve the PLD accountant of dp-accounting
composes); :func:`sigma_for_epsilon` (their Algorithm 1, solved by bisection
instead of their closed-form search) and :func:`epsilon_for_sigma` invert it.
Everything is evaluated in log space (``scipy.special.log_ndtr``), so tiny
deltas and large epsilons stay accurate.
"""

from __future__ import annotations

import math

from scipy import special

from fedjax_dp.privacy import bisection

_BISECTION_STEPS = 200


def _check(sensitivity: float) -> None:
  if not (math.isfinite(sensitivity) and sensitivity > 0):
    raise ValueError(f"sensitivity must be > 0, got {sensitivity}")


def log_delta_for_epsilon(sigma: float, epsilon: float, sensitivity: float = 1.0) -> float:
  """log of :func:`delta_for_epsilon` (-inf when delta underflows to 0)."""
  _check(sensitivity)
  if not sigma > 0:
    raise ValueError(f"sigma must be > 0, got {sigma}")
  if not epsilon >= 0:
    raise ValueError(f"epsilon must be >= 0, got {epsilon}")
  r = sensitivity / sigma
  a = r / 2.0 - epsilon / r
  b = -r / 2.0 - epsilon / r
  log_a = float(special.log_ndtr(a))
  log_b = epsilon + float(special.log_ndtr(b))
  if log_b >= log_a:  # only by rounding: the difference is positive
    return -math.inf
  return log_a + math.log1p(-math.exp(log_b - log_a))


def delta_for_epsilon(sigma: float, epsilon: float, sensitivity: float = 1.0) -> float:
  """The smallest delta for which ``N(0, sigma^2)`` noise is (epsilon, delta)-DP.

  Balle and Wang 2018, Theorem 8.

  Args:
    sigma: Noise standard deviation (> 0).
    epsilon: epsilon >= 0.
    sensitivity: L2 sensitivity Delta of the released function.

  Returns:
    delta(epsilon) in [0, 1).
  """
  return math.exp(log_delta_for_epsilon(sigma, epsilon, sensitivity))


def sigma_for_epsilon(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
  """The smallest sigma making the Gaussian mechanism (epsilon, delta)-DP.

  Balle and Wang 2018, Algorithm 1 (analytical calibration). delta(epsilon)
  decreases in sigma; the answer is bisected in log sigma to a relative
  width of ~1e-15 and the upper end returned, so the delta equation holds
  with ``delta_for_epsilon(result) <= delta``.

  Args:
    epsilon: epsilon >= 0.
    delta: delta in (0, 1).
    sensitivity: L2 sensitivity Delta.

  Returns:
    sigma > 0.

  Raises:
    ValueError: On invalid arguments.
  """
  _check(sensitivity)
  if not (math.isfinite(epsilon) and epsilon >= 0):
    raise ValueError(f"epsilon must be a finite number >= 0, got {epsilon}")
  if not 0 < delta < 1:
    raise ValueError(f"delta must be in (0, 1), got {delta}")
  log_delta = math.log(delta)
  ok = lambda s: log_delta_for_epsilon(s, epsilon, sensitivity) <= log_delta
  lo, hi = sensitivity, sensitivity
  while not ok(hi):
    hi *= 2.0
  while ok(lo):
    lo /= 2.0
    if lo < 1e-300:
      return lo
  for _ in range(_BISECTION_STEPS):
    mid = math.sqrt(lo * hi)
    if ok(mid):
      hi = mid
    else:
      lo = mid
    if hi / lo - 1.0 < 1e-15:
      break
  return hi


def epsilon_for_sigma(sigma: float, delta: float, sensitivity: float = 1.0) -> float:
  """The smallest epsilon for which ``N(0, sigma^2)`` noise is (epsilon, delta)-DP.

  Inverts Balle and Wang 2018, Theorem 8 (delta(epsilon) decreases in
  epsilon) by bisection; the upper end is returned, so the guarantee holds.

  Args:
    sigma: Noise standard deviation (> 0).
    delta: delta in (0, 1).
    sensitivity: L2 sensitivity Delta.

  Returns:
    epsilon >= 0 (0 when even epsilon = 0 meets delta).
  """
  if not 0 < delta < 1:
    raise ValueError(f"delta must be in (0, 1), got {delta}")
  log_delta = math.log(delta)
  ok = lambda e: log_delta_for_epsilon(sigma, e, sensitivity) <= log_delta
  if ok(0.0):
    return 0.0
  lo, hi = 0.0, 1.0
  while not ok(hi):
    lo, hi = hi, 2.0 * hi
  return bisection.bisect(ok, lo, hi, rel_tol=1e-13)[1]


def classical_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
  """The classical bound ``Delta sqrt(2 ln(1.25/delta)) / epsilon`` (Dwork-Roth
  Theorem A.1, valid for epsilon < 1), for comparison."""
  return sensitivity * math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon
