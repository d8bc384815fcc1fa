"""CDP-LQ (poster, seed 001): the analytical Gaussian mechanism, per-example
clipping with Poisson batches, the client's quantized message and a short run
on the tiny model with its record-level epsilon and measured bzip2 size."""

import dataclasses
import math

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate, stats

from fedjax_dp import bandwidth, keys, sampling, simulation
from fedjax_dp.compression import lattice as lat_lib
from fedjax_dp.privacy import accounting, per_sample
from fedjax_dp.privacy import analytic_gaussian as agm
from fedjax_dp.schemes import LocalTraining, Noise, get_scheme
from fedjax_dp.schemes import cdp_lq
from scheme_helpers import round_plan
from tiny_model import tiny_linear

CDP_LQ = get_scheme("cdp-lq")


# --- The analytical Gaussian mechanism (Balle and Wang 2018) ---------------

def test_agm_sigma_at_epsilon_zero_is_the_total_variation_closed_form():
  """delta(0) = 2 Phi(1 / (2 sigma)) - 1, so sigma = 1 / (2 Phi^-1((1 + delta) / 2))."""
  for delta in (0.5, 0.1, 1e-3):
    closed = 1 / (2 * stats.norm.ppf((1 + delta) / 2))
    assert agm.sigma_for_epsilon(0.0, delta) == pytest.approx(closed, rel=1e-9)


def _hockey_stick(sigma, eps):
  """delta(eps) by integrating max(0, p0 - e^eps p1), p0 = N(0, s^2), p1 = N(1, s^2)."""
  edge = 0.5 - eps * sigma ** 2  # p0 > e^eps p1 exactly left of this point
  f = lambda x: stats.norm.pdf(x, 0, sigma) - math.exp(eps) * stats.norm.pdf(x, 1, sigma)
  value, _ = integrate.quad(f, edge - 40 * sigma, edge, epsabs=0, epsrel=1e-11, limit=200)
  return value


@pytest.mark.parametrize("eps", [0.1, 0.5, 0.9, 3.11])
@pytest.mark.parametrize("delta", [1e-5, 1e-4])
def test_agm_delta_equation_holds_at_the_returned_sigma(eps, delta):
  sigma = agm.sigma_for_epsilon(eps, delta)
  reached = agm.delta_for_epsilon(sigma, eps)
  assert reached <= delta and reached == pytest.approx(delta, rel=1e-9)
  assert _hockey_stick(sigma, eps) == pytest.approx(delta, rel=1e-6)  # from the definition
  # Independent implementation (dp_accounting.gaussian_mechanism, their Eq. 6).
  assert sigma == pytest.approx(
      dp_accounting.gaussian_mechanism.get_sigma_gaussian(eps, delta), rel=1e-8)
  if eps < 1:  # the classical bound holds for eps < 1 and is always looser
    assert sigma < agm.classical_sigma(eps, delta)
  assert agm.epsilon_for_sigma(sigma, delta) == pytest.approx(eps, rel=1e-9)
  assert agm.sigma_for_epsilon(eps, delta, sensitivity=2.5) == pytest.approx(2.5 * sigma)


def test_agm_rejects_bad_arguments():
  with pytest.raises(ValueError):
    agm.sigma_for_epsilon(1.0, 0.0)
  with pytest.raises(ValueError):
    agm.sigma_for_epsilon(-1.0, 1e-5)
  with pytest.raises(ValueError):
    agm.delta_for_epsilon(0.0, 1.0)


def test_pld_of_one_unsampled_step_is_the_analytical_gaussian():
  """The PLD accountant composes the exact Gaussian profile (Balle-Wang Thm 8)."""
  for sigma in (0.8, 1.54):
    exact = agm.epsilon_for_sigma(sigma, 1e-5)
    pld = accounting.epsilon(sigma, 1.0, 1, 1e-5, "pld")
    assert exact <= pld + 1e-9 and pld == pytest.approx(exact, rel=0.01)


# --- Per-example clipping and Poisson batches ------------------------------

@pytest.fixture(scope="module")
def tiny():
  model = tiny_linear()
  w = model.init(jax.random.PRNGKey(0)) * 20  # larger weights: diverse gradient norms
  x = jax.random.uniform(jax.random.PRNGKey(1), (30, 28, 28, 1))
  y = jax.random.randint(jax.random.PRNGKey(2), (30,), 0, 10)
  return model, w, x, y


