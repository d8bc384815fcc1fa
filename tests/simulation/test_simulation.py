"""End-to-end rounds on real Fashion-MNIST: every scheme on the linear model (the
paper CNN learns in test_golden.py)."""


import numpy as np
import pytest

from fedjax_dp import simulation
from fedjax_dp.schemes import SCHEMES, get_scheme
from fedjax_dp.schemes.coordinate_subset import MASKED_SCHEMES
from tiny_model import tiny_linear

# r = 0.5 so the schemes that drop part of a freely trained update (FL-BAS-2/4,
# FL-RND, FL-CS) also move visibly within 4 rounds of 16 clients. Evaluated
# every round: with 10 images per client the non-DP reset schemes oscillate
# (FL-TOP measured 0.13, 0.10, 0.31, 0.12-0.16 over rounds 1-4, on both the
# fast and the generic training path), so the test takes the best round.
SMALL = dict(ratio=0.5, rounds=4, clients_per_round=16, eval_every=1,
             noise_multiplier=0.3, clip_norm=None)


# UAI Table 1's fourteen schemes, and the thesis' FL-CS and sign families,
# on the 7,850-weight linear model (the round is the same for every model).
# Fed-SMP and CDP-LQ learn in their own CLI tests, FL-SIGN-DP in
# tests/schemes/test_sign_schemes.py (its sampler compiles for ~40 s); the paper CNN
# learns in tests/test_golden.py (its FL-TOP-DP and FL-STD cases, pinned and
# checked above chance).
LEARNING_SCHEMES = list(MASKED_SCHEMES) + ["FL-CS", "FL-CS-DP", "FL-SIGN", "signSGD"]


def test_the_learning_lists_name_real_schemes():
  assert set(LEARNING_SCHEMES) <= set(SCHEMES)


def _run(model, name, small_federation):
  data, test, public = small_federation
  scheme = get_scheme(name)
  clip = 1.0 if scheme.dp else None  # calibration has its own test
  cfg = simulation.RunConfig.of(**{**SMALL, "clip_norm": clip})
  return scheme, simulation.run(model, scheme, data, test, public, cfg)


@pytest.fixture(scope="module")
def small_runs(small_federation):
  """``_run`` on the linear model, each scheme's run once per module (the
  learning test's FL-STD run is the diverged run's healthy twin)."""
  runs = {}

  def run(name):
    if name not in runs:
      model = tiny_linear()
      runs[name] = (model,) + _run(model, name, small_federation)
    return runs[name]
  return run


# Chance is 0.1 (w0 scores ~0.10); on 2,000 test images the standard error
# there is 0.0067, so 0.15 is over 7 standard errors above chance.
CHANCE_PLUS = 0.15


@pytest.mark.parametrize("name", LEARNING_SCHEMES)
def test_every_scheme_learns_above_chance(name, small_runs):
  model, scheme, record = small_runs(name)
  assert record["best_accuracy"] > CHANCE_PLUS, record["history"]
  assert record["num_params"] == model.num_params
  assert (0 < record["epsilon"] < np.inf) if scheme.dp else record["epsilon"] is None


def test_truncated_poisson_run_is_accounted_with_pld(small_federation):
  data, test, public = small_federation
  cnn = tiny_linear()  # the accounting is the same for every model
  cfg = simulation.RunConfig.of(ratio=0.05, rounds=2, clients_per_round=12, eval_every=2,
                             clip_norm=1.0, accountant="pld", max_cohort=6)
  rec = simulation.run(cnn, get_scheme("FL-TOP-DP"), data, test, public, cfg)
  assert rec["capacity"] == 6 and rec["truncated_rounds"] >= 1
  assert "truncated" in rec["accountant"].lower()
  assert 0 < rec["epsilon"] < np.inf
  with pytest.raises(ValueError, match="max_cohort"):
    simulation.RunConfig.of(max_cohort=6, accountant="moments").validate(600)


def test_padded_clients_train_and_bad_runs_are_refused(small_federation):
  """Clients of unequal size (padding label -1) run through the round; a
  client without examples and a balanced-accuracy selection on a 10-class
  model are refused before any work."""
  import jax.numpy as jnp
  data, test, public = small_federation
  sizes = 3 + jnp.arange(data.y.shape[0]) % 8  # 3..10 examples
  real = jnp.arange(data.y.shape[1])[None, :] < sizes[:, None]
  padded = simulation.ClientData(jnp.where(real[..., None, None, None], data.x, 0),
                                 jnp.where(real, data.y, -1))
  model = tiny_linear()
  cfg = simulation.RunConfig.of(rounds=2, clients_per_round=20, clip_norm=1.0, eval_every=2)
  record = simulation.run(model, get_scheme("FL-STD-DP"), padded, test, public, cfg)
  assert record["best_accuracy"] > CHANCE_PLUS and record["selection_metric"] == "accuracy"
  empty = simulation.ClientData(padded.x, padded.y.at[5].set(-1))
  with pytest.raises(ValueError, match="client 5 holds no examples"):
    simulation.prepare(model, get_scheme("FL-STD"), empty, public, cfg)
  with pytest.raises(ValueError, match="needs a binary model"):
    simulation.prepare(model, get_scheme("FL-STD"), data, public,
                       simulation.RunConfig.of(selection_metric="balanced_accuracy"))
  with pytest.raises(ValueError, match="selection_metric 'auroc' is unknown"):
    simulation.RunConfig.of(selection_metric="auroc").validate(600)


def test_a_model_whose_outputs_stop_being_finite_is_flagged(small_federation, small_runs):
  """A diverged run (here a learning rate of 3e38) is not mistaken for a poor
  model: its record names the first round whose test outputs are NaN or
  infinite, each such evaluation is marked, and the run warns."""
  data, test, public = small_federation
  cfg = simulation.RunConfig.of(**{**SMALL, "lr": 3e38, "rounds": 2})
  with pytest.warns(UserWarning, match="NaN or infinite at 2 of 2 evaluations, first at "
                                       "round 1"):
    record = simulation.run(tiny_linear(), get_scheme("FL-STD"), data, test, public, cfg)
  assert record["nonfinite_round"] == 1
  assert [h.get("nonfinite") for h in record["history"]] == [True, True]
  _, _, healthy = small_runs("FL-STD")
  assert "nonfinite_round" not in healthy
  assert not any("nonfinite" in h for h in healthy["history"])


def test_clip_ratio_calibrates_one_s_for_every_ratio(small_federation):
  # Fed-SMP Sec. 6.2: one S for all ratios. A run at r = 5% with
  # clip_ratio = 1 gets the S a run at r = 1 calibrates; without it, its own.
  data, _, public = small_federation
  model, scheme = tiny_linear(), get_scheme("Fed-SMP-randk")
  cfg = simulation.RunConfig.of(ratio=0.05, rounds=1, clients_per_round=8)

  def clip(**kw):
    _, plan = simulation.prepare(model, scheme, data, public, cfg.replace(**kw))
    return plan.clip_norm

  own, full = clip(), clip(ratio=1.0)
  assert clip(clip_ratio=1.0) == pytest.approx(full)
  assert own != pytest.approx(full, rel=0.05)
  with pytest.raises(ValueError, match="clip_ratio must be in"):
    clip(clip_ratio=1.5)
  with pytest.raises(ValueError, match="clip_ratio applies to a calibrated S"):
    clip(clip_ratio=1.0, clip_norm=0.5)
