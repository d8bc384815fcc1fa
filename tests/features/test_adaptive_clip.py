"""Adaptive clipping (Andrew et al. 2021) as a round feature."""

import math

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from fedjax_dp import features, simulation
from fedjax_dp.errors import ConfigError
from fedjax_dp.features.adaptive_clip import AdaptiveClipConfig, update_noise_multiplier
from fedjax_dp.schemes import get_scheme
from scheme_helpers import run_view
from tiny_model import tiny_linear

_CFG = simulation.RunConfig.of(ratio=1.0, rounds=3, clients_per_round=20, eval_every=1,
                               local_steps=2, batch_size=5, lr=0.1, noise_multiplier=1.0,
                               clip_norm=5.0, init_steps=1)


def _rdp_epsilon(*multipliers: float) -> float:
  """Epsilon of the composed (unsampled) Gaussians of these multipliers."""
  accountant = dp_accounting.rdp.RdpAccountant()
  for z in multipliers:
    accountant.compose(dp_accounting.GaussianDpEvent(z))
  return accountant.get_epsilon(1e-5)


def test_updates_and_count_together_cost_the_runs_sigma():
  """Theorem 1: updates at z_Delta and the count at sigma_b (sensitivity 1/2)
  are one Gaussian of multiplier z, so the accountant's epsilon holds."""
  z, sigma_b = 1.0, 0.6
  z_delta = update_noise_multiplier(z, sigma_b)
  assert z_delta == pytest.approx((1 - 1 / 1.44) ** -0.5) and z_delta > 1.8
  assert _rdp_epsilon(z_delta, 2 * sigma_b) == pytest.approx(_rdp_epsilon(z), rel=1e-9)
  # The count charged at its own multiplier sigma_b (sensitivity 1) would cost more.
  assert _rdp_epsilon(z_delta, sigma_b) > 1.2 * _rdp_epsilon(z)
  assert update_noise_multiplier(1.0, 0.5) == math.inf  # no noise left for the updates
  assert update_noise_multiplier(0.0, 0.0) == 0.0


def _feature(cfg, scheme_name="FL-STD-DP", clip=2.0):
  run = run_view(get_scheme(scheme_name), cfg, num_clients=600, clip_norm=clip)
  return features.adaptive_clip.AdaptiveClip(cfg.feature("adaptive_clip"), run)


def test_the_count_is_released_with_noise_sigma_b():
  """Over 2,000 rounds with a fixed count, log(C_{t+1} / C_t) = -eta (b_t - gamma)
  with b_t = (count + N(0, sigma_b^2)) / m: the noise is accepted at sigma_b = 1
  (m / 20 for m = 20) and rejected at 0.9 and 1.1."""
  cfg = _CFG.replace(adaptive_clip=AdaptiveClipConfig(clip_lr=0.2))
  feature = _feature(cfg)
  assert feature.count_noise == 1.0
  state = feature.init()[0]
  noise = features.Noise(2.0, 1.0, jnp.int32(20))

  def step(key):  # 12 of 20 fitted: the centred tally is 12 - 20 / 2
    seen = features.Observed(None, jnp.float32(2.0), None, None, noise, key)
    return feature.observe(features.At(state, observed=seen), state).log_factor

  steps = np.asarray(jax.vmap(step)(jax.random.split(jax.random.PRNGKey(3), 2000)),
                     np.float64)
  # -0.2 ((12 + e) / 20 - 0.5) = -0.02 - 0.01 e, e ~ N(0, sigma_b^2).
  noise_draws = (steps + 0.02) / -0.01
  assert stats.kstest(noise_draws, "norm").pvalue > 1e-3  # Gaussian, centred

  def variance_pvalue(sigma):  # two-sided chi-square test of the variance
    stat = np.sum(noise_draws ** 2) / sigma ** 2
    return 2 * min(stats.chi2.cdf(stat, 2000), stats.chi2.sf(stat, 2000))

  assert variance_pvalue(1.0) > 1e-3
  assert variance_pvalue(0.9) < 1e-6 and variance_pvalue(1.1) < 1e-6


def test_the_fraction_is_of_the_clients_expected_to_report():
  """With half the clients failing (dropout rate 0.5), the 10 of 20 that
  report all fit: the released fraction is about 1, not 1/2 + 10 / 2 / 20 =
  0.75 (the tally over the cohort m), so at gamma 0.9 the clip falls, by
  -eta (1 - 0.9) a round on average over 2,000 draws of the count's noise
  (it grew by 0.15 eta a round, without end, when the tally was over m)."""
  cfg = _CFG.replace(dropout_rate=0.5,
                     adaptive_clip=AdaptiveClipConfig(clip_lr=0.2, target_quantile=0.9))
  feature = _feature(cfg)
  state = feature.init()[0]
  noise = features.Noise(2.0, 1.0, jnp.int32(20))

  def step(key):  # 10 reported, all fitted: the centred tally is 10 / 2
    seen = features.Observed(None, jnp.float32(5.0), None, None, noise, key)
    return feature.observe(features.At(state, observed=seen), state).log_factor

  steps = np.asarray(jax.vmap(step)(jax.random.split(jax.random.PRNGKey(4), 2000)))
  # Each step is -0.2 (1 + e / 10 - 0.9), e ~ N(0, 1): mean -0.02, std 0.02 / sqrt(2000).
  assert np.mean(steps) == pytest.approx(-0.02, abs=0.002)


