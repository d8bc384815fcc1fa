"""The run loop (``simulation.loop``): counting rounds, evaluating in batches,
the train loop's intervals, and the checkpoint's fingerprint.

On 40 random clients and the 7,850-weight linear model (resuming a
checkpoint: tests/test_checkpoint.py; ``on_round``: test_on_round.py).
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_dp import simulation
from fedjax_dp.schemes import get_scheme
from fedjax_dp.simulation import loop
from tiny_model import random_clients, random_public, tiny_linear

N = 40


def _clients(seed=0, num=N):
  return random_clients(num, seed)


def test_counters_add_each_rounds_counts_truncated_at_the_capacity():
  """Three rounds of capacity 8: a cohort of 9 trains 8 slots and is counted
  truncated once."""
  infos = simulation.RoundInfo(num_sampled=jnp.array([3, 9, 5]),
                               num_clipped=jnp.array([1, 2, 0]),
                               secure_overflow=jnp.array([0, 4, 1]),
                               num_silent=jnp.array([1, 0, 2]))
  counters = simulation.Counters(participations=10, truncated=1, clipped=2, overflows=3,
                                 silent=1)
  assert counters.add(infos, capacity=8) == (10 + 3 + 8 + 5, 1 + 1, 2 + 3, 3 + 5, 1 + 3)
  # A checkpoint's counters of before `silent` resume it from 0.
  assert simulation.Counters(*(10, 1, 2, 3)).silent == 0
  assert simulation.Counters().add(infos, capacity=9).truncated == 0


@pytest.mark.parametrize("num", [7, 9])
def test_eval_fn_predicts_every_example_in_padded_batches(num):
  """Batches of 3 (7 examples: the last batch padded, its padding cut off;
  9: none): the outputs are the model's on the whole set at once."""
  model = tiny_linear()
  w = model.init(jax.random.PRNGKey(0))
  x = jnp.asarray(np.random.default_rng(num).integers(0, 256, (num, 28, 28, 1), np.uint8))
  preds, scores = simulation.make_eval_fn(model, batch_size=3)(w, x)
  want_preds, want_scores = model.predict(w, x.astype(jnp.float32) / 255.0)
  assert preds.shape == (num,) and scores.shape == want_scores.shape
  np.testing.assert_array_equal(preds, want_preds)
  np.testing.assert_allclose(scores, want_scores, rtol=1e-6, atol=1e-6)


def test_the_train_loop_evaluates_the_state_at_the_end_of_each_interval():
  """Four rounds, eval_every 2: evaluations after rounds 2 and 4, the last
  entry the returned model's accuracy on the test set. A fixed cohort of 10
  with a clip norm no update is under: 40 participations, all clipped."""
  model, scheme = tiny_linear(), get_scheme("FL-STD-DP")
  data = _clients()
  cfg = simulation.RunConfig.of(rounds=4, eval_every=2, clients_per_round=10,
                                sampler="fixed", accountant="rdp", clip_norm=1e-6,
                                local_steps=1, batch_size=3)
  state, plan = simulation.prepare(model, scheme, data, random_public(), cfg)
  test_x = np.random.default_rng(2).integers(0, 256, (20, 28, 28, 1), np.uint8)
  test_y = np.random.default_rng(3).integers(0, 10, 20)
  progress = []
  trained = loop.train_loop(model, state, plan, data, (test_x, test_y), progress.append)
  assert [h["round"] for h in trained.history] == [2, 4] and progress == [2, 2]
  preds, _ = model.predict(trained.state.weights, jnp.asarray(test_x, jnp.float32) / 255.0)
  assert trained.history[-1]["accuracy"] == pytest.approx(np.mean(np.asarray(preds) == test_y))
  assert trained.counters == simulation.Counters(participations=40, truncated=0, clipped=40,
                                                 overflows=0)
  assert trained.coded_sizes == [] and trained.earlier_seconds == 0.0


def test_the_checkpoint_key_changes_with_what_makes_another_run():
  model, scheme, cfg, data = tiny_linear(), get_scheme("FL-STD"), simulation.RunConfig(), _clients()
  test, public = random_public(seed=5), random_public()
  key = loop.checkpoint_key(model, scheme, data, test, public, cfg)
  assert loop.checkpoint_key(tiny_linear(), get_scheme("FL-STD"), _clients(), random_public(
      seed=5), random_public(), cfg) == key
  cs, smp = get_scheme("FL-CS"), get_scheme("Fed-SMP-topk")
  others = {
      "a label": (model, scheme, simulation.ClientData(data.x, data.y.at[3, 2].add(1)), cfg),
      "the client count": (model, scheme, _clients(num=N - 1), cfg),
      "the images' type": (model, scheme,
                           simulation.ClientData(data.x.astype(jnp.float32), data.y), cfg),
      "the scheme": (model, get_scheme("FL-STD-DP"), data, cfg),
      "a setting": (model, scheme, data, cfg.replace(lr=0.1)),
      # Scheme settings the record's describe() leaves out.
      "FL-CS's server rate": (model, dataclasses.replace(cs, server_lr=1.0), data, cfg),
      "Fed-SMP's server steps": (model, dataclasses.replace(smp, server_steps=7), data, cfg),
  }
  for what, (*args, config) in others.items():
    assert loop.checkpoint_key(*args, test, public, config) != key, what
  # A scheme setting changes the key of that scheme's run.
  assert loop.checkpoint_key(model, cs, data, test, public, cfg) != loop.checkpoint_key(
      model, dataclasses.replace(cs, tol=1e-4), data, test, public, cfg)
  # The test set and the public set (a --test-size or --public-size of another run).
  shorter = (test[0][:-1], test[1][:-1])
  assert loop.checkpoint_key(model, scheme, data, shorter, public, cfg) != key
  assert loop.checkpoint_key(model, scheme, data, test, random_public(seed=6), cfg) != key
