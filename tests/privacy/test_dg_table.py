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


@functools.lru_cache(maxsize=None)
def _sampler(scale, size):
  """One compiled sampler per table and size (the key is traced)."""
  table = _table(scale)
  return jax.jit(lambda k: dg_table.sample_table(k, table, (size,)))


def _draw(scale, seed=0, size=N):
  return np.asarray(_sampler(scale, size)(jax.random.PRNGKey(seed)))


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


def _exact_map(table, keys, size, decide_bits=None):
  """What ``sample_table(keys[b], table, (size,))`` must draw, replayed in numpy.

  The first word of element j is word j of ``split(key)[0]``'s ``(chunks,
  chunk)`` block; a tie's further words are ``bits(fold_in(split(key)[1],
  j))``, compared with the threshold's unread bits as one number.

  Returns:
    ``(samples, ties)``: (B, size) and the number of ties.
  """
  k, slots = table.log2_slots, table.slots
  decide = 32 - k if decide_bits is None else decide_bits
  rest = 32 - k - decide
  chunks, chunk = dg_table.num_chunks(size)

  @jax.jit
  @jax.vmap
  def bits(key):
    draw_key, refine_key = jax.random.split(key)
    first = jax.random.bits(draw_key, (chunks, chunk), jnp.uint32).reshape(-1)[:size]
    more = jax.vmap(lambda j: jax.random.bits(jax.random.fold_in(refine_key, j),
                                              (3 + (rest > 0),), jnp.uint32))(jnp.arange(size))
    return first, more

  words, more = (np.asarray(a).astype(np.int64) for a in bits(keys))
  primary = table.primary[0].astype(np.int64)
  alias, top = primary & (slots - 1), primary >> k
  refine = table.refine[0].astype(np.int64)
  slot = words >> (32 - k)
  v = (words & ((1 << (32 - k)) - 1)) >> rest
  t = top[slot] >> rest
  out = np.where(v < t, slot, alias[slot])
  for b, j in zip(*np.nonzero(v == t)):
    i, r = int(slot[b, j]), [int(x) for x in more[b, j]]
    number = r[-3] << 64 | r[-2] << 32 | r[-1]
    threshold = int(refine[i, 0]) << 64 | int(refine[i, 1]) << 32 | int(refine[i, 2])
    if rest:
      number |= (r[0] & ((1 << rest) - 1)) << 96
      threshold |= (int(top[i]) & ((1 << rest) - 1)) << 96
    out[b, j] = i if number < threshold else alias[i]
  return out - slots // 2, int(np.sum(v == t))


@functools.lru_cache(maxsize=None)
def _exact_map_of_key_7():
  """``_exact_map`` of scale 2e4's 200,000 draws from key 7, replayed once for
  both ways of sampling."""
  return _exact_map(_table(2e4), jax.random.PRNGKey(7)[None], 200_000)


@pytest.mark.parametrize("scan", [True, False])
def test_sampler_is_the_exact_map_of_its_bits(scan):
  """Every sample equals the alias table applied to its 128 uniform bits,
  whether the lookups run in a scan over chunks (the CPU's way) or at once.

  Scale 2e4 has K = 2^20 slots, so 2^-12 of the samples (about 50 here) tie
  on the first word and are decided by the three refinement words; visiting
  2 of the 7 chunks an iteration, the loop runs many times, and the draw
  does not depend on that.
  """
  table, size, key = _table(2e4), 200_000, jax.random.PRNGKey(7)
  expected, ties = _exact_map_of_key_7()
  assert 10 <= ties <= 200, ties
  for max_ties in (None, 2):
    fn = jax.jit(lambda k: dg_table.sample_table(k, table, (size,), max_ties=max_ties,
                                                 scan=scan))
    np.testing.assert_array_equal(np.asarray(fn(key)), expected[0])


def test_forced_ties_take_many_iterations_and_keep_the_pmf():
  """The tie path on its own: deciding the first word on 3 threshold bits
  makes about 1/8 of the elements ties (25,000 of 200 vectors of 1,000),
  decided in one loop visiting 64 vectors an iteration (hundreds of
  iterations). They are the exact map of their bits, and the samples still
  follow the pmf (a 2% wrong scale is rejected)."""
  scale, rows, size = 3.5, 200, 1000
  table = _table(scale)
  keys = jax.random.split(jax.random.PRNGKey(11), rows)

  @jax.jit
  def sample(keys):
    values, ties = jax.vmap(lambda k: dg_table.draw_marked(k, table, size, decide_bits=3))(keys)
    return dg_table.resolve_ties(values, ties, keys, table, decide_bits=3, max_ties=64), ties

  x, ties = (np.asarray(a) for a in sample(keys))
  expected, replayed = _exact_map(table, keys, size, decide_bits=3)
  assert 20_000 < replayed < 30_000 and int(ties.sum()) == replayed
  np.testing.assert_array_equal(x, expected)
  x = x.ravel()
  pmf = lambda s: (lambda sup: discrete_gaussian_pmf(sup, 0.0, s))
  assert chi2_pvalue(x, pmf(scale), -30, 30) > ALPHA
  assert chi2_pvalue(x, pmf(scale * 1.02), -30, 30) < ALPHA
  with pytest.raises(ValueError, match="decide_bits"):
    dg_table.draw_marked(keys[0], table, 10, decide_bits=40)


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
