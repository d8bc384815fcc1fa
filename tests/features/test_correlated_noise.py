"""Correlated noise (DP-FTRL by matrix factorization) and cyclic Poisson sampling."""

import json
import warnings

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax_privacy.matrix_factorization import buffered_toeplitz
from scipy import stats

from fedjax_dp import features, sampling, simulation
from fedjax_dp.privacy import accounting, correlated
from fedjax_dp.schemes import get_scheme
from scheme_helpers import Killed, kill_after
from tiny_model import tiny_linear

_CFG = simulation.RunConfig.of(rounds=8, clients_per_round=30, eval_every=4,
                               noise_multiplier=1.0, clip_norm=0.5, accountant="rdp")
_TEST = slice(0, 300)


def _run(data, test, public, scheme="FL-STD-DP", **settings):
  cfg = _CFG.replace(**settings)
  return simulation.run(tiny_linear(), get_scheme(scheme), data,
                        (test[0][_TEST], test[1][_TEST]), public, cfg)


def test_one_band_and_one_group_is_todays_gaussian_epsilon(small_federation):
  """Banded noise with one band over plain Poisson sampling is independent
  noise: the record's epsilon is today's for the same z, q and T."""
  data, test, public = small_federation
  plain = _run(data, test, public)
  banded = _run(data, test, public,
                correlated_noise=features.CorrelatedNoiseConfig("banded", bands=1))
  assert banded["epsilon"] == plain["epsilon"] > 0
  assert "violation" not in plain  # only an audit decides one
  assert banded["correlated_noise"]["final_prefix_noise_std"] == pytest.approx(8 ** 0.5,
                                                                                rel=1e-6)
  # The curve itself, at every T: the same dp-accounting composition.
  for t in (1, 50, 200):
    assert accounting.cyclic_epsilon_curve(1.2, 0.01, 1, [t], 1e-5) == \
        accounting.epsilon_curve(1.2, 0.01, [t], 1e-5, "rdp")


def test_cyclic_epsilon_is_jax_privacys_amplified_banded_mf():
  """ceil(T/b) steps at rate b q, as jax-privacy's DpsgdTrainingAccountant
  accounts cyclic Poisson sampling (cycle_length b)."""
  from jax_privacy import accounting as jpa
  num, batch, sigma, delta = 6000, 60, 1.3, 1e-5
  for cycle, rounds in ((1, 200), (4, 200), (5, 37)):
    params = jpa.DpParams(noise_multipliers=sigma, num_samples=num, delta=delta,
                          batch_size=batch, cycle_length=cycle)
    # dp-accounting's default RDP orders (ours; jax-privacy's default is coarser).
    orders = dp_accounting.rdp.rdp_privacy_accountant.DEFAULT_RDP_ORDERS
    theirs = jpa.DpsgdTrainingAccountant(jpa.RdpAccountantConfig(orders=orders)
                                         ).compute_epsilon(rounds, params)
    ours = accounting.cyclic_epsilon_curve(sigma, batch / num, cycle, [rounds], delta)[0]
    assert ours == pytest.approx(theirs, rel=1e-9), cycle


@pytest.fixture(scope="module")
def fresh_blt_build():
  """A BLT strategy of the stream test's shape (T = 8, min-separation 4) built
  uncached (``make_strategy.__wrapped__``: the build itself runs here), and
  every warning the build raised: the stream test reads the strategy, the
  float64-warnings test the warnings (one optimisation, 6-18 s, for both).

  JAX warns of float64 only where it first traces such an op in the process,
  so a build after another one would not warn whatever make_strategy does:
  the optimisation is wrapped to warn as JAX does at every build, and the
  result is jax-privacy's own."""
  optimize = buffered_toeplitz.optimize

  def warning_optimize(**kwargs):
    warnings.warn("Explicitly requested dtype float64 requested in asarray is not available",
                  UserWarning)
    return optimize(**kwargs)

  with pytest.MonkeyPatch.context() as patch, warnings.catch_warnings(record=True) as caught:
    patch.setattr(buffered_toeplitz, "optimize", warning_optimize)
    warnings.simplefilter("always")
    strategy = correlated.make_strategy.__wrapped__("blt", 8, 1, 4)
  return strategy, [f"{w.category.__name__}: {w.message}" for w in caught]


