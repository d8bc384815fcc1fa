"""The run resolved once: ``simulation.prepare``'s frozen Plan, and features
built once per run."""

import dataclasses

import pytest

from fedjax_dp import features, simulation
from fedjax_dp.features import adaptive_clip, dropouts
from fedjax_dp.features.adaptive_clip import AdaptiveClipConfig
from fedjax_dp.schemes import get_scheme
from tiny_model import tiny_linear

# One round of 10 clients; S calibrated on the public data (clip_norm None).
_CFG = simulation.RunConfig.of(rounds=1, clients_per_round=10, eval_every=1,
                               noise_multiplier=1.0, clip_norm=None)


def test_prepare_gives_a_frozen_plan_with_s_once(small_federation):
  data, test, public = small_federation
  model, scheme = tiny_linear(), get_scheme("FL-STD-DP")
  state, plan = simulation.prepare(model, scheme, data, public, _CFG)
  assert isinstance(state, simulation.ServerState) and isinstance(plan, simulation.Plan)
  with pytest.raises(dataclasses.FrozenInstanceError):
    plan.clip_norm = 2.0  # pylint: disable=invalid-name
  with pytest.raises(dataclasses.FrozenInstanceError):
    plan.capacity = 1
  assert plan.sum is plan.sum  # built once a plan, not at every access (issue 61)
  # S is calibrated once and held by the plan alone: the config keeps what was
  # given (None), the features see the plan's S, and the record states it.
  assert isinstance(plan.clip_norm, float) and plan.clip_norm > 0
  assert plan.config is _CFG and plan.config.privacy.clip_norm is None
  assert plan.noise_multiplier == 1.0 and plan.num_kept == model.num_params
  assert [f.kind for f in plan.features] == ["dropouts"]
  assert all(f.run.clip_norm == plan.clip_norm for f in plan.features)
  record = simulation.run(model, scheme, data, test, public, _CFG)
  assert record["clip_norm"] == plan.clip_norm
  assert record["noise_multiplier"] == plan.noise_multiplier
  assert record["capacity"] == plan.capacity


def test_a_plan_without_dp_has_no_clip_norm_and_no_noise(small_federation):
  data, _, public = small_federation
  cfg = _CFG.replace(clip_norm=0.5, noise_multiplier=1.5)  # given, but FL-STD adds no noise
  _, plan = simulation.prepare(tiny_linear(), get_scheme("FL-STD"), data, public, cfg)
  assert plan.clip_norm is None and plan.noise_multiplier == 0
  assert plan.config.privacy.noise_multiplier == 1.5  # the config as given
  assert all(f.run.clip_norm is None for f in plan.features)


def test_features_are_built_once_per_run(small_federation, monkeypatch):
  """Two evaluation intervals, a record and the validation: each of the run's
  features (dropouts, adaptive clipping) is constructed exactly once."""
  data, test, public = small_federation
  built = []
  for cls in (dropouts.Dropouts, adaptive_clip.AdaptiveClip):
    init = cls.__init__

    def counting(self, config, run, init=init):
      built.append(type(self).kind)
      init(self, config, run)

    monkeypatch.setattr(cls, "__init__", counting)
  cfg = _CFG.replace(rounds=2, clip_norm=1.0, adaptive_clip=AdaptiveClipConfig(count_noise=1.0))
  record = simulation.run(tiny_linear(), get_scheme("FL-STD-DP"), data, test, public, cfg)
  assert len(record["history"]) == 2 and "adaptive_clip" in record
  assert sorted(built) == ["adaptive_clip", "dropouts"]


def test_the_run_constants_are_in_the_plan_not_on_the_scheme(small_federation):
  """CDP-LQ's batch capacity and FL-SIGN-DP's tables: computed once by
  ``run_constants`` into ``plan.scheme_constants``; the plan's scheme is the
  scheme as given (nothing of the run on it)."""
  data, _, public = small_federation
  cfg = _CFG.replace(clip_norm=0.5)
  for name in ("CDP-LQ", "FL-SIGN-DP", "FL-STD-DP"):
    scheme = get_scheme(name)
    _, plan = simulation.prepare(tiny_linear(), scheme, data, public, cfg)
    assert plan.scheme is scheme
    assert (plan.scheme_constants is not None) == scheme.traits.run_constants, name
  _, lq = simulation.prepare(tiny_linear(), get_scheme("CDP-LQ"), data, public, cfg)
  assert isinstance(lq.scheme_constants, int) and lq.scheme_constants >= 1


