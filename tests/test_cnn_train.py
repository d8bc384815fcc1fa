"""The fast CNN local training computes what generic local SGD computes."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_dp import client
from fedjax_dp.compression import masks
from fedjax_dp.models import cnn_train


def _clients(small_federation, count=3):
  data, _, _ = small_federation
  return (data.x[:count].astype(jnp.float32) / 255.0, data.y[:count],
          jax.random.split(jax.random.PRNGKey(3), count))


def _generic(cnn, w, steps, lr, mask=None, momentum=None):
  return jax.jit(jax.vmap(lambda x, y, k: client.local_sgd(
      cnn.loss, w, x, y, k, steps=steps, batch_size=10, lr=lr, grad_mask=mask,
      momentum=momentum) - w))


def _fast(cnn, w, steps, lr, mask=None, indices=None, only=False, momentum=None):
  return jax.jit(jax.vmap(lambda x, y, k: cnn.local_update(
      w, x, y, k, steps=steps, batch_size=10, lr=lr, grad_mask=mask, grad_indices=indices,
      only_indices=only, momentum=momentum)))


def test_fast_update_equals_local_sgd(small_federation, cnn):
  assert cnn.local_update_fn is not None
  x, y, k = _clients(small_federation)
  w = cnn.init(jax.random.PRNGKey(0))
  ref = np.asarray(_generic(cnn, w, 3, 0.215)(x, y, k))  # the same trajectory
  new = np.asarray(_fast(cnn, w, 3, 0.215)(x, y, k))
  np.testing.assert_allclose(new, ref, rtol=0, atol=2e-5 * np.abs(ref).max())
  # One client without vmap: the same as under vmap.
  one = cnn.local_update(w, x[1], y[1], k[1], steps=3, batch_size=10, lr=0.215)
  np.testing.assert_allclose(one, new[1], rtol=0, atol=1e-6 * np.abs(ref).max())


def test_long_training_switches_to_per_client_copies_with_the_same_update(
    small_federation, cnn, monkeypatch):
  """Beyond FACTORED_MAX_ROWS history rows the dense layer is trained as a
  per-client copy: the generic trajectory either way, and without momentum
  only (momentum keeps the factored form)."""
  x, y, k = _clients(small_federation)
  w = cnn.init(jax.random.PRNGKey(0))
  ref = np.asarray(_generic(cnn, w, 3, 0.215)(x, y, k))
  factored = np.asarray(_fast(cnn, w, 3, 0.215)(x, y, k))  # 30 rows
  monkeypatch.setattr(cnn_train, "FACTORED_MAX_ROWS", 29)
  copies = np.asarray(_fast(cnn, w, 3, 0.215)(x, y, k))
  forced = np.asarray(jax.jit(jax.vmap(lambda a, b, c: cnn_train.cnn_local_update(
      cnn, w, a, b, c, steps=3, batch_size=10, lr=0.215, dense_form="per-client")))(x, y, k))
  np.testing.assert_array_equal(copies, forced)  # auto chose the per-client form
  assert not np.array_equal(copies, factored)  # a different computation ...
  for got in (factored, copies):  # ... of the same update
    np.testing.assert_allclose(got, ref, rtol=0, atol=2e-5 * np.abs(ref).max())
  one = lambda **kw: cnn_train.cnn_local_update(cnn, w, x[0], y[0], k[0], steps=3,
                                                batch_size=10, lr=0.1, **kw)
  # Momentum keeps the factored form however long (the copies have none).
  np.testing.assert_array_equal(one(momentum=0.9), one(momentum=0.9, dense_form="factored"))
  assert not np.array_equal(one(momentum=0.9), one())
  with pytest.raises(ValueError, match="momentum needs the factored"):
    one(momentum=0.9, dense_form="per-client")
  with pytest.raises(ValueError, match="unknown dense_form 'dense'"):
    one(dense_form="dense")


def test_fast_momentum_update_equals_momentum_sgd(small_federation, cnn):
  """Heavy-ball momentum (Fed-SMP's local optimiser) through the factored
  dense layer: the same trajectory as optax momentum SGD; without momentum
  the result differs (so the momentum is applied), and a mask is refused."""
  x, y, k = _clients(small_federation)
  w = cnn.init(jax.random.PRNGKey(0))
  ref = np.asarray(_generic(cnn, w, 4, 0.05, momentum=0.9)(x, y, k))
  new = np.asarray(_fast(cnn, w, 4, 0.05, momentum=0.9)(x, y, k))
  # float32 round-off through 4 steps (a few ReLU / max-pool ties flip and
  # the momentum carries it: 1e-4 of the largest update at most, in 0.01% of
  # the weights); a wrong history weight would move every weight by ~10%.
  diff, scale = np.abs(new - ref), np.abs(ref).max()
  assert diff.max() < 1e-3 * scale and np.median(diff) < 1e-7 * scale
  plain = np.asarray(_fast(cnn, w, 4, 0.05)(x, y, k))
  assert np.abs(plain - ref).max() > 0.1 * np.abs(ref).max()
  mask = jnp.ones((cnn.num_params,), bool)
  with pytest.raises(ValueError, match="momentum"):
    cnn.local_update(w, x[0], y[0], k[0], steps=2, batch_size=10, lr=0.1, grad_mask=mask,
                     momentum=0.9)


def test_fast_masked_update_keeps_off_mask_weights_exactly(small_federation, cnn):
  x, y, k = _clients(small_federation)
  n = cnn.num_params
  w = cnn.init(jax.random.PRNGKey(0))
  idx = masks.random_indices(jax.random.PRNGKey(7), n, 8317)
  mask = masks.indices_to_mask(idx, n)
  ref = np.asarray(_generic(cnn, w, 3, 0.215, mask)(x, y, k))
  dense = np.asarray(_fast(cnn, w, 3, 0.215, mask)(x, y, k))  # per-client dense layer
  sparse = np.asarray(_fast(cnn, w, 3, 0.215, mask, idx)(x, y, k))  # values on T only
  on_t = np.asarray(_fast(cnn, w, 3, 0.215, mask, idx, only=True)(x, y, k))
  scale = np.abs(ref).max()
  for got in (dense, sparse):
    np.testing.assert_allclose(got, ref, rtol=0, atol=2e-5 * scale)
    np.testing.assert_array_equal(got[:, ~np.asarray(mask)], 0.0)  # UAI Alg. 2, bit-exact
  np.testing.assert_allclose(on_t, ref[:, np.asarray(idx)], rtol=0, atol=2e-5 * scale)
  assert np.count_nonzero(on_t) > 0.5 * on_t.size


def test_pool_bias_relu_matches_pool_after_relu_with_ties():
  z = jax.random.normal(jax.random.PRNGKey(0), (2, 8, 8, 3))
  z = z.at[0, :2, :2, :].set(0.5).at[1, 2:4, 2:4, 1].set(-0.2)  # tied windows
  b = jnp.array([0.1, 0.3, -0.1])
  g = jax.random.normal(jax.random.PRNGKey(2), (2, 4, 4, 3))

  def reference(z, b):
    bsz, h, w, c = z.shape
    return jax.nn.relu(z + b).reshape(bsz, h // 2, 2, w // 2, 2, c).max(axis=(2, 4))

  ref_out, ref_vjp = jax.vjp(reference, z, b)
  out, vjp = jax.vjp(cnn_train.pool_bias_relu, z, b)
  np.testing.assert_array_equal(out, ref_out)
  for got, want in zip(vjp(g), ref_vjp(g)):
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


def test_conv_gradients_match_autodiff_of_lax_conv():
  x = jax.random.normal(jax.random.PRNGKey(4), (3, 8, 8, 4))
  w = jax.random.normal(jax.random.PRNGKey(5), (5, 5, 4, 6))
  g = jax.random.normal(jax.random.PRNGKey(6), (3, 8, 8, 6))

  def reference(x, w):
    return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"))

  ref_out, ref_vjp = jax.vjp(reference, x, w)
  out, vjp = jax.vjp(cnn_train.conv5x5, x, w)
  np.testing.assert_allclose(out, ref_out, rtol=1e-5, atol=1e-4)
  for got, want in zip(vjp(g), ref_vjp(g)):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-3)
  # Per-client weights under vmap (a lax.map over clients) as well.
  xs, ws = jnp.stack([x, 2 * x]), jnp.stack([w, -w])
  batched = jax.vmap(cnn_train.conv5x5)(xs, ws)
  np.testing.assert_allclose(batched[1], reference(2 * x, -w), rtol=1e-5, atol=1e-4)


def test_fast_update_on_padded_clients_equals_local_sgd_and_ignores_padding(
    small_federation, cnn):
  """Clients padded with label -1 rows (unequal sizes): the fast path trains
  as generic local SGD does; the padding never moves the weights (replacing
  its pixels changes nothing), and a client smaller than |B| trains on its
  real rows only."""
  x, y, k = _clients(small_federation)
  sizes = jnp.array([10, 7, 4])  # client 2 holds fewer than |B| = 10
  real = jnp.arange(x.shape[1])[None, :] < sizes[:, None]
  y_pad = jnp.where(real, y, -1)
  x_pad = jnp.where(real[..., None, None, None], x, 0.0)
  w = cnn.init(jax.random.PRNGKey(0))
  fast = _fast(cnn, w, 3, 0.215)  # one compilation for the three calls
  ref = np.asarray(_generic(cnn, w, 3, 0.215)(x_pad, y_pad, k))
  new = np.asarray(fast(x_pad, y_pad, k))
  np.testing.assert_allclose(new, ref, rtol=0, atol=2e-5 * np.abs(ref).max())
  noisy = jnp.where(real[..., None, None, None], x, 0.7)
  other = np.asarray(fast(noisy, y_pad, k))
  np.testing.assert_array_equal(other, new)
  # Client 0 holds all its rows: the same update as without padding labels.
  plain = np.asarray(fast(x, y, k))
  np.testing.assert_array_equal(new[0], plain[0])
  assert np.abs(new[1] - plain[1]).max() > 1e-3 * np.abs(plain).max()
