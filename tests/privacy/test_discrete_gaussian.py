"""The exact discrete Gaussian sampler: chi-square against the pmf, moments, jit/vmap.

Every statistical test accepts the true parameters and rejects a wrong
sigma or mean, and a rounded continuous Gaussian, on the same samples.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from dg_stats import binned_pvalue as _binned_pvalue, chi2_pvalue as _chi2_pvalue
from fedjax_dp.privacy import discrete_gaussian_pmf, sample_discrete_gaussian

N = 200_000
ALPHA = 1e-3


# One compiled sampler for every (mean, sigma): they are traced arguments.
_SAMPLE = jax.jit(lambda k, m, s: sample_discrete_gaussian(k, m, s, (N,)))


def _draw(mean, sigma, seed=0):
  return np.asarray(_SAMPLE(jax.random.PRNGKey(seed), jnp.float32(mean), jnp.float32(sigma)))


@pytest.mark.parametrize("mean,sigma", [
    (0.3, 0.3),     # small: almost all mass on 0 and 1, asymmetric
    (0.5, 0.1),     # tiny sigma, half-integer mean: two equal atoms
    (-2.7, 3.5),    # medium, negative real mean
    (1.0, 199.0),   # FL-SIGN-DP's share scale, integer mean
])
def test_chi_square_accepts_the_exact_pmf_and_rejects_wrong_ones(mean, sigma):
  x = _draw(mean, sigma)
  assert x.dtype == np.int32
  lo, hi = int(np.floor(mean - 6 * sigma - 2)), int(np.ceil(mean + 6 * sigma + 2))
  if sigma < 100:
    p = _chi2_pvalue(x, lambda s: discrete_gaussian_pmf(s, mean, sigma), lo, hi)
  else:
    p = _binned_pvalue(x, mean, sigma, width=int(sigma // 8))
  assert p > ALPHA, p
  if (mean, sigma) == (0.5, 0.1):
    # DG(0.5, 0.1) and DG(0.5, 0.11) are both (0.5, 0.5) on {0, 1}: test the atoms.
    assert set(np.unique(x)) == {0, 1}
    assert abs(np.mean(x) - 0.5) < 4 * 0.5 / np.sqrt(N)
    return
  # Wrong sigma (5% or 2% off) and wrong mean are rejected on the same samples,
  # and a sampler run with the wrong sigma is rejected against the true pmf.
  wrong_sigma = sigma * (1.05 if sigma < 100 else 1.02)
  wrong_mean = mean + (0.1 if sigma < 1 else 0.05 * sigma)
  wrong_sampler = _draw(mean, wrong_sigma, seed=1)
  for samples, m, s in ((x, mean, wrong_sigma), (x, wrong_mean, sigma),
                        (wrong_sampler, mean, sigma)):
    if sigma < 100:
      p = _chi2_pvalue(samples, lambda sup, m=m, s=s: discrete_gaussian_pmf(sup, m, s),
                       lo, hi)
    else:
      p = _binned_pvalue(samples, m, s, width=int(sigma // 8))
    assert p < ALPHA, (m, s, p)


def test_not_a_rounded_continuous_gaussian():
  """DG(0.3, 0.3) puts 0.90 on 0; round(N(0.3, 0.3^2)) only 0.75."""
  x = _draw(0.3, 0.3)
  rounded = lambda s: stats.norm.cdf(s + 0.5, 0.3, 0.3) - stats.norm.cdf(s - 0.5, 0.3, 0.3)
  assert _chi2_pvalue(x, rounded, -3, 4) < ALPHA
  assert np.mean(x == 0) == pytest.approx(discrete_gaussian_pmf(np.array([0]), 0.3, 0.3)[0],
                                          abs=4e-3)


@pytest.mark.parametrize("mean,sigma", [(0.25, 1e6), (-7.5, 1e3), (3.0, 20.0)])
def test_mean_and_variance_at_large_sigma(mean, sigma):
  x = _draw(mean, sigma).astype(np.float64)
  grid = np.arange(np.floor(mean - 12 * sigma), np.ceil(mean + 12 * sigma) + 1) \
      if sigma < 1e4 else None
  if grid is None:  # Lemma 1: DG moments equal the Gaussian's to within kappa ~ 0
    true_mean, true_var = mean, sigma ** 2
  else:
    pmf = discrete_gaussian_pmf(grid, mean, sigma)
    true_mean = np.sum(pmf * grid)
    true_var = np.sum(pmf * (grid - true_mean) ** 2)
  assert abs(x.mean() - true_mean) < 4.5 * np.sqrt(true_var / N)
  # Variance: chi-square test around the known mean; 2% off is rejected.
  def var_p(var):
    stat = np.sum((x - true_mean) ** 2) / var
    return 2 * min(stats.chi2.cdf(stat, N), stats.chi2.sf(stat, N))
  assert var_p(true_var) > ALPHA
  assert var_p(true_var * 1.02 ** 2) < ALPHA
  assert var_p(true_var / 1.02 ** 2) < ALPHA
  if sigma >= 1e4:
    assert _binned_pvalue(x.astype(np.int64), mean, sigma, width=int(sigma // 8)) > ALPHA


def test_vmap_over_keys_and_parameters_and_tiny_shapes():
  """Five values per call (the single-level path), vmapped over 4 x 5000 keys
  with a (mean, sigma) per row; the same key gives the same draw."""
  means = np.repeat([0.5, -3.5, 0.75, 1e4 + 0.5], 5000).astype(np.float32)
  sigmas = np.repeat([0.3, 2.0, 30.0, 1e5], 5000).astype(np.float32)
  keys = jax.random.split(jax.random.PRNGKey(3), means.size)
  fn = jax.jit(jax.vmap(lambda k, m, s: sample_discrete_gaussian(k, m, s, (5,))))
  x = np.asarray(fn(keys, means, sigmas))
  assert x.shape == (20_000, 5) and x.dtype == np.int32
  groups = x.reshape(4, -1)
  pmf = lambda m, s: (lambda sup: discrete_gaussian_pmf(sup, m, s))
  assert _chi2_pvalue(groups[0], pmf(0.5, 0.3), -2, 3) > ALPHA
  assert _chi2_pvalue(groups[0], pmf(0.5, 0.4), -2, 3) < ALPHA
  assert _chi2_pvalue(groups[1], pmf(-3.5, 2.0), -14, 7) > ALPHA
  for row, m, s in zip(groups[2:], (0.75, 1e4 + 0.5), (30.0, 1e5)):
    assert abs(row.mean() - m) < 4.5 * s / np.sqrt(row.size)
    assert abs(row.std() / s - 1) < 0.03
  np.testing.assert_array_equal(x, np.asarray(fn(keys, means, sigmas)))
  other = np.asarray(fn(jax.random.split(jax.random.PRNGKey(4), means.size), means, sigmas))
  assert np.mean(x[10_000:] == other[10_000:]) < 0.1


@pytest.mark.parametrize("sigma", [0.0, -1.0, float("nan"), 2.0 ** 22 * 1.01, 1e8])
def test_a_concrete_scale_outside_its_range_is_refused(sigma):
  """Clipped, 1e8 sampled a std of 4.2e6 (24x less noise than asked for)."""
  with pytest.raises(ValueError, match=r"sigma must be in \(0, 2\^22\]"):
    sample_discrete_gaussian(jax.random.PRNGKey(0), 0.0, sigma, (4,))


def test_a_traced_vanishing_scale_is_the_point_mass_at_the_nearest_integer():
  """A traced scale of 0 or 1e-20 (no check possible under jit) used to make
  every acceptance exponent NaN, and the sampler never ended."""
  draw = jax.jit(lambda mean, sigma: sample_discrete_gaussian(
      jax.random.PRNGKey(1), mean, sigma, (64,)))
  for sigma in (0.0, 1e-20):
    for mean, nearest in ((0.3, 0), (-2.7, -3), (5.0, 5)):
      assert np.all(np.asarray(draw(mean, sigma)) == nearest)