def test_a_client_moves_the_released_count_by_one_half():
  """Sensitivity 1/2, as Theorem 1's z_Delta assumes: adding one client to a
  chunk moves the tally by +-1/2 whether or not its update fits; failed and
  padding slots add nothing. (A raw count of fitted updates moves by 1.)"""
  cfg = _CFG.replace(adaptive_clip=AdaptiveClipConfig())
  feature = _feature(cfg)
  noise = features.Noise(2.0, 1.0, jnp.int32(20))
  norms = jnp.array([0.5, 1.9, 2.5, 3.0, 1.0, 0.1])  # clip 2: four fit, two do not

  def tally(present):
    messages = norms[:, None]  # one-value messages of these norms
    chunk = features.Chunk(jnp.arange(6), jnp.ones(6, bool), jnp.asarray(present), None)
    return float(feature.tally(features.At(noise=noise, chunk=chunk, messages=messages), None))

  base = [True, True, True, False, False, False]  # 2 fit, 1 does not
  assert tally(base) == 0.5
  assert tally(base[:3] + [True, False, False]) == 0.0   # one more, over the clip
  assert tally(base[:3] + [False, True, False]) == 1.0   # one more, within it
  assert tally([False] * 6) == 0.0


def test_the_round_noises_updates_at_z_delta_and_at_the_tracked_clip(small_federation):
  """lr ~ 0: the update is the noise, std C_t z_Delta / m, accepted at z_Delta
  (1.81 for z = 1, sigma_b = 0.6) and rejected at the run's z = 1."""
  data, _, public = small_federation
  cfg = _CFG.replace(lr=1e-12, adaptive_clip=AdaptiveClipConfig(count_noise=0.6))
  model = tiny_linear()
  state0, plan = simulation.prepare(model, get_scheme("FL-STD-DP"), data, public, cfg)
  fn = jax.jit(simulation.make_round_fn(model, plan))
  state, _ = fn(state0, data, jax.random.PRNGKey(0), jnp.int32(1))
  diff = np.asarray(state.weights - state0.weights, np.float64)
  z_delta = update_noise_multiplier(1.0, 0.6)
  for z, accepted in ((z_delta, True), (1.0, False)):
    stat = np.sum(diff ** 2) / (5.0 * z / 20) ** 2
    p = 2 * min(stats.chi2.cdf(stat, diff.size), stats.chi2.sf(stat, diff.size))
    assert (p > 1e-3) == accepted, (z, p)


def test_the_clip_norm_tracks_the_median_update_norm(small_federation):
  """From S = 5, far above every update's norm, the clip norm falls round by
  round while the updates fit, towards the median norm."""
  data, test, public = small_federation
  cfg = _CFG.replace(rounds=12, noise_multiplier=0.5,
                     adaptive_clip=AdaptiveClipConfig(clip_lr=0.5))
  plain = simulation.run(tiny_linear(), get_scheme("FL-STD-DP"), data, test, public,
                         cfg.replace(adaptive_clip=None))
  record = simulation.run(tiny_linear(), get_scheme("FL-STD-DP"), data, test, public, cfg)
  clips = [h["clip_norm"] for h in record["history"]]
  assert clips[0] == pytest.approx(5.0)
  assert all(b < a for a, b in zip(clips[:6], clips[1:7]))  # every update fits: C falls
  final = record["adaptive_clip"]["final_clip_norm"]
  assert final < 5.0 * math.exp(-0.5 * 0.5 * 6)  # at least 6 rounds of the full step
  assert record["clipped_fraction"] > plain["clipped_fraction"]
  # The accountant's epsilon is that of the run's sigma, with or without it.
  assert record["epsilon_final"] == plain["epsilon_final"]
  assert record["noise_multiplier"] == 0.5
  assert record["adaptive_clip"]["update_noise_multiplier"] == pytest.approx(
      update_noise_multiplier(0.5, 1.0))
  assert "adaptive_clip" not in plain and "clip_norm" not in plain["history"][0]


@pytest.mark.parametrize("name,kw,field", [
    ("FL-STD", {}, "adaptive_clip"),                      # no DP
    ("FL-SIGN-DP", {}, "adaptive_clip"),                  # a fixed sensitivity
    ("CDP-LQ", {}, "adaptive_clip"),                      # record-level DP
    ("FL-STD-DP", {"secure_aggregation": True}, "adaptive_clip"),
    ("FL-STD-DP", {"adaptive_clip": AdaptiveClipConfig(count_noise=0.4)}, "count_noise"),
    ("FL-STD-DP", {"adaptive_clip": AdaptiveClipConfig(target_quantile=1.5)},
     "target_quantile"),
    ("FL-STD-DP", {"adaptive_clip": AdaptiveClipConfig(clip_lr=0)}, "clip_lr"),
])
def test_refused_settings_name_their_field(small_federation, name, kw, field):
  data, _, public = small_federation
  cfg = _CFG.replace(**{"adaptive_clip": AdaptiveClipConfig(), **kw})
  with pytest.raises(ConfigError) as error:
    simulation.prepare(tiny_linear(), get_scheme(name), data, public, cfg)
  assert error.value.field == field and str(error.value).startswith(field)


