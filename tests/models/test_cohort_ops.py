"""The cohort ops and the rewritten forward pass compute what JAX's ops compute."""

import json
import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_dp.models import cohort_ops, fast_apply, from_flax, paper_cnn
from fedjax_dp.models.flat import cross_entropy

# (input spatial, window, strides, padding, lhs dilation, rhs dilation)
CONVS = [
    ((8, 8), (5, 5), (1, 1), ((2, 2), (2, 2)), (1, 1), (1, 1)),  # the paper CNN's
    ((9, 7), (3, 3), (2, 2), ((1, 1), (1, 1)), (1, 1), (1, 1)),  # strided, odd sizes
    ((8, 8), (3, 2), (2, 1), ((0, 0), (0, 0)), (1, 1), (1, 1)),  # 'VALID', uneven
    ((9, 9), (3, 3), (1, 1), ((1, 2), (0, 1)), (1, 1), (2, 2)),  # dilated kernel
    ((5, 6), (3, 3), (1, 1), ((1, 1), (1, 1)), (2, 2), (1, 1)),  # transposed (lhs dilation)
    ((10,), (4,), (3,), ((2, 1),), (2,), (2,)),  # 1-D, everything at once
    ((4, 5, 6), (2, 3, 2), (1, 2, 1), ((1, 0), (1, 1), (0, 1)), (1, 1, 1), (1, 1, 2)),  # 3-D
]


def _lax_conv(x, w, strides, padding, ld, rd):
  return jax.lax.conv_general_dilated(
      x, w, strides, padding, ld, rd,
      dimension_numbers=cohort_ops.canonical_dimension_numbers(x.ndim - 2))


@pytest.mark.parametrize("spatial,window,strides,padding,ld,rd", CONVS)
def test_conv_and_its_gradients_equal_lax(spatial, window, strides, padding, ld, rd):
  keys = jax.random.split(jax.random.PRNGKey(0), 4)
  x = jax.random.normal(keys[0], (3,) + spatial + (4,))
  w = jax.random.normal(keys[1], window + (4, 5))
  ref = lambda x, w: _lax_conv(x, w, strides, padding, ld, rd)
  ours = lambda x, w: cohort_ops.conv(x, w, strides, padding, ld, rd)

  @jax.jit  # one program for every comparison (eagerly, each op compiles alone)
  def both(x, w, g):
    want, want_vjp = jax.vjp(ref, x, w)
    got, got_vjp = jax.vjp(ours, x, w)
    # Under vmap: per-client kernels, a shared kernel, shared inputs.
    xs, ws = jnp.stack([x, 2 * x]), jnp.stack([w, -w])
    vmapped = (jax.vmap(ours)(xs, ws)[1], ref(2 * x, -w),
               jax.vmap(ours, (0, None))(xs, w)[1], ref(2 * x, w),
               jax.vmap(ours, (None, 0))(x, ws)[1], ref(x, -w))
    grads = jax.vmap(jax.grad(lambda x, w: jnp.sum(ours(x, w) ** 2), (0, 1)))(xs, ws)
    want_g = jax.grad(lambda x, w: jnp.sum(ref(x, w) ** 2), (0, 1))(2 * x, -w)
    return got, want, got_vjp(g), want_vjp(g), vmapped, grads, want_g

  shape = jax.eval_shape(ref, x, w).shape
  got, want, got_ct, want_ct, vmapped, grads, want_g = both(
      x, w, jax.random.normal(keys[2], shape))
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  for a, b in zip(got_ct, want_ct):
    assert a.shape == b.shape
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-4)
  for a, b in zip(vmapped[::2], vmapped[1::2]):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-4)
  for a, b in zip(grads, want_g):
    np.testing.assert_allclose(a[1], b, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("mode,case", [(m, c) for m in ("product", "patches", "grouped")
                                       for c in CONVS] + [("vmap", CONVS[0])])
def test_per_client_kernels_batched_as_products_or_grouped_equal_lax(mode, case):
  """Per-client kernels batched another way than one client at a time (the
  GPU's ways: products of receptive fields gathered by slices or by a 0/1
  convolution, grouped convolutions, JAX's own rule): values and both
  gradients."""
  spatial, window, strides, padding, ld, rd = case
  keys = jax.random.split(jax.random.PRNGKey(0), 3)
  xs = jax.random.normal(keys[0], (2, 3) + spatial + (4,))
  ws = jax.random.normal(keys[1], (2,) + window + (4, 5))
  ref = lambda x, w: _lax_conv(x, w, strides, padding, ld, rd)
  ours = lambda x, w: cohort_ops.conv(x, w, strides, padding, ld, rd)
  both = lambda f: jax.jit(lambda xs, ws: (jax.vmap(f)(xs, ws), jax.vmap(jax.grad(
      lambda x, w: jnp.sum(jnp.sin(f(x, w))), (0, 1)))(xs, ws)))  # one program each
  jax.clear_caches()
  with cohort_ops.cohort_batching(mode):
    got, got_g = both(ours)(xs, ws)
  jax.clear_caches()
  want, want_g = both(ref)(xs, ws)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
  for a, b in zip(got_g, want_g):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("mode", ["patches", "grouped"])
def test_per_client_kernels_on_shared_inputs_equal_lax(mode):
  """One input for every client (the kernels folded into the output
  channels by the grouped forward pass): values and the kernels' gradients."""
  spatial, window, strides, padding, ld, rd = CONVS[1]
  keys = jax.random.split(jax.random.PRNGKey(1), 2)
  x = jax.random.normal(keys[0], (3,) + spatial + (4,))
  ws = jax.random.normal(keys[1], (2,) + window + (4, 5))
  ref = lambda x, w: _lax_conv(x, w, strides, padding, ld, rd)
  ours = lambda x, w: cohort_ops.conv(x, w, strides, padding, ld, rd)
  loss = lambda f: lambda x, w: jnp.sum(jnp.sin(f(x, w)))
  both = lambda f: jax.jit(lambda x, ws: (jax.vmap(f, (None, 0))(x, ws), jax.vmap(
      jax.grad(loss(f), (0, 1)), (None, 0))(x, ws)))
  jax.clear_caches()
  with cohort_ops.cohort_batching(mode):
    got, got_g = both(ours)(x, ws)
  jax.clear_caches()
  want, want_g = both(ref)(x, ws)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
  for a, b in zip(got_g, want_g):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-3)


