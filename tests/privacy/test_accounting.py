"""Tests for fedjax_dp.privacy.accounting."""

import math

import dp_accounting
import pytest

from fedjax_dp.privacy import accounting as acc

DELTA = 1e-5
PAPER = dict(noise_multiplier=1.54, sampling_rate=1 / 60, delta=DELTA)


def test_moments_reproduces_papers():
  # UAI 2021 FL-TOP / Kerkouche thesis: sigma=1.54, q=1/60, 200 rounds -> 1.00.
  assert abs(acc.epsilon(rounds=200, **PAPER) - 1.0) < 0.005
  # sigma=1.49, q=100/5010, 100 rounds -> 1.00.
  assert abs(acc.epsilon(1.49, 100 / 5010, 100, DELTA) - 1.0) < 0.005
  # UAI 2021 FL-STD-DP reports eps = 0.76 at round 60 with sigma=1.54, q=1/60.
  assert round(acc.epsilon(rounds=60, **PAPER), 2) == 0.76


@pytest.mark.parametrize("sigma,rounds", [(0.7, 1), (1.0, 10), (2.5, 300),
                                          (5.0, 1000), (20.0, 1)])
def test_moments_without_subsampling_matches_gaussian_rdp(sigma, rounds):
  # For q = 1 the Gaussian mechanism has RDP a / (2 sigma^2) at order a. At
  # sigma=20, T=1 the unconstrained optimum (a ~ 97) lies beyond order 33.
  expected = min(rounds * a / (2 * sigma**2) + math.log(1 / DELTA) / (a - 1)
                 for a in range(2, 34))
  got = acc.epsilon(sigma, 1.0, rounds, DELTA, "moments")
  assert got == pytest.approx(expected, rel=1e-10)


@pytest.mark.parametrize("accountant", acc.ACCOUNTANTS)
def test_monotonicity(accountant):
  def eps(sigma=1.2, q=0.02, rounds=50):
    return acc.epsilon(sigma, q, rounds, DELTA, accountant)
  by_sigma = [eps(sigma=s) for s in (0.8, 1.0, 1.5, 2.5)]
  by_rounds = [eps(rounds=t) for t in (1, 10, 50, 200)]
  by_rate = [eps(q=q) for q in (0.005, 0.02, 0.1, 0.5)]
  assert all(a > b for a, b in zip(by_sigma, by_sigma[1:])), by_sigma
  assert all(a < b for a, b in zip(by_rounds, by_rounds[1:])), by_rounds
  assert all(a < b for a, b in zip(by_rate, by_rate[1:])), by_rate


@pytest.mark.parametrize("sigma,q,rounds", [(1.54, 1 / 60, 200),
                                            (1.54, 1 / 60, 60),
                                            (1.49, 0.02, 100),
                                            (1.0, 1.0, 10),
                                            (5.0, 0.3, 200)])
def test_accountant_ordering(sigma, q, rounds):
  moments, rdp, pld = (acc.epsilon(sigma, q, rounds, DELTA, a)
                       for a in ("moments", "rdp", "pld"))
  # dp_accounting's RDP conversion and orders are a superset of the moments
  # accountant's; PLD is tighter still. All stay within a factor of 2.
  assert pld <= rdp <= moments
  assert pld > 0.5 * moments


def test_paper_setting_values():
  # Regression values for sigma=1.54, q=1/60, delta=1e-5.
  assert acc.epsilon(rounds=200, accountant="rdp", **PAPER) == pytest.approx(0.7734, abs=1e-4)
  assert acc.epsilon(rounds=200, accountant="pld", **PAPER) == pytest.approx(0.681, abs=2e-3)
  assert acc.epsilon(rounds=60, accountant="rdp", **PAPER) == pytest.approx(0.5464, abs=1e-4)
  assert acc.epsilon(rounds=60, accountant="pld", **PAPER) == pytest.approx(0.387, abs=2e-3)


@pytest.mark.parametrize("sampler,num_clients", [("poisson", None),
                                                 ("fixed", 600)])