def test_a_target_epsilon_checks_the_calibrated_sigma_not_the_placeholder(small_federation):
  """With --target-epsilon, sigma_b is checked against the sigma calibrated
  for the target, not the config's placeholder (1.0 here, which sigma_b =
  0.5 would refuse): epsilon 50 calibrates sigma below 2 sigma_b = 1 and
  runs; epsilon 0.5 calibrates it above, and is refused naming that sigma."""
  data, _, public = small_federation
  cfg = _CFG.replace(adaptive_clip=AdaptiveClipConfig(count_noise=0.5))
  _, plan = simulation.prepare(tiny_linear(), get_scheme("FL-STD-DP"), data, public,
                               cfg.replace(target_epsilon=50.0))
  assert plan.noise_multiplier < 1.0 and not plan.sigma_pending
  sigma = plan.noise_multiplier
  feature = next(f for f in plan.features if f.kind == "adaptive_clip")
  assert feature.update_noise == pytest.approx(update_noise_multiplier(sigma, 0.5))
  with pytest.raises(ConfigError, match=r"must exceed noise_multiplier [0-9.]+$") as error:
    simulation.prepare(tiny_linear(), get_scheme("FL-STD-DP"), data, public,
                       cfg.replace(target_epsilon=0.5))
  assert error.value.field == "count_noise"
  with pytest.raises(ConfigError, match="must exceed noise_multiplier 1$"):
    simulation.prepare(tiny_linear(), get_scheme("FL-STD-DP"), data, public, cfg)


def test_a_feature_is_one_registry_line():
  """Its kind names it in RunConfig.of; a config of no registered kind is refused."""
  cfg = simulation.RunConfig.of(adaptive_clip=AdaptiveClipConfig(clip_lr=0.1))
  assert cfg.feature("adaptive_clip") == AdaptiveClipConfig(clip_lr=0.1)
  assert cfg.feature("audit") is None and cfg.replace(adaptive_clip=None).features == ()
  assert features.REGISTRY["adaptive_clip"] is features.adaptive_clip.AdaptiveClip
  assert features.REGISTRY["adaptive_clip"].config_type is AdaptiveClipConfig
  with pytest.raises(TypeError, match="not a registered feature config"):
    simulation.RunConfig.of(features=(object(),))
  with pytest.raises(ConfigError, match="adaptive_clip is given more than once"):
    simulation.RunConfig.of(features=(AdaptiveClipConfig(), AdaptiveClipConfig()))


def test_the_command_line_runs_it_and_names_its_flags(tmp_path, capsys):
  """--adaptive-clip and its options reach the record; misuse is one line, exit 2."""
  import json
  from fedjax_dp.cli import sweep
  out = tmp_path / "res"
  code = sweep.main([
      "--dataset", "medical-synth", "--schemes", "FL-STD-DP", "--rounds", "2",
      "--num-clients", "60", "--samples-per-client", "10", "--clients-per-round", "6",
      "--local-steps", "1", "--test-size", "100", "--quiet", "--adaptive-clip",
      "--clip-lr", "0.3", "--clip-count-noise", "2", "--out", str(out)])
  assert code == 0, capsys.readouterr().err
  capsys.readouterr()
  run = json.loads((out / "results.json").read_text())["runs"][0]
  assert run["adaptive_clip"]["clip_lr"] == 0.3 and run["adaptive_clip"]["count_noise"] == 2
  assert run["history"][0]["clip_norm"] == pytest.approx(run["clip_norm"])
  for args, needle in ((["--schemes", "FL-STD", "--adaptive-clip"],
                        "--adaptive-clip tracks the clip norm"),
                       (["--clip-lr", "0.1"], "--clip-lr needs --adaptive-clip"),
                       (["--adaptive-clip", "--clip-quantile", "2"],
                        "--clip-quantile must be in [0, 1], got 2"),
                       (["--schemes", "FL-TOP-DP", "--adaptive-clip", "--clip-count-noise", "0.5"],
                        "--clip-count-noise 0.5 leaves no noise for the updates"),
                       # Found once sigma is calibrated, after the data is loaded.
                       (["--dataset", "medical-synth", "--rounds", "2", "--num-clients", "60",
                         "--samples-per-client", "10", "--clients-per-round", "6",
                         "--local-steps", "1", "--test-size", "100", "--quiet",
                         "--schemes", "FL-STD-DP", "--adaptive-clip", "--clip-count-noise",
                         "0.5", "--target-epsilon", "0.5"],
                        "must exceed noise_multiplier")):
    assert sweep.main([*args, "--out", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
  assert not (tmp_path / "bad").exists()
