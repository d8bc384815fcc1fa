"""Hash of the lowered round of each family's scheme, with TREE's fedjax_dp."""
import hashlib, sys
tree = sys.argv[1]
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
sys.path.insert(0, tree); sys.path.insert(0, f"{tree}/benchmarks")
import jax, jax.numpy as jnp
import throughput
from fedjax_dp import simulation
from fedjax_dp.models import paper_cnn
from fedjax_dp.data import ClientData
from fedjax_dp.datasets import load
import numpy as np
model = paper_cnn()
rng = np.random.default_rng(0)
data = ClientData(jnp.asarray(rng.integers(0, 255, (60, 10, 28, 28, 1), dtype=np.uint8)),
                  jnp.asarray(rng.integers(0, 10, (60, 10), dtype=np.int32)))
public = (np.asarray(data.x[0], np.float32) / 255, np.asarray(data.y[0]))
for name in sys.argv[2:]:
  prep = throughput.prepared_round(model, name, data, public, 8, 0.005, None, rounds=2)
  if len(prep) != 2:
    state, cfg, key = prep.state, prep.round_cfg, prep.run_key
  else:
    state, cfg = prep; key = cfg.run_key
  fn = simulation.make_rounds_fn(model, cfg, 1)
  text = fn.lower(state, data, key, jnp.int32(1)).as_text()
  print(name, hashlib.sha256(text.encode()).hexdigest()[:16], len(text))
