"""The fixed-scale discrete Gaussian sampler (alias tables).

The tables are checked exactly (weights against the DG pmf to 2^-127, the
cut tails below 2^-128); the sampler is checked to be the exact map of its
random bits through the table (including the rare 96-bit refinement), and
statistically like the rejection sampler: chi-square against the exact pmf
at scales 0.5 to 1e5, mean and variance, rejecting a 2% wrong scale and a
rounded continuous Gaussian on the same samples.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from dg_stats import binned_pvalue, chi2_pvalue
from fedjax_dp.privacy import dg_table, discrete_gaussian_pmf

N = 200_000
ALPHA = 1e-3


@functools.lru_cache(maxsize=None)
def _table(*scales):
  return dg_table.discrete_gaussian_table(scales)


def _draw(scale, seed=0, size=N):
  table = _table(scale)
  fn = jax.jit(lambda k: dg_table.sample_table(k, table, (size,)))
  return np.asarray(fn(jax.random.PRNGKey(seed)))


@pytest.mark.parametrize("scale", [0.1, 0.5, 3.5, 199.0, 1000.0])
def test_table_weights_are_the_dg_pmf_to_fixed_point(scale):
  table = _table(scale)
  support, weights = dg_table.table_pmf(table)
  assert sum(weights) == 1 << dg_table.BITS
  p = np.array([float(w) for w in weights]) / 2.0 ** dg_table.BITS
  true = discrete_gaussian_pmf(support, 0.0, scale)
  inside = np.abs(support) <= table.tails[0]
  # 2^-127 from the fixed point; 1e-13 relative from the float64 reference pmf.
  assert np.all(np.abs(p - true)[inside] <= 2.0 ** -127 + 1e-13 * true[inside])
  assert np.all(p[~inside] == 0)
  # The cut tails carry less than 2^-128, and T is within 2 of the smallest such cut.
  t = table.tails[0]
  beyond = lambda cut: 2 * discrete_gaussian_pmf(np.arange(cut + 1, cut + 40 * scale + 50),
                                                 0.0, scale).sum()
  assert beyond(t) < 2.0 ** -128
  assert t <= 2 or beyond(t - 3) >= 2.0 ** -128


def test_alias_construction_is_exact_for_arbitrary_weights():
  """The sweep construction reproduces any integer weights, zeros and ties included."""
  rng = np.random.default_rng(0)
  unit = 1 << 40
  for trial in range(20):
    slots = int(rng.integers(1, 40))
    raw = rng.integers(0, 5, slots) * rng.integers(0, 2 ** 30, slots)
    if trial % 4 == 0:
      raw[:] = 7  # every slot exactly full
    if raw.sum() == 0:
      raw[0] = 1
    total = int(raw.sum())  # scale to sum slots * unit exactly (remainder on slot 0)
    w = np.array([int(v) * slots * unit // total for v in raw], dtype=object)
    w[0] += slots * unit - int(w.sum())
    threshold, alias = dg_table._alias(w, unit)
    assert all(0 <= t < unit for t in threshold)
    rebuilt = np.array([unit if alias[i] == i else threshold[i] for i in range(slots)],
                       dtype=object)
    for i in range(slots):
      if alias[i] != i:
        rebuilt[alias[i]] += unit - threshold[i]
    assert list(rebuilt) == list(w)


def test_sampler_is_the_exact_map_of_its_bits():
  """Every sample equals the alias table applied to its 128 uniform bits.

  Scale 2e4 has K = 2^20 slots, so 2^-12 of the samples (about 50 here) tie
  on the first word and are decided by the three refinement words.
  """
  table = _table(2e4)
  size = 200_000
  key = jax.random.PRNGKey(7)
  x = np.asarray(jax.jit(lambda k: dg_table.sample_table(k, table, (size,)))(key))
  # Replicate the sampler's use of its key: words per chunk, refinement words
  # per (chunk, tie in index order).
  k, slots = table.log2_slots, table.slots
  num_chunks = -(-size // dg_table.CHUNK)
  chunk = -(-size // num_chunks)
  draw_key, refine_key = jax.random.split(key)
  words = np.asarray(jax.random.bits(draw_key, (num_chunks, chunk), jnp.uint32))
  primary = table.primary[0].astype(np.int64)
  alias = primary & (slots - 1)
  top = primary >> k
  rest = table.refine[0].tolist()
  threshold = [(int(top[i]) << 96) | (rest[i][0] << 64) | (rest[i][1] << 32) | rest[i][2]
               for i in range(slots)]
  expected = np.empty(num_chunks * chunk, np.int64)
  ties = 0
  for c in range(num_chunks):
    chunk_key = jax.random.fold_in(refine_key, c)
    trip = 0
    for j, w in enumerate(words[c].tolist()):
      slot = w >> (32 - k)
      v = w & ((1 << (32 - k)) - 1)
      if v == threshold[slot] >> 96:
        r = np.asarray(jax.random.bits(jax.random.fold_in(chunk_key, trip), (3,), jnp.uint32))
        v = (v << 96) | (int(r[0]) << 64) | (int(r[1]) << 32) | int(r[2])
        trip += 1
        ties += 1
        keep = v < threshold[slot]
      else:
        keep = v < threshold[slot] >> 96
      expected[c * chunk + j] = (slot if keep else alias[slot]) - slots // 2
  assert 10 <= ties <= 200, ties
  np.testing.assert_array_equal(x, expected[:size])


@pytest.mark.parametrize("scale,mean", [(0.5, 0), (3.5, -3), (199.0, 1), (1000.0, -1)])
def test_chi_square_accepts_the_pmf_and_rejects_a_two_percent_wrong_scale(scale, mean):
  x = _draw(scale) + mean
  wrong = _draw(scale * 1.02, seed=1) + mean
  lo, hi = int(mean - 7 * scale - 2), int(mean + 7 * scale + 2)

  def pvalue(samples, s):
    if scale < 100:
      return chi2_pvalue(samples, lambda sup: discrete_gaussian_pmf(sup, mean, s), lo, hi)
    return binned_pvalue(samples, mean, s, width=int(scale // 8))

  assert pvalue(x, scale) > ALPHA
  assert pvalue(x, scale * 1.02) < ALPHA  # the same samples against a wrong pmf
  assert pvalue(wrong, scale) < ALPHA  # a sampler with the wrong scale


def test_not_a_rounded_continuous_gaussian():
  """DG(0, 0.5) puts 0.79 on 0; round(N(0, 0.5^2)) only 0.68."""
  x = _draw(0.5)
  rounded = lambda s: stats.norm.cdf(s + 0.5, 0, 0.5) - stats.norm.cdf(s - 0.5, 0, 0.5)
  assert chi2_pvalue(x, rounded, -4, 4) < ALPHA
  assert chi2_pvalue(x, lambda s: discrete_gaussian_pmf(s, 0.0, 0.5), -4, 4) > ALPHA


@pytest.mark.parametrize("scale", [20.0, 1e5])
def test_mean_and_variance(scale):
  x = _draw(scale, seed=2).astype(np.float64)
  grid = np.arange(-12 * scale, 12 * scale + 1)
  pmf = discrete_gaussian_pmf(grid, 0.0, scale)
  true_var = np.sum(pmf * grid ** 2)
  assert abs(x.mean()) < 4.5 * np.sqrt(true_var / N)

  def var_p(var):
    stat = np.sum(x ** 2) / var
    return 2 * min(stats.chi2.cdf(stat, N), stats.chi2.sf(stat, N))

  assert var_p(true_var) > ALPHA
  assert var_p(true_var * 1.02 ** 2) < ALPHA
  assert var_p(true_var / 1.02 ** 2) < ALPHA
  if scale >= 1e4:
    assert binned_pvalue(x.astype(np.int64), 0.0, scale, width=int(scale // 8)) > ALPHA


def test_rows_jit_vmap_and_keys():
  """One compiled sampler serves every row (traced); vmap over keys; the same
  key gives the same draw and another key another."""
  table = _table(2.0, 30.0)
  fn = jax.jit(jax.vmap(lambda k, r: dg_table.sample_table(k, table, (4, 5), r)))
  keys = jax.random.split(jax.random.PRNGKey(3), 20_000)
  rows = jnp.repeat(jnp.array([0, 1]), 10_000)
  x = np.asarray(fn(keys, rows))
  assert x.shape == (20_000, 4, 5) and x.dtype == np.int32
  small, large = x[:10_000].ravel(), x[10_000:].ravel()
  pmf = lambda s: (lambda sup: discrete_gaussian_pmf(sup, 0.0, s))
  assert chi2_pvalue(small, pmf(2.0), -12, 12) > ALPHA
  assert chi2_pvalue(small, pmf(2.04), -12, 12) < ALPHA
  assert chi2_pvalue(large, pmf(30.0), -200, 200) > ALPHA
  np.testing.assert_array_equal(x, np.asarray(fn(keys, rows)))
  other = np.asarray(fn(jax.random.split(jax.random.PRNGKey(4), 20_000), rows))
  assert np.mean(x[10_000:] == other[10_000:]) < 0.1


@pytest.mark.parametrize("scales,match", [((0.0,), "positive"), ((float("nan"),), "positive"),
                                          ((1e7,), "slots")])
def test_bad_scales_are_rejected(scales, match):
  with pytest.raises(ValueError, match=match):
    dg_table.discrete_gaussian_table(scales)


def test_host_sampler_draws_the_scale_of_its_argument():
  """``sample_on_host`` (rare scales inside a jitted program): the pmf of the
  scale its traced argument selects, a 2% wrong scale rejected; same key,
  same draw."""
  scale_of = lambda shares: 40.0 / np.sqrt(float(shares))
  fn = jax.jit(lambda k, a: dg_table.sample_on_host(k, scale_of, (N,), a))
  x = np.asarray(fn(jax.random.PRNGKey(5), jnp.int32(4)))  # scale 20
  assert x.dtype == np.int32
  pvalue = lambda s: chi2_pvalue(x, lambda sup: discrete_gaussian_pmf(sup, 0.0, s), -150, 150)
  assert pvalue(20.0) > ALPHA
  assert pvalue(20.4) < ALPHA and pvalue(19.6) < ALPHA
  np.testing.assert_array_equal(x, np.asarray(fn(jax.random.PRNGKey(5), jnp.int32(4))))
  assert np.mean(x == np.asarray(fn(jax.random.PRNGKey(6), jnp.int32(4)))) < 0.1