@pytest.mark.parametrize("kind,bands,separation", [("banded", 3, 3), ("blt", 1, 4)])
def test_the_stream_adds_the_strategys_noise_round_by_round(kind, bands, separation,
                                                            request):
  """The streaming inverse (jax-privacy's) gives scale * C^{-1} z round by
  round, from a state the server carries; its noise is jointly Gaussian with
  covariance scale^2 C^{-1} C^{-T}: accepted at that covariance, rejected at
  independent noise of the same variance (8 rounds: the BLT optimisation
  costs a third less than at 12; the independent claim's p is still 0)."""
  rounds, n = 8, 4000
  # BLT's: make_strategy's build, uncached (the fixture's, shared with the
  # float64-warnings test below).
  strategy = (request.getfixturevalue("fresh_blt_build")[0] if kind == "blt" else
              correlated.make_strategy(kind, rounds, bands, separation))
  assert (strategy.kind, strategy.rounds, strategy.min_separation) == (kind, rounds, separation)
  z = jax.random.normal(jax.random.PRNGKey(0), (rounds, n))
  state, out = strategy.init(n), []
  step = jax.jit(strategy.next)
  for t in range(rounds):
    noise, state = step(z[t], state)
    out.append(np.asarray(noise, np.float64))
  out = np.stack(out)
  want = strategy.scale * np.linalg.solve(strategy.matrix, np.asarray(z, np.float64))
  np.testing.assert_allclose(out, want, atol=1e-4 * strategy.scale)
  cov = correlated.noise_correlation(strategy)
  # Whitened by the claimed covariance, the rounds are independent N(0, 1)
  # over the n coordinates: their variances (chi-square of the sum of
  # squares) and their cross-round correlations (n r_ij^2 ~ chi-square(1)).
  for claimed, accept in ((cov, True), (np.diag(np.diag(cov)), False)):
    white = np.linalg.solve(np.linalg.cholesky(claimed), out)
    stat = np.sum(white ** 2)
    p_var = min(stats.chi2.cdf(stat, white.size), stats.chi2.sf(stat, white.size))
    cross = (white @ white.T / n)[np.triu_indices(rounds, 1)]
    p_cross = stats.chi2.sf(n * np.sum(cross ** 2), cross.size)
    assert (min(p_var, p_cross) > 1e-3) == accept, (kind, accept, p_var, p_cross)


def test_a_blt_strategy_builds_without_jaxs_float64_warnings(fresh_blt_build):
  """jax-privacy's BLT optimisation asks for float64; without x64 JAX warns
  three times a build, which make_strategy quiets (float32 gives the same
  strategy to 4 digits at the paper setting, docs/correlated-noise.md). The
  stream test's shape (T = 8, min-separation 4): unfiltered, that build warns
  three times too (the first in a process; the fixture's build warns at
  every build). The build (a fresh one, uncached) is the fixture's, which
  records every warning it raised: none."""
  strategy, caught = fresh_blt_build
  assert caught == []
  assert strategy.kind == "blt" and strategy.scale > 1.0


def test_a_strategy_is_built_once_per_process_and_read_only():
  """make_strategy is cached (a BLT optimisation costs up to a minute): the
  same arguments give the same strategy, other ones another, and the shared
  matrix cannot be changed by one of its users."""
  first = correlated.make_strategy("banded", 12, 3, 3)
  assert correlated.make_strategy("banded", 12, 3, 3) is first
  assert correlated.make_strategy("banded", 12, 2, 3) is not first
  with pytest.raises(ValueError, match="read-only"):
    first.matrix[0, 0] = 2.0