def test_rdp_matches_fresh_accountant(sampler, num_clients):
  # The cached per-round RDP vector must give exactly what a fresh
  # RdpAccountant composing T rounds gives.
  q, sigma, rounds = 0.05, 1.3, 37
  if sampler == "poisson":
    accountant = dp_accounting.rdp.RdpAccountant()
    event = dp_accounting.PoissonSampledDpEvent(
        q, dp_accounting.GaussianDpEvent(sigma))
  else:
    accountant = dp_accounting.rdp.RdpAccountant(
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    event = dp_accounting.SampledWithoutReplacementDpEvent(
        num_clients, 30, dp_accounting.GaussianDpEvent(sigma / 2))
  accountant.compose(dp_accounting.SelfComposedDpEvent(event, rounds))
  got = acc.epsilon(sigma, q, rounds, DELTA, "rdp", sampler, num_clients)
  assert got == accountant.get_epsilon(DELTA)


@pytest.mark.parametrize("sigma,q,rounds,delta", [(1.54, 1 / 60, 200, DELTA),
                                                  (0.8, 0.01, 50, DELTA),
                                                  (1.1, 0.5, 3, 1e-3)])
def test_pld_matches_fresh_accountant(sigma, q, rounds, delta):
  # The one-round PLD is cached per (sigma, q) and self-composed per T: the
  # epsilon must be a fresh PLDAccountant's, bit for bit, before and after a
  # curve at other T has used the cached PLD.
  accountant = dp_accounting.pld.PLDAccountant(
      value_discretization_interval=acc.PLD_VALUE_DISCRETIZATION)
  accountant.compose(dp_accounting.SelfComposedDpEvent(
      dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), rounds))
  expected = accountant.get_epsilon(delta)
  assert acc.epsilon(sigma, q, rounds, delta, "pld") == expected
  acc.epsilon_curve(sigma, q, [1, rounds + 1, 2 * rounds], delta, "pld")
  acc._pld_epsilon.cache_clear()  # pylint: disable=protected-access
  assert acc.epsilon(sigma, q, rounds, delta, "pld") == expected
  assert acc.epsilon(sigma * 1.01, q, rounds, delta, "pld") < expected


@pytest.mark.parametrize("accountant", acc.ACCOUNTANTS)
def test_curve_matches_pointwise(accountant):
  rounds = [0, 1, 7, 60, 25]
  curve = acc.epsilon_curve(1.54, 1 / 60, rounds, DELTA, accountant)
  assert curve == [acc.epsilon(1.54, 1 / 60, t, DELTA, accountant) for t in rounds]
  assert curve[0] == 0.0


def test_fixed_sampler():
  poisson = acc.epsilon(rounds=200, accountant="rdp", **PAPER)
  fixed = acc.epsilon(rounds=200, accountant="rdp", sampler="fixed",
                      num_clients=600, **PAPER)
  assert fixed > poisson
  # Without subsampling, replace-one doubles the sensitivity: the fixed cohort
  # at sigma equals the add/remove Gaussian mechanism at sigma / 2.
  full = acc.epsilon(3.0, 1.0, 10, DELTA, "rdp", "fixed", num_clients=50)
  assert full == pytest.approx(acc.epsilon(1.5, 1.0, 10, DELTA, "rdp"), rel=1e-9)
  for accountant in ("moments", "pld"):
    with pytest.raises(ValueError, match="assumes Poisson sampling"):
      acc.epsilon(rounds=10, accountant=accountant, sampler="fixed",
                  num_clients=600, **PAPER)
  with pytest.raises(ValueError, match="num_clients"):
    acc.epsilon(rounds=10, accountant="rdp", sampler="fixed", **PAPER)


def test_truncated_cohort():
  plain = acc.epsilon(rounds=50, accountant="pld", **PAPER)
  # A cap at least the population size never truncates.
  untruncated = acc.epsilon(rounds=50, accountant="pld", num_clients=600,
                            truncated_cohort=600, **PAPER)
  assert untruncated == pytest.approx(plain, rel=1e-6)
  truncated = acc.epsilon(rounds=50, accountant="pld", num_clients=600,
                          truncated_cohort=20, **PAPER)
  assert math.isfinite(truncated) and truncated > 0
  with pytest.raises(ValueError, match="truncated_cohort"):
    acc.epsilon(rounds=50, accountant="rdp", num_clients=600,
                truncated_cohort=20, **PAPER)
  with pytest.raises(ValueError, match="num_clients"):
    acc.epsilon(rounds=50, accountant="pld", truncated_cohort=20, **PAPER)


@pytest.mark.parametrize("accountant,sampler,tolerance", [
    ("moments", "poisson", 1e-4), ("rdp", "poisson", 1e-4),
    ("pld", "poisson", 1e-3), ("rdp", "fixed", 1e-2)])
def test_noise_multiplier_for_epsilon_inverts(accountant, sampler, tolerance):
  kwargs = dict(sampling_rate=1 / 60, rounds=200, delta=DELTA,
                accountant=accountant, sampler=sampler, num_clients=600)
  target = 1.0 if sampler == "poisson" else 5.0
  sigma = acc.noise_multiplier_for_epsilon(target, tolerance=tolerance, **kwargs)
  assert acc.epsilon(sigma, **kwargs) <= target
  assert acc.epsilon(sigma - tolerance, **kwargs) > target
  if accountant == "moments":
    assert sigma == pytest.approx(1.54, abs=0.01)


def test_edge_cases():
  assert acc.epsilon(rounds=0, **PAPER) == 0.0
  assert acc.epsilon(0.0, 0.1, 5, DELTA) == math.inf
  assert acc.epsilon(0.0, 0.1, 5, DELTA, "pld") == math.inf


