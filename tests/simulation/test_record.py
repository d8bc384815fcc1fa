"""A run's record (``simulation.record``): UAI Table 1's columns from a made-up
history and counts, the privacy report, and sigma calibrated to a target.

The record is built from a real plan (40 random clients, the linear model)
and a hand-written train-loop result, so every column can be derived from the
numbers put in; nothing trains.
"""

import dataclasses
import warnings

import pytest

from fedjax_dp import simulation
from fedjax_dp.privacy import accounting
from fedjax_dp.schemes import get_scheme
from fedjax_dp.simulation import record as record_lib
import tiny_model
from tiny_model import tiny_linear

N, COHORT, ROUNDS = 40, 10, 4
Q = COHORT / N
CFG = simulation.RunConfig.of(ratio=0.1, rounds=ROUNDS, clients_per_round=COHORT,
                              clip_norm=1.0, noise_multiplier=1.2, delta=1e-5)
# Round 2 and round 3 tie at the best accuracy: the earlier is the best round.
HISTORY = [{"round": 1, "accuracy": 0.3}, {"round": 2, "accuracy": 0.5},
           {"round": 3, "accuracy": 0.5}, {"round": 4, "accuracy": 0.4}]


@pytest.fixture(scope="module")
def random_clients():
  """40 clients of 6 random images, and a public batch of 10."""
  return tiny_model.random_clients(N), tiny_model.random_public()


def _record(random_clients, name, cfg=CFG, history=HISTORY, counters=None):
  data, public = random_clients
  model = tiny_linear()
  state, plan = simulation.prepare(model, get_scheme(name), data, public, cfg)
  counters = counters or simulation.Counters(participations=36, truncated=1, clipped=9)
  trained = simulation.Trained(state, list(history), counters, [])
  return plan, record_lib.make_record(model, plan, trained, seconds=12.5)


def test_the_dp_record_is_uai_table_1s_columns(random_clients):
  plan, rec = _record(random_clients, "FL-TOP-DP")
  assert (rec["best_round"], rec["best_accuracy"], rec["final_accuracy"]) == (2, 0.5, 0.4)
  assert rec["scheme"] == "FL-TOP-DP" and rec["ratio"] == 0.1 and rec["seconds"] == 12.5
  k = 785  # r n = 0.1 * 7,850 values each way, 32 bits each
  assert rec["upstream_values"] == rec["downstream_values"] == k
  # UAI Sec. 4.1: values * 32 * best round * C / 8 / 1000 KB.
  assert rec["upstream_kb"] == pytest.approx(k * 32 * 2 * Q / 8 / 1000)
  assert rec["downstream_kb"] == pytest.approx(k * 32 * 2 * Q / 8 / 1000)
  # What was sent: 36 participations over 40 clients.
  assert rec["measured_upstream_kb"] == pytest.approx(k * 32 * 36 / N / 8 / 1000)
  assert rec["mean_cohort"] == 36 / ROUNDS and rec["truncated_rounds"] == 1
  assert rec["clipped_fraction"] == 9 / 36
  # Poisson sampling, the moments accountant: epsilon at the best round and at the end.
  assert rec["epsilon"] == pytest.approx(accounting.epsilon(1.2, Q, 2, 1e-5, "moments"))
  assert rec["epsilon_final"] == pytest.approx(accounting.epsilon(1.2, Q, ROUNDS, 1e-5,
                                                                  "moments"))
  assert rec["epsilon"] < rec["epsilon_final"]
  assert rec["delta"] == 1e-5 and rec["noise_multiplier"] == 1.2 and rec["clip_norm"] == 1.0
  assert (rec["num_clients"], rec["clients_per_round"], rec["rounds"]) == (N, COHORT, ROUNDS)
  assert rec["capacity"] == plan.capacity and rec["history"] == HISTORY
  assert "local_optimizer" not in rec and "nonfinite_round" not in rec


def test_a_record_without_dp_has_no_epsilon_delta_or_clipping(random_clients):
  with warnings.catch_warnings():
    warnings.simplefilter("error")  # nothing is suspect: no warning
    _, rec = _record(random_clients, "FL-STD")
  assert rec["epsilon"] is None and rec["epsilon_final"] is None and rec["delta"] is None
  assert rec["clipped_fraction"] is None and rec["clip_norm"] is None
  assert rec["noise_multiplier"] == 0.0
  assert rec["ratio"] == 1.0  # FL-STD sends the whole model whatever the ratio
  assert rec["upstream_values"] == 7850 and rec["upstream_bits"] == 32