def _cohort_grad_hlo(platform: str, mode: str = "auto") -> str:
  """The lowered gradient of a conv over 3 clients' own kernels, for ``platform``."""
  xs, ws = jnp.ones((3, 2, 8, 8, 4)), jnp.ones((3, 5, 5, 4, 6))
  loss = lambda x, w: jnp.sum(jax.vmap(lambda x, w: cohort_ops.conv(
      x, w, (1, 1), ((2, 2), (2, 2))))(x, w) ** 2)
  jax.clear_caches()
  with cohort_ops.cohort_batching(mode):
    text = jax.jit(jax.grad(loss, (0, 1))).trace(xs, ws).lower(
        lowering_platforms=(platform,)).as_text()
  jax.clear_caches()
  return text


@pytest.mark.parametrize("mode,products,groups", [
    ("product", 3, []),  # receptive fields by slices, no convolution
    ("patches", 3, [4, 4, 4]),  # three 0/1 convolutions grouped by the 4 input channels
    ("grouped", 1, [3, 3, 4]),  # forward and input gradient grouped by the 3 clients
    ("vmap", 0, [3, 3, 3]),
])
def test_gpu_batchings_lowered_for_cuda(mode, products, groups):
  """What each batching lowers to for CUDA (from the CPU): its matrix products,
  its convolutions' feature groups, and no concatenated receptive fields but
  in "product"'s."""
  text = _cohort_grad_hlo("cuda", mode)
  assert "stablehlo.while" not in text
  assert text.count("stablehlo.dot_general") == products
  lines = [line for line in text.splitlines() if "stablehlo.convolution" in line]
  assert sorted(int(re.search(r"feature_group_count = (\d+)", line).group(1))
                for line in lines) == groups
  assert ("stablehlo.concatenate" in text) == (mode == "product")


