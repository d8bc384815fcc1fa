"""Client failures: which runs lose noise when a client fails."""

import warnings

import pytest

from fedjax_dp import features, simulation
from fedjax_dp.errors import ConfigError
from fedjax_dp.schemes import get_scheme
from tiny_model import tiny_linear


def _run(small_federation, scheme, **settings):
  data, test, public = small_federation
  cfg = simulation.RunConfig.of(rounds=2, clients_per_round=10, eval_every=2, clip_norm=1.0,
                                noise_multiplier=1.0, dropout_rate=0.5, **settings)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    record = simulation.run(tiny_linear(), get_scheme(scheme), data,
                            (test[0][:200], test[1][:200]), public, cfg)
  return record, [str(w.message) for w in caught if "max-dropouts" in str(w.message)]


@pytest.mark.parametrize("scheme,settings", [
    ("CDP-LQ", {}),
    ("FL-STD-DP", dict(correlated_noise=features.CorrelatedNoiseConfig("banded", bands=2),
                       cycle_length=2)),
], ids=["cdp-lq", "correlated"])
def test_failures_without_noise_shares_under_noise_no_round(small_federation, scheme,
                                                            settings):
  """CDP-LQ's clients each add their own records' whole noise and correlated
  noise is the server's: half the clients failing takes no noise away (both
  were counted as under-noised rounds, with the warning that their epsilon
  is not valid)."""
  record, warned = _run(small_federation, scheme, max_dropouts=1, **settings)
  assert record["dropped_clients"] > 2
  assert record["under_noised_rounds"] == 0 and record["max_dropouts"] == 0 and not warned


def test_failures_beyond_l_under_noise_shared_noise(small_federation):
  """FL-STD-DP's shares are sized for |K| - l: half of 10 failing is beyond
  l = 1 in both rounds, each counted and warned of once."""
  record, warned = _run(small_federation, "FL-STD-DP", max_dropouts=1)
  assert record["max_dropouts"] == 1 and record["under_noised_rounds"] == 2
  assert len(warned) == 1


@pytest.mark.parametrize("scheme,settings,refused", [
    ("FL-STD-DP", {}, True),
    ("FL-STD", {}, False),  # no noise: l sizes nothing
    ("CDP-LQ", {}, False),  # each client's own whole noise
    ("FL-STD-DP", dict(correlated_noise=features.CorrelatedNoiseConfig("banded", bands=2),
                       cycle_length=2), False),  # the server's noise
], ids=["shares", "no-dp", "cdp-lq", "correlated"])
def test_l_of_at_least_the_cohort_is_refused_where_clients_share_the_noise(
    small_federation, scheme, settings, refused):
  """l >= |K| sized the shares for max(1, |K| - l) = 1 client, each the
  whole noise, without a word: refused where the clients add the noise in
  shares, and left alone where l sizes nothing."""
  if refused:
    with pytest.raises(ConfigError) as error:
      _run(small_federation, scheme, max_dropouts=10, **settings)
    assert error.value.field == "max_dropouts" and error.value.detail == (
        "must be below |K| = 10, the clients a round asks (noise shares are sized for "
        "|K| - l of them), got 10")
    record, _ = _run(small_federation, scheme, max_dropouts=9, **settings)
    assert record["max_dropouts"] == 9
  else:
    record, _ = _run(small_federation, scheme, max_dropouts=10, **settings)
    assert record["max_dropouts"] == 0
