"""The jitted round: DP noise at the round level (shares, or their sum drawn once), no
recompilation, calibration."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from fedjax_dp import calibration, simulation
from fedjax_dp.features.attack.adversary import AttackConfig
from fedjax_dp.privacy import accounting, noise
from fedjax_dp.compression import masks
from fedjax_dp.schemes import LocalTraining, SetupData, get_scheme
from scheme_helpers import round_plan
from tiny_model import tiny_linear


def _round_plan(scheme, n, **kw):
  base = dict(num_clients=600, clients_per_round=10, capacity=24, sampler="poisson",
              num_kept=masks.num_kept(n, 0.01), local_steps=2, batch_size=10, lr=0.1,
              noise_multiplier=1.54, clip_norm=0.5)
  return round_plan(scheme, **{**base, **kw})


def test_dp_round_adds_s_sigma_noise_on_t_only(small_federation, cnn):
  """With a tiny lr the update is the noise: N(0, (S sigma / E|K|)^2) on T, 0 off T."""
  data, _, _ = small_federation
  n = cnn.num_params
  scheme = get_scheme("FL-TOP-DP")
  plan = _round_plan(scheme, n, lr=1e-12)  # capacity 24 > cohort: padded slots
  fixed = masks.random_indices(jax.random.PRNGKey(9), n, plan.num_kept)
  w0 = cnn.init(jax.random.PRNGKey(0))
  fn = jax.jit(simulation.make_round_fn(cnn, plan))
  state, info = fn(simulation.ServerState(w0, fixed), data, jax.random.PRNGKey(1), jnp.int32(1))
  assert 0 < int(info.num_sampled) <= plan.capacity
  diff = np.asarray(state.weights - w0, np.float64)
  on = np.zeros(n, bool)
  on[np.asarray(fixed)] = True
  np.testing.assert_array_equal(diff[~on], 0.0)
  std = plan.clip_norm * plan.noise_multiplier / plan.clients_per_round
  for s, accept in ((std, True), (std * 1.05, False), (std * 0.95, False)):
    stat = np.sum(diff[on] ** 2) / s**2
    p = 2 * min(stats.chi2.cdf(stat, on.sum()), stats.chi2.sf(stat, on.sum()))
    assert (p > 1e-3) == accept, (s, p)


def test_round_two_does_not_recompile(small_federation):
  data, _, _ = small_federation
  cnn = tiny_linear()  # the round's program is the same for every model
  scheme = get_scheme("FL-BASIC-DP")
  plan = _round_plan(scheme, cnn.num_params, local_steps=1)
  fn = simulation.make_rounds_fn(cnn, plan, 2)
  state = simulation.ServerState(cnn.init(jax.random.PRNGKey(0)), jnp.zeros((0,), jnp.int32))
  state, infos = fn(state, data, jax.random.PRNGKey(1), jnp.int32(1))
  state, infos = fn(state, data, jax.random.PRNGKey(1), jnp.int32(3))
  assert fn._cache_size() == 1
  assert infos.num_sampled.shape == (2,)


def test_rounds_are_deterministic_given_the_key(small_federation):
  data, _, _ = small_federation
  cnn = tiny_linear()
  plan = _round_plan(get_scheme("FL-STD-DP"), cnn.num_params, local_steps=1)
  fn = jax.jit(simulation.make_round_fn(cnn, plan))
  w0 = cnn.init(jax.random.PRNGKey(0))
  empty = jnp.zeros((0,), jnp.int32)
  a, _ = fn(simulation.ServerState(w0, empty), data, jax.random.PRNGKey(1), jnp.int32(1))
  b, _ = fn(simulation.ServerState(w0, empty), data, jax.random.PRNGKey(1), jnp.int32(1))
  c, _ = fn(simulation.ServerState(w0, empty), data, jax.random.PRNGKey(1), jnp.int32(2))
  np.testing.assert_array_equal(a.weights, b.weights)
  assert not np.array_equal(np.asarray(a.weights), np.asarray(c.weights))


def _setup_data(small_federation, cnn, ratio=0.005):
  _, _, (px, py) = small_federation
  return SetupData(model=cnn, w0=cnn.init(jax.random.PRNGKey(0)), public_x=jnp.asarray(px),
                   public_y=jnp.asarray(py), key=jax.random.PRNGKey(3), ratio=ratio,
                   init_steps=5, local=LocalTraining(5, 10, 0.215))


def test_topk_setup_keeps_the_largest_public_gradients(small_federation, cnn):
  data = _setup_data(small_federation, cnn)
  fixed = get_scheme("FL-TOP").setup(data)
  scores = calibration.topk_scores(cnn, data.w0, data.public_x, data.public_y, 5, 0.215)
  k = masks.num_kept(cnn.num_params, 0.005)
  assert fixed.shape == (k,)
  threshold = np.sort(np.asarray(scores))[-k]
  assert np.all(np.asarray(scores)[np.asarray(fixed)] >= threshold)
  # Fixed random subsets differ from Top-K; redrawn ones need no setup state.
  bas3 = get_scheme("FL-BAS-3").setup(data)
  assert bas3.shape == (k,) and not np.array_equal(np.asarray(bas3), np.asarray(fixed))
  assert get_scheme("FL-BASIC").setup(data).shape == (0,)


def test_clip_calibration_follows_uai_section_4(small_federation, cnn):
  from fedjax_dp import local_training
  data = _setup_data(small_federation, cnn)
  n = cnn.num_params
  top = get_scheme("FL-TOP-DP")
  fixed = top.setup(data)
  s_top = top.calibrate_clip(data, fixed)
  train_key, _ = jax.random.split(jax.random.fold_in(data.key, 1))
  sgd = jax.jit(lambda mask: local_training.local_sgd(  # one program for both references
      cnn.loss, data.w0, data.public_x, data.public_y, train_key, steps=5, batch_size=10,
      lr=0.215, grad_mask=mask))
  w1 = sgd(masks.indices_to_mask(fixed, n))
  assert s_top == pytest.approx(float(jnp.linalg.norm((w1 - data.w0)[fixed])), rel=1e-4)
  # Random subsets: the median over 100 subsets of the unconstrained update,
  # about sqrt(r) of its full norm, and far below the Top-K norm.
  s_bas = get_scheme("FL-BAS-2-DP").calibrate_clip(data, jnp.zeros((0,), jnp.int32))
  full = float(jnp.linalg.norm(sgd(jnp.ones((n,), bool)) - data.w0))
  assert 0 < s_bas < s_top and s_bas == pytest.approx(full * np.sqrt(0.005), rel=0.3)


def test_initial_update_norms_are_each_clients_round_from_w0(small_federation):
  """Thesis 5.2.6 fn 4: the norms S's median is taken over, one per client, in
  client order, through the padded last chunk (7 clients in chunks of 3)."""
  from fedjax_dp import local_training
  data, _, _ = small_federation
  model, key = tiny_linear(), jax.random.PRNGKey(5)
  w0 = model.init(jax.random.PRNGKey(0))
  few = simulation.ClientData(data.x[:7], data.y[:7])
  norms = calibration.initial_update_norms(model, w0, few, key, steps=3, batch_size=5,
                                           lr=0.1, chunk=3)
  want = [np.linalg.norm(local_training.local_sgd(
      model.loss, w0, jnp.asarray(few.x[i], jnp.float32) / 255, few.y[i],
      jax.random.fold_in(key, i), steps=3, batch_size=5, lr=0.1) - w0) for i in range(7)]
  assert norms.shape == (7,) and len(set(norms.tolist())) == 7
  np.testing.assert_allclose(norms, want, rtol=1e-5)


def test_cpu_default_chunks_only_where_they_train_fewer_slots_than_one_piece():
  """On a CPU the cohort goes 4 slots a device at a time when the planned
  rounds leave chunks of padding to skip; a cohort that is always full (thesis
  Table 8.3's 10 clients on 2 devices: chunks of 8 would train 16 slots) goes
  in one piece, as does a robust aggregator's."""
  assert jax.default_backend() == "cpu"
  full = np.full(40, 10)
  assert simulation.default_chunk(10, 2, False, full) is None
  assert simulation.default_chunk(10, 2, False, np.full(40, 3)) == 8  # 8 slots, not 10
  poisson = np.random.default_rng(0).binomial(6000, 1 / 60, size=200)  # UAI: ~100 in 132
  capacity = int(-(-poisson.max() // 4) * 4)
  assert simulation.default_chunk(capacity, 2, False, poisson) == 8
  assert simulation.default_chunk(capacity, 1, False, poisson) == 4
  assert simulation.default_chunk(capacity, 2, True, poisson) is None
  assert simulation.default_chunk(8, 2, False, np.full(5, 1)) is None  # one chunk anyway
  # 100 clients in 100 slots: chunks of 8 would train 104.
  assert simulation.default_chunk(100, 2, False, np.full(5, 100)) is None


def test_a_chunk_of_padding_slots_only_is_not_trained_and_changes_nothing(
    small_federation, monkeypatch):
  """Chunked (the CPU default), a chunk whose slots are all padding is
  skipped: only the chunks holding the cohort train, and the round's result
  is the one-piece round's (to float rounding: the sum goes chunk by chunk)."""
  data, _, _ = small_federation
  trained = []
  make_train = simulation.make_train_fn

  def counting(model, plan):
    train = make_train(model, plan)

    def train_and_count(w, shared, data, indices, keys, noise):
      jax.debug.callback(lambda ids: trained.append(np.asarray(ids)), indices)
      return train(w, shared, data, indices, keys, noise)
    return train_and_count

  monkeypatch.setattr(simulation.round, "make_train_fn", counting)
  cnn = tiny_linear()
  w0 = cnn.init(jax.random.PRNGKey(0))
  state = simulation.ServerState(w0, jnp.zeros((0,), jnp.int32))
  weights = {}
  for chunk in (None, 4):
    trained.clear()
    plan = _round_plan(get_scheme("FL-STD-DP"), cnn.num_params, local_steps=1,
                       client_chunk=chunk)
    fn = jax.jit(simulation.make_round_fn(cnn, plan))
    new, info = fn(state, data, jax.random.PRNGKey(1), jnp.int32(1))
    jax.block_until_ready(new.weights)
    weights[chunk] = np.asarray(new.weights)
    sampled = int(info.num_sampled)
    assert 4 < sampled <= 16, sampled  # at least one chunk of 24 slots is padding only
    if chunk is None:
      assert [len(ids) for ids in trained] == [24]
    else:
      assert [len(ids) for ids in trained] == [4] * -(-sampled // 4)  # 6 chunks, not all
  np.testing.assert_allclose(weights[4], weights[None], rtol=1e-5, atol=1e-7)
  assert not np.array_equal(weights[None], np.asarray(w0))


def _variance_p(samples: np.ndarray, variance: float) -> float:
  """Two-sided chi-square p-value of ``samples`` ~ N(0, variance)."""
  stat, dof = np.sum(np.asarray(samples, np.float64) ** 2) / variance, samples.size
  return 2 * min(stats.chi2.cdf(stat, dof), stats.chi2.sf(stat, dof))


def test_the_shares_sum_drawn_once_has_the_shares_distribution_dropouts_included():
  """10 slots, 8 sampled, 2 of them failed; shares sized for |K| - l = 6: the
  present shares' sum and the one draw are both N(0, 6 (S sigma)^2 / 6), and
  a variance 2% off is rejected for both."""
  m, clip, sigma, shares = 400_000, 0.7, 1.3, 6
  sampled = jnp.arange(10) < 8
  present = sampled & (jnp.arange(10) >= 2)
  keys = jax.random.split(jax.random.PRNGKey(3), 10)
  contribs, _ = noise.privatize(jnp.zeros((10, m)), sampled, keys, clip, sigma,
                                jnp.int32(shares))
  summed = noise.masked_sum(contribs, present)
  once = noise.aggregate_noise(jax.random.PRNGKey(4), (m,), clip, sigma, jnp.int32(shares),
                               jnp.sum(present))
  variance = 6 * (clip * sigma) ** 2 / shares
  for draw in (summed, once):
    assert _variance_p(draw, variance) > 1e-3
    assert _variance_p(draw, 1.02 * variance) < 1e-3
    assert _variance_p(draw, variance / 1.02) < 1e-3
  # Nobody present: nothing (the round's server_noise covers that round).
  nothing = noise.aggregate_noise(jax.random.PRNGKey(4), (m,), clip, sigma, jnp.int32(1),
                                  jnp.int32(0))
  assert not np.any(np.asarray(nothing))


def test_a_noise_once_round_adds_s_sigma_noise_and_skips_the_shares(small_federation, cnn):
  """FL-STD-DP on the paper CNN with a tiny lr: the update is the noise, drawn
  once, N(0, (S sigma / E|K|)^2) on every weight; a 2% error in its variance
  is rejected. The clients' privatize gets sigma 0 (no share drawn)."""
  data, _, _ = small_federation
  n = cnn.num_params
  scheme = get_scheme("FL-STD-DP")
  plan = dataclasses.replace(_round_plan(scheme, n, lr=1e-12, num_kept=n),
                             mechanism=accounting.Mechanism("gaussian", 1.54))
  assert plan.noise_once
  noise_in = simulation.round_noise(plan, simulation.round_inputs(
      plan, simulation.ServerState(cnn.init(jax.random.PRNGKey(0)), ()),
      jax.random.PRNGKey(1), jnp.int32(1)), ())
  assert simulation.client_noise(plan, noise_in).noise_multiplier == 0.0
  w0 = cnn.init(jax.random.PRNGKey(0))
  fn = jax.jit(simulation.make_round_fn(cnn, plan))
  state, info = fn(simulation.ServerState(w0, ()), data, jax.random.PRNGKey(1), jnp.int32(1))
  assert int(info.num_sampled) > 0
  diff = np.asarray(state.weights - w0, np.float64)
  variance = (plan.clip_norm * plan.noise_multiplier / plan.clients_per_round) ** 2
  assert _variance_p(diff, variance) > 1e-3
  assert _variance_p(diff, 1.02 * variance) < 1e-3
  assert _variance_p(diff, variance / 1.02) < 1e-3


_ONCE_CASES = {
    "FL-STD-DP": ("FL-STD-DP", {}, True),
    "FL-TOP-DP, dropouts": ("FL-TOP-DP", dict(dropout_rate=0.2, max_dropouts=2), True),
    "FL-STD-DP, secure aggregation": ("FL-STD-DP", dict(secure_aggregation=True), False),
    "FL-STD-DP, attackers skip their noise": (
        "FL-STD-DP", dict(attack=AttackConfig("gradient-ascent", 0.1, skip_noise=True)), False),
    "FL-STD-DP, attackers add their noise": (
        "FL-STD-DP", dict(attack=AttackConfig("gradient-ascent", 0.1)), True),
    "FL-SIGN-DP (discrete Gaussian shares)": ("FL-SIGN-DP", {}, False),
    "FL-STD (no DP)": ("FL-STD", {}, False),
}


@pytest.mark.parametrize("case", list(_ONCE_CASES))
def test_the_plan_draws_the_noise_once_only_where_no_share_is_needed_apart(
    small_federation, case):
  data, _, public = small_federation
  name, settings, once = _ONCE_CASES[case]
  cfg = simulation.RunConfig.of(rounds=1, clients_per_round=10, noise_multiplier=1.0,
                                clip_norm=0.5, **settings)
  _, plan = simulation.prepare(tiny_linear(), get_scheme(name), data, public, cfg)
  assert plan.noise_once is once
