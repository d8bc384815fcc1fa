"""Simulated secure aggregation: exact sums, uniform masked vectors, cancelling
masks, the thesis bit width, overflow reporting, and client failures."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from fedjax_dp import features, sampling, simulation
from fedjax_dp.privacy import accounting, noise, secure_aggregation as sa
from fedjax_dp.schemes import get_scheme
from scheme_helpers import round_plan, run_view
from tiny_model import tiny_linear

IDS = jnp.array([5, 17, 3, 99, 42, 8, 1, 0, 0, 0])  # 7 sampled clients, 3 padding slots
SAMPLED = jnp.arange(10) < 7
KEY = jax.random.PRNGKey(4)


@pytest.mark.parametrize("neighbours", [1, 2, 4])
def test_integer_sum_is_exact_for_any_ring(neighbours):
  x = jax.random.randint(jax.random.PRNGKey(0), (10, 3000), -1000, 1000)
  result = sa.secure_sum(x, SAMPLED, SAMPLED, IDS, KEY, 16, 1.0, neighbours)
  np.testing.assert_array_equal(np.asarray(result.total),
                                np.asarray(x)[:7].sum(0).astype(np.float32))
  assert int(result.overflow) == 0


def test_fixed_point_sum_is_the_exact_sum_of_the_encodings():
  x = 3.0 * jax.random.normal(jax.random.PRNGKey(1), (10, 3000))
  scale = 2.0 ** 16
  result = sa.secure_sum(x, SAMPLED, SAMPLED, IDS, KEY, 24, scale, 1)
  q = np.round(np.asarray(x, np.float64)[:7] * scale).astype(np.int64)
  np.testing.assert_array_equal(np.asarray(result.total, np.float64), q.sum(0) / scale)
  # Within |K| half-steps of the real sum.
  assert np.max(np.abs(np.asarray(result.total) - np.asarray(x)[:7].sum(0))) <= 7 / scale


@pytest.mark.parametrize("neighbours,clients", [(1, 7), (2, 7), (3, 4), (1, 2)])
def test_each_masked_vector_is_uniform(neighbours, clients):
  """Chi-square of one client's masked values over Z_256; the input is constant."""
  bits, m = 8, 64_000
  sampled = jnp.arange(10) < clients
  encoded = jnp.full((10, m), 3, jnp.int32)
  masked = np.asarray(sa.mask_contributions(encoded, sampled, IDS, KEY, bits, neighbours))
  for k in range(clients):
    counts = np.bincount(masked[k], minlength=256)
    assert counts.size == 256
    assert stats.chisquare(counts).pvalue > 1e-4, k
  # The test has power: the encodings themselves are far from uniform.
  assert stats.chisquare(np.bincount(np.asarray(encoded[0]), minlength=256)).pvalue < 1e-4
  # Padding rows carry nothing.
  assert not masked[clients:].any()


def test_a_lone_client_is_not_masked():
  """Documented limitation: with |K| = 1 there is no partner to share a mask with."""
  sampled = jnp.arange(10) < 1
  encoded = jnp.full((10, 100), 3, jnp.int32)
  masked = sa.mask_contributions(encoded, sampled, IDS, KEY, 8, 1)
  np.testing.assert_array_equal(masked[0], encoded[0])


def test_masks_cancel_only_when_every_sampled_client_is_present():
  bits = 20
  x = jax.random.randint(jax.random.PRNGKey(2), (10, 5000), -100, 100)
  masked = sa.mask_contributions(x, SAMPLED, IDS, KEY, bits, 2)
  everyone = sa.decode(sa.modular_sum(masked, SAMPLED, bits), bits, 1.0)
  np.testing.assert_array_equal(np.asarray(everyone), np.asarray(x)[:7].sum(0))
  present = SAMPLED & (jnp.arange(10) != 3)
  survivors = np.asarray(x)[[0, 1, 2, 4, 5, 6]].sum(0)
  # Without the dropped client, the masked vectors sum to garbage...
  partial = np.asarray(sa.decode(sa.modular_sum(masked, present, bits), bits, 1.0))
  assert np.mean(partial == survivors) < 0.01
  # ...until the server removes the dropped client's pair masks (Bonawitz et al.).
  result = sa.secure_sum(x, SAMPLED, present, IDS, KEY, bits, 1.0, 2)
  np.testing.assert_array_equal(np.asarray(result.total), survivors)
  # Masks are derived per pair: a different key gives different masked vectors.
  other = sa.mask_contributions(x, SAMPLED, IDS, jax.random.PRNGKey(5), bits, 2)
  assert np.mean(np.asarray(other)[:7] == np.asarray(masked)[:7]) < 0.01


