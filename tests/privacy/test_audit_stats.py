"""Tests for fedjax_dp.privacy.audit (canary directions and audit statistics)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import special, stats

from fedjax_dp.privacy import analytic_gaussian
from fedjax_dp.privacy import audit
from fedjax_dp.privacy import bisection

DELTA = 1e-5


def _hadamard(n: int) -> np.ndarray:
  j = np.arange(n)
  popcount = np.vectorize(lambda x: bin(x).count("1"))(j[:, None] & j[None, :])
  return (-1.0) ** popcount


def test_fwht_matches_explicit_hadamard_and_is_an_involution_up_to_scale():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(3, 16)).astype(np.float32)
  np.testing.assert_allclose(np.asarray(audit.fwht(jnp.asarray(x))), x @ _hadamard(16).T,
                             rtol=1e-5, atol=1e-5)
  y = rng.normal(size=1024).astype(np.float32)
  twice = np.asarray(audit.fwht(audit.fwht(jnp.asarray(y))))
  np.testing.assert_allclose(twice, 1024 * y, rtol=1e-4, atol=1e-3)


def test_fwht_rejects_other_lengths():
  with pytest.raises(ValueError, match="power-of-two"):
    audit.fwht(jnp.zeros(12))


def test_canary_basis_structure():
  basis = audit.canary_basis(jax.random.PRNGKey(1), 3000, 200)
  assert basis.size == 4096
  rows, positions = np.asarray(basis.rows), np.asarray(basis.positions)
  assert rows.dtype == np.int32 and positions.dtype == np.int32
  assert len(set(rows.tolist())) == 200 and rows.min() >= 1 and rows.max() < 4096
  assert len(set(positions.tolist())) == 3000 and positions.min() >= 0
  assert positions.max() < 4096
  assert set(np.asarray(basis.signs).tolist()) == {-1.0, 1.0}
  # More canaries than values: d' is set by num_canaries + 1.
  assert audit.canary_basis(jax.random.PRNGKey(2), 5, 16).size == 32


def test_directions_are_unit_and_nearly_orthogonal():
  m, k = 3000, 200
  basis = audit.canary_basis(jax.random.PRNGKey(3), m, k)
  u = np.asarray(audit.canary_directions(basis, jnp.arange(k)), np.float64)
  assert u.shape == (k, m)
  np.testing.assert_allclose(np.abs(u), 1 / math.sqrt(m), rtol=1e-6)
  gram = u @ u.T
  np.testing.assert_allclose(np.diag(gram), 1.0, rtol=1e-6)
  off_diagonal = np.abs(gram[~np.eye(k, dtype=bool)])
  assert off_diagonal.max() < 5 / math.sqrt(m)
  signs = np.asarray(audit.canary_signs(basis, jnp.arange(k)))
  assert signs.dtype == np.int32
  np.testing.assert_array_equal(signs, np.rint(u * math.sqrt(m)).astype(np.int32))


@pytest.mark.parametrize("m,k", [(3000, 50), (5, 10), (1024, 7)])
def test_canary_dots_equal_directions_times_vector(m, k):
  basis = audit.canary_basis(jax.random.PRNGKey(4), m, k)
  rng = np.random.default_rng(5)
  v = rng.normal(size=(2, m)).astype(np.float32)
  u = np.asarray(audit.canary_directions(basis, jnp.arange(k)), np.float64)
  dots = np.asarray(audit.canary_dots(basis, jnp.asarray(v)))
  assert dots.shape == (2, k) and dots.dtype == np.float32
  np.testing.assert_allclose(dots, v @ u.T, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(np.asarray(audit.canary_dots(basis, jnp.asarray(v[0]))),
                             dots[0], rtol=1e-6, atol=1e-6)


def _analytic_gaussian_delta(mu: float, eps: float) -> float:
  """Balle and Wang 2018, Theorem 8, for sensitivity / sigma = mu."""
  log_a = special.log_ndtr(-eps / mu + mu / 2)
  log_b = eps + special.log_ndtr(-eps / mu - mu / 2)
  return math.exp(log_a) * -math.expm1(log_b - log_a)


@pytest.mark.parametrize("mu", [0.5, 1.0, 2.0, 4.0])
def test_gaussian_epsilon_equal_variances_is_the_analytic_gaussian(mu):
  eps = audit.gaussian_epsilon(0.3, 2.0, 0.3 + 2.0 * mu, 2.0, DELTA)
  assert eps > 0
  assert _analytic_gaussian_delta(mu, eps) == pytest.approx(DELTA, rel=1e-6)
  assert _analytic_gaussian_delta(mu, 0.99 * eps) > DELTA
  assert eps == pytest.approx(analytic_gaussian.epsilon_for_sigma(1 / mu, DELTA), rel=1e-9)
  assert audit.gaussian_epsilon(0.3 + 2.0 * mu, 2.0, 0.3, 2.0, DELTA) == pytest.approx(eps)


def _numerical_delta(mu_p, sd_p, mu_q, sd_q, eps) -> float:
  """``integral max(0, p - e^eps q)`` by the trapezoid rule on a fine grid."""
  scale = max(sd_p, sd_q)
  x = np.linspace(min(mu_p, mu_q) - 40 * scale, max(mu_p, mu_q) + 40 * scale, 2_000_001)
  p = stats.norm.pdf(x, mu_p, sd_p)
  q = stats.norm.pdf(x, mu_q, sd_q)
  return float(np.trapezoid(np.maximum(0.0, p - math.exp(eps) * q), x))


@pytest.mark.parametrize("mu0,sd0,mu1,sd1", [(0.0, 1.0, 1.0, 1.3), (0.0, 1.0, 0.5, 0.7),
                                             (0.0, 1.0, 0.0, 1.5), (2.0, 0.5, 0.0, 1.0)])
def test_gaussian_epsilon_unequal_variances_against_integration(mu0, sd0, mu1, sd1):
  eps = audit.gaussian_epsilon(mu0, sd0, mu1, sd1, DELTA)
  assert 0 < eps < audit.EPS_CAP

  def delta_at(e):
    return max(_numerical_delta(mu1, sd1, mu0, sd0, e), _numerical_delta(mu0, sd0, mu1, sd1, e))

  assert delta_at(eps) == pytest.approx(DELTA, rel=1e-3)
  assert delta_at(0.98 * eps) > 1.05 * DELTA


def test_gaussian_epsilon_edge_cases():
  assert audit.gaussian_epsilon(0.0, 1.0, 0.0, 1.0, DELTA) == 0.0
  assert audit.gaussian_epsilon(0.0, 1e-3, 1.0, 1e-3, DELTA) == audit.EPS_CAP
  assert audit.gaussian_epsilon(0.0, 0.0, 1.0, 1.0, DELTA) == audit.EPS_CAP
  assert audit.gaussian_epsilon(1.0, 0.0, 1.0, 0.0, DELTA) == 0.0
  with pytest.raises(ValueError):
    audit.gaussian_epsilon(0.0, -1.0, 1.0, 1.0, DELTA)
  with pytest.raises(ValueError):
    audit.gaussian_epsilon(0.0, 1.0, 1.0, 1.0, 0.0)


def _exact_moments(z: np.ndarray) -> np.ndarray:
  return (z - z.mean()) / z.std(ddof=1)


@pytest.mark.parametrize("sigma", [0.5, 1.0, 2.0])
def test_estimate_epsilon_fits_sample_mean_and_std(sigma):
  # K = 2000 canaries whose sample moments are exactly those of the mechanism.
  rng = np.random.default_rng(6)
  held_out = _exact_moments(rng.normal(size=1000))
  inserted = 1 / sigma + _exact_moments(rng.normal(size=1000))
  expected = audit.gaussian_epsilon(0.0, 1.0, 1 / sigma, 1.0, DELTA)
  assert audit.estimate_epsilon(inserted, held_out, DELTA) == pytest.approx(expected, rel=1e-7)


@pytest.mark.parametrize("sigma", [0.5, 1.0, 2.0])
def test_estimate_epsilon_recovers_gaussian_mechanism(sigma):
  # The estimate is biased upwards at small samples (fitted variances never
  # match, which makes the fitted privacy loss quadratic): with 1000 + 1000
  # canaries it is off by up to ~70% at sigma = 2, so this checks consistency
  # at 100k + 100k (within 6% over 40 seeds).
  rng = np.random.default_rng(7)
  held_out = rng.normal(0.0, 1.0, 100_000)
  inserted = rng.normal(1 / sigma, 1.0, 100_000)
  expected = audit.gaussian_epsilon(0.0, 1.0, 1 / sigma, 1.0, DELTA)
  assert audit.estimate_epsilon(inserted, held_out, DELTA) == pytest.approx(expected, rel=0.15)


def test_estimate_epsilon_needs_two_values():
  with pytest.raises(ValueError, match="need >= 2"):
    audit.estimate_epsilon(np.array([1.0]), np.zeros(5), DELTA)


def test_one_run_p_value():
  # delta = 0: the p-value is the binomial tail of eps-DP randomized response.
  q = math.exp(1.0) / (1 + math.exp(1.0))
  assert audit.one_run_p_value(100, 50, 40, 1.0, 0.0) == pytest.approx(
      stats.binom.sf(39, 50, q), rel=1e-9)
  assert audit.one_run_p_value(100, 50, 40, 1.0, 1e-3) > audit.one_run_p_value(
      100, 50, 40, 1.0, 0.0)
  assert audit.one_run_p_value(100, 50, 0, 1.0, 0.0) == 1.0


def _memberships(seed: int, m: int = 1000) -> tuple[np.random.Generator, np.ndarray]:
  rng = np.random.default_rng(seed)
  return rng, rng.random(m) < 0.5


def test_one_run_lower_bound_perfect_statistic():
  rng, inserted = _memberships(8)
  statistics = inserted + 0.01 * rng.random(inserted.size)
  result = audit.one_run_lower_bound(statistics, inserted, DELTA)
  assert result["epsilon_lower_bound"] > 2
  assert result["correct"] == result["guesses"] and result["confidence"] == 0.95


@pytest.mark.parametrize("seed", range(5))
def test_one_run_lower_bound_independent_statistic(seed):
  rng, inserted = _memberships(seed)
  result = audit.one_run_lower_bound(rng.normal(size=inserted.size), inserted, DELTA)
  assert 0 <= result["epsilon_lower_bound"] < 0.3


def test_one_run_lower_bound_below_gaussian_mechanism_epsilon():
  rng, inserted = _memberships(9)
  statistics = inserted + rng.normal(size=inserted.size)
  result = audit.one_run_lower_bound(statistics, inserted, DELTA)
  true_eps = audit.gaussian_epsilon(0.0, 1.0, 1.0, 1.0, DELTA)
  assert 0.5 < result["epsilon_lower_bound"] < true_eps
  assert result["correct"] <= result["guesses"]


@pytest.mark.parametrize("root,floor", [(math.pi, 0.0), (1e-6, 1.0), (700.0, 1.0)])
def test_bisection_keeps_the_predicate_true_at_the_upper_end(root, floor):
  calls = []

  def ok(x):
    calls.append(x)
    return x >= root

  lo, hi = bisection.bisect(ok, 0.0, 1000.0, rel_tol=1e-9, floor=floor)
  assert not ok(lo) and ok(hi) and lo < root <= hi
  assert hi - lo <= 1e-9 * max(hi, floor)
  assert len(calls) < 80  # stops at the tolerance, not after every step
