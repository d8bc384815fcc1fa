"""FL-STD-DP and FL-TOP-DP rounds with independent vs banded (b=4) vs BLT noise, alternating."""
import json, sys, time, platform
import jax, jax.numpy as jnp, numpy as np
from fedjax_dp import simulation, features
from fedjax_dp.schemes import get_scheme
from fedjax_dp.models import paper_cnn
from fedjax_dp.data import load_federated, public_batch
fed, tx, ty = load_federated("fashion-mnist", 6000, 10, seed=0)
data = simulation.ClientData(jnp.asarray(fed.x), jnp.asarray(fed.y))
public = public_batch(10, seed=0)
model = paper_cnn()
out = []
for scheme in ("FL-STD-DP", "FL-TOP-DP"):
  fns = {}
  for name, corr in (("independent", None), ("banded-4", features.CorrelatedNoiseConfig("banded", bands=4)),
                     ("blt", features.CorrelatedNoiseConfig("blt"))):
    cfg = simulation.RunConfig.of(ratio=0.005, rounds=200, clients_per_round=60, cycle_length=4,
                                  accountant="rdp", clip_norm=0.6, noise_multiplier=1.54,
                                  correlated_noise=corr)
    state, plan = simulation.prepare(model, get_scheme(scheme), data, public, cfg)
    fn = simulation.make_rounds_fn(model, plan, 1)
    s, _ = fn(state, data, plan.run_key, jnp.int32(1)); jax.block_until_ready(s.weights)
    fns[name] = (fn, s, plan)
  times = {k: [] for k in fns}
  for rep in range(5):
    for name, (fn, s, plan) in fns.items():
      t = time.perf_counter()
      s, _ = fn(s, data, plan.run_key, jnp.int32(2 + rep)); jax.block_until_ready(s.weights)
      times[name].append(time.perf_counter() - t)
      fns[name] = (fn, s, plan)
  base = min(times["independent"])
  row = {"scheme": scheme, "best_seconds": {k: min(v) for k, v in times.items()},
         "ratio_to_independent": {k: min(v) / base for k, v in times.items()}}
  print(json.dumps(row)); out.append(row)
meta = {"machine": platform.processor() or platform.machine(), "cpu": open("/proc/cpuinfo").read().split("model name")[1].split("\n")[0].strip(": "),
        "jax": jax.__version__, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "setting": "Fashion-MNIST 6,000 clients, paper CNN, r = 0.005, 60 clients a round (cyclic Poisson, b = 4), T_gd 5, |B| 10; best of 5 alternating rounds; machine shared with other jobs",
        "command": "python /work/bench/noise_cost.py (copied as benchmarks/records/issue49-noise-cost/noise_cost.py)"}
json.dump({"meta": meta, "rows": out}, open(sys.argv[1], "w"), indent=1)
