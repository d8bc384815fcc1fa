"""Monte Carlo accounting of amplified matrix mechanisms (fedjax_dp.privacy.monte_carlo)."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax_privacy import batch_selection
from jax_privacy.experimental.monte_carlo import sample_generation
from scipy import special, stats

from fedjax_dp.privacy import accounting
from fedjax_dp.privacy import monte_carlo as mc


def _toeplitz(c, rounds):
  return sum(v * np.eye(rounds, k=-k) for k, v in enumerate(c))


def _exact_min_sep_loss(y, c, sigma, p, b):
  """ln P(y)/Q(y) by enumerating every participation pattern of b-min-sep
  from its stationary start (T small)."""
  rounds = y.shape[0]
  start = np.full(b, p / (1 + (b - 1) * p))
  start[0] = 1 / (1 + (b - 1) * p)
  logs = []
  for x in itertools.product([0, 1], repeat=rounds):
    prob = 0.0
    for wait0, weight in enumerate(start):
      wait, pr = wait0, weight
      for joined in x:
        if wait:
          pr, wait = (0.0, 0) if joined else (pr, wait - 1)
          if pr == 0.0:
            break
        else:
          pr *= p if joined else 1 - p
          wait = b - 1 if joined else 0
      prob += pr
    if prob > 0:
      m = _toeplitz(c, rounds) @ np.asarray(x, float)
      logs.append(np.log(prob) + (2 * y @ m - m @ m) / (2 * sigma ** 2))
  return special.logsumexp(logs)


@pytest.mark.parametrize("c", [[1.0], [0.8, 0.6], [0.7, 0.5, 0.3], [0.6, 0.5, 0.4, 0.3]])
def test_min_sep_loss_equals_enumeration(c):
  """The backward recursion is the exact log-likelihood ratio of the mixture."""
  b, rounds, p, sigma = len(c), 7, 0.3, 0.9
  y = np.random.default_rng(b).normal(size=(rounds, 6)) * 1.2 + 0.5
  got = np.asarray(mc._min_sep_loss(jnp.asarray(y, jnp.float32), jnp.asarray(c, jnp.float32),
                                    jnp.float32(sigma), jnp.float32(p), b))
  want = [_exact_min_sep_loss(y[:, i], np.asarray(c), sigma, p, b) for i in range(6)]
  np.testing.assert_allclose(got, want, atol=2e-5)


def test_min_sep_loss_matches_jax_privacy_up_to_two_bands():
  """jax-privacy 2.0.0's numpy recursion agrees for b <= 2; from 3 bands its
  last columns' norms run the wrong way (the enumeration above decides)."""
  rounds, p, sigma = 12, 0.2, 1.1
  for c in ([1.0], [0.8, 0.6], [0.7, 0.5, 0.3]):
    strategy = batch_selection.BMinSepSampling(p, rounds, len(c))
    y = sample_generation.generate_sample(strategy, sigma, np.asarray(c), seed=1,
                                          num_samples=50)
    theirs = sample_generation.compute_privacy_loss(strategy, y, sigma, np.asarray(c))
    ours = np.asarray(mc._min_sep_loss(jnp.asarray(y, jnp.float32),
                                       jnp.asarray(c, jnp.float32), jnp.float32(sigma),
                                       jnp.float32(p), len(c)))
    assert np.allclose(ours, theirs, atol=1e-4) == (len(c) <= 2)


def test_bins_loss_matches_jax_privacy():
  """Balls-in-bins: the loss from w = M y equals jax-privacy's per-draw loss,
  a BLT-like column longer than the bins included."""
  rounds, bins, sigma = 9, 3, 1.1
  c = np.array([1.0, 0.5, 0.3, 0.2, 0.1, 0.05, 0.02])
  part = mc.Participation("balls-in-bins", rounds, bins)
  means = mc.bins_means(part, c)
  y = np.random.default_rng(0).normal(size=(rounds, 8)) + 0.3
  ours = np.asarray(mc._bins_loss(jnp.asarray(means @ y, jnp.float32),
                                  jnp.asarray(means @ means.T, jnp.float32), jnp.float32(sigma)))
  theirs = [sample_generation._compute_balls_in_bins_privacy_loss(bins, y[:, i], sigma, c)  # pylint: disable=protected-access
            for i in range(8)]
  np.testing.assert_allclose(ours, theirs, atol=1e-4)


