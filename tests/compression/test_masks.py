"""Top-K / random subsets: selection, linearity, uniformity."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from fedjax_dp.compression import masks


def test_topk_picks_the_largest_scores():
  scores = jax.random.uniform(jax.random.PRNGKey(0), (1000,))
  idx = np.asarray(masks.topk_indices(scores, 37))
  expected = np.sort(np.argsort(-np.asarray(scores))[:37])
  np.testing.assert_array_equal(idx, expected)


def test_compression_is_linear_and_decompress_is_its_adjoint():
  n, k = 500, 40
  idx = masks.random_indices(jax.random.PRNGKey(1), n, k)
  xs = jax.random.normal(jax.random.PRNGKey(2), (7, n))
  # sum_i C(x_i) == C(sum_i x_i): what makes secure aggregation possible.
  np.testing.assert_allclose(jnp.sum(jax.vmap(masks.compress, (0, None))(xs, idx), 0),
                             masks.compress(jnp.sum(xs, 0), idx), rtol=1e-5, atol=1e-5)
  c = jax.random.normal(jax.random.PRNGKey(3), (k,))
  # <C x, c> == <x, C^T c>
  np.testing.assert_allclose(jnp.dot(masks.compress(xs[0], idx), c),
                             jnp.dot(xs[0], masks.decompress(c, idx, n)), rtol=1e-5)


def test_random_subset_has_k_distinct_sorted_indices():
  idx = np.asarray(masks.random_indices(jax.random.PRNGKey(4), 10_000, 321))
  assert len(np.unique(idx)) == 321 and np.all(np.diff(idx) > 0)
  assert idx.min() >= 0 and idx.max() < 10_000


def test_random_subset_is_uniform():
  """Inclusion counts per coordinate: accept uniform k/n, reject a biased sampler."""
  n, k, trials = 50, 10, 4000
  keys = jax.random.split(jax.random.PRNGKey(5), trials)
  subsets = jax.vmap(lambda kk: masks.random_indices(kk, n, k))(keys)
  counts = np.bincount(np.asarray(subsets).ravel(), minlength=n)
  expected = np.full(n, trials * k / n)
  assert stats.chisquare(counts, expected).pvalue > 1e-3
  # A sampler that favours low indices (top-k of u + small ramp) must be rejected.
  biased = jax.vmap(lambda kk: masks.topk_indices(
      -(jax.random.uniform(kk, (n,)) + 0.05 * jnp.arange(n) / n), k))(keys)
  counts_b = np.bincount(np.asarray(biased).ravel(), minlength=n)
  assert stats.chisquare(counts_b, expected).pvalue < 1e-3


def test_num_kept_rounds_and_validates():
  assert masks.num_kept(1_663_370, 0.005) == 8317
  assert masks.num_kept(10, 1e-9) == 1
  for bad in (0.0, -0.1, 1.5):
    with pytest.raises(ValueError, match="ratio"):
      masks.num_kept(100, bad)
