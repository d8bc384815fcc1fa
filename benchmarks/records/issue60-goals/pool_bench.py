import functools, math, time, sys
import jax, jax.numpy as jnp
from jax import lax
from fedjax_dp.models import cohort_ops as co

def make(variant, window):
  @jax.custom_vjp
  def op(x):
    return jnp.max(co._windows(x, window), axis=-1)
  def fwd(x):
    xs = co._windows(x, window)
    first = jnp.argmax(xs, axis=-1)
    if variant == "gather":
      v = jnp.take_along_axis(xs, first[..., None], axis=-1)[..., 0]
    elif variant == "max":
      v = jnp.max(xs, axis=-1)
    elif variant == "reduce":
      idx = lax.broadcasted_iota(jnp.int32, xs.shape, xs.ndim - 1)
      def cmp(a, b):
        av, ai = a; bv, bi = b
        pick_a = (av > bv) | ((av == bv) & (ai < bi)) | jnp.isnan(av)
        return jnp.where(pick_a, av, bv), jnp.where(pick_a, ai, bi)
      v, first = lax.reduce((xs, idx), (jnp.array(-jnp.inf, xs.dtype), jnp.int32(0)), cmp, (xs.ndim - 1,))
    return v, first
  def bwd(first, g):
    hit = jax.nn.one_hot(first, math.prod(window), dtype=g.dtype)
    return (co._unwindows(hit * g[..., None], window),)
  op.defvjp(fwd, bwd)
  return op

x = jax.random.normal(jax.random.key(0), (50, 10, 28, 28, 32))
c = jax.random.normal(jax.random.key(1), (50, 10, 14, 14, 32))
res = {}
for variant in sys.argv[1:]:
  op = make(variant, (1, 1, 2, 2, 1))
  f = jax.jit(jax.value_and_grad(lambda z: jnp.sum(op(jax.nn.relu(z)) * c)))
  out = f(x); jax.block_until_ready(out)
  res[variant] = out
  ts = []
  for _ in range(15):
    t = time.perf_counter(); jax.block_until_ready(f(x)); ts.append(time.perf_counter() - t)
  ts.sort(); print(variant, "median ms %.1f min %.1f" % (1e3 * ts[7], 1e3 * ts[0]))
ref = res[sys.argv[1]]
for k, v in res.items():
  print(k, bool(jnp.all(v[0] == ref[0])), bool(jnp.all(v[1] == ref[1])))