def test_bins_draws_are_correlated_at_full_float32_precision():
  """The draws g ~ N(0, G) are a product with G's Cholesky factor at
  HIGHEST precision (a GPU's default, TF32, would round each to 10 bits)."""
  gram = jnp.eye(3) + 0.5
  jaxpr = str(jax.make_jaxpr(lambda k: mc._bins_losses(
      k, gram, jnp.linalg.cholesky(gram), jnp.float32(1.0), num=4, positive=True))(
          jax.random.PRNGKey(0)))
  assert "precision=(Precision.HIGHEST, Precision.HIGHEST)" in jaxpr


def test_the_epsilon_found_is_where_the_bound_holds_and_just_below_it_does_not():
  """The epsilon is the safe end of the final bracket: the bound on delta
  holds there and fails a hair below (a root finder's point can miss by its
  tolerance on either side)."""
  rng = np.random.default_rng(0)
  tails = [mc._Tail.of(rng.normal(1.0, 1.5, 20_000)), mc._Tail.of(rng.normal(0.8, 1.4, 20_000))]
  delta = 1e-3
  for bound in (lambda t, e: t.delta(e),
                lambda t, e: mc.mean_bound(t.delta(e), t.num, 0.025)):
    eps = mc._epsilon_at(tails, delta, bound)
    assert 0 < eps < np.inf
    assert max(bound(t, eps) for t in tails) <= delta
    assert max(bound(t, eps * (1 - 1e-6)) for t in tails) > delta


def test_the_kl_bounds_are_on_their_safe_sides():
  """The upper bound's KL divergence from the mean is at least the level, the
  lower bound's too (each end of its final bracket on the safe side)."""
  for mean, num, beta in [(0.01, 1000, 0.05), (0.3, 10**6, 0.01), (1e-6, 10**7, 0.025)]:
    level = np.log(1 / beta) / num
    hi, lo = mc.mean_bound(mean, num, beta), mc.mean_bound(mean, num, beta, upper=False)
    assert lo < mean < hi
    assert mc._kl(mean, hi) >= level and mc._kl(mean, lo) >= level
    assert mc._kl(mean, hi * (1 - 1e-9)) < level


def test_joins_follow_b_min_sep():
  """The positive draws' participations: never closer than b, and the
  stationary rate p / (1 + (b - 1) p) from the first round on (accepted);
  the plain Poisson rate p is rejected."""
  b, p, rounds, num = 4, 0.1, 40, 20000
  x = np.asarray(mc._joins(jax.random.PRNGKey(0), jnp.float32(p), rounds=rounds,
                           separation=b, num=num))
  for col in x.T[:2000]:
    assert np.all(np.diff(np.flatnonzero(col)) >= b)
  per_round = x.sum(axis=1)
  for rate, accept in ((p / (1 + (b - 1) * p), True), (p, False)):
    z = (per_round[0] - num * rate) / np.sqrt(num * rate * (1 - rate))
    mean_z = (per_round.mean() - num * rate) / np.sqrt(num * rate * (1 - rate) / rounds)
    assert (abs(z) < 4 and abs(mean_z) < 6) == accept, (rate, z, mean_z)


def test_mean_bound_covers_with_its_confidence():
  """The KL bound on a Bernoulli mean misses it in at most beta of the trials
  (accepted at beta = 0.05); a bound that pretends to 10 times the draws
  misses more often (rejected)."""
  rng = np.random.default_rng(0)
  mu, n, beta, trials = 0.01, 2000, 0.05, 2000
  means = rng.binomial(n, mu, size=trials) / n
  for draws, accept in ((n, True), (10 * n, False)):
    misses = sum(mc.mean_bound(m, draws, beta) < mu for m in means)
    assert (stats.binom.sf(misses - 1, trials, beta) > 1e-3) == accept, (draws, misses)


def _poisson_interval(column, sigma=1.0, rounds=20, rate=0.1, delta=1e-3, samples=200_000):
  part = mc.Participation("b-min-sep", rounds, 1, rate)
  return mc.estimate(part, column, sigma, delta, samples=samples, confidence=0.99, seed=3,
                     cache=False)


