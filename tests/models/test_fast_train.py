"""The fast local training computes what generic local SGD computes.

On the paper CNN with real data (its dense layer factored, sparse under a
mask, or per-client copies), and on small flax models of every layer kind.
"""

import dataclasses
import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_dp import local_training
from fedjax_dp.compression import masks
from fedjax_dp.models import fast_train, from_flax


def _clients(small_federation, count=3):
  data, _, _ = small_federation
  return (data.x[:count].astype(jnp.float32) / 255.0, data.y[:count],
          jax.random.split(jax.random.PRNGKey(3), count))


def _generic(cnn, w, steps, lr, mask=None, momentum=None):
  return jax.jit(jax.vmap(lambda x, y, k: local_training.local_sgd(
      cnn.loss, w, x, y, k, steps=steps, batch_size=10, lr=lr, grad_mask=mask,
      momentum=momentum) - w))


def _fast(cnn, w, steps, lr, mask=None, indices=None, only=False, momentum=None):
  return jax.jit(jax.vmap(lambda x, y, k: cnn.local_update(
      w, x, y, k, steps=steps, batch_size=10, lr=lr, grad_mask=mask, grad_indices=indices,
      only_indices=only, momentum=momentum)))


def _one(update, *args, **kw):
  """``update(*args, **kw)`` for one client (no vmap), jitted: run eagerly, the
  fast path's many small ops cost 10 s of dispatch and compilation on the paper CNN."""
  return jax.jit(functools.partial(update, **kw))(*args)


def test_fast_update_equals_local_sgd(small_federation, cnn):
  assert cnn.local_update_fn is fast_train.local_update
  x, y, k = _clients(small_federation)
  w = cnn.init(jax.random.PRNGKey(0))
  ref = np.asarray(_generic(cnn, w, 3, 0.215)(x, y, k))  # the same trajectory
  new = np.asarray(_fast(cnn, w, 3, 0.215)(x, y, k))
  np.testing.assert_allclose(new, ref, rtol=0, atol=2e-5 * np.abs(ref).max())
  # One client without vmap: the same as under vmap.
  one = _one(cnn.local_update, w, x[1], y[1], k[1], steps=3, batch_size=10, lr=0.215)
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
  monkeypatch.setattr(fast_train, "FACTORED_MAX_ROWS", 29)
  copies = np.asarray(_fast(cnn, w, 3, 0.215)(x, y, k))
  forced = np.asarray(jax.jit(jax.vmap(lambda a, b, c: fast_train.local_update(
      cnn, w, a, b, c, steps=3, batch_size=10, lr=0.215, dense_form="per-client")))(x, y, k))
  np.testing.assert_array_equal(copies, forced)  # auto chose the per-client form
  assert not np.array_equal(copies, factored)  # a different computation ...
  for got in (factored, copies):  # ... of the same update
    np.testing.assert_allclose(got, ref, rtol=0, atol=2e-5 * np.abs(ref).max())
  one = lambda **kw: _one(functools.partial(fast_train.local_update, cnn), w, x[0], y[0],
                          k[0], steps=3, batch_size=10, lr=0.1, **kw)
  # Momentum in either form: the same trajectory up to round-off.
  moved = one(momentum=0.9, dense_form="factored")
  np.testing.assert_allclose(one(momentum=0.9, dense_form="per-client"), moved, rtol=0,
                             atol=2e-5 * np.abs(moved).max())
  assert not np.array_equal(one(momentum=0.9), one())
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
  # the momentum carries it: 1e-4 to 1.4e-3 of the largest update, in 0.03%
  # of the weights, as the compiler rounds; tests/conftest.py's LLVM -O0
  # flipped one); a wrong history weight would move every weight by ~10%.
  diff, scale = np.abs(new - ref), np.abs(ref).max()
  assert diff.max() < 1e-2 * scale and np.median(diff) < 1e-7 * scale
  assert np.mean(diff > 1e-5 * scale) < 1e-3
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


class _ConvNet(nn.Module):
  """Every layer kind the fast path rewrites: strided, dilated and 'VALID'
  convolutions, tiling max pooling, and a dense layer large enough to factor."""

  @nn.compact
  def __call__(self, x):
    x = nn.relu(nn.Conv(6, (3, 3), strides=(2, 2), padding="SAME")(x))  # 12x12
    x = nn.relu(nn.Conv(8, (3, 3), kernel_dilation=(2, 2), padding="VALID")(x))  # 8x8
    x = nn.max_pool(x, (2, 2), strides=(2, 2))  # 4x4
    x = nn.relu(nn.Dense(64)(x.reshape(x.shape[0], -1)))  # 128 x 64 kernel
    return nn.Dense(5)(x)


class _CharRNN(nn.Module):
  """Embedding, an LSTM under nn.RNN (a scan: bound unchanged), a dense head."""

  @nn.compact
  def __call__(self, x):
    h = nn.RNN(nn.OptimizedLSTMCell(16))(nn.Embed(12, 4)(x))
    return nn.Dense(12)(h[:, -1])


def _toy(module, x, classes, clients=3, samples=7, seed=0):
  fast = from_flax(module, x[:1])
  plain = from_flax(module, x[:1], fast=False)
  rng = np.random.default_rng(seed)
  xs = jnp.asarray(np.stack([np.asarray(x)] * clients))
  if xs.dtype == jnp.float32:
    xs = jnp.asarray(rng.random(xs.shape, np.float32))
  ys = jnp.asarray(rng.integers(0, classes, (clients, samples)))
  ys = ys.at[2, 5:].set(-1)  # a padded client, fewer rows than |B|
  return fast, plain, xs, ys, jax.random.split(jax.random.PRNGKey(seed + 1), clients)


