"""Clipping and the noisy secure sum: the aggregate noise is S*sigma, never less."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from fedjax_dp import keys
from fedjax_dp.privacy import clip_by_l2_norm, noise, noise_share_std, noisy_sum


def test_clipping_bounds_the_norm_and_leaves_short_vectors_alone():
  long = jnp.full((100,), 1.0)  # norm 10
  clipped, norm = clip_by_l2_norm(long, 2.0)
  assert norm == pytest.approx(10.0)
  assert float(jnp.linalg.norm(clipped)) == pytest.approx(2.0, rel=1e-6)
  np.testing.assert_allclose(clipped / jnp.linalg.norm(clipped), long / 10.0, rtol=1e-6)
  short = jnp.array([0.3, -0.4])
  np.testing.assert_array_equal(clip_by_l2_norm(short, 2.0)[0], short)
  np.testing.assert_array_equal(clip_by_l2_norm(jnp.zeros(3), 1.0)[0], jnp.zeros(3))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, 1e20])
def test_an_update_whose_norm_is_not_finite_is_clipped_to_zero(bad):
  # 1e20 is finite, but its square overflows float32: the norm is inf.
  x = jnp.array([0.5, bad, -2.0], jnp.float32)
  clipped, norm = clip_by_l2_norm(x, 1.0)
  assert not np.isfinite(float(norm))
  np.testing.assert_array_equal(clipped, jnp.zeros(3))
  # Finite vectors keep the formula's values exactly, under jit too.
  y = jnp.array([0.5, 3.0, -2.0], jnp.float32)
  got = jax.jit(clip_by_l2_norm)(y, 1.0)[0]
  np.testing.assert_array_equal(got, y * (1.0 / jnp.maximum(1.0, jnp.linalg.norm(y))))


@pytest.mark.parametrize("dim", [6, 2**20])  # the masked sum and the matvec sum
def test_a_diverged_client_neither_poisons_the_noisy_sum_nor_escapes_the_bound(dim):
  rng = np.random.default_rng(0)
  updates = jnp.asarray(rng.normal(size=(4, dim)), jnp.float32)
  bad = updates.at[1, 3].set(jnp.nan).at[2, 0].set(jnp.inf)  # slot 2 is padding
  zeroed = updates.at[1].set(0.0).at[2].set(0.0)
  mask = jnp.array([True, True, False, True])
  noise_keys = jax.random.split(jax.random.PRNGKey(0), 4)
  got, clipped = noisy_sum(bad, mask, noise_keys, jax.random.PRNGKey(1), 0.5, 1.54)
  want, _ = noisy_sum(zeroed, mask, noise_keys, jax.random.PRNGKey(1), 0.5, 1.54)
  assert bool(jnp.all(jnp.isfinite(got)))
  # The same release as with that client's update replaced by zeros, which
  # has norm <= S: the sensitivity, hence the guarantee, is unchanged.
  np.testing.assert_array_equal(got, want)
  assert int(clipped) == 3  # two clipped to S, one zeroed; padding not counted


def _aggregate_noise(num_real, capacity, clip, sigma, dim=20_000, seed=0):
  """The noise part of noisy_sum for zero updates."""
  mask = jnp.arange(capacity) < num_real
  noise_keys = jax.random.split(jax.random.PRNGKey(seed), capacity)
  total, _ = noisy_sum(jnp.zeros((capacity, dim)), mask, noise_keys,
                       jax.random.PRNGKey(seed + 1), clip, sigma)
  return np.asarray(total)


def _variance_pvalue(samples, std):
  """Two-sided chi-square test of Var(samples) == std^2 (mean 0 known)."""
  stat = np.sum(samples.astype(np.float64) ** 2) / std**2
  dof = samples.size
  cdf = stats.chi2.cdf(stat, dof)
  return 2 * min(cdf, 1 - cdf)


@pytest.mark.parametrize("num_real,capacity", [(10, 10), (7, 12), (1, 4), (0, 4)])
def test_aggregate_noise_is_exactly_s_sigma(num_real, capacity):
  clip, sigma = 0.6, 1.54
  total = _aggregate_noise(num_real, capacity, clip, sigma)
  assert _variance_pvalue(total, clip * sigma) > 1e-3
  # A wrong sigma (5% off either way) is rejected.
  assert _variance_pvalue(total, clip * sigma * 1.05) < 1e-3
  assert _variance_pvalue(total, clip * sigma * 0.95) < 1e-3


def test_noise_shares_scale_with_real_participants():
  assert float(noise_share_std(2.0, 1.5, jnp.int32(9))) == pytest.approx(1.0)
  assert float(noise_share_std(2.0, 1.5, jnp.int32(0))) == pytest.approx(3.0)


def test_clipped_updates_sum_and_padding_is_ignored():
  updates = jnp.stack([jnp.full((4,), 3.0), jnp.full((4,), 0.1), jnp.full((4,), 100.0)])
  mask = jnp.array([True, True, False])
  total, num_clipped = noisy_sum(updates, mask, jax.random.split(jax.random.PRNGKey(0), 3),
                                 jax.random.PRNGKey(1), 1.0, 0.0)
  np.testing.assert_allclose(total, jnp.full((4,), 0.5 + 0.1), rtol=1e-6)
  assert int(num_clipped) == 1


def test_round_and_client_keys_are_never_reused():
  root = keys.run_key(0)
  seen = set()
  for t in range(1, 6):
    rk = keys.round_key(root, t)
    for p in (keys.SAMPLING, keys.MASK, keys.SERVER_NOISE):
      seen.add(tuple(np.asarray(keys.purpose(rk, p)).tolist()))
    train, noise = keys.client_keys(rk, jnp.arange(50))
    for k in np.concatenate([np.asarray(train), np.asarray(noise)]):
      seen.add(tuple(k.tolist()))
  assert len(seen) == 5 * (3 + 100)
  # A client's key depends on its id, not on its slot in the cohort.
  a, _ = keys.client_keys(keys.round_key(root, 1), jnp.array([3, 7]))
  b, _ = keys.client_keys(keys.round_key(root, 1), jnp.array([7, 3]))
  np.testing.assert_array_equal(a[0], b[1])


@pytest.mark.parametrize("m", [5, noise.MATVEC_SUM_MIN])
def test_a_row_left_out_of_the_sum_never_reaches_it_even_when_not_finite(m):
  """A padding slot's or dropped client's diverged update (inf, NaN) is not
  in the sum, at either length (short rows: the masked reduction; long ones:
  the product, 0 x inf = NaN there); one in the sum makes it non-finite."""
  values = jnp.ones((3, m)).at[1, 0].set(jnp.inf).at[1, 1].set(jnp.nan)
  total = jax.jit(noise.masked_sum)(values, jnp.array([True, False, True]))
  np.testing.assert_array_equal(total[:3], [2.0, 2.0, 2.0])
  assert bool(jnp.all(total == 2.0))
  included = noise.masked_sum(values, jnp.array([True, True, False]))
  assert float(included[0]) == np.inf and np.isnan(float(included[1]))
  assert bool(jnp.all(included[2:] == 2.0))
