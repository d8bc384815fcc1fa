"""``on_round``: called as each round ends, inside the rounds compiled between
two evaluations, changing no number (issue 62: the progress bar moves every
round whatever --eval-every)."""

import json
import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_dp import simulation
from fedjax_dp.schemes import get_scheme
from scheme_helpers import round_plan
from tiny_model import tiny_linear
from xla_env import xla_flags

TESTS = pathlib.Path(__file__).resolve().parents[1]


def test_on_round_is_called_once_a_round_between_evaluations_and_moves_no_number(
    small_federation):
  """eval_every 3 over 5 rounds: two compiled calls (3 rounds, then 2); each
  round reported as it ends, before its interval's evaluation; the history,
  record and weights those of the run without the callback, bit for bit."""
  data, test, public = small_federation
  model, scheme = tiny_linear(), get_scheme("FL-TOP-DP")
  cfg = simulation.RunConfig.of(ratio=0.05, rounds=5, clients_per_round=10, clip_norm=1.0,
                                eval_every=3)
  plain, plain_state = simulation.run(model, scheme, data, test, public, cfg,
                                      return_state=True)
  events = []
  record, state = simulation.run(
      model, scheme, data, test, public, cfg, return_state=True,
      progress=lambda n: events.append(("evaluated", n)),
      on_round=lambda t: events.append(("round", t)))
  assert events == [("round", 1), ("round", 2), ("round", 3), ("evaluated", 3),
                    ("round", 4), ("round", 5), ("evaluated", 2)]
  assert all(isinstance(t, int) for kind, t in events if kind == "round")
  assert record["history"] == plain["history"]
  for key in ("best_accuracy", "epsilon", "clipped_fraction", "mean_cohort"):
    assert record[key] == plain[key], key
  np.testing.assert_array_equal(state.weights, plain_state.weights)


def test_the_callback_is_in_the_compiled_rounds_only_when_given():
  model, scheme = tiny_linear(), get_scheme("FL-STD")
  plan = round_plan(scheme, num_clients=20, clients_per_round=4, capacity=4,
                    num_kept=0, sampler="fixed", local_steps=1, batch_size=5, lr=0.1)
  rng = np.random.default_rng(0)
  data = simulation.ClientData(
      jnp.asarray(rng.integers(0, 256, (20, 10, 28, 28, 1), dtype=np.uint8)),
      jnp.asarray(rng.integers(0, 10, (20, 10), dtype=np.int32)))
  state = simulation.ServerState(model.init(jax.random.PRNGKey(0)), jnp.zeros((0,), jnp.int32))
  args = (state, data, jax.random.PRNGKey(1), jnp.int32(1))
  without = simulation.make_rounds_fn(model, plan, 4).lower(*args).as_text()
  assert "callback" not in without.lower()
  seen = []
  fn = simulation.make_rounds_fn(model, plan, 4, seen.append)
  assert "callback" in fn.lower(*args).as_text().lower()
  fn(*args)
  assert seen == [1, 2, 3, 4]


# A run on two host devices (the cohort sharded over them) in a fresh process:
# the device count is fixed before JAX starts.
_SHARDED = """
import json, sys
sys.path[:0] = [{tests!r}]
import jax, jax.numpy as jnp, numpy as np
from fedjax_dp import simulation
from fedjax_dp.schemes import get_scheme
from tiny_model import tiny_linear
rng = np.random.default_rng(0)
data = simulation.ClientData(
    jnp.asarray(rng.integers(0, 256, (40, 10, 28, 28, 1), dtype=np.uint8)),
    jnp.asarray(rng.integers(0, 10, (40, 10), dtype=np.int32)))
test = (np.asarray(data.x[:20, 0]), np.asarray(data.y[:20, 0]))
public = (np.asarray(data.x[20:30, 0], np.float32) / 255.0, np.asarray(data.y[20:30, 0]))
cfg = simulation.RunConfig.of(rounds=4, clients_per_round=6, eval_every=4, clip_norm=0.5,
                              devices=2)
seen = []
runs = [simulation.run(tiny_linear(), get_scheme("FL-STD-DP"), data, test, public, cfg,
                       return_state=True, on_round=on_round)
        for on_round in (None, seen.append)]
print(json.dumps({{"devices": len(jax.devices()), "capacity": runs[1][0]["capacity"],
                  "seen": seen, "same": bool(np.array_equal(runs[0][1].weights,
                                                            runs[1][1].weights)),
                  "history": runs[0][0]["history"] == runs[1][0]["history"]}}))
"""


def test_on_round_fires_once_a_round_with_the_cohort_sharded_over_two_devices():
  env = dict(os.environ, XLA_FLAGS=xla_flags(2), JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, "-c", _SHARDED.format(tests=str(TESTS))], env=env,
                        capture_output=True, text=True, timeout=600, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  out = json.loads(proc.stdout.strip().splitlines()[-1])
  assert out["devices"] == 2 and out["capacity"] % 2 == 0
  assert out["seen"] == [1, 2, 3, 4]  # once a round, not once a device
  assert out["same"] and out["history"]