def test_clipped_gradient_sum_matches_a_loop(tiny):
  model, w, x, y = tiny
  indices = jnp.array([3, 7, 7, 12, 0, 29, 5])
  mask = jnp.array([True, True, True, False, True, True, False])
  grads = np.asarray(jax.jit(jax.vmap(lambda i: jax.grad(model.loss)(
      w, x[i][None], y[i][None])))(indices))
  norms = np.linalg.norm(grads, axis=1)
  clip = float(np.median(norms))
  expected = sum(g * min(1.0, clip / nrm) for g, nrm, m in zip(grads, norms, mask) if m)
  for mb in (2, 8):
    total, clipped = per_sample.clipped_gradient_sum(model.loss, w, x, y, indices, mask,
                                                     clip, mb)
    np.testing.assert_allclose(total, expected, rtol=2e-5, atol=1e-6)
    assert int(clipped) == int(np.sum((norms > clip) & np.asarray(mask)))
  # Leading real slots (a Poisson batch): micro-batches past `count` are skipped.
  lead = jnp.arange(7) < 5
  want = per_sample.clipped_gradient_sum(model.loss, w, x, y, indices, lead, clip, 2)
  got = jax.jit(lambda c: per_sample.clipped_gradient_sum(model.loss, w, x, y, indices,
                                                          lead, clip, 2, c))(jnp.int32(5))
  np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-7)
  assert int(got[1]) == int(want[1])


def test_the_clipped_gradients_are_summed_at_full_float32_precision(tiny):
  """The sum of the clipped per-example gradients asks for HIGHEST precision:
  at a GPU's default (TF32) the sum could be longer than S allows."""
  model, w, x, y = tiny
  indices, mask = jnp.arange(4), jnp.ones(4, bool)
  jaxpr = str(jax.make_jaxpr(lambda w: per_sample.clipped_gradient_sum(
      model.loss, w, x, y, indices, mask, 1.0, 2))(w))
  assert "precision=(Precision.HIGHEST, Precision.HIGHEST)" in jaxpr


def test_padding_rows_add_nothing_to_the_clipped_sum(tiny):
  """Record-level DP on padded clients: a sampled padding row (label -1)
  has a zero gradient, so the clipped sum is that of the real rows alone and
  each real record enters at the Poisson rate the accountant assumes."""
  model, w, x, y = tiny
  y_pad = y.at[20:].set(-1)
  indices = jnp.array([3, 25, 7, 28, 12])
  mask = jnp.ones(5, bool)
  clip = 0.5
  total, clipped = per_sample.clipped_gradient_sum(model.loss, w, x, y_pad, indices, mask,
                                                   clip, 2)
  real = jnp.array([True, False, True, False, True])
  want, want_clipped = per_sample.clipped_gradient_sum(model.loss, w, x, y_pad, indices,
                                                       real, clip, 2)
  np.testing.assert_array_equal(total, want)
  assert int(clipped) == int(want_clipped) and float(jnp.abs(total).max()) > 0

def test_an_example_with_a_non_finite_gradient_adds_nothing(tiny):
  """A record whose gradient overflows (here an infinite pixel) adds zero,
  which has norm <= S, and is counted as clipped; real or padding, it never
  makes the sum NaN."""
  model, w, x, y = tiny
  x_bad = x.at[7, 3, 3, 0].set(jnp.inf)
  indices = jnp.array([3, 7, 12, 7])
  mask = jnp.array([True, True, True, False])
  clip = 0.5
  total, clipped = per_sample.clipped_gradient_sum(model.loss, w, x_bad, y, indices, mask,
                                                   clip, 2)
  keep = jnp.array([True, False, True, False])
  want, want_clipped = per_sample.clipped_gradient_sum(model.loss, w, x, y, indices, keep,
                                                       clip, 2)
  assert bool(jnp.all(jnp.isfinite(total)))
  np.testing.assert_array_equal(total, want)
  assert int(clipped) == int(want_clipped) + 1


def test_poisson_batches_and_an_untruncated_planned_capacity():
  num, q = 200, 0.1
  ks = jax.random.split(jax.random.PRNGKey(3), 3000)
  sizes = np.asarray(jax.vmap(lambda k: per_sample.batch_size_draw(k, num, q))(ks))
  drawn = int(sizes.sum())
  assert stats.binomtest(drawn, num * ks.shape[0], q).pvalue > 1e-3  # rate q: accepted
  assert stats.binomtest(drawn, num * ks.shape[0], 0.97 * q).pvalue < 1e-6  # 3% off: not
  assert stats.binomtest(drawn, num * ks.shape[0], 1.03 * q).pvalue < 1e-6
  u = np.asarray(jax.random.uniform(ks[0], (num,)))
  batch = per_sample.poisson_batch(ks[0], num, q, 40)
  count = int(batch.num_sampled)
  assert count == sizes[0] == int(batch.mask.sum())
  assert set(np.asarray(batch.indices)[:count]) == set(np.flatnonzero(u < q))
  step_keys = lambda t: jax.random.split(jax.random.fold_in(jax.random.PRNGKey(4), t), 50)
  cap = per_sample.plan_batch_capacity(step_keys, 6, num, q, multiple=4)
  all_keys = jnp.concatenate([step_keys(t) for t in range(1, 7)])
  drawn = np.asarray(jax.vmap(lambda k: per_sample.batch_size_draw(
      jax.random.fold_in(k, per_sample.BATCH), num, q))(all_keys))
  assert max(drawn) <= cap < max(drawn) + 4 and cap % 4 == 0
  assert per_sample.plan_batch_capacity(step_keys, 2, num, 1.0) == num


