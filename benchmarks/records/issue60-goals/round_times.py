"""Each of N consecutive rounds' time (not the best of them): FL-STD, 100 clients.

  PYTHONPATH=TREE python round_times.py TREE [N] [SCHEME]   # run from TREE

What barrier_ab.sh's best-of-3 hides: whether a round stalls now and then.
"""
import json
import sys
import time

sys.path.insert(0, "benchmarks")
import throughput  # noqa: E402  (sets the CPU devices before JAX starts)
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from common import load_paper_data  # noqa: E402
from fedjax_dp import sharding, simulation  # noqa: E402
from fedjax_dp.data import public_batch  # noqa: E402
from fedjax_dp.models import paper_cnn  # noqa: E402

n = int(sys.argv[2]) if len(sys.argv) > 2 else 10
scheme = sys.argv[3] if len(sys.argv) > 3 else "FL-STD"
data, _, _ = load_paper_data(100)
state, plan = throughput.prepared_round(paper_cnn(), scheme, data, public_batch(10, seed=0),
                                        100, 0.005, None, rounds=n + 2)
state, data, run_key = sharding.replicate((state, data, plan.run_key), plan.mesh)
fn = simulation.make_rounds_fn(paper_cnn(), plan, 1)
times = []
for t in range(1, n + 2):
  start = time.perf_counter()
  state, _ = fn(state, data, run_key, jnp.int32(t))
  jax.block_until_ready(state)
  times.append(time.perf_counter() - start)
print(json.dumps({"tree": sys.argv[1], "scheme": scheme, "round_seconds": times[1:]}))