def test_auto_batching_is_one_client_at_a_time_on_cpu_and_products_on_gpus():
  assert cohort_ops.batching() == "auto"
  cpu = _cohort_grad_hlo("cpu")
  assert "stablehlo.while" in cpu and "stablehlo.convolution" in cpu
  for platform in ("cuda", "rocm"):  # lowered here, without the device
    gpu = _cohort_grad_hlo(platform)
    assert "stablehlo.while" not in gpu and "stablehlo.convolution" not in gpu
    assert gpu.count("stablehlo.dot_general") == 3  # forward, input and kernel gradients
  with pytest.raises(ValueError, match="cohort batching must be one of"):
    with cohort_ops.cohort_batching("loop"):
      pass
  assert cohort_ops.batching() == "auto"


@pytest.fixture(scope="module")
def paper_cnn_cohort(cnn):
  """The paper CNN's local updates of two clients as a function of nothing,
  traced when called; and their value one client at a time (the CPU's way),
  computed once for every batching compared with it."""
  keys = jax.random.split(jax.random.PRNGKey(0), 4)
  xs = jax.random.uniform(keys[0], (2, 10, 28, 28, 1))
  ys = jax.random.randint(keys[1], (2, 10), 0, 10)
  w = cnn.init(keys[2])
  cohort = lambda: jax.jit(jax.vmap(lambda x, y, k: cnn.local_update(
      w, x, y, k, steps=2, batch_size=5, lr=0.2)))(xs, ys, jax.random.split(keys[3], 2))
  jax.clear_caches()
  with cohort_ops.cohort_batching("map"):
    want = cohort()
  jax.clear_caches()
  return cohort, want


@pytest.mark.parametrize("mode", ["product", "patches", "grouped"])
def test_paper_cnn_cohort_training_equal_batched_as_products(paper_cnn_cohort, mode):
  """The paper CNN's local updates of two clients (the round's fast path) are
  the same with the per-client convolutions batched each GPU way (products,
  0/1 convolutions, grouped convolutions) as one client at a time (the CPU's)."""
  cohort, want = paper_cnn_cohort
  jax.clear_caches()
  with cohort_ops.cohort_batching(mode):
    got = cohort()
  jax.clear_caches()
  scale = float(jnp.max(jnp.abs(want)))
  assert scale > 1e-3
  np.testing.assert_allclose(got, want, atol=1e-4 * scale)


def test_conv_computes_the_gradients_asked_for_and_only_those():
  """x's gradient where x is differentiated (a saliency map, an attack on the
  inputs), none where x is data (a model's input layer in training): that
  backward pass has one convolution fewer."""
  x = jax.random.normal(jax.random.PRNGKey(0), (2, 6, 6, 3))
  w = jax.random.normal(jax.random.PRNGKey(1), (3, 3, 3, 4))
  pad = ((1, 1), (1, 1))
  ours = lambda x, w: jnp.sum(jnp.sin(cohort_ops.conv(x, w, (1, 1), pad)))
  ref = lambda x, w: jnp.sum(jnp.sin(_lax_conv(x, w, (1, 1), pad, (1, 1), (1, 1))))
  convs = {}
  for argnums in (0, 1, (0, 1)):
    got, want = jax.grad(ours, argnums)(x, w), jax.grad(ref, argnums)(x, w)
    for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    convs[argnums] = str(jax.make_jaxpr(jax.grad(ours, argnums))(x, w)).count(
        "conv_general_dilated")
  assert convs == {0: 2, 1: 2, (0, 1): 3}  # forward, then dx and/or dw


def test_a_fast_models_input_gradient_is_the_plain_forward_passes():
  """Through a fast model's ``loss`` (the paper CNN's, a flax model's) the
  gradient with respect to the input is the model's own, not zero."""
  x = jax.random.uniform(jax.random.PRNGKey(0), (4, 28, 28, 1))
  y = jnp.array([1, 2, 3, 4])
  for model in (paper_cnn(), from_flax(_Small(), x[:1])):
    w = model.init(jax.random.PRNGKey(1))
    plain = lambda x: cross_entropy(model.eval_logits(w, x), y, model.loss_name)
    got = jax.grad(lambda x: model.loss(w, x, y))(x)
    want = jax.grad(plain)(x)
    assert float(jnp.abs(want).max()) > 1e-4
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6 * float(jnp.abs(want).max()))
    # Forward mode goes through the module's own pass (docs/api.md).
    _, tangent = jax.jvp(lambda x: model.eval_logits(w, x), (x,), (jnp.ones_like(x),))
    assert tangent.shape == (4, model.eval_logits(w, x).shape[1])