def test_local_dp_sgd_is_clipped_gd_plus_gaussian_noise_of_std_sigma_s(tiny):
  model, w, x, y = tiny
  lr, clip, key = 0.3, 0.05, jax.random.PRNGKey(5)
  run = jax.jit(lambda sigma: per_sample.local_dp_sgd(
      model.loss, w, x, y, key, steps=1, rate=1.0, capacity=30, lr=lr, clip_norm=clip,
      noise_multiplier=sigma, microbatch=8)[0])
  total, _ = per_sample.clipped_gradient_sum(model.loss, w, x, y, jnp.arange(30),
                                             jnp.ones(30, bool), clip, 8)
  np.testing.assert_allclose(run(0.0), w - lr * total / 30, rtol=1e-5, atol=1e-7)
  sigma = 1.3
  noise = np.asarray(run(sigma) - run(0.0), np.float64) * 30 / lr  # = sigma S N(0, 1)
  for claimed, accept in ((sigma, True), (0.9 * sigma, False), (1.1 * sigma, False)):
    stat = np.sum(noise ** 2) / (claimed * clip) ** 2
    p = min(stats.chi2.cdf(stat, noise.size), stats.chi2.sf(stat, noise.size))
    assert (p > 1e-3) == accept, (claimed, p)


# --- The client's message --------------------------------------------------

# The round's S and sigma as a CDP-LQ client receives them (no batch capacity: all records).
NOISE = dict(noise=Noise(0.05, 1.0, jnp.int32(1)), constants=None)


@pytest.mark.parametrize("kind", ["scalar", "hexagonal"])
def test_message_is_the_decoded_dithered_lattice_point_of_the_update(tiny, kind):
  model, w, x, y = tiny
  scheme = dataclasses.replace(CDP_LQ, lattice=kind)
  local = LocalTraining(steps=2, batch_size=6, lr=0.2)
  key = jax.random.PRNGKey(6)
  v, coords, msg = jax.jit(lambda: (
      scheme.client_update(model, w, x, y, key, local, **NOISE),
      scheme.client_stream(model, w, None, x, y, key, local, **NOISE),
      scheme.client_message(model, w, None, x, y, key, local, **NOISE)))()
  v = np.asarray(v)
  assert coords.dtype == jnp.int32
  assert coords.shape == (scheme.quantizer.padded_size(w.shape[0]),)
  unit = local.lr * 0.05 / (6 / 30 * 30)  # lr S / (q |D_k|)
  v_hat = -np.asarray(msg) / unit
  dither = lat_lib.dither(jax.random.fold_in(key, cdp_lq.DITHER), scheme.quantizer, v.size)
  np.testing.assert_allclose(
      v_hat, lat_lib.decode(coords, scheme.quantizer, v.size) - dither, atol=1e-4)
  err = (v_hat - v).reshape(-1, scheme.quantizer.block)
  radius = 0.125 if kind == "scalar" else 0.25 / math.sqrt(3)  # Delta = 0.25
  assert np.max(np.linalg.norm(err, axis=1)) <= radius * (1 + 1e-3) + 1e-4
  # v is in units of S: its noise has std sigma sqrt(T_gd) per coordinate.
  assert np.std(v) == pytest.approx(math.sqrt(2), rel=0.05)


def test_scheme_options_are_validated():
  with pytest.raises(ValueError, match="must be even"):
    dataclasses.replace(CDP_LQ, lattice="hexagonal", dim=5).validate(10, 1.0)
  with pytest.raises(ValueError, match="step must be > 0"):
    dataclasses.replace(CDP_LQ, step=0.0).validate(10, 1.0)
  assert CDP_LQ.quantizer.dim == cdp_lq.POSTER_LATTICE_DIM == 5
  assert dataclasses.replace(CDP_LQ, lattice="hexagonal").quantizer.dim == 2


# --- A run ---------------------------------------------------------------------

