"""Client sampling: Poisson rate, fixed size, capacity planning, truncation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from fedjax_dp import sampling


def _sizes(rate, num_clients=600, trials=3000, capacity=64):
  keys = jax.random.split(jax.random.PRNGKey(0), trials)
  cohorts = jax.vmap(lambda k: sampling.sample_cohort(k, num_clients, rate, capacity))(keys)
  return np.asarray(cohorts.num_sampled), cohorts


def test_poisson_cohort_size_is_binomial():
  """Accept Binomial(N, q); reject Binomial(N, 1.1 q)."""
  sizes, _ = _sizes(0.05)
  values = np.arange(0, 64)
  observed = np.array([(sizes == v).sum() for v in values])
  for q, accept in ((0.05, True), (0.055, False)):
    pmf = stats.binom.pmf(values, 600, q)
    pmf[-1] += stats.binom.sf(values[-1], 600, q)
    # Pool the tails so every expected count is >= 5.
    exp = pmf * sizes.size
    keep = exp >= 5
    obs_p = np.append(observed[keep], observed[~keep].sum())
    exp_p = np.append(exp[keep], exp[~keep].sum())
    p = stats.chisquare(obs_p, exp_p * obs_p.sum() / exp_p.sum()).pvalue
    assert (p > 1e-3) == accept, (q, p)


def test_every_client_is_sampled_with_rate_q():
  _, cohorts = _sizes(0.05, num_clients=200, trials=4000)
  idx, mask = np.asarray(cohorts.indices), np.asarray(cohorts.mask)
  counts = np.bincount(idx[mask], minlength=200)
  # Each client's count is Binomial(4000, q): accept q = 0.05, reject 0.055.
  for q, accept in ((0.05, True), (0.055, False)):
    stat = np.sum((counts - 4000 * q) ** 2 / (4000 * q * (1 - q)))
    p = stats.chi2.sf(stat, df=200)
    assert (p > 1e-3) == accept, (q, p)


def test_real_slots_are_distinct_sampled_clients():
  _, cohorts = _sizes(0.05)
  for i in range(20):
    real = np.asarray(cohorts.indices[i])[np.asarray(cohorts.mask[i])]
    assert len(real) == int(cohorts.num_sampled[i]) and len(set(real)) == len(real)


def test_fixed_sampler_draws_exactly_round_q_n():
  c = sampling.sample_cohort(jax.random.PRNGKey(1), 6000, 1 / 60, 104, "fixed")
  assert int(c.num_sampled) == 100 and int(c.mask.sum()) == 100
  assert len(set(np.asarray(c.indices)[:100].tolist())) == 100


def test_planned_capacity_never_truncates():
  keys = jax.random.split(jax.random.PRNGKey(2), 200)
  cap = sampling.plan_capacity(keys, 6000, 1 / 60)
  sizes = [int(sampling.sample_cohort(k, 6000, 1 / 60, cap).num_sampled) for k in keys[:50]]
  assert cap % 4 == 0 and max(sizes) <= cap
  all_sizes = jax.vmap(lambda k: sampling.sample_cohort(k, 6000, 1 / 60, cap).num_sampled)(keys)
  assert int(jnp.max(all_sizes)) <= cap < int(jnp.max(all_sizes)) + 4


def test_overflow_keeps_a_uniform_subset_and_reports_it():
  c = sampling.sample_cohort(jax.random.PRNGKey(3), 100, 0.5, 10)
  assert int(c.num_sampled) > 10 and bool(c.mask.all())


def test_unknown_sampler_is_rejected():
  with pytest.raises(ValueError, match="unknown sampler"):
    sampling.sample_cohort(jax.random.PRNGKey(0), 10, 0.5, 4, "stratified")
