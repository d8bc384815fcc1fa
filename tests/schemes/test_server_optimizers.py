"""FL-STD(-DP) with a server optimiser (optax): FedAvgM and FedAdam."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_dp import simulation
from fedjax_dp.cli import sweep
from fedjax_dp.schemes import SetupData, LocalTraining, get_scheme
from tiny_model import tiny_linear


def _state(scheme, n):
  w0 = jnp.zeros((n,), jnp.float32)
  data = SetupData(model=tiny_linear(), w0=w0, public_x=jnp.zeros((1, 28, 28, 1)),
                   public_y=jnp.zeros((1,), jnp.int32), key=jax.random.PRNGKey(0),
                   ratio=1.0, init_steps=1, local=LocalTraining(1, 1, 0.1))
  return w0, scheme.setup(data)


def test_fedavgm_is_server_momentum_on_the_mean():
  scheme = dataclasses.replace(get_scheme("FL-STD"), server_optimizer="fedavgm",
                               server_lr=0.5)
  w, state = _state(scheme, 5)
  means = [jnp.arange(5.0), jnp.ones(5) * -2.0]
  v, expect = np.zeros(5), np.zeros(5)
  for m in means:
    w, state = scheme.server_update(w, state, m, None)
    v = 0.9 * v + np.asarray(m)  # the velocity of the mean update (Hsu et al. 2019)
    expect = expect + 0.5 * v
  np.testing.assert_allclose(w, expect, rtol=1e-6)
  # Plain FedAvg is w += mean, and a wrong momentum would not match.
  assert not np.allclose(w, sum(np.asarray(m) for m in means) * 0.5)


def test_fedadam_is_adam_on_the_pseudo_gradient():
  scheme = dataclasses.replace(get_scheme("FL-STD-DP"), server_optimizer="fedadam",
                               server_lr=0.1)
  w, state = _state(scheme, 4)
  means = [jnp.array([1.0, -2.0, 0.5, 0.0]), jnp.array([0.5, 1.0, -1.0, 2.0])]
  m1, m2, expect = np.zeros(4), np.zeros(4), np.zeros(4)
  for t, mean in enumerate(means, start=1):
    w, state = scheme.server_update(w, state, mean, None)
    g = -np.asarray(mean)
    m1 = 0.9 * m1 + 0.1 * g
    m2 = 0.99 * m2 + 0.01 * g * g
    expect = expect - 0.1 * (m1 / (1 - 0.9 ** t)) / (np.sqrt(m2 / (1 - 0.99 ** t)) + 1e-3)
  np.testing.assert_allclose(w, expect, rtol=1e-5, atol=1e-7)


def test_server_optimizer_is_refused_off_the_full_model_and_configured_only_there():
  top = dataclasses.replace(get_scheme("FL-TOP"), server_optimizer="fedadam")
  with pytest.raises(ValueError, match="needs the full model"):
    top.validate(100, 0.1)
  with pytest.raises(ValueError, match="server_optimizer must be one of"):
    dataclasses.replace(get_scheme("FL-STD"), server_optimizer="yogi").validate(100, 1.0)
  args = sweep.build_parser().parse_args(
      ["--schemes", "FL-STD-DP", "FL-TOP", "--server-optimizer", "fedavgm",
       "--server-optimizer-lr", "0.7"])
  planned = {r.scheme.name: r.scheme for r in sweep.resolve(args, num_params=7850).runs}
  std, fl_top = planned["FL-STD-DP"], planned["FL-TOP"]
  assert (std.server_optimizer, std.server_lr) == ("fedavgm", 0.7)
  assert fl_top.server_optimizer == "sgd"


def test_a_dp_run_with_fedavgm_reports_it_and_the_same_epsilon(small_federation):
  data, test, public = small_federation
  cfg = simulation.RunConfig.of(rounds=2, clients_per_round=10, local_steps=2, batch_size=5,
                             lr=0.1, noise_multiplier=1.0, clip_norm=0.5, devices=1)
  plain = simulation.run(tiny_linear(), get_scheme("FL-STD-DP"), data, test, public, cfg)
  scheme = dataclasses.replace(get_scheme("FL-STD-DP"), server_optimizer="fedavgm")
  rec = simulation.run(tiny_linear(), scheme, data, test, public, cfg)
  assert rec["server_optimizer"] == "fedavgm" and "server_optimizer" not in plain
  assert rec["epsilon"] == plain["epsilon"]  # post-processing of the noisy mean
  assert rec["best_accuracy"] > 0.1