def test_max_pool_and_its_gradient_equal_reduce_window_with_ties():
  z = jax.random.normal(jax.random.PRNGKey(0), (2, 8, 6, 3))
  z = z.at[0, :2, :3, :].set(0.5).at[1, 2:4, 3:6, 1].set(-0.2)  # tied windows
  pool = lambda z: nn.max_pool(z, (2, 3), strides=(2, 3))
  ours = lambda z: cohort_ops.max_pool(z, (1, 2, 3, 1))
  np.testing.assert_array_equal(ours(z), pool(z))
  g = jax.random.normal(jax.random.PRNGKey(1), (2, 4, 2, 3))
  got = jax.vjp(ours, z)[1](g)[0]
  np.testing.assert_array_equal(got, jax.vjp(pool, z)[1](g)[0])  # ties: the first maximum
  np.testing.assert_array_equal(got[0, :2, :3, 0].ravel(), [g[0, 0, 0, 0]] + [0.0] * 5)
  zs = jnp.stack([z, -z])  # under vmap too
  np.testing.assert_array_equal(jax.vmap(lambda z: jax.vjp(ours, z)[1](g)[0])(zs)[1],
                                jax.vjp(pool, -z)[1](g)[0])
  with pytest.raises(ValueError, match="tile"):
    cohort_ops.max_pool(z, (1, 3, 3, 1))


class _Odd(nn.Module):
  """A conv in NCHW through lax (transposed layouts), one inside jax.jit, an
  overlapping pool (left to JAX), and a kernel used twice (not a site)."""

  @nn.compact
  def __call__(self, x):
    k = self.param("k", nn.initializers.lecun_normal(), (4, 1, 3, 3))  # OIHW
    h = jax.lax.conv_general_dilated(x.transpose(0, 3, 1, 2), k, (1, 1), "SAME",
                                     dimension_numbers=("NCHW", "OIHW", "NCHW"))
    k2 = self.param("k2", nn.initializers.lecun_normal(), (3, 3, 4, 4))  # HWIO
    h = jax.jit(lambda h, k: jax.lax.conv_general_dilated(
        h.transpose(0, 2, 3, 1), k, (1, 1), "SAME",
        dimension_numbers=("NHWC", "HWIO", "NHWC")))(h, k2)
    h = nn.max_pool(nn.relu(h), (3, 3), strides=(2, 2))
    tied = self.param("tied", nn.initializers.lecun_normal(), (h.shape[-1], h.shape[-1]))
    h = (h @ tied) @ tied.T
    return nn.Dense(3)(h.reshape(h.shape[0], -1))


def test_rewritten_forward_equals_the_module():
  x = jax.random.uniform(jax.random.PRNGKey(0), (5, 9, 9, 1))
  model = from_flax(_Odd(), x[:1])
  w = model.init(jax.random.PRNGKey(1))
  params = model.unflatten(w)
  ws = jnp.stack([w, 0.5 * w])
  # The module itself and the rewritten pass, each one jitted program.
  both = lambda f: jax.jit(lambda w, ws: (jax.vmap(lambda v: f(v, x))(ws), jax.grad(
      lambda v: jnp.sum(f(v, x) ** 2))(w)))
  want, g_want = both(model.eval_logits)(w, ws)
  got, g_got = both(model.logits)(w, ws)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(g_got, g_want, rtol=1e-4, atol=1e-6)
  traced = fast_apply.trace(model.eval_apply_fn, model.shapes, x)
  top = [e.primitive.name for e in traced.jaxpr.jaxpr.eqns]
  assert "conv_general_dilated" in top and any(p in top for p in ("jit", "pjit"))
  names = [s.name for s in fast_apply.dense_sites(traced)]
  assert names == ["Dense_0/kernel"]  # "tied" is used twice
  assert fast_apply.evaluate(traced, params, x).shape == (5, 3)


