"""The clients' optimiser: Adam (thesis Table 8.1) beside SGD, on every path."""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_dp import local_training, simulation
from fedjax_dp.cli import sweep as experiment
from fedjax_dp.models import from_flax
from fedjax_dp.schemes import get_scheme
from fedjax_dp.schemes.base import LocalTraining
from tiny_model import tiny_linear

B1, B2 = 0.9, 0.999  # Keras' and optax's Adam


def _data(n=12, seed=0):
  rng = np.random.default_rng(seed)
  x = jnp.asarray(rng.random((n, 28, 28, 1), np.float32))
  y = jnp.asarray(rng.integers(0, 10, n).astype(np.int32))
  return x, y


def _adam_by_hand(model, w, x, y, key, steps, batch_size, lr, eps):
  """Adam written out (Kingma & Ba Alg. 1, Keras' epsilon), batches as the clients'."""
  w = np.asarray(w, np.float64)
  m = np.zeros_like(w)
  v = np.zeros_like(w)
  for t, step_key in enumerate(jax.random.split(key, steps), start=1):
    idx = local_training.sample_batch(step_key, x.shape[0], batch_size, local_training.num_examples(y))
    g = np.asarray(jax.grad(model.loss)(jnp.asarray(w, jnp.float32), x[idx], y[idx]),
                   np.float64)
    m = B1 * m + (1 - B1) * g
    v = B2 * v + (1 - B2) * g * g
    m_hat, v_hat = m / (1 - B1 ** t), v / (1 - B2 ** t)
    w = w - lr * m_hat / (np.sqrt(v_hat) + eps)
  return w


def test_adam_update_is_adam_written_out():
  model = tiny_linear()
  w = model.init(jax.random.PRNGKey(1))
  x, y = _data()
  key = jax.random.PRNGKey(2)
  got = model.local_update(w, x, y, key, steps=4, batch_size=5, lr=0.01, optimizer="adam")
  want = _adam_by_hand(model, w, x, y, key, 4, 5, 0.01, local_training.KERAS_ADAM_EPS)
  np.testing.assert_allclose(np.asarray(got), want - np.asarray(w), atol=2e-6)
  # Not SGD's update: the optimiser is really switched.
  sgd = model.local_update(w, x, y, key, steps=4, batch_size=5, lr=0.01)
  assert float(jnp.max(jnp.abs(sgd - got))) > 1e-3


class _SmallConvNet(nn.Module):

  @nn.compact
  def __call__(self, x):
    x = nn.relu(nn.Conv(4, (3, 3))(x))
    x = nn.max_pool(x, (2, 2), strides=(2, 2)).reshape(x.shape[0], -1)
    return nn.Dense(10)(x)


def test_adam_on_the_fast_path_equals_the_plain_path_for_a_cohort():
  sample = jnp.zeros((1, 28, 28, 1))
  fast = from_flax(_SmallConvNet(), sample)
  plain = from_flax(_SmallConvNet(), sample, fast=False)
  w = fast.init(jax.random.PRNGKey(0))
  xs, ys = zip(*(_data(seed=s) for s in range(3)))
  xs, ys = jnp.stack(xs), jnp.stack(ys)
  keys = jax.random.split(jax.random.PRNGKey(3), 3)

  def cohort(model):
    return jax.vmap(lambda x, y, k: model.local_update(
        w, x, y, k, steps=3, batch_size=4, lr=0.01, optimizer="adam"))(xs, ys, keys)

  got, want = cohort(fast), cohort(plain)
  scale = float(jnp.max(jnp.abs(want)))
  assert scale > 1e-3
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=2e-5 * scale)


def test_masked_adam_moves_only_the_mask_and_gives_its_values():
  model = tiny_linear()
  w = model.init(jax.random.PRNGKey(1))
  x, y = _data()
  indices = jnp.arange(0, model.num_params, 7)
  mask = jnp.zeros(model.num_params, bool).at[indices].set(True)
  local = LocalTraining(3, 5, 0.01, "adam")
  full = local.update(model, w, x, y, jax.random.PRNGKey(4), grad_mask=mask)
  assert float(jnp.max(jnp.abs(jnp.where(mask, 0.0, full)))) == 0.0
  assert float(jnp.max(jnp.abs(full[indices]))) > 1e-3
  only = local.update(model, w, x, y, jax.random.PRNGKey(4), grad_mask=mask,
                      grad_indices=indices, only_indices=True)
  np.testing.assert_array_equal(np.asarray(only), np.asarray(full[indices]))


def test_optimizer_names_and_momentum_are_checked():
  with pytest.raises(ValueError, match="unknown local optimizer 'rmsprop'"):
    local_training.optimizer("rmsprop", 0.1)
  with pytest.raises(ValueError, match="momentum applies to the sgd"):
    local_training.optimizer("adam", 0.1, momentum=0.5)
  # SGD keeps its heavy-ball form.
  state = local_training.optimizer("sgd", 0.1, 0.5).init(jnp.zeros(2))
  assert jax.tree_util.tree_leaves(state)


def test_schemes_declare_the_optimisers_they_follow():
  cfg = simulation.RunConfig.of(ratio=0.1, local_optimizer="adam")
  model, key = tiny_linear(), jax.random.PRNGKey(0)
  for name in ("Fed-SMP-randk", "CDP-LQ", "signSGD"):
    with pytest.raises(ValueError, match=f"does not apply to {name}, which trains with sgd"):
      simulation.setup.validate(cfg, get_scheme(name), model, 6000, 10, key)
  for name in ("FL-STD", "FL-TOP-DP", "FL-CS", "FL-SIGN"):
    simulation.setup.validate(cfg, get_scheme(name), model, 6000, 10, key)
  with pytest.raises(ValueError, match="local_optimizer 'adagrad' is unknown"):
    cfg.replace(local_optimizer="adagrad").validate(6000)


@pytest.mark.parametrize("name", ["FL-STD", "FL-TOP-DP"])
def test_a_run_trains_with_adam_and_says_so(name, small_federation):
  data, test, public = small_federation
  model = tiny_linear()
  cfg = dict(ratio=0.5, rounds=2, clients_per_round=8, eval_every=1, lr=0.001,
             noise_multiplier=0.3)
  records = {opt: simulation.run(model, get_scheme(name), data, test, public,
                                 simulation.RunConfig.of(**cfg, local_optimizer=opt))
             for opt in ("sgd", "adam")}
  assert records["adam"]["local_optimizer"] == "adam"
  assert "local_optimizer" not in records["sgd"]  # the records before it: SGD
  # At eta 0.001 SGD barely moves the linear model; Adam's steps are ~eta each.
  acc = {opt: r["history"][-1]["accuracy"] for opt, r in records.items()}
  assert acc["adam"] > acc["sgd"] + 0.05, acc


def test_cli_local_optimizer_is_recorded_and_refused_where_it_does_not_apply(tmp_path,
                                                                             capsys):
  common = ["--rounds", "1", "--num-clients", "20", "--clients-per-round", "2",
            "--test-size", "100", "--quiet"]
  out = tmp_path / "bad"
  assert experiment.main(["--schemes", "Fed-SMP-randk", "--ratio", "0.1",
                          "--local-optimizer", "adam", *common, "--out", str(out)]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and "does not apply to Fed-SMP-randk" in err[0], err
  assert not out.exists()
  assert experiment.main(["--local-optimizer", "sgdd", *common,
                          "--out", str(out)]) == 2
  assert "invalid choice: 'sgdd'" in capsys.readouterr().err