def test_secure_overflows_are_recorded_and_warned(random_clients):
  cfg = CFG.replace(secure_aggregation=True, secure_bits=12, secure_neighbours=2)
  with pytest.warns(UserWarning, match="^FL-TOP-DP: 3 coordinate sums overflowed the 12-bit "
                                       "secure-aggregation modulus$"):
    _, rec = _record(random_clients, "FL-TOP-DP", cfg,
                     counters=simulation.Counters(participations=36, overflows=3))
  assert rec["secure_aggregation"] and rec["secure_overflows"] == 3
  assert rec["secure_bits"] == rec["upstream_bits"] == 12 and rec["secure_neighbours"] == 2
  assert rec["secure_frac_bits"] == 16
  assert rec["upstream_kb"] == pytest.approx(785 * 12 * 2 * Q / 8 / 1000)


def test_the_selection_metric_picks_the_best_round(random_clients):
  """Balanced accuracy (thesis Sec. 8.4.2) picks round 3, whose accuracy is
  not the best; the record carries that round's binary metrics."""
  history = [{"round": r, "accuracy": a, "balanced_accuracy": b, "auroc": u}
             for r, a, b, u in ((1, 0.9, 0.5, 0.6), (2, 0.8, 0.6, 0.7), (3, 0.7, 0.8, 0.75),
                                (4, 0.95, 0.55, 0.8))]
  cfg = CFG.replace(selection_metric="balanced_accuracy", local_optimizer="adam")
  data, public = random_clients
  model = tiny_linear()
  state, plan = simulation.prepare(model, get_scheme("FL-STD"), data, public,
                                   CFG.replace(local_optimizer="adam"))
  # prepare refuses balanced accuracy for a 10-class model; the record only reads it.
  plan = dataclasses.replace(plan, config=cfg)
  rec = record_lib.make_record(model, plan, simulation.Trained(
      state, history, simulation.Counters(participations=40), []), seconds=1.0)
  assert rec["best_round"] == 3 and rec["selection_metric"] == "balanced_accuracy"
  assert (rec["best_accuracy"], rec["balanced_accuracy"], rec["auroc"]) == (0.7, 0.8, 0.75)
  assert rec["final_accuracy"] == 0.95 and rec["local_optimizer"] == "adam"


def test_a_round_whose_model_was_not_finite_is_never_the_best(random_clients):
  """A NaN model predicts one class (argmax of NaN): 0.12 here, above the
  diverging run's earlier 0.10; the best is the best finite round."""
  history = [{"round": 1, "accuracy": 0.11}, {"round": 2, "accuracy": 0.10},
             {"round": 3, "accuracy": 0.12, "nonfinite": True}]
  _, rec = _record(random_clients, "FL-STD", history=history)
  assert (rec["best_round"], rec["best_accuracy"]) == (1, 0.11)
  # Every round non-finite: the best of them, for want of another.
  _, rec = _record(random_clients, "FL-STD", history=[dict(h, nonfinite=True) for h in history])
  assert rec["best_round"] == 3


def test_calibrated_sigma_is_on_the_tolerance_grid_and_meets_the_target(random_clients):
  """Rounded up to a multiple of the tolerance: at sigma epsilon is at most
  the target; two steps less (the bisection's step, then the rounding) it is
  above."""
  data, public = random_clients
  _, plan = simulation.prepare(tiny_linear(), get_scheme("FL-STD-DP"), data, public, CFG)
  sigma = record_lib.calibrated_sigma(plan, 3.0, tolerance=0.05)
  steps = sigma / 0.05
  assert steps == pytest.approx(round(steps), abs=1e-9)

  def eps(s):
    return accounting.epsilon(s, Q, ROUNDS, 1e-5, "moments")

  assert eps(sigma) <= 3.0 < eps(sigma - 2 * 0.05)


def test_an_unreachable_target_is_one_line(random_clients):
  """The moments accountant's epsilon has a floor, log(1/delta) / 32 at its
  largest order: a target below what sigma = 1e4 gives is refused."""
  data, public = random_clients
  _, plan = simulation.prepare(tiny_linear(), get_scheme("FL-STD-DP"), data, public, CFG)
  target = accounting.epsilon(1e4, Q, ROUNDS, 1e-5, "moments") / 2
  assert target > 0
  with pytest.raises(ValueError, match=f"^no noise multiplier up to 1e4 reaches epsilon "
                                       f"{target:g}$"):
    record_lib.calibrated_sigma(plan, target)