@pytest.mark.parametrize("settings", [
    dict(accountant="moments"), dict(accountant="rdp"), dict(accountant="pld"),
    dict(accountant="rdp", cycle_length=2),
    dict(accountant="rdp", correlated_noise=features.CorrelatedNoiseConfig("blt"),
         cycle_length=2),
    dict(accountant="monte-carlo", sampler="b-min-sep", min_separation=2,
         correlated_noise=features.CorrelatedNoiseConfig("banded", bands=2),
         delta=1e-2, mc_samples=20_000),
], ids=lambda s: "-".join(str(v) for k, v in s.items() if k in ("accountant", "sampler",
                                                                   "cycle_length")))
def test_target_epsilon_calibrates_sigma_under_every_accountant(small_federation, settings):
  """--target-epsilon: the plan's sigma puts the run at most at the target
  under its own accountant and sampler, and two resolutions less (1e-4;
  Monte Carlo: 1e-3, on the calibration's draws) would not: the bisection
  stops within one and rounds up by less than one."""
  data, _, public = small_federation
  cfg = _CFG.replace(rounds=6, target_epsilon=2.0, **settings)
  _, plan = simulation.prepare(tiny_linear(), get_scheme("FL-STD-DP"), data, public, cfg)
  sigma = plan.noise_multiplier
  assert plan.config.privacy.noise_multiplier == sigma and plan.mechanism.noise_multiplier == sigma
  eps = simulation.privacy_report(plan, [6]).epsilons[0]
  step = 1e-4
  if settings["accountant"] == "monte-carlo":  # the calibration's own draws decide
    plan = dataclasses.replace(plan, config=plan.config.replace(mc_seed=1))
    eps, step = simulation.privacy_report(plan, [6]).epsilons[0], 1e-3
  assert eps <= 2.0
  less = dataclasses.replace(
      plan, mechanism=plan.mechanism._replace(noise_multiplier=sigma - 2 * step))
  assert simulation.privacy_report(less, [6]).epsilons[0] > 2.0


def test_a_record_above_its_target_epsilon_says_so(small_federation):
  """Monte Carlo calibrates on other draws than the record's bound, which can
  land above the target: the record's epsilon is checked against it."""
  from fedjax_dp.simulation import record as record_lib
  data, _, public = small_federation
  cfg = _CFG.replace(rounds=6, target_epsilon=2.0)
  _, plan = simulation.prepare(tiny_linear(), get_scheme("FL-STD-DP"), data, public, cfg)
  assert record_lib.target_missed(plan, 2.0) is None
  assert record_lib.target_missed(plan, 2.04).startswith(
      "FL-STD-DP: epsilon 2.04 after the last round, above --target-epsilon 2: sigma ")
  assert record_lib.target_missed(dataclasses.replace(
      plan, config=plan.config.replace(target_epsilon=None)), 2.04) is None


def test_target_epsilon_for_fl_sign_dp_searches_past_theorem_3s_floor(small_federation):
  """A loose target puts FL-SIGN-DP's sigma near Theorem 3's least sigma
  (0.012 for n = 7,850, |K| = 16); the search probes below it, where the
  theorem gives no epsilon (that stopped the calibration with its error),
  and reads it as not private enough."""
  data, _, public = small_federation
  cfg = _CFG.replace(rounds=6, target_epsilon=30_000.0)
  _, plan = simulation.prepare(tiny_linear(), get_scheme("FL-SIGN-DP"), data, public, cfg)
  sigma = plan.noise_multiplier
  assert 0.012 < sigma < 0.0156
  assert simulation.privacy_report(plan, [6]).epsilons[0] <= 30_000.0
  less = dataclasses.replace(plan, mechanism=plan.mechanism._replace(noise_multiplier=sigma - 2e-4))
  assert simulation.privacy_report(less, [6]).epsilons[0] > 30_000.0