def test_one_band_under_poisson_agrees_with_pld():
  """One band under Poisson sampling is the subsampled Gaussian: PLD's epsilon
  lies inside Monte Carlo's interval; doubling the sensitivity (c = 2)
  moves the interval above PLD's, so the comparison fails."""
  pld = accounting.epsilon(1.0, 0.1, 20, 1e-3, "pld")
  found = _poisson_interval([1.0])
  assert found.epsilon_lower <= pld <= found.epsilon, (found, pld)
  assert found.epsilon - found.epsilon_lower < 0.3
  doubled = _poisson_interval([2.0])
  assert not doubled.epsilon_lower <= pld <= doubled.epsilon, (doubled, pld)


def test_epsilon_falls_as_sigma_rises():
  part = mc.Participation("b-min-sep", 30, 3, 0.1)
  column = [0.7, 0.5, 0.5]
  eps = [mc.estimate(part, column, s, 1e-3, samples=100_000, seed=0, cache=False).epsilon
         for s in (0.7, 1.0, 1.5, 2.5)]
  assert all(a > b for a, b in zip(eps, eps[1:])), eps


def test_estimate_is_cached_per_setting(tmp_path, monkeypatch):
  monkeypatch.setenv("FEDJAX_DP_CACHE", str(tmp_path))
  part = mc.Participation("balls-in-bins", 12, 3)
  first = mc.estimate(part, [1.0, 0.4], 1.5, 1e-2, samples=20_000, seed=5)
  again = mc.estimate(part, [1.0, 0.4], 1.5, 1e-2, samples=20_000, seed=5)
  other = mc.estimate(part, [1.0, 0.4], 1.5, 1e-2, samples=20_000, seed=6)
  assert len(list((tmp_path / "monte_carlo").iterdir())) == 2
  assert again._replace(seconds=0.0) == first._replace(seconds=0.0) and again.seconds == 0.0
  assert other.epsilon_estimate != first.epsilon_estimate


def test_sigma_for_epsilon_meets_its_target():
  part = mc.Participation("balls-in-bins", 12, 3)
  kw = dict(samples=50_000, seed=0, cache=False)
  sigma = mc.sigma_for_epsilon(part, [1.0], 2.0, 1e-2, tolerance=0.01, **kw)
  assert mc.estimate(part, [1.0], sigma, 1e-2, **kw).epsilon <= 2.0
  assert mc.estimate(part, [1.0], sigma - 0.02, 1e-2, **kw).epsilon > 2.0


@pytest.mark.parametrize("part,column,match", [
    (mc.Participation("b-min-sep", 10, 2, 0.1), [0.5, 0.5, 0.5], "at most b = 2 bands"),
    (mc.Participation("b-min-sep", 10, 2, 0.1), [1.0, -0.1], "non-negative"),
])
def test_bad_strategies_are_refused(part, column, match):
  with pytest.raises(ValueError, match=match):
    mc.estimate(part, column, 1.0, 1e-3, samples=1000, cache=False)


def test_participation_is_checked():
  with pytest.raises(ValueError, match="unknown participation"):
    mc.Participation("cyclic", 10, 2)
  with pytest.raises(ValueError, match="at most 1/4"):
    mc.min_sep_prob(0.3, 4)
  assert mc.Participation("b-min-sep", 10, 4, mc.min_sep_prob(1 / 60, 4)).rate() == \
      pytest.approx(1 / 60)


@pytest.mark.parametrize("changes,says", [
    ({"cycle_length": 4}, r"cyclic Poisson sampling \(b = 4\)"),
    ({"max_cohort": 80}, r"truncated cohorts \(max 80\)")])
def test_monte_carlo_accounting_refuses_the_samplings_it_does_not_cover(changes, says):
  """Cyclic Poisson and truncated cohorts are not Poisson: the draws would
  account them as Poisson (cyclic at q is less private than Poisson at q)."""
  sampling = accounting.Sampling(rate=0.05, sampler="poisson", num_clients=1000,
                                 capacity=100, **changes)
  with pytest.raises(ValueError, match=f"^monte-carlo accounting does not cover {says}"):
    accounting.participation(sampling, 50)
  assert accounting.participation(sampling._replace(cycle_length=1, max_cohort=None), 50) == \
      mc.Participation("b-min-sep", 50, 1, 0.05)
