"""jax_internals: the fast path's reads of JAX on the JAX at hand, and its fallback.

The readers are checked against jaxprs traced here (whatever JAX runs the
test: tests/fast_path_tests.txt lists the files to run under another). A
construct made unknown on purpose (a reader or a bind that fails, as on a
JAX that moved something) must fall back to the plain path with one warning
naming the primitive, and train what the plain path trains.
"""

import pathlib
import re
import warnings

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_dp import jax_internals as jxi
from fedjax_dp.models import fast_apply, from_flax


@pytest.fixture(autouse=True)
def _fresh_warnings():
  jxi.reset_warnings()
  yield
  jxi.reset_warnings()


def _eqn(closed, name):
  jaxpr, _ = jxi.open_jaxpr(closed)
  (eqn,) = [e for e in jaxpr.eqns if jxi.primitive_name(e) == name]
  return eqn


def test_scan_layout_splits_constants_carry_and_inputs():
  def f(w1, w2, c0, h0, xs):
    def step(carry, x):
      c, h = carry
      h = jnp.tanh(x @ w1 + h @ w2)
      return (c + h.sum(), h), h * 2.0
    return jax.lax.scan(step, (c0, h0), xs, reverse=True)

  args = (jnp.ones((3, 4)), jnp.ones((4, 4)), jnp.zeros(()), jnp.zeros((2, 4)),
          jnp.ones((5, 2, 3)))
  eqn = _eqn(jax.make_jaxpr(f)(*args), "scan")
  layout = jxi.scan_layout(eqn)
  assert (layout.num_consts, layout.num_carry) == (2, 2)
  assert (layout.length, layout.reverse, layout.unroll) == (5, True, 1)
  assert len(layout.body.invars) == len(eqn.invars) == 5
  assert len(layout.body.outvars) == len(eqn.outvars) == 3
  assert [v.aval.shape for v in layout.body.invars] == [(3, 4), (4, 4), (), (2, 4), (2, 3)]
  assert len(layout.consts) == len(layout.body.constvars)