def test_jaxpr_rewrite_finds_the_paper_cnn_dense_layers(cnn):
  traced = fast_apply.trace(cnn.eval_apply_fn, cnn.shapes, jnp.zeros((10, 28, 28, 1)))
  sites = fast_apply.dense_sites(traced)
  assert [(s.name, s.shape, s.rows) for s in sites] == [
      ("dense1_w", (3136, 512), 10), ("dense2_w", (512, 10), 10)]
  prims = [e.primitive.name for e in traced.jaxpr.jaxpr.eqns]
  assert prims.count("conv_general_dilated") == 2


class _Recurrent(nn.Module):
  """A hand-written recurrence: a reversed scan over int tokens whose body
  multiplies by a kernel built inside the loop (loop-invariant) and carries
  a second, scalar state."""

  @nn.compact
  def __call__(self, x):
    emb = self.param("emb", nn.initializers.normal(), (7, 5))
    w_in = self.param("w_in", nn.initializers.normal(), (5, 6))
    w_h = self.param("w_h", nn.initializers.normal(), (6, 6))

    def step(carry, tok):
      h, total = carry
      kernel = jnp.concatenate([w_in, w_h], axis=0)  # invariant, rebuilt every step
      h = jnp.tanh(jnp.concatenate([emb[tok], h], axis=-1) @ kernel)
      return (h, total + h.sum()), h

    init = (jnp.zeros((x.shape[0], 6)), jnp.zeros(()))
    (h, total), hs = jax.lax.scan(step, init, x.T, reverse=True)
    return jnp.concatenate([h, hs.mean(0)], -1)[:, :4] + total


def test_scan_weight_gradients_hoisted_equal_autodiff():
  x = jax.random.randint(jax.random.PRNGKey(0), (3, 9), 0, 7)
  model = from_flax(_Recurrent(), x[:1])
  ws = jnp.stack([model.init(jax.random.PRNGKey(1)), model.init(jax.random.PRNGKey(2))])
  traced = fast_apply.trace(model.eval_apply_fn, model.shapes, x)
  assert "scan" in [e.primitive.name for e in traced.jaxpr.jaxpr.eqns]
  for fn in (model.logits, model.eval_logits):
    assert fn(ws[0], x).shape == (3, 4)
  loss = lambda fn: lambda w: jnp.sum(jnp.sin(fn(w, x)))
  want = jax.jit(jax.vmap(jax.value_and_grad(loss(model.eval_logits))))(ws)
  got = jax.jit(jax.vmap(jax.value_and_grad(loss(model.logits))))(ws)
  for a, b in zip(got, want):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  assert np.abs(want[1]).min() >= 0 and np.abs(want[1]).max() > 1e-3


class _TiedRecurrent(nn.Module):
  """A loop whose kernel W is both a product's (``h @ W``) and read another
  way in the same step (``W @ h.T``)."""

  @nn.compact
  def __call__(self, x):
    w = self.param("W", nn.initializers.normal(0.3), (8, 8))
    u = self.param("U", nn.initializers.normal(0.3), (x.shape[-1], 8))

    def cell(h, x_t):
      h = jnp.tanh(x_t @ u + h @ w + 0.1 * (w @ h.T).T)
      return h, h

    h, _ = jax.lax.scan(cell, jnp.zeros((x.shape[0], 8)), x.swapaxes(0, 1))
    return nn.Dense(4)(h)


def test_a_kernel_read_elsewhere_in_the_loop_keeps_its_whole_gradient():
  """W's gradient through ``W @ h.T`` is not lost (the loop leaves W's
  product bound as it is; U's still takes its gradient after the loop)."""
  x = jax.random.normal(jax.random.PRNGKey(0), (3, 5, 3))
  model = from_flax(_TiedRecurrent(), x[:1])
  ws = jnp.stack([model.init(jax.random.PRNGKey(1)), model.init(jax.random.PRNGKey(2))])
  loss = lambda fn: lambda w: jnp.sum(jnp.sin(fn(w, x)))
  want = jax.jit(jax.vmap(jax.value_and_grad(loss(model.eval_logits))))(ws)
  got = jax.jit(jax.vmap(jax.value_and_grad(loss(model.logits))))(ws)
  for a, b in zip(got, want):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


