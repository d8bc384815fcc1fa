"""Robust aggregators against numpy on small arrays, padding slots excluded."""

import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_dp import aggregators
from fedjax_dp.aggregators import AggregatorConfig


def _data(present, slots=7, n=5, seed=0):
  rng = np.random.default_rng(seed)
  x = rng.standard_normal((slots, n)).astype(np.float32)
  x[present:] = 1e6  # padding slots hold garbage that must not count
  mask = np.arange(slots) < present
  return x, mask


@pytest.mark.parametrize("present", [1, 2, 5, 6])  # odd and even counts
def test_median_matches_numpy(present):
  x, mask = _data(present)
  got = aggregators.aggregate(AggregatorConfig("median"), jnp.asarray(x), jnp.asarray(mask))
  np.testing.assert_allclose(got, np.median(x[:present], axis=0), rtol=1e-6)


@pytest.mark.parametrize("present,trim", [(6, 0.2), (7, 0.3), (5, 0.0), (4, 0.49)])
def test_trimmed_mean_matches_numpy(present, trim):
  x, mask = _data(present)
  got = aggregators.aggregate(AggregatorConfig("trimmed-mean", trim=trim),
                              jnp.asarray(x), jnp.asarray(mask))
  cut = int(np.floor(trim * present))
  kept = np.sort(x[:present], axis=0)[cut:present - cut]
  np.testing.assert_allclose(got, kept.mean(axis=0), rtol=1e-6)


@pytest.mark.parametrize("present,trim,cut", [(300, 0.21, 63), (100, 0.29, 29)])
def test_trimmed_mean_cuts_the_whole_floor_of_trim_times_count(present, trim, cut):
  """0.21 * 300 is 62.99... in float32 and 0.29 * 100 is 28.99... in float64:
  63 and 29 values are cut at each end, so ``cut`` attackers' extreme values
  all go (one of them stayed: a mean of 5.7 here)."""
  x = np.zeros((present, 1), np.float32)
  x[:cut] = 1000.0
  got = aggregators.aggregate(AggregatorConfig("trimmed-mean", trim=trim),
                              jnp.asarray(x), jnp.ones(present, bool))
  assert float(got[0]) == 0.0


def test_norm_bound_scales_only_long_updates():
  x, mask = _data(4, n=3)
  x[0] *= 100.0  # one long update
  got = aggregators.aggregate(AggregatorConfig("norm-bound", norm_bound=2.0),
                              jnp.asarray(x), jnp.asarray(mask))
  norms = np.linalg.norm(x[:4], axis=1, keepdims=True)
  want = (x[:4] * np.minimum(1.0, 2.0 / norms)).mean(axis=0)
  np.testing.assert_allclose(got, want, rtol=1e-6)
  assert np.linalg.norm(x[0]) > 2.0 and np.linalg.norm(x[1]) < 2.0  # both cases hit


def test_mean_and_empty_cohort():
  x, mask = _data(3)
  np.testing.assert_allclose(
      aggregators.aggregate(AggregatorConfig(), jnp.asarray(x), jnp.asarray(mask)),
      x[:3].mean(axis=0), rtol=1e-6)
  none = jnp.zeros(7, bool)
  for cfg in (AggregatorConfig(), AggregatorConfig("median"),
              AggregatorConfig("trimmed-mean"), AggregatorConfig("norm-bound", norm_bound=1.0)):
    np.testing.assert_array_equal(aggregators.aggregate(cfg, jnp.asarray(x), none), 0.0)


def test_median_resists_an_outlier_the_mean_does_not():
  x = np.zeros((5, 2), np.float32)
  x[:4] = 1.0
  x[4] = 1000.0  # one attacker
  mask = jnp.ones(5, bool)
  assert float(aggregators.aggregate(AggregatorConfig("median"), jnp.asarray(x), mask)[0]) == 1.0
  assert float(aggregators.aggregate(AggregatorConfig(), jnp.asarray(x), mask)[0]) > 100


def test_integer_messages_are_averaged_as_numbers():
  signs = jnp.asarray([[1, -1], [1, 1], [-1, 1]], jnp.int8)
  got = aggregators.aggregate(AggregatorConfig("median"), signs, jnp.ones(3, bool))
  np.testing.assert_array_equal(got, [1.0, 1.0])


