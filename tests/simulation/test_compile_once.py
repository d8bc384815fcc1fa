"""Round 2 reuses the compiled program: no retrace, no recompile, no host copies."""

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_dp import simulation
from fedjax_dp.compression import masks
from fedjax_dp.models.flat import FlatModel
from fedjax_dp.schemes import get_scheme
from scheme_helpers import round_plan
from tiny_model import tiny_linear


def _counting(model):
  """The model, counting how often its forward pass is traced."""
  traces = {"n": 0}

  def apply(params, x):
    traces["n"] += 1
    return model.apply_fn(params, x)

  return FlatModel(model.name, model.shapes, model.init_fn, apply, model.loss_name), traces


def _data():
  rng = np.random.default_rng(0)
  return simulation.ClientData(
      jnp.asarray(rng.integers(0, 256, (50, 10, 28, 28, 1), dtype=np.uint8)),
      jnp.asarray(rng.integers(0, 10, (50, 10), dtype=np.int32)))


def test_rounds_fn_compiles_once_and_copies_nothing_to_the_host():
  model, traces = _counting(tiny_linear())
  scheme = get_scheme("FL-TOP-DP")
  k = scheme.num_kept(model.num_params, 0.05)
  plan = round_plan(scheme, num_clients=50, clients_per_round=5, capacity=8,
                    sampler="poisson", num_kept=k, local_steps=2, batch_size=5, lr=0.1,
                    noise_multiplier=1.0, clip_norm=0.5)
  fn = simulation.make_rounds_fn(model, plan, 3)
  data, key = _data(), jax.random.PRNGKey(1)
  state = simulation.ServerState(model.init(jax.random.PRNGKey(0)),
                                 masks.random_indices(jax.random.PRNGKey(2),
                                                      model.num_params, k))
  first, second = jax.device_put(jnp.int32(1)), jax.device_put(jnp.int32(4))
  state, _ = fn(state, data, key, first)
  jax.block_until_ready(state)
  traced = traces["n"]
  assert traced > 0
  # Rounds 4-6: same program; every argument already on the device.
  with jax.transfer_guard("disallow"):
    state, infos = fn(state, data, key, second)
    jax.block_until_ready(state)
  assert traces["n"] == traced  # not traced again
  assert fn._cache_size() == 1  # not compiled again
  assert infos.num_sampled.shape == (3,)
  # The loop body makes no host callbacks.
  hlo = fn.lower(state, data, key, second).as_text()
  assert "callback" not in hlo.lower()


def test_eval_fn_compiles_once():
  model, traces = _counting(tiny_linear())
  eval_fn = simulation.make_eval_fn(model)
  w = model.init(jax.random.PRNGKey(0))
  x = jnp.asarray(np.random.default_rng(1).integers(0, 256, (1200, 28, 28, 1),
                                                     dtype=np.uint8))
  preds, _ = eval_fn(w, x)
  traced = traces["n"]
  w2 = jax.block_until_ready(w * 2)  # new weights, already on the device
  with jax.transfer_guard("disallow"):
    preds2, _ = eval_fn(w2, x)
    jax.block_until_ready(preds2)
  assert traces["n"] == traced and eval_fn._cache_size() == 1
  assert preds.shape == (1200,)