def test_bit_width_is_the_thesis_formula():
  n = 1_663_370
  # Thesis 5.2.4 example: |K| = 100, max|mu| = 1, sigma = 1 -> 22 bits (n = 1e7).
  assert sa.bit_width(math.sqrt(1e7) * 1.0, 1.0, 100) == 22
  # Tables 5.1-5.2: 22 bits at epsilon 1, 21 at epsilon 2 and 4 (sigma from the
  # moments accountant, q = 1/60, T = 200, delta = 1e-5).
  for eps, bits in ((1, 22), (2, 21), (4, 21)):
    sigma = accounting.noise_multiplier_for_epsilon(eps, 1 / 60, 200, 1e-5)
    assert sa.bit_width(math.sqrt(n) * sigma, 1.0, 100) == bits
  # ceil(log2((12 * 2 + 1) * 100)) = ceil(11.29) = 12; plus f fractional bits.
  assert sa.bit_width(2.0, 1.0, 100) == 12
  assert sa.bit_width(2.0, 1.0, 100, scale=2.0 ** 8) == 20
  # Without noise the exact range of the sum is kept: 2 * 100 + 1 values.
  assert sa.bit_width(0.0, 1.0, 100) == 8
  with pytest.raises(ValueError, match="bits"):
    sa.bit_width(1e6, 1.0, 1000, scale=2.0 ** 16)
  # The thesis' |K| is the expected cohort C N; a Poisson cohort above it
  # (132 of seed 0's at C N = 100) sizes only the noiseless sum's term.
  sigma = accounting.noise_multiplier_for_epsilon(2, 1 / 60, 200, 1e-5)
  assert sa.bit_width(math.sqrt(n) * sigma, 1.0, 100, largest=132) == 21
  assert sa.bit_width(math.sqrt(n) * sigma, 1.0, 132) == 22
  assert sa.bit_width(0.0, 1.0, 100, largest=132) == 9  # 2 * 132 + 1 values
  with pytest.raises(ValueError, match="num_clients <= largest"):
    sa.bit_width(1.0, 1.0, 100, largest=99)


@pytest.mark.parametrize("total,overflows", [(511, False), (512, True), (-512, False),
                                             (-513, True), (3000, True)])