def test_max_participations_counts_the_recomputed_cohorts():
  ks = jax.vmap(lambda t: jax.random.fold_in(jax.random.PRNGKey(7), t))(jnp.arange(1, 21))
  got = sampling.max_participations(ks, 30, 0.2, 12, "poisson", [0, 5, 20])
  counts = np.zeros(30, int)
  expected = [0]
  for t in range(20):
    c = sampling.sample_cohort(ks[t], 30, 0.2, 12, "poisson")
    counts[np.asarray(c.indices)[np.asarray(c.mask)]] += 1
    if t + 1 in (5, 20):
      expected.append(int(counts.max()))
  assert got == expected
  assert sampling.max_participations(ks, 30, 1.0, 30, "poisson", [7]) == [7]


def test_a_short_run_reports_record_level_epsilon_and_bzip2_bits(small_federation):
  data, test, public = small_federation
  data = simulation.ClientData(data.x[:40], data.y[:40])
  model = tiny_linear()
  cfg = simulation.RunConfig.of(rounds=3, clients_per_round=8, local_steps=2, batch_size=5,
                             lr=0.2, noise_multiplier=1.0, clip_norm=0.5, accountant="rdp",
                             eval_every=1)
  rec = simulation.run(model, CDP_LQ, data, test, public, cfg)
  q = 5 / 10
  steps = 2 * rec["max_participations"]
  assert rec["composed_steps"] == steps and 1 <= rec["max_participations"] <= 3
  assert rec["epsilon_final"] == pytest.approx(accounting.epsilon(1.0, q, steps, 1e-5, "rdp"))
  assert rec["epsilon_every_round"] == pytest.approx(accounting.epsilon(1.0, q, 6, 1e-5, "rdp"))
  assert rec["epsilon_final"] <= rec["epsilon_every_round"]
  assert rec["epsilon_step_agm"] == pytest.approx(agm.epsilon_for_sigma(1.0, 1e-5))
  assert rec["accountant"].startswith("record-level: rdp")
  assert rec["measured_streams"] == 3  # one client in the first round of each interval
  bits = rec["coded_bits_per_value"]
  assert 3.5 < bits < 8 and rec["compression_factor"] == pytest.approx(32 / bits)
  assert rec["upstream_bits"] == bits
  assert rec["upstream_kb"] == pytest.approx(
      bandwidth.cost_kb(model.num_params, rec["best_round"], 8 / 40, bits))
  assert rec["clip_norm"] == 0.5 and rec["clipped_fraction"] is None
  assert rec["batch_capacity"] <= 10 and rec["lattice"] == "scalar"
  # Under secure aggregation a masked value is uniform mod 2^b: it costs b bits,
  # and the coded size is what the stream would cost without it.
  rec = simulation.run(model, CDP_LQ, data, test, public,
                       cfg.replace(secure_aggregation=True, rounds=1))
  assert rec["secure_bits"] > 16 and rec["upstream_bits"] == rec["secure_bits"]
  assert 3.5 < rec["coded_bits_per_value"] < 8


def test_the_measured_stream_is_what_the_round_sends(small_federation):
  """One client, C = 1: the model moves by exactly the decoded measured stream."""
  data = simulation.ClientData(small_federation[0].x[:1], small_federation[0].y[:1])
  model = tiny_linear()
  scheme = CDP_LQ
  plan = round_plan(scheme, num_clients=1, clients_per_round=1, capacity=1,
                    sampler="poisson", num_kept=model.num_params, local_steps=1,
                    batch_size=4, lr=0.2, clip_norm=0.05, noise_multiplier=1.0,
                    scheme_constants=8)
  state = simulation.ServerState(model.init(jax.random.PRNGKey(0)), jnp.zeros((0,), jnp.int32))
  run_key, t = jax.random.PRNGKey(8), jnp.int32(1)
  streams, real = simulation.make_stream_fn(model, plan, 1)(state, data, run_key, t)
  new, _ = jax.jit(simulation.make_round_fn(model, plan))(state, data, run_key, t)
  assert bool(real[0])
  train_key = keys.client_keys(keys.round_key(run_key, t), jnp.zeros(1, jnp.int32))[0][0]
  lat = scheme.quantizer
  v_hat = (lat_lib.decode(streams[0], lat, model.num_params)
           - lat_lib.dither(jax.random.fold_in(train_key, cdp_lq.DITHER), lat,
                            model.num_params))
  unit = 0.2 * 0.05 / 4  # lr S / (q |D_k|), q |D_k| = |B| = 4
  np.testing.assert_allclose(new.weights - state.weights, -unit * v_hat, atol=1e-6)