def _cohort(model, w, steps=3, batch=6, lr=0.3, **kw):
  return jax.jit(jax.vmap(lambda x, y, k: model.local_update(
      w, x, y, k, steps=steps, batch_size=batch, lr=lr, **kw)))


@pytest.mark.parametrize("form", ["factored", "per-client"])
def test_generic_flax_cnn_trains_as_plain_vmap(monkeypatch, form):
  monkeypatch.setattr(fast_train, "FACTOR_MIN_SIZE", 1000)  # factor the 128 x 64 kernel
  fast, plain, x, y, k = _toy(_ConvNet(), jnp.zeros((7, 24, 24, 3)), 5)
  w = fast.init(jax.random.PRNGKey(0))
  ref = np.asarray(_cohort(plain, w)(x, y, k))
  got = np.asarray(jax.jit(jax.vmap(lambda a, b, c: fast_train.local_update(
      fast, w, a, b, c, steps=3, batch_size=6, lr=0.3, dense_form=form)))(x, y, k))
  np.testing.assert_allclose(got, ref, rtol=0, atol=1e-5 * np.abs(ref).max())
  assert np.abs(ref).max() > 1e-3
  # Momentum, and the same client alone (no vmap).
  ref_m = np.asarray(_cohort(plain, w, momentum=0.8)(x, y, k))
  got_m = np.asarray(_cohort(fast, w, momentum=0.8)(x, y, k))
  np.testing.assert_allclose(got_m, ref_m, rtol=0, atol=1e-5 * np.abs(ref_m).max())
  one = _one(fast.local_update, w, x[1], y[1], k[1], steps=3, batch_size=6, lr=0.3)
  np.testing.assert_allclose(one, ref[1], rtol=0, atol=1e-5 * np.abs(ref).max())


def test_generic_masked_update_sparse_and_per_client(monkeypatch):
  monkeypatch.setattr(fast_train, "FACTOR_MIN_SIZE", 1000)
  fast, plain, x, y, k = _toy(_ConvNet(), jnp.zeros((7, 24, 24, 3)), 5)
  n = fast.num_params
  w = fast.init(jax.random.PRNGKey(0))
  idx = masks.random_indices(jax.random.PRNGKey(7), n, n // 5)
  mask = masks.indices_to_mask(idx, n)
  ref = np.asarray(_cohort(plain, w, grad_mask=mask)(x, y, k))
  sparse = np.asarray(_cohort(fast, w, grad_mask=mask, grad_indices=idx)(x, y, k))
  on_t = np.asarray(_cohort(fast, w, grad_mask=mask, grad_indices=idx,
                            only_indices=True)(x, y, k))
  copies = np.asarray(_cohort(fast, w, grad_mask=mask)(x, y, k))  # no indices: per-client
  scale = np.abs(ref).max()
  for got in (sparse, copies):
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-5 * scale)
    np.testing.assert_array_equal(got[:, ~np.asarray(mask)], 0.0)
  np.testing.assert_allclose(on_t, ref[:, np.asarray(idx)], rtol=0, atol=1e-5 * scale)
  assert np.count_nonzero(on_t) > 0.3 * on_t.size


def test_generic_lstm_trains_as_plain_vmap():
  fast, plain, x, y, k = _toy(_CharRNN(), jnp.zeros((7, 9), jnp.int32), 12)
  x = jax.random.randint(jax.random.PRNGKey(5), x.shape, 0, 12)
  w = fast.init(jax.random.PRNGKey(0))
  ref = np.asarray(_cohort(plain, w)(x, y, k))
  got = np.asarray(_cohort(fast, w)(x, y, k))
  np.testing.assert_allclose(got, ref, rtol=0, atol=1e-5 * np.abs(ref).max())
  assert np.abs(ref).max() > 1e-3


def test_fast_update_refuses_bad_arguments(cnn):
  w = jnp.zeros((cnn.num_params,))
  x, y, key = jnp.zeros((4, 28, 28, 1)), jnp.zeros((4,), jnp.int32), jax.random.PRNGKey(0)
  call = lambda **kw: fast_train.local_update(cnn, w, x, y, key, steps=1, batch_size=2,
                                              lr=0.1, **kw)
  with pytest.raises(ValueError, match="only_indices needs grad_indices"):
    call(only_indices=True)
  with pytest.raises(ValueError, match="momentum"):
    call(grad_mask=jnp.ones((cnn.num_params,), bool), momentum=0.9)
  keyed = dataclasses.replace(cnn, train_apply_fn=lambda p, x, k: cnn.apply_fn(p, x))
  with pytest.raises(ValueError, match="dropout"):
    fast_train.local_update(keyed, w, x, y, key, steps=1, batch_size=2, lr=0.1)


def test_medical_mlp_trains_fast_with_its_sigmoid_loss():
  from fedjax_dp.models import medical_mlp
  model = medical_mlp()
  assert model.local_update_fn is fast_train.local_update
  w = model.init(jax.random.PRNGKey(0))
  x = jax.random.normal(jax.random.PRNGKey(1), (2, 6, 7280))
  y = jnp.array([[0, 1, 1, 0, 1, -1], [1, 1, 0, 0, 0, 1]])
  k = jax.random.split(jax.random.PRNGKey(2), 2)
  ref = np.asarray(jax.jit(jax.vmap(lambda a, b, c: local_training.local_sgd(
      model.loss, w, a, b, c, steps=3, batch_size=4, lr=0.1) - w))(x, y, k))
  got = np.asarray(_cohort(model, w, batch=4, lr=0.1)(x, y, k))
  np.testing.assert_allclose(got, ref, rtol=0, atol=1e-5 * np.abs(ref).max())