@pytest.mark.parametrize("kwargs,match", [
    (dict(name="krum"), "aggregator 'krum' is unknown"),
    (dict(name="trimmed-mean", trim=0.5), "trim must be in"),
    (dict(name="norm-bound"), "norm_bound must be > 0 for aggregator norm-bound"),
    (dict(name="norm-bound", norm_bound=0.0), "norm_bound must be > 0"),
])
def test_bad_settings(kwargs, match):
  with pytest.raises(ValueError, match=match):
    AggregatorConfig(**kwargs).validate()


# ------------------------------------------------------------- in the round


def _round(small_federation, name, aggregator, **kw):
  from fedjax_dp import simulation  # pylint: disable=import-outside-toplevel
  from fedjax_dp.schemes import get_scheme  # pylint: disable=import-outside-toplevel
  from tiny_model import tiny_linear  # pylint: disable=import-outside-toplevel
  data, test, public = small_federation
  cfg = simulation.RunConfig.of(ratio=0.5, rounds=2, clients_per_round=12, eval_every=1,
                             aggregator=aggregator, **kw)
  return simulation.run(tiny_linear(), get_scheme(name), data, test, public, cfg,
                        return_state=True)


def test_robust_path_of_the_round_equals_the_streamed_mean_when_nothing_is_cut(
    small_federation):
  # trimmed-mean with beta = 0 is the mean, computed from all updates at once.
  plain, w_plain = _round(small_federation, "FL-STD", None)
  cut0, w_cut0 = _round(small_federation, "FL-STD", AggregatorConfig("trimmed-mean", trim=0.0))
  np.testing.assert_allclose(w_cut0.weights, w_plain.weights, rtol=1e-5, atol=1e-6)
  assert cut0["aggregator"]["name"] == "trimmed-mean" and "aggregator" not in plain
  same, w_same = _round(small_federation, "FL-STD", AggregatorConfig("mean"))
  np.testing.assert_array_equal(w_same.weights, w_plain.weights)  # the default path
  median, w_median = _round(small_federation, "FL-TOP", AggregatorConfig("median"))
  assert median["best_accuracy"] > 0.2  # chance 0.1: the median of updates still learns
  assert not np.allclose(w_median.weights, w_plain.weights)


@pytest.mark.parametrize("name,kw,match", [
    ("FL-SIGN", dict(secure_aggregation=True), "secure aggregation hides"),
    ("FL-STD-DP", dict(clip_norm=1.0), "noise shares are sized for a sum"),
    ("FL-STD", dict(client_chunk=4), "client_chunk streams a sum"),
])
def test_robust_aggregators_are_refused_where_they_cannot_run(small_federation, name, kw,
                                                              match):
  with pytest.raises(ValueError, match=match):
    _round(small_federation, name, AggregatorConfig("median"), **kw)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, 1e20])
@pytest.mark.parametrize("slots", [5, 7])  # without and with padding slots
def test_a_non_finite_update_is_discarded_within_the_breakdown_point(bad, slots):
  """A diverged client (or an attacker) sends NaN or inf, or values whose
  norm overflows: the median and the trimmed mean discard it as an extreme
  value, the norm bound counts it as zeros; none becomes NaN."""
  x, mask = _data(5, slots=slots, n=4, seed=1)
  x[2, 1] = bad
  honest = np.delete(x[:5], 2, axis=0)
  jx, jm = jnp.asarray(x), jnp.asarray(mask)
  median = np.asarray(aggregators.aggregate(AggregatorConfig("median"), jx, jm))
  trimmed = np.asarray(aggregators.aggregate(AggregatorConfig("trimmed-mean", trim=0.2),
                                             jx, jm))
  bounded = np.asarray(aggregators.aggregate(AggregatorConfig("norm-bound", norm_bound=1.5),
                                             jx, jm))
  ranked = x[:5].copy()
  ranked[2, 1] = np.inf if np.isnan(bad) else bad  # NaN ranks as the largest value
  np.testing.assert_allclose(median, np.median(ranked, axis=0), rtol=1e-6)
  kept = np.sort(ranked, axis=0)[1:4]  # floor(0.2 * 5) = 1 dropped at each end
  np.testing.assert_allclose(trimmed, kept.mean(axis=0), rtol=1e-6)
  norms = np.linalg.norm(honest, axis=1, keepdims=True)
  # The bad row counts as zeros (1e20 too: its squared norm overflows float32).
  want = (honest * np.minimum(1.0, 1.5 / norms)).sum(axis=0) / 5
  np.testing.assert_allclose(bounded, want, rtol=1e-5)
  assert np.isfinite(median).all() and np.isfinite(trimmed).all()
