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
  """A Poisson draw above the capacity keeps ``capacity`` of its clients, each
  client as often as any other (the truncated-Poisson accountant assumes a
  uniform subset): per-id counts over 4,000 rounds accepted as uniform;
  a lowest-ids-first truncation of the same kind of draw rejected."""
  n, rate, cap, rounds = 100, 0.5, 10, 4000
  c = sampling.sample_cohort(jax.random.PRNGKey(3), n, rate, cap)
  assert int(c.num_sampled) > cap and bool(c.mask.all())
  kept = jax.vmap(lambda k: sampling.sample_cohort(k, n, rate, cap).indices)(
      jax.random.split(jax.random.PRNGKey(4), rounds))
  counts = np.bincount(np.asarray(kept).ravel(), minlength=n)
  assert stats.chisquare(counts).pvalue > 1e-3
  draws = np.random.default_rng(5).random((rounds, n)) < rate
  lowest = np.concatenate([np.flatnonzero(d)[:cap] for d in draws])
  assert stats.chisquare(np.bincount(lowest, minlength=n)).pvalue < 1e-6


def test_unknown_sampler_is_rejected():
  with pytest.raises(ValueError, match="unknown sampler"):
    sampling.sample_cohort(jax.random.PRNGKey(0), 10, 0.5, 4, "stratified")


# Balls-in-bins and b-min-sep (sampling.Schedule): cohorts across rounds.

def _schedule(kind, num_clients, rate, separation=None, seed=0):
  return sampling.schedule_for(kind, jax.random.PRNGKey(seed), rate, separation)


def test_balls_in_bins_takes_each_client_every_b_rounds():
  """A client is in exactly the rounds of its bin, B = 1/q apart; its bin is
  uniform (each bin's size Binomial(N, 1/B): accepted, 1.2/B rejected)."""
  n, rounds = 3000, 40
  s = _schedule("balls-in-bins", n, 0.1)
  joined = sampling.scheduled_rounds(s, n, rounds)
  assert s.separation == 10
  assert np.all(joined.sum(axis=1)[:10] == joined.sum(axis=1)[10:20])
  for client in joined.T[:300]:
    rounds_in = np.flatnonzero(client)
    assert len(rounds_in) == 4 and np.all(np.diff(rounds_in) == 10)
  sizes = joined.sum(axis=1)[:10]
  for q, accept in ((0.1, True), (0.12, False)):
    stat = np.sum((sizes - n * q) ** 2 / (n * q * (1 - q)))
    assert (stats.chi2.sf(stat, df=10) > 1e-3) == accept, (q, stat)


def test_b_min_sep_keeps_clients_b_apart_at_rate_q():
  """b-min-sep: no client joins twice within b rounds; cohort sizes have mean
  q N from round 1 on (p = 1/(1/q - b + 1): accepted; p = q, the plain
  Poisson rate, rejected); each client's count has mean T q."""
  n, rounds, q, b = 4000, 60, 0.05, 4
  s = _schedule("b-min-sep", n, q, b)
  joined = sampling.scheduled_rounds(s, n, rounds)
  for client in joined.T:
    assert np.all(np.diff(np.flatnonzero(client)) >= b)
  sizes = joined.sum(axis=1)
  counts = joined.sum(axis=0)
  assert abs(counts.mean() - rounds * q) < 4 * counts.std() / np.sqrt(n)
  for p, accept in ((s.prob, True), (q, False)):
    rate = p / (1 + (b - 1) * p)
    # Rounds' sizes are nearly independent; their mean's std, widened x2 for that.
    z = (sizes.mean() - n * rate) / (2 * np.sqrt(n * rate / rounds))
    z1 = (sizes[0] - n * rate) / np.sqrt(n * rate)
    assert (abs(z) < 4 and abs(z1) < 4) == accept, (p, z, z1)


@pytest.mark.parametrize("kind,separation", [("balls-in-bins", None), ("b-min-sep", 3)])
def test_scheduled_cohort_is_the_schedules_round(kind, separation):
  """sample_cohort's members in round t are scheduled_rounds' row t, in the
  slots; the planned sizes are the rows' sizes."""
  n, rounds, q = 300, 12, 0.1
  s = _schedule(kind, n, q, separation, seed=4)
  joined = sampling.scheduled_rounds(s, n, rounds)
  keys = jax.random.split(jax.random.PRNGKey(9), rounds)
  sizes = sampling.planned_cohort_sizes(keys, n, q, kind, schedule=s)
  assert np.array_equal(sizes, joined.sum(axis=1))
  cap = sampling.capacity_for(sizes, n)
  for t in (1, 2, 7, 12):
    c = sampling.sample_cohort(keys[t - 1], n, q, cap, kind, t=t, schedule=s)
    real = np.asarray(c.indices)[np.asarray(c.mask)]
    assert sorted(real.tolist()) == np.flatnonzero(joined[t - 1]).tolist()


def test_b_min_sep_needs_b_at_most_one_over_q():
  with pytest.raises(ValueError, match="b is at most 1/q"):
    _schedule("b-min-sep", 100, 0.25, 5)
  assert _schedule("b-min-sep", 100, 0.25, 4).prob == 1.0


def test_cyclic_sampling_takes_the_group_that_help_and_docs_name():
  """Round t (from 1) samples group (t - 1) mod b of the clients i mod b, as
  --help and docs/correlated-noise.md say (issue 62): at rate b q = 1 a round
  takes its whole group."""
  import pathlib  # pylint: disable=import-outside-toplevel
  from fedjax_dp.cli.parser import build_parser  # pylint: disable=import-outside-toplevel
  num, b = 12, 4
  for t in range(1, 2 * b + 1):
    cohort = sampling.sample_cohort(jax.random.PRNGKey(t), num, 1 / b, num,
                                    cycle_length=b, t=t)
    joined = sorted(np.asarray(cohort.indices)[np.asarray(cohort.mask)].tolist())
    assert joined == [i for i in range(num) if i % b == (t - 1) % b], t
  text = " ".join(build_parser().format_help().split())
  assert "round t samples group (t - 1) mod B" in text
  assert "round t takes bin (t - 1) mod 1/q" in text
  doc = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "correlated-noise.md").read_text()
  assert "round t samples group (t - 1) mod b" in doc and "round t takes bin (t - 1) mod B" in doc
  assert "t mod B" not in doc.replace("(t - 1) mod B", "")
