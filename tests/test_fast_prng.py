"""fast_prng: the unrolled threefry lowering on CPU gives the same bits."""

import json
import os
import subprocess
import sys

_SCRIPT = r"""
import json, jax, jax.numpy as jnp
from fedjax_dp import fast_prng
key = jax.random.PRNGKey(123)
def draws(k):
  return (jax.random.bits(k, (4097,)), jax.random.normal(jax.random.fold_in(k, 7), (3, 1001)),
          jax.vmap(lambda kk: jax.random.uniform(kk, (5,)))(jax.random.split(k, 9)))
before = jax.jit(draws)
ref = before(key)
hlo_before = before.lower(key).as_text()
ok = fast_prng.use_unrolled_threefry()
after = jax.jit(lambda k: draws(k))  # a new function: compiled with the new lowering
new = after(key)
hlo_after = after.lower(key).as_text()
print(json.dumps({"registered": ok,
                  "equal": all(bool(jnp.array_equal(a, b)) for a, b in zip(ref, new)),
                  "loop_before": "while" in hlo_before, "loop_after": "while" in hlo_after}))
"""


def test_unrolled_threefry_draws_the_same_bits_without_the_loop():
  proc = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True,
                        timeout=300, check=False, env=dict(os.environ, JAX_PLATFORMS="cpu"))
  assert proc.returncode == 0, proc.stderr[-2000:]
  out = json.loads(proc.stdout.strip().splitlines()[-1])
  assert out["registered"] and out["equal"]
  assert out["loop_before"] and not out["loop_after"]  # the lowering really changed