class _Small(nn.Module):
  @nn.compact
  def __call__(self, x):
    x = nn.relu(nn.Conv(4, (3, 3), padding="SAME")(x))
    return nn.Dense(3)(x.reshape(x.shape[0], -1))


def test_a_forward_pass_traced_inside_shard_map_is_not_replayed_outside():
  """The rewritten forward pass keeps its trace per input shape; one traced
  inside shard_map (the round's clients, a sharded evaluation) typed its
  values on the mesh's manual axis, and replayed outside it (Fed-SMP's
  server training, later in the same process) failed: 'Mesh for all
  inputs should be equal'."""
  x = jax.random.uniform(jax.random.PRNGKey(0), (4, 6, 6, 1))
  model = from_flax(_Small(), x[:1])
  w = model.init(jax.random.PRNGKey(1))
  mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("clients",))
  spec = jax.sharding.PartitionSpec()
  inside = jax.jit(jax.shard_map(model.logits, mesh=mesh, in_specs=(spec, spec),
                                 out_specs=spec, check_vma=False))(w, x)
  replicated = jax.sharding.NamedSharding(mesh, spec)
  outside = jax.jit(model.logits)(jax.device_put(w, replicated), jax.device_put(x, replicated))
  np.testing.assert_allclose(outside, inside, rtol=1e-6)
  np.testing.assert_allclose(outside, model.eval_logits(w, x), rtol=1e-5, atol=1e-6)


def test_lowered_traffic_counts_each_batching(tmp_path, capsys):
  """benchmarks/lowered_traffic.py's main (in process): a bad flag is one line
  and exit 2; the counts see the same products in every batching and the
  receptive fields' concatenation only in "product"."""
  import benchmark_modules  # pylint: disable=import-outside-toplevel
  main = benchmark_modules.load("lowered_traffic").main
  with pytest.raises(SystemExit) as bad:
    main(["--batching", "product,loop"])
  err = capsys.readouterr().err
  assert bad.value.code == 2 and err.count("\n") == 1 and "unknown batching loop" in err
  out = tmp_path / "traffic.jsonl"
  assert main(["--batching", "product,grouped", "--clients", "2", "--steps", "2",
               "--out", str(out)]) == 0
  ok = capsys.readouterr()
  product, grouped = [json.loads(line) for line in out.read_text().splitlines()]
  assert product["product_gflop"] == pytest.approx(grouped["product_gflop"], rel=1e-9)
  assert product["product_gflop"] > 0 and product["unknown_loops"] == 0
  assert product["movement_gb"]["concatenate"] > 5 * grouped["movement_gb"]["concatenate"]
  assert product["patch_conv_gb"] == 0 < grouped["patch_conv_gb"]
  assert "| grouped |" in ok.out


@pytest.mark.parametrize("where, argv, says", [
    ("nodir/traffic.jsonl", [], "--out: folder '{tmp}/nodir' does not exist"),
    ("folder", [], "--out {tmp}/folder is a folder; give a file"),
    (None, ["--top", "-1"], "--top must be >= 0, got -1")])
def test_lowered_traffic_refuses_bad_flags_before_lowering(where, argv, says, tmp_path, capsys,
                                                           monkeypatch):
  """An --out that cannot take the lines (a missing folder was a
  FileNotFoundError after every batching was lowered and counted) and a
  negative --top, refused in one line before anything is lowered; nothing
  written."""
  import benchmark_modules  # pylint: disable=import-outside-toplevel
  module = benchmark_modules.load("lowered_traffic")
  monkeypatch.setattr(module, "lower", lambda *a: pytest.fail("lowered"))
  (tmp_path / "folder").mkdir()
  out = [] if where is None else ["--out", str(tmp_path / where)]
  with pytest.raises(SystemExit) as bad:
    module.main(["--batching", "product", "--clients", "2", *out, *argv])
  lines = capsys.readouterr().err.strip().splitlines()
  assert bad.value.code == 2 and len(lines) == 1, lines
  assert lines[0].endswith("error: " + says.format(tmp=tmp_path))
  assert sorted(p.name for p in tmp_path.rglob("*")) == ["folder"]  # nothing written
