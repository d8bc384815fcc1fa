"""The server's work before round 1 (``simulation.setup``): the run's checks,
the bit widths, the chunks, and what ``prepare`` sizes from the sampler.

On 40 random clients and the 7,850-weight linear model: nothing here trains.
"""

import math

import jax
import numpy as np
import pytest

from fedjax_dp import aggregators, keys, simulation
from fedjax_dp.errors import ConfigError
from fedjax_dp.schemes import get_scheme
from fedjax_dp.simulation import setup
import tiny_model
from tiny_model import tiny_linear

N = 40


@pytest.fixture(scope="module")
def random_clients():
  """40 clients of 6 random images, and a public batch of 10."""
  return tiny_model.random_clients(N), tiny_model.random_public()


# A cohort of exactly 10 a round (fixed-size sampling, accounted with RDP).
FIXED = simulation.RunConfig.of(rounds=3, clients_per_round=10, sampler="fixed",
                                accountant="rdp", clip_norm=1.0, noise_multiplier=1.0)


def test_validate_starts_the_plan_the_features_read():
  """validate's Plan: what the features read (``features.RunView``) known,
  S, the capacity, the features and the constants left to prepare."""
  model, scheme = tiny_linear(), get_scheme("FL-TOP-DP")
  cfg = simulation.RunConfig.of(ratio=0.1, rounds=7, clients_per_round=8, cycle_length=2,
                                accountant="rdp", noise_multiplier=1.3, devices=1)
  run = simulation.validate(cfg, scheme, model, N, 6, jax.random.PRNGKey(0))
  assert isinstance(run, simulation.Plan) and run.config is cfg and run.scheme is scheme
  assert run.scheme_name == "FL-TOP-DP" and run.num_params == 7850
  assert run.num_kept == scheme.num_kept(7850, 0.1) < 7850
  assert (run.rounds, run.clients_per_round, run.noise_multiplier) == (7, 8, 1.3)
  assert run.rate == 8 / N and run.min_separation == 2 and run.cycle_length == 2
  assert run.slot_multiple == 4 and run.clip_norm is None  # S is not known yet
  assert (run.capacity, run.features, run.scheme_constants) == (0, (), None)
  assert run.mechanism.noise_multiplier == 1.3
  # Without DP the Plan's sigma is the effective one: 0.
  plain = simulation.validate(cfg, get_scheme("FL-TOP"), model, N, 6, jax.random.PRNGKey(0))
  assert plain.noise_multiplier == 0.0


def test_the_mean_aggregator_streams_with_secure_aggregation_dp_and_chunks():
  """Only a robust rule needs the individual updates; the mean is the plain sum."""
  cfg = simulation.RunConfig.of(clients_per_round=10, secure_aggregation=True, client_chunk=4,
                                aggregator=aggregators.AggregatorConfig(name="mean"))
  plan = simulation.validate(cfg, get_scheme("FL-STD-DP"), tiny_linear(), N, 6,
                             jax.random.PRNGKey(0))
  assert plan.config is cfg and plan.aggregator is None  # summed as the plain mean
  assert plan.secure_aggregation and plan.config.execution.client_chunk == 4
  robust = cfg.replace(secure_aggregation=False, client_chunk=None,
                       aggregator=aggregators.AggregatorConfig(name="median"))
  with pytest.raises(ConfigError, match="individual updates"):
    simulation.validate(robust, get_scheme("FL-STD-DP"), tiny_linear(), N, 6,
                        jax.random.PRNGKey(0))


def _bits(noise_std, max_abs, clients, scale):
  """Thesis 5.2.4's b, and never less than the noiseless sum's range."""
  return max(math.ceil(math.log2((12 * noise_std + max_abs) * clients * scale)),
             math.ceil(math.log2(2 * max_abs * clients * scale + 1)))