def test_call_body_and_the_other_readers():
  @jax.jit
  def inner(a, b):
    return jnp.dot(a, b) + 1.0

  def f(x, k):
    y = jax.lax.conv_general_dilated(x, k, (2, 1), [(1, 1), (0, 2)], (1, 1), (1, 2),
                                     dimension_numbers=("NCHW", "OIHW", "NHWC"))
    z = jax.lax.reduce_window(y, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    return inner(z.reshape(2, -1), jnp.ones((z.size // 2, 3)))

  closed = jax.make_jaxpr(f)(jnp.ones((2, 3, 8, 8)), jnp.ones((5, 3, 3, 3)))
  conv = jxi.conv(_eqn(closed, "conv_general_dilated"))
  assert (conv.window_strides, conv.lhs_dilation, conv.rhs_dilation) == ((2, 1), (1, 1), (1, 2))
  assert tuple(map(tuple, conv.padding)) == ((1, 1), (0, 2))
  assert conv.specs == ((0, 1, 2, 3), (0, 1, 2, 3), (0, 3, 1, 2))
  assert (conv.feature_group_count, conv.batch_group_count) == (1, 1)
  pool = jxi.reduce_window(_eqn(closed, "reduce_window_max"))
  assert pool.window_dimensions == pool.window_strides == (1, 2, 2, 1)
  assert pool.base_dilation == pool.window_dilation == (1, 1, 1, 1)
  (call,) = [e for e in jxi.open_jaxpr(closed)[0].eqns if jxi.primitive_name(e) in jxi.CALLS]
  body, consts = jxi.call_body(call)
  assert len(body.invars) == 2 and len(consts) == len(body.constvars)
  dot = jxi.dot_general(_eqn(body, "dot_general"))
  assert dot.contract == ((1,), (0,)) and dot.batch == ((), ())
  assert jxi.call_body(_eqn(closed, "conv_general_dilated")) is None


def test_a_missing_parameter_is_unsupported_naming_the_primitive():
  eqn = _eqn(jax.make_jaxpr(lambda a: jax.lax.scan(lambda c, x: (c + x, c), 0.0, a))(
      jnp.ones(3)), "scan")

  class _Moved:  # a scan equation as a JAX that renamed its parameters would have it
    primitive, invars, outvars = eqn.primitive, eqn.invars, eqn.outvars
    params = {k: v for k, v in eqn.params.items()
              if k not in ("num_consts", "num_carry", "ft_in")}

  with pytest.raises(jxi.Unsupported, match="scan") as err:
    jxi.scan_layout(_Moved())
  assert err.value.primitive == "scan"


def test_one_warning_per_primitive():
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for name in ("scan", "scan", "conv_general_dilated", "scan"):
      jxi.warn_fallback(jxi.Unsupported(name, "test"), "binding it unchanged")
  got = [str(w.message) for w in caught if issubclass(w.category, jxi.FastPathWarning)]
  assert len(got) == 2
  assert "'scan'" in got[0] and "'conv_general_dilated'" in got[1]
  assert jax.__version__ in got[0]


class _CharRNN(nn.Module):
  """Embedding, an LSTM under nn.RNN (a scan the fast path rewrites), a head."""

  @nn.compact
  def __call__(self, x):
    h = nn.RNN(nn.OptimizedLSTMCell(16))(nn.Embed(12, 4)(x))
    return nn.Dense(12)(h[:, -1])


class _Tanh(nn.Module):
  """Two dense layers around a top-level tanh."""

  @nn.compact
  def __call__(self, x):
    return nn.Dense(5)(jnp.tanh(nn.Dense(16)(x)))


def _models(module, x):
  return from_flax(module, x[:1]), from_flax(module, x[:1], fast=False)


def _cohort(model, w, x, y, keys):
  return np.asarray(jax.jit(jax.vmap(lambda a, b, k: model.local_update(
      w, a, b, k, steps=3, batch_size=4, lr=0.3)))(x, y, keys))


def _fast_path_warnings(caught):
  return [str(w.message) for w in caught if issubclass(w.category, jxi.FastPathWarning)]


def test_an_unreadable_scan_is_bound_unchanged_with_one_warning(monkeypatch):
  x = jax.random.randint(jax.random.PRNGKey(5), (3, 6, 9), 0, 12)
  y = jax.random.randint(jax.random.PRNGKey(6), (3, 6), 0, 12)
  keys = jax.random.split(jax.random.PRNGKey(1), 3)
  fast, plain = _models(_CharRNN(), x[0])
  w = fast.init(jax.random.PRNGKey(0))

  def moved(eqn):
    raise jxi.Unsupported(jxi.primitive_name(eqn), "no parameter 'num_consts'")

  monkeypatch.setattr(jxi, "scan_layout", moved)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    got = _cohort(fast, w, x, y, keys)
    logits = fast.logits(w, x[0])  # traced again: no second warning
  ref = _cohort(plain, w, x, y, keys)
  found = _fast_path_warnings(caught)
  assert len(found) == 1 and "'scan'" in found[0], found
  np.testing.assert_allclose(got, ref, rtol=0, atol=1e-5 * np.abs(ref).max())
  assert np.abs(ref).max() > 1e-3
  np.testing.assert_allclose(logits, plain.logits(w, x[0]), rtol=1e-5, atol=1e-6)


def test_an_unbindable_primitive_trains_the_model_on_the_plain_path(monkeypatch):
  x = jax.random.normal(jax.random.PRNGKey(5), (3, 6, 7))
  y = jax.random.randint(jax.random.PRNGKey(6), (3, 6), 0, 5)
  keys = jax.random.split(jax.random.PRNGKey(1), 3)
  fast, plain = _models(_Tanh(), x[0])
  w = fast.init(jax.random.PRNGKey(0))
  bind = jxi.bind

  def unknown_tanh(eqn, invals):  # as a primitive whose bind parameters moved
    if jxi.primitive_name(eqn) == "tanh":
      raise jxi.Unsupported("tanh", "bind parameters: KeyError")
    return bind(eqn, invals)

  monkeypatch.setattr(jxi, "bind", unknown_tanh)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    got = _cohort(fast, w, x, y, keys)
    logits = fast.logits(w, x[0])
  ref = _cohort(plain, w, x, y, keys)
  found = _fast_path_warnings(caught)
  assert len(found) == 1 and "'tanh'" in found[0], found
  np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-7)
  assert np.abs(ref).max() > 1e-3
  np.testing.assert_allclose(logits, plain.logits(w, x[0]), rtol=1e-6, atol=1e-7)


class _HigherOrder(nn.Module):
  """Primitives the fast path binds unchanged: custom_jvp (relu), a custom_vjp,
  checkpoint, cond, a while loop, and sort inside a jit."""

  @nn.compact
  def __call__(self, x):

    @jax.custom_vjp
    def clip_grad(v):
      return v

    clip_grad.defvjp(lambda v: (v, None), lambda _, g: (jnp.clip(g, -1.0, 1.0),))
    h = nn.relu(nn.Dense(16)(x))
    h = jax.checkpoint(lambda v: jnp.sin(v) * v)(clip_grad(h))
    h = jax.lax.cond(h.sum() > 0, lambda v: v * 2.0, lambda v: v - 1.0, h)
    # a while loop on the input alone (reverse mode does not cross one)
    scale = jax.lax.while_loop(lambda s: s < 2.0, lambda s: s * 1.5, jnp.abs(x).mean() + 0.1)
    h = h * scale
    return nn.Dense(5)(jnp.sort(h, axis=-1))


def test_higher_order_primitives_bind_unchanged_without_a_warning():
  x = jax.random.normal(jax.random.PRNGKey(5), (3, 6, 7))
  y = jax.random.randint(jax.random.PRNGKey(6), (3, 6), 0, 5)
  keys = jax.random.split(jax.random.PRNGKey(1), 3)
  fast, plain = _models(_HigherOrder(), x[0])
  w = fast.init(jax.random.PRNGKey(0))
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    got = _cohort(fast, w, x, y, keys)
  ref = _cohort(plain, w, x, y, keys)
  assert not _fast_path_warnings(caught)
  np.testing.assert_allclose(got, ref, rtol=0, atol=1e-5 * np.abs(ref).max())
  assert np.abs(ref).max() > 1e-3
  traced = fast_apply.trace(fast.eval_apply_fn, fast.shapes, x[0])
  names, todo = set(), [jxi.open_jaxpr(traced.jaxpr)[0]]
  while todo:  # the calls' bodies too (jnp.sort is a jit)
    for e in todo.pop().eqns:
      names.add(jxi.primitive_name(e))
      body = jxi.call_body(e)
      todo += [body[0]] if body else []
  assert {"custom_jvp_call", "custom_vjp_call", "cond", "while", "sort"} <= names, names
  assert names & {"checkpoint", "remat", "remat2"}, names


def test_the_fast_path_test_list_is_complete():
  """tests/fast_path_tests.txt (run under each JAX) names every test file that
  uses the fast path, and only files that exist."""
  root = pathlib.Path(__file__).resolve().parents[1]
  listed = [line.strip() for line in (root / "tests" / "fast_path_tests.txt").read_text()
            .splitlines() if line.strip() and not line.startswith("#")]
  assert all((root / name).is_file() for name in listed), listed
  # cohort_ops alone is named by benchmark tests that only list its batchings
  uses = re.compile(r"\b(fast_apply|fast_scan|fast_train|jax_internals|fast_prng|from_flax)\b")
  want = sorted(str(p.relative_to(root)) for p in (root / "tests").rglob("test_*.py")
                if uses.search(p.read_text()))
  assert sorted(listed) == want
  assert "tests/models/test_cohort_ops.py" in listed