@pytest.mark.parametrize("kwargs,match", [
    (dict(noise_multiplier=-1.0), "noise_multiplier"),
    (dict(sampling_rate=0.0), "sampling_rate"),
    (dict(sampling_rate=1.5), "sampling_rate"),
    (dict(rounds=-1), "rounds"),
    (dict(rounds=2.5), "rounds"),
    (dict(delta=0.0), "delta"),
    (dict(delta=1.0), "delta"),
    (dict(accountant="gdp"), "Unknown accountant"),
    (dict(sampler="shuffle"), "Unknown sampler"),
    # Not independent across rounds: Monte Carlo's, never the Poisson epsilon.
    (dict(sampler="balls-in-bins"), "cannot account balls-in-bins sampling"),
    (dict(sampler="b-min-sep", accountant="pld"), "cannot account b-min-sep sampling"),
    (dict(sampler="b-min-sep", accountant="rdp"), "use Monte Carlo accounting"),
])
def test_validation(kwargs, match):
  args = dict(noise_multiplier=1.0, sampling_rate=0.1, rounds=10, delta=DELTA)
  args.update(kwargs)
  with pytest.raises(ValueError, match=match):
    acc.epsilon(**args)


def test_noise_multiplier_for_epsilon_validation():
  with pytest.raises(ValueError, match="target_epsilon"):
    acc.noise_multiplier_for_epsilon(0.0, 0.1, 10, DELTA)
  with pytest.raises(ValueError, match="sampling_rate"):
    acc.noise_multiplier_for_epsilon(1.0, 0.0, 10, DELTA)


def test_accountant_label():
  assert acc.accountant_label("moments", "poisson") == (
      "moments (RDP orders 2..33, Abadi et al. conversion), Poisson sampling")
  assert "without replacement" in acc.accountant_label("rdp", "fixed")
  assert "at most 32 clients" in acc.accountant_label("pld", "poisson", 32)
  with pytest.raises(ValueError, match="assumes Poisson sampling"):
    acc.accountant_label("moments", "fixed")


SAMPLING = acc.Sampling(rate=0.01, sampler="poisson", num_clients=6000, capacity=128)


@pytest.mark.parametrize("changes, says", [
    (dict(sampler="fixed"), "not fixed sampling"),
    (dict(max_cohort=40), "not Poisson sampling truncated to 40 clients"),
    (dict(sampler="fixed", cycle_length=4), "not fixed sampling"),
])
def test_correlated_noise_is_not_accounted_as_poisson_for_another_sampler(changes, says):
  """Cyclic and banded accounting hold for untruncated Poisson sampling: a
  fixed-size or truncated cohort is refused, not given Poisson's (smaller)
  epsilon. One band is independent noise, so its epsilon there is the
  sampler's own."""
  banded = acc.Mechanism("gaussian", 1.0, correlation="banded")
  sampling = SAMPLING._replace(**changes)
  with pytest.raises(ValueError, match=says):
    acc.report(banded, [200], DELTA, "rdp" if sampling.sampler == "fixed" else "pld", sampling)
  assert acc.report(banded, [200], DELTA, "pld", SAMPLING).epsilons == acc.epsilon_curve(
      1.0, 0.01, [200], DELTA, "pld")


def test_discrete_gaussian_under_cyclic_sampling_composes_a_groups_rounds():
  """FL-SIGN-DP's Theorem 3 under cyclic Poisson sampling over b groups: a
  client's ceil(T / b) rounds at rate min(1, b q), as for the Gaussian (for a
  large model kappa = nu = 0, so the two agree); more than the uncycled run's
  epsilon, which amplification by the whole population lowers."""
  sign = acc.Mechanism("discrete_gaussian", 1.0, dimension=1_663_370)
  rounds = [0, 7, 100, 200]
  plain = acc.report(sign, rounds, DELTA, "rdp", SAMPLING)
  for cycle in (4, 60, 150):
    cyclic = acc.report(sign, rounds, DELTA, "rdp", SAMPLING._replace(cycle_length=cycle))
    rate = min(1.0, 0.01 * cycle)
    assert cyclic.epsilons == acc.epsilon_discrete_gaussian_curve(
        1.0, rate, [-(-t // cycle) for t in rounds], DELTA, 1_663_370, 128, "rdp")
    assert cyclic.epsilons == pytest.approx(acc.cyclic_epsilon_curve(
        1.0, 0.01, cycle, rounds, DELTA, "rdp"), rel=1e-9)
    assert cyclic.epsilons[0] == 0.0 and cyclic.epsilons[-1] > plain.epsilons[-1]
    assert f"b = {cycle} groups" in cyclic.label and cyclic.fields["cycle_length"] == cycle
  assert "cyclic" not in plain.label and plain.fields == {}