@pytest.mark.parametrize("name, settings, clip, want", [
    # Signs are integers: no fixed point; the noiseless sum of 100 signs needs
    # 201 values: 8 bits.
    ("FL-SIGN", dict(secure_aggregation=True), None, (_bits(0, 1, 100, 1), 1.0, None)),
    # FL-SIGN-DP always encrypts: its upstream cost is the modulus even without
    # secure aggregation, for noise S sigma = 3 * 1.5.
    ("FL-SIGN-DP", dict(noise_multiplier=1.5), 3.0, (None, 1.0, None)),
    # A non-DP float scheme has nothing secure aggregation could encode.
    ("FL-STD", dict(secure_aggregation=True), None, (None, 1.0, None)),
    # A width given is kept; real values are fixed point at 2^f.
    ("FL-STD-DP", dict(secure_aggregation=True, secure_bits=20, secure_frac_bits=10), 0.5,
     (20, 2.0 ** 10, 10)),
    ("FL-STD-DP", dict(secure_aggregation=True, secure_frac_bits=8, noise_multiplier=2.0), 0.5,
     (_bits(0.5 * 2.0, 0.5, 100, 2 ** 8), 2.0 ** 8, 8)),
])
def test_communication_bits_per_value(name, settings, clip, want):
  traits = get_scheme(name).traits
  comm = simulation.communication(traits, simulation.RunConfig.of(**settings), 100, clip)
  assert (comm.secure_bits, comm.secure_scale, comm.secure_frac_bits) == want
  if comm.secure_bits is not None:
    assert comm.upstream_bits == comm.secure_bits
  elif name == "FL-SIGN-DP":
    assert comm.upstream_bits == _bits(3.0 * 1.5, 1.0, 100, 1) == 13
  else:
    assert comm.upstream_bits == traits.upstream_bits == 32
  assert comm.downstream_bits == traits.downstream_bits


def test_an_accelerator_chunks_only_cohorts_above_256(monkeypatch):
  monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
  sizes = np.full(3, 300)
  assert setup.default_chunk(256, 1, False, sizes) is None
  assert setup.default_chunk(257, 1, False, sizes) == setup.AUTO_CHUNK == 128
  assert setup.default_chunk(257, 8, True, sizes) is None  # a robust rule: one piece


@pytest.mark.parametrize("name, dropouts", [("FL-STD-DP", 2), ("FL-STD", 2), ("FL-STD-DP", 0)])
def test_prepare_sizes_slots_and_noise_shares_from_the_cohort(random_clients, name, dropouts):
  """A fixed cohort of 10 takes 12 slots (a multiple of 4); a DP scheme's
  noise shares are sized for 10 - l and 12 - l clients (l failures, thesis
  5.2.5), a scheme without DP ignores l."""
  data, public = random_clients
  _, plan = simulation.prepare(tiny_linear(), get_scheme(name), data, public,
                               FIXED.replace(max_dropouts=dropouts))
  assert plan.capacity == 12
  l = dropouts if name.endswith("-DP") else 0
  assert plan.num_shares == (10 - l, 12 - l)
  assert plan.sampling_keys.shape[0] == 3 and plan.client_chunk is None  # 12 slots: one piece


def test_max_cohort_caps_the_slots_and_a_given_chunk_is_kept(random_clients):
  data, public = random_clients
  cfg = FIXED.replace(sampler="poisson", accountant="pld", clients_per_round=20, max_cohort=5,
                      client_chunk=2)
  _, plan = simulation.prepare(tiny_linear(), get_scheme("FL-STD-DP"), data, public, cfg)
  assert plan.capacity == 5 and plan.client_chunk == 2
  assert plan.num_shares[1] == 5  # every slot, at most max_cohort


def test_w0_depends_on_the_seed_alone(random_clients):
  """Every scheme and ratio of a seed starts from the same model, another
  seed from another."""
  data, public = random_clients
  model = tiny_linear()

  def w0(name, **settings):
    state, _ = simulation.prepare(model, get_scheme(name), data, public,
                                  FIXED.replace(**settings))
    return np.asarray(state.weights)

  first = w0("FL-STD")
  np.testing.assert_array_equal(w0("FL-TOP-DP", ratio=0.1), first)
  assert not np.allclose(w0("FL-STD", seed=1), first)