def test_cyclic_sampling_keeps_participations_b_apart_at_rate_b_q():
  """Client i joins only rounds t with t = i + 1 (mod b), each with
  probability b q: accepted at b q, rejected at q and at 1.2 b q."""
  num, rate, cycle, rounds = 400, 0.02, 5, 200
  keys = jax.random.split(jax.random.PRNGKey(1), rounds)
  ts = jnp.arange(1, rounds + 1)
  cohorts = jax.vmap(lambda k, t: sampling.sample_cohort(
      k, num, rate, 64, cycle_length=cycle, t=t))(keys, ts)
  joined = np.zeros((rounds, num), bool)
  for t in range(rounds):
    ids = np.asarray(cohorts.indices[t])[np.asarray(cohorts.mask[t])]
    joined[t, ids] = True
  groups = np.arange(num) % cycle
  for t in range(rounds):
    assert not joined[t, groups != t % cycle].any()
  eligible = rounds * (num // cycle)  # one group of N / b clients a round
  count = int(joined.sum())
  for claimed, accept in ((cycle * rate, True), (rate, False), (1.2 * cycle * rate, False)):
    p = stats.binomtest(count, eligible, claimed).pvalue
    assert (p > 1e-3) == accept, (claimed, p)
  assert sampling.max_participations(keys, num, rate, 64, "poisson", [rounds],
                                     cycle_length=cycle)[0] <= rounds // cycle
  with pytest.raises(ValueError, match="Poisson sampling within a group; got sampler 'fixed'"):
    sampling.sample_cohort(keys[0], num, rate, 64, "fixed", cycle_length=cycle, t=1)


def test_a_run_with_banded_noise_resumes_its_noise_state_exactly(small_federation, tmp_path):
  """The strategy's buffers are the feature's state, checkpointed with the
  server's: a run killed after its first evaluation and resumed from the
  checkpoint ends with the uninterrupted run's weights and buffers."""
  data, test, public = small_federation
  test = (test[0][_TEST], test[1][_TEST])
  model, scheme = tiny_linear(), get_scheme("FL-TOP-DP")
  cfg = _CFG.replace(cycle_length=3, eval_every=2, rounds=6, ratio=0.05,
                     correlated_noise=features.CorrelatedNoiseConfig("banded", bands=3))
  whole, whole_state = simulation.run(model, scheme, data, test, public, cfg,
                                      return_state=True)
  path = tmp_path / "run.npz"
  with pytest.raises(Killed):
    simulation.run(model, scheme, data, test, public, cfg, progress=kill_after(1),
                   checkpoint=path)
  assert path.exists()
  record, state = simulation.run(model, scheme, data, test, public, cfg, checkpoint=path,
                                 return_state=True)
  assert record["history"] == whole["history"]
  np.testing.assert_array_equal(state.weights, whole_state.weights)
  jax.tree.map(np.testing.assert_array_equal, state.features, whole_state.features)
  kept = [f for f in jax.tree.leaves(state.features) if np.ndim(f) == 2]
  # b buffers of K, the compressed sum's length.
  assert kept and kept[0].shape == (3, round(0.05 * model.num_params))


@pytest.mark.parametrize("name,ratio,refused", [
    ("FL-TOP-DP", 0.1, False), ("FL-BAS-4-DP", 0.1, False), ("FL-CS-DP", 0.1, False),
    ("FL-BASIC-DP", 0.1, True), ("FL-BAS-2-DP", 0.1, True), ("FL-RND-DP", 0.1, True),
    ("Fed-SMP-randk", 0.1, True), ("Fed-SMP-topk", 0.1, True),
    ("Fed-SMP-randk", 1.0, False),  # the mask is every weight, in order
])
def test_correlated_noise_needs_message_values_that_keep_their_weights(name, ratio, refused):
  """Traits.fixed_positions: a mask drawn anew each round is refused below r = 1."""
  cfg = simulation.RunConfig.of(ratio=ratio, rounds=4, clients_per_round=10, cycle_length=2,
                                correlated_noise=features.correlated_noise.CorrelatedNoiseConfig(
                                    "banded", 2))
  scheme = get_scheme(name)
  assert scheme.traits.fixed_positions is not (refused or name.startswith("Fed-SMP"))
  if refused:
    with pytest.raises(ValueError, match="draws its mask anew each round"):
      simulation.validate(cfg, scheme, tiny_linear(), 600, 10, jax.random.PRNGKey(0))
  else:
    simulation.validate(cfg, scheme, tiny_linear(), 600, 10, jax.random.PRNGKey(0))


@pytest.mark.parametrize("args,needle", [
    (["--schemes", "FL-STD-DP", "--noise", "banded", "--bands", "4"],
     "--bands 4 bands need a client's participations at least 4 rounds apart; the run keeps "
     "them 1 apart (set --cycle-length 4)"),
    # Monte Carlo accounting accounts no cycle: the way out it names is one it accounts.
    (["--schemes", "FL-STD-DP", "--noise", "banded", "--bands", "2", "--accountant",
      "monte-carlo"], "the run keeps them 1 apart (use --sampling b-min-sep "
     "--min-separation 2)"),
    # A mask drawn anew each round: the noise would never cancel.
    (["--schemes", "FL-BASIC-DP", "--ratio", "0.1", "--noise", "banded", "--bands", "2",
      "--cycle-length", "2"], "--noise banded noise cancels across rounds only where a message "
     "value stands for the same weights every round; FL-BASIC-DP draws its mask anew each "
     "round"),
    (["--schemes", "Fed-SMP-randk", "--ratio", "0.1", "--noise", "blt", "--cycle-length",
      "2"], "Fed-SMP-randk draws its mask anew each round"),
    (["--schemes", "FL-STD-DP", "--noise", "blt", "--cycle-length", "4",
      "--min-separation", "5"],
     "--min-separation 5 rounds between a client's participations are not what the sampler "
     "guarantees"),
    (["--schemes", "FL-SIGN-DP", "--noise", "blt", "--cycle-length", "2"],
     "--noise blt noise goes on a client-level Gaussian sum; FL-SIGN-DP releases a "
     "client-level discrete gaussian"),
    (["--schemes", "CDP-LQ", "--noise", "banded"],
     "CDP-LQ releases a record-level gaussian"),
    (["--bands", "2"], "--bands needs --noise banded"),
    (["--noise", "banded"], "FL-TOP adds no noise; run a DP scheme (--schemes FL-TOP-DP, or "
     "any other -DP scheme)"),
    (["--schemes", "FL-STD-DP", "--noise", "blt"],
     "--noise blt noise is built for a client's rounds at least 2 apart"),
    (["--schemes", "FL-STD-DP", "--noise", "banded", "--bands", "2", "--sampling",
      "b-min-sep", "--min-separation", "2"],
     "--accountant 'moments' cannot account b-min-sep sampling; use --accountant monte-carlo"),
    (["--sampling", "b-min-sep", "--accountant", "monte-carlo"],
     "--min-separation is b of --sampling b-min-sep; give it"),
    (["--sampling", "b-min-sep", "--min-separation", "11", "--accountant", "monte-carlo"],
     "--min-separation b = 11 of b-min-sep cannot keep 6 of 60 clients a round"),
    (["--schemes", "FL-STD-DP", "--noise", "blt", "--sampling", "b-min-sep",
      "--min-separation", "3", "--accountant", "monte-carlo"],
     "use --sampling balls-in-bins"),
    (["--sampling", "balls-in-bins", "--accountant", "monte-carlo", "--mc-samples", "1000"],
     "--mc-samples 1000 draws cannot bound delta"),
    (["--accountant", "monte-carlo", "--cycle-length", "2"],
     "--accountant monte-carlo accounts poisson, balls-in-bins and b-min-sep sampling"),
    (["--noise", "banded", "--cycle-length", "2", "--sampling", "fixed",
      "--accountant", "rdp"], "--cycle-length (cyclic Poisson sampling) needs sampler"),
    # One band passes the separation check, but its accounting is Poisson's.
    (["--schemes", "FL-STD-DP", "--noise", "banded", "--bands", "1", "--sampling", "fixed",
      "--accountant", "rdp"], "--noise banded noise is accounted for Poisson (cyclic), "
     "b-min-sep or balls-in-bins sampling, not fixed-size cohorts: use --sampling poisson"),
    (["--schemes", "FL-STD-DP", "--noise", "banded", "--bands", "1", "--max-cohort", "8",
      "--accountant", "pld"], "--noise cannot be combined with --max-cohort"),
])
def test_the_command_line_refuses_what_the_accountant_cannot_vouch_for(tmp_path, capsys,
                                                                         args, needle):
  from fedjax_dp.cli import sweep
  out = tmp_path / "bad"
  assert sweep.main(["--dataset", "medical-synth", "--rounds", "2", "--num-clients", "60",
                     "--samples-per-client", "10", "--clients-per-round", "6", *args,
                     "--out", str(out)]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and needle in err[0], err
  assert not out.exists()


def test_the_command_line_runs_banded_noise_and_records_its_accounting(tmp_path, capsys):
  from fedjax_dp.cli import sweep
  out = tmp_path / "res"
  code = sweep.main([
      "--dataset", "medical-synth", "--schemes", "FL-STD-DP", "--rounds", "4",
      "--num-clients", "60", "--samples-per-client", "10", "--clients-per-round", "6",
      "--local-steps", "1", "--test-size", "100", "--quiet", "--accountant", "rdp",
      "--noise", "banded", "--bands", "2", "--cycle-length", "2", "--out", str(out)])
  assert code == 0, capsys.readouterr().err
  run = json.loads((out / "results.json").read_text())["runs"][0]
  assert run["correlated_noise"]["noise"] == "banded" and run["cycle_length"] == 2
  assert run["noise_correlation"] == "banded"
  q = 6 / 60
  assert run["epsilon_final"] == pytest.approx(accounting.cyclic_epsilon_curve(
      run["noise_multiplier"], q, 2, [4], run["delta"])[0])


@pytest.mark.parametrize("noise,sampling_flags", [
    (["--noise", "banded", "--bands", "3"], ["--sampling", "b-min-sep", "--min-separation", "3"]),
    (["--noise", "blt"], ["--sampling", "balls-in-bins"]),
])
def test_amplified_noise_records_its_monte_carlo_epsilon(tmp_path, capsys, noise,
                                                         sampling_flags):
  """--noise banded|blt under b-min-sep or balls-in-bins, accounted by Monte
  Carlo: the record keeps the method, the draws, the confidence and the
  seed, and its epsilon is the estimate's bound for the run's strategy."""
  from fedjax_dp.cli import sweep
  from fedjax_dp.privacy import monte_carlo
  out = tmp_path / "res"
  code = sweep.main([
      "--dataset", "medical-synth", "--schemes", "FL-STD-DP", "--rounds", "6",
      "--num-clients", "60", "--samples-per-client", "10", "--clients-per-round", "6",
      "--local-steps", "1", "--test-size", "100", "--quiet", "--accountant", "monte-carlo",
      "--delta", "1e-3", "--mc-samples", "40000", "--mc-seed", "3", *noise, *sampling_flags,
      "--out", str(out)])
  assert code == 0, capsys.readouterr().err
  run = json.loads((out / "results.json").read_text())["runs"][0]
  assert (run["epsilon_method"], run["mc_samples"], run["mc_confidence"], run["mc_seed"]) == (
      "monte-carlo", 40000, 0.99, 3)
  assert run["sampler"] == sampling_flags[1] and run["correlated_noise"]["toeplitz"]
  assert run["mc_epsilon_lower"] <= run["mc_epsilon_estimate"] <= run["epsilon_final"]
  assert run["epsilon"] == run["epsilon_final"]  # the whole run's, every round
  separation = 3 if sampling_flags[1] == "b-min-sep" else 10
  prob = monte_carlo.min_sep_prob(0.1, 3) if separation == 3 else 1.0
  assert (run["min_separation"], run["participation_prob"]) == (separation, prob)
  part = monte_carlo.Participation(sampling_flags[1], 6, separation, prob)
  strategy = correlated.make_strategy(noise[1], 6, 3 if noise[1] == "banded" else 1,
                                      separation, toeplitz=True)
  again = monte_carlo.estimate(part, strategy.column, run["noise_multiplier"], 1e-3,
                               samples=40000, seed=3, cache=False)
  assert run["epsilon_final"] == pytest.approx(again.epsilon, rel=1e-6)
