"""Run by tests/test_sharding.py in a subprocess with 4 host devices.

Compares rounds with the client axis sharded over a 4-device mesh against the
same rounds on one device; prints one JSON line.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from fedjax_dp import sharding, simulation  # noqa: E402
from fedjax_dp.compression import masks  # noqa: E402
from fedjax_dp.schemes import get_scheme  # noqa: E402
from scheme_helpers import round_plan  # noqa: E402
from tiny_model import tiny_linear  # noqa: E402


def rounds(model, scheme_name, mesh, data, capacity, steps, num_rounds=2):
  scheme = get_scheme(scheme_name)
  n = model.num_params
  k = scheme.num_kept(n, 0.05)
  plan = round_plan(
      scheme, num_clients=int(data.x.shape[0]), clients_per_round=capacity - 2,
      capacity=capacity, sampler="poisson", num_kept=k, local_steps=steps, batch_size=5,
      lr=0.1, noise_multiplier=1.0, clip_norm=0.5, mesh=mesh)
  fixed = (masks.random_indices(jax.random.PRNGKey(1), n, k) if scheme.uses_ratio
           else jnp.zeros((0,), jnp.int32))
  state = simulation.ServerState(model.init(jax.random.PRNGKey(0)), fixed)
  state, data, key = sharding.replicate((state, data, jax.random.PRNGKey(2)), mesh)
  fn = simulation.make_rounds_fn(model, plan, num_rounds)
  state, infos = fn(state, data, key, jnp.int32(1))
  sampled = np.asarray(infos.num_sampled)
  state, infos = fn(state, data, key, jnp.int32(1 + num_rounds))  # no recompilation
  sampled = np.concatenate([sampled, np.asarray(infos.num_sampled)])
  return np.asarray(state.weights), sampled, fn


def privatize_count(mesh) -> dict:
  """``sharding.shard_privatize``'s clip count over the devices: its sum,
  and whether each count's all-reduce reads the contributions (a constant
  count's did not: a device could wait in it before training)."""
  messages = jnp.arange(10 * 3, dtype=jnp.float32).reshape(10, 3) - 12.0
  mask = jnp.arange(10) < 9  # a padding slot
  keys = jnp.zeros((10, 2), jnp.uint32)

  def counted(m, s, k, n):  # real slots whose first value is above 2
    del k, n
    return m * 2.0, jnp.sum(s & (m[:, 0] > 2.0)).astype(jnp.int32)

  def constant(m, s, k, n):
    del s, k, n
    return m, jnp.zeros((), jnp.int32)

  out = {}
  for name, fn in (("counted", counted), ("constant", constant)):
    sharded = jax.jit(sharding.shard_privatize(fn, mesh))
    _, count = sharded(messages, mask, keys, jnp.int32(9))
    text = sharded.lower(messages, mask, keys, jnp.int32(9)).compile().as_text()
    operands = [line.split("all-reduce(")[1].split(")")[0].lstrip("%")
                for line in text.splitlines() if "s32[] all-reduce(" in line]
    defined = {line.split(" = ")[0].strip().removeprefix("ROOT ").lstrip("%"): line
               for line in text.splitlines() if " = " in line}
    out[name] = {"count": int(count), "all_reduces": len(operands),
                 "of_constants": sum(" constant(" in defined.get(o, "") for o in operands)}
  return out


def main():
  mesh = sharding.client_mesh()
  rng = np.random.default_rng(0)
  data = simulation.ClientData(
      jnp.asarray(rng.integers(0, 256, (60, 10, 28, 28, 1), dtype=np.uint8)),
      jnp.asarray(rng.integers(0, 10, (60, 10), dtype=np.int32)))
  out = {"devices": len(jax.devices()), "mesh": sharding.mesh_size(mesh), "cases": []}
  cases = [(tiny_linear(), "FL-STD-DP", 10, 3), (tiny_linear(), "FL-TOP-DP", 10, 3),
           (tiny_linear(), "FL-STD", 8, 2)]
  if "--cnn" in sys.argv:
    from fedjax_dp.models import paper_cnn
    cases.append((paper_cnn(), "FL-TOP-DP", 6, 2))
  for model, name, capacity, steps in cases:
    one, sampled_one, _ = rounds(model, name, None, data, capacity, steps)
    many, sampled_many, fn = rounds(model, name, mesh, data, capacity, steps)
    out["cases"].append({
        "model": model.name, "scheme": name, "capacity": capacity,
        "max_abs_diff": float(np.abs(one - many).max()),
        "scale": float(np.abs(one).max()),
        "same_cohorts": bool((sampled_one == sampled_many).all()),
        "compiled": fn._cache_size()})
  # A whole run (evaluation sharded too), with the device count as an option.
  test = (np.asarray(data.x[:40, 0]), np.asarray(data.y[:40, 0]))
  public = (np.asarray(data.x[40:50, 0], np.float32) / 255.0, np.asarray(data.y[40:50, 0]))
  records = [simulation.run(tiny_linear(), get_scheme("FL-STD-DP"), data, test, public,
                            simulation.RunConfig.of(rounds=2, clients_per_round=6, eval_every=2,
                                                 clip_norm=0.5, devices=d))
             for d in (1, None)]
  out["run"] = {"capacity": [r["capacity"] for r in records],
                "accuracy": [[h["accuracy"] for h in r["history"]] for r in records]}
  out["privatize_count"] = privatize_count(mesh)
  print(json.dumps(out))


if __name__ == "__main__":
  main()