def test_prepare_decides_s_and_says_where_it_came_from(random_clients, monkeypatch):
  """Given, calibrated (at the run's ratio or at clip_ratio) or the scheme's
  fixed sensitivity: decided in prepare alone, and named in the Plan."""
  data, public = random_clients
  model = tiny_linear()
  calls = []
  masked = type(get_scheme("FL-STD-DP"))
  monkeypatch.setattr(masked, "calibrate_clip", lambda self, at, state: calls.append(at.ratio) or 0.5)

  def prepared(name, **settings):
    return simulation.prepare(model, get_scheme(name), data, public, FIXED.replace(**settings))[1]

  plan = prepared("FL-STD-DP", clip_norm=0.25)
  assert (plan.clip_norm, plan.clip_source, calls) == (0.25, "given", [])
  plan = prepared("FL-TOP-DP", ratio=0.5, clip_norm=None)
  assert (plan.clip_norm, plan.clip_source, calls) == (0.5, "calibrated (UAI Sec. 4)", [0.5])
  plan = prepared("FL-TOP-DP", ratio=0.5, clip_norm=None, clip_ratio=0.1)
  assert plan.clip_source == "calibrated at r = 0.1 for every ratio (Fed-SMP Sec. 6.2)"
  assert calls[1:] == [0.1]  # the server's setup at the run's 0.5; S as at 0.1
  plan = prepared("FL-STD", clip_norm=None)
  assert (plan.clip_norm, plan.clip_source, len(calls)) == (None, None, 2)
  # A given S does not apply to a sign vector: its sensitivity is sqrt(n).
  sign = get_scheme("FL-SIGN-DP")
  plan = prepared("FL-SIGN-DP", clip_norm=0.25)
  assert plan.clip_source == sign.traits.sensitivity_reason
  assert plan.clip_norm == pytest.approx(math.sqrt(plan.num_params))


def test_target_epsilon_leaves_a_scheme_without_dp_alone(random_clients, monkeypatch):
  def refuse(*args):
    raise AssertionError("a non-DP run has no sigma to calibrate")

  monkeypatch.setattr(simulation.record, "calibrated_sigma", refuse)
  data, public = random_clients
  cfg = FIXED.replace(target_epsilon=1.0)
  _, plan = simulation.prepare(tiny_linear(), get_scheme("FL-STD"), data, public, cfg)
  assert plan.config is cfg and plan.noise_multiplier == 0.0


def test_the_config_is_checked_before_the_clients(random_clients):
  """A bad setting names its field even where a client is empty too."""
  data, public = random_clients
  empty = simulation.ClientData(data.x, data.y.at[3].set(-1))
  with pytest.raises(ConfigError, match="^rounds must be >= 1, got 0$"):
    simulation.prepare(tiny_linear(), get_scheme("FL-STD"), empty, public,
                       FIXED.replace(rounds=0))
  with pytest.raises(ValueError, match="^client 3 holds no examples"):
    simulation.prepare(tiny_linear(), get_scheme("FL-STD"), empty, public, FIXED)


def test_prepare_fills_the_plan_validate_started_without_validating_again(
    random_clients, monkeypatch):
  """A front end validates each run once (before the first starts) and hands
  prepare the Plan; a Plan of another data shape is validated afresh."""
  data, public = random_clients
  model, scheme = tiny_linear(), get_scheme("FL-STD-DP")
  started = simulation.validate(FIXED, scheme, model, N, 6, keys.run_key(0))
  calls = []
  real = setup.validate
  monkeypatch.setattr(setup, "validate", lambda *a: calls.append(a[3:5]) or real(*a))
  _, filled = simulation.prepare(model, scheme, data, public, started)
  assert calls == [] and filled.config is FIXED and started.capacity == 0
  _, fresh = simulation.prepare(model, scheme, data, public, FIXED)
  assert calls == [(N, 6)]
  assert (filled.capacity, filled.clip_norm, filled.num_shares, filled.client_chunk) == (
      fresh.capacity, fresh.clip_norm, fresh.num_shares, fresh.client_chunk)
  assert (filled.capacity, filled.clip_norm, filled.num_shares) == (12, 1.0, (10, 12))
  other = simulation.validate(FIXED, scheme, model, N, 5, keys.run_key(0))
  _, revalidated = simulation.prepare(model, scheme, data, public, other)
  assert calls == [(N, 6), (N, 6)] and revalidated.samples_per_client == 6