def test_overflow_is_detected_exactly_at_the_boundary(total, overflows):
  """b = 10: sums must lie in [-512, 512); the wrapped value is reported, not hidden."""
  x = np.zeros((10, 4), np.int32)
  x[0, 1] = total - 2 * (total // 3)
  x[1, 1] = total // 3
  x[2, 1] = total // 3
  result = sa.secure_sum(jnp.asarray(x), SAMPLED, SAMPLED, IDS, KEY, 10, 1.0, 1)
  assert int(result.overflow) == int(overflows)
  wrapped = (total + 512) % 1024 - 512
  assert float(result.total[1]) == wrapped
  assert float(result.total[0]) == 0


def test_unencodable_values_are_reported():
  x = jnp.zeros((10, 3)).at[2, 0].set(1e9).at[4, 2].set(jnp.nan)
  result = sa.secure_sum(x, SAMPLED, SAMPLED, IDS, KEY, 31, 2.0 ** 16, 1)
  assert int(result.overflow) == 2


def _variance_pvalue_low(samples, std):
  """One-sided test of H0: Var >= std^2 (small p: the variance is below)."""
  stat = np.sum(np.asarray(samples, np.float64) ** 2) / std ** 2
  return stats.chi2.cdf(stat, samples.size)


def test_dropout_scaled_shares_keep_s_sigma_and_unscaled_ones_do_not():
  """Thesis 5.2.5 / 5.3.3: shares for |K| - l clients; l of the |K| drop out."""
  k, l, clip, sigma, dim = 20, 5, 0.7, 1.3, 20_000
  mask = jnp.ones((k,), bool)
  keys = jax.random.split(jax.random.PRNGKey(7), k)
  survivors = np.arange(k) >= l
  for num_shares, ok in ((k - l, True), (k, False)):
    contributions, _ = noise.privatize(jnp.zeros((k, dim)), mask, keys, clip, sigma,
                                       jnp.int32(num_shares))
    total = np.asarray(contributions)[survivors].sum(0)
    assert (_variance_pvalue_low(total, clip * sigma) > 1e-3) == ok, num_shares
  # With the scaled shares the noise is exactly S*sigma when l drop (two-sided).
  contributions, _ = noise.privatize(jnp.zeros((k, dim)), mask, keys, clip, sigma,
                                     jnp.int32(k - l))
  total = np.asarray(contributions, np.float64)[survivors].sum(0)
  stat = np.sum(total ** 2) / (clip * sigma) ** 2
  assert 2 * min(stats.chi2.cdf(stat, dim), stats.chi2.sf(stat, dim)) > 1e-3


# --- The round: secure aggregation and failures inside the jitted round. -----

def _with_dropouts(scheme, max_dropouts=0, dropout_rate=0.0) -> dict:
  """Plan fields of a round with the dropouts feature."""
  dropouts = simulation.Dropouts(max_dropouts, dropout_rate)
  run = run_view(scheme, simulation.RunConfig.of(clients_per_round=10, dropouts=dropouts),
                 run_key=jax.random.PRNGKey(1))
  feature = features.dropouts.Dropouts(dropouts, run)
  return dict(features=(feature,), feature_slots=(0,))


def _dropped(info) -> int:
  return int(info.features[0]["num_dropped"])


_ROUND_FNS = {}


def _round_fn(scheme, max_dropouts, dropout_rate, **kw):
  """(model, plan, jitted round): compiled once per setting (the round t is traced)."""
  key = (scheme.name, max_dropouts, dropout_rate, tuple(sorted(kw.items())))
  if key not in _ROUND_FNS:
    model = tiny_linear()
    base = dict(num_clients=600, clients_per_round=10, capacity=24, sampler="poisson",
                num_kept=model.num_params, local_steps=1, batch_size=10, lr=0.1,
                noise_multiplier=1.0, clip_norm=0.5,
                **_with_dropouts(scheme, max_dropouts, dropout_rate))
    plan = round_plan(scheme, **{**base, **kw})
    _ROUND_FNS[key] = model, plan, jax.jit(simulation.make_round_fn(model, plan))
  return _ROUND_FNS[key]


def _round(data, scheme, t=1, max_dropouts=0, dropout_rate=0.0, **kw):
  model, plan, fn = _round_fn(scheme, max_dropouts, dropout_rate, **kw)
  w0 = model.init(jax.random.PRNGKey(0))
  state, info = fn(simulation.ServerState(w0, jnp.zeros((0,), jnp.int32),
                                          (plan.features[0].init()[0],)), data,
                   jax.random.PRNGKey(1), jnp.int32(t))
  return np.asarray(state.weights - w0, np.float64), info


def test_secure_round_matches_the_plain_round(small_federation):
  data = small_federation[0]
  scheme = get_scheme("FL-STD-DP")
  plain, info = _round(data, scheme)
  bits = sa.bit_width(0.5 * 1.0, 0.5, 24, 2.0 ** 16)
  secure, sinfo = _round(data, scheme, secure_bits=bits, secure_scale=2.0 ** 16)
  assert int(sinfo.secure_overflow) == 0 and int(info.secure_overflow) == 0
  # Fixed point: each of |K| contributions is off by <= 2^-17, the sum is / 10.
  assert np.max(np.abs(secure - plain)) <= int(info.num_sampled) * 2.0 ** -17 / 10 + 1e-6


def test_each_sampled_client_fails_with_the_dropout_rate(small_federation):
  """Over 300 rounds, the sampled clients that fail are Binomial(sampled,
  0.2): accepted at 0.2, rejected at 0.15 and 0.25."""
  model = tiny_linear()
  plan = round_plan(get_scheme("FL-STD"), num_clients=600, clients_per_round=10, capacity=24,
                    sampler="poisson", num_kept=model.num_params, local_steps=1,
                    batch_size=10, lr=0.1, **_with_dropouts(get_scheme("FL-STD"), 0, 0.2))
  fn = jax.jit(simulation.make_round_fn(model, plan))
  state = simulation.ServerState(model.init(jax.random.PRNGKey(0)), jnp.zeros((0,), jnp.int32),
                                 (plan.features[0].init()[0],))
  sampled = dropped = 0
  for t in range(1, 301):
    _, info = fn(state, small_federation[0], jax.random.PRNGKey(1), jnp.int32(t))
    assert 0 <= _dropped(info) <= int(info.num_sampled)
    sampled, dropped = sampled + int(info.num_sampled), dropped + _dropped(info)
  assert sampled > 2500
  assert stats.binomtest(dropped, sampled, 0.2).pvalue > 1e-3
  assert stats.binomtest(dropped, sampled, 0.15).pvalue < 1e-6
  assert stats.binomtest(dropped, sampled, 0.25).pvalue < 1e-6


@pytest.mark.parametrize("t,within", [(5, True), (7, False)])
def test_round_with_failures_reports_drops_and_the_noise_follows(t, within,
                                                                 small_federation):
  """lr ~ 0: the update is the noise, std S sigma sqrt((K-d)/(K-l)) / E|K|.

  Round 5 of this seed loses d = l = 3 of 10 clients: the noise is S*sigma.
  Round 7 loses 4 > l of 16: below S*sigma (what the run then reports).
  """
  data = small_federation[0]
  clip, sigma, cpr, l = 0.5, 1.0, 10, 3
  diff, info = _round(data, get_scheme("FL-STD-DP"), t=t, lr=1e-12, max_dropouts=l,
                      dropout_rate=0.2, client_chunk=8)
  k, d = int(info.num_sampled), _dropped(info)
  assert (d <= l) == within and d > 0
  std = clip * sigma * math.sqrt((k - d) / (k - l)) / cpr
  stat = np.sum(diff ** 2) / std ** 2
  assert 2 * min(stats.chi2.cdf(stat, diff.size), stats.chi2.sf(stat, diff.size)) > 1e-3
  # S*sigma itself is accepted within l failures, rejected (too low) beyond.
  low = _variance_pvalue_low(diff, clip * sigma / cpr)
  assert (low > 1e-3) == within


def test_run_reports_bits_overflows_and_under_noised_rounds(small_federation):
  data, test, public = small_federation
  cfg = simulation.RunConfig.of(rounds=2, clients_per_round=10, eval_every=2, clip_norm=0.5,
                             secure_aggregation=True, secure_bits=8, dropout_rate=0.3)
  with pytest.warns(UserWarning) as warned:
    rec = simulation.run(tiny_linear(), get_scheme("FL-STD-DP"), data, test, public, cfg)
  messages = " ".join(str(w.message) for w in warned)
  assert "overflowed the 8-bit" in messages and "max-dropouts" in messages
  assert rec["secure_aggregation"] and rec["secure_overflows"] > 0
  assert rec["secure_bits"] == rec["upstream_bits"] == 8
  assert rec["upstream_kb"] == pytest.approx(7850 * 8 * rec["best_round"] / 60 / 8 / 1000)
  assert rec["dropped_clients"] > 0 and rec["under_noised_rounds"] >= 1
  # What was sent: the participations less the clients that failed, per client.
  sent = rec["mean_cohort"] * rec["rounds"] - rec["dropped_clients"]
  assert rec["measured_upstream_kb"] == pytest.approx(7850 * 8 * sent / 600 / 8 / 1000)
  # Without DP nothing is noised, so nothing is under-noised; no secure sum of floats.
  rec = simulation.run(tiny_linear(), get_scheme("FL-STD"), data, test, public,
                       cfg.replace(clip_norm=None))
  assert rec["under_noised_rounds"] == 0 and rec["upstream_bits"] == 32
  assert not rec["secure_aggregation"]


def test_the_secure_sum_of_signs_holds_the_largest_poisson_cohort(small_federation):
  """FL-SIGN's signs under secure aggregation: the modulus holds 2 |K|max + 1
  values, |K|max the largest cohort the run's Poisson draws plan (not the
  slots' padding to a multiple of the devices, not the mean C N)."""
  data, _, public = small_federation
  cfg = simulation.RunConfig.of(rounds=30, clients_per_round=50, secure_aggregation=True,
                                seed=5)
  _, plan = simulation.prepare(tiny_linear(), get_scheme("FL-SIGN"), data, public, cfg)
  sizes = sampling.planned_cohort_sizes(plan.sampling_keys, 600, plan.rate)
  # Seed 5's largest cohort is 61 (123 values: 7 bits), its slots 64 (129: 8).
  assert sizes.max() == 61 and plan.capacity == 64
  assert plan.comm.secure_bits == math.ceil(math.log2(2 * 61 + 1)) == 7


def test_default_bit_width_of_a_gaussian_scheme():
  """12 S sigma + S, times the largest cohort and the fixed-point scale 2^f."""
  cfg = simulation.RunConfig.of(secure_aggregation=True, clip_norm=0.5, noise_multiplier=1.54)
  traits = get_scheme("FL-TOP-DP").traits
  comm = simulation.communication(traits, cfg, 124, 0.5)
  bits = math.ceil(math.log2((12 * 0.5 * 1.54 + 0.5) * 124 * 2 ** 16))
  assert comm.secure_bits == comm.upstream_bits == bits == 27
  assert comm.secure_scale == 2.0 ** 16 and comm.downstream_bits == 32
  plain = simulation.communication(traits, cfg.replace(secure_aggregation=False),
                                   124, 0.5)
  assert plain.secure_bits is None and plain.upstream_bits == 32


@pytest.mark.parametrize("value,overflows", [(-1, False), (2, True)])
def test_overflow_count_is_exact_past_32767_clients(value, overflows):
  """40,000 clients: the exact sum's low limb wrapped past 32,767 clients of
  negative values, and a sum in range (-40,000 in 17 bits) was counted as
  overflowed; 80,000 is not in range."""
  clients = 40_000
  every = jnp.ones((clients,), bool)
  x = jnp.full((clients, 1), value, jnp.int32)
  bits = sa.bit_width(0.0, 1.0, clients)
  result = jax.jit(lambda x: sa.secure_sum(x, every, every, jnp.arange(clients), KEY, bits,
                                           1.0))(x)
  assert bits == 17 and int(result.overflow) == int(overflows)
  if not overflows:
    assert float(result.total[0]) == value * clients
