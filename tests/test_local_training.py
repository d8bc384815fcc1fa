"""Local training: masked SGD (UAI Alg. 2) and Top-K selection (UAI Sec. 3.1)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

from fedjax_dp import local_training
from fedjax_dp.compression import masks
from tiny_model import tiny_linear


def _client_batch(small_federation, k=0):
  data, _, _ = small_federation
  return data.x[k].astype(jnp.float32) / 255.0, data.y[k]


def test_masked_sgd_leaves_every_non_topk_weight_exactly_at_w0(small_federation, cnn):
  x, y = _client_batch(small_federation)
  w0 = cnn.init(jax.random.PRNGKey(0))
  _, _, (px, py) = small_federation
  scores = local_training.accumulated_abs_gradients(cnn.loss, w0, px, py, steps=5, lr=0.215)
  idx = masks.topk_indices(scores, 8317)
  mask = masks.indices_to_mask(idx, cnn.num_params)
  w = jax.jit(functools.partial(local_training.local_sgd, cnn.loss, steps=5, batch_size=10,
                                lr=0.215))(w0, x, y, jax.random.PRNGKey(1), grad_mask=mask)
  w, w0, mask = np.asarray(w), np.asarray(w0), np.asarray(mask)
  np.testing.assert_array_equal(w[~mask], w0[~mask])  # bit-exact
  assert np.count_nonzero(w[mask] != w0[mask]) > 0.9 * mask.sum()


def test_unmasked_sgd_moves_weights_and_lowers_the_loss(small_federation, cnn):
  x, y = _client_batch(small_federation, 3)
  w0 = cnn.init(jax.random.PRNGKey(0))
  w = local_training.local_sgd(cnn.loss, w0, x, y, jax.random.PRNGKey(1), steps=5,
                       batch_size=10, lr=0.215)
  assert cnn.loss(w, x, y) < cnn.loss(w0, x, y)
  assert np.count_nonzero(np.asarray(w != w0)) > 0.5 * cnn.num_params


def test_accumulated_gradients_match_a_manual_loop(small_federation):
  _, _, (px, py) = small_federation
  cnn = tiny_linear()  # any model: the accumulation is model-agnostic
  w = cnn.init(jax.random.PRNGKey(2))
  acc = jnp.zeros_like(w)
  for _ in range(3):
    g = jax.grad(cnn.loss)(w, px, py)
    acc, w = acc + jnp.abs(g), w - 0.1 * g
  ours = local_training.accumulated_abs_gradients(cnn.loss, cnn.init(jax.random.PRNGKey(2)),
                                          px, py, steps=3, lr=0.1)
  np.testing.assert_allclose(ours, acc, rtol=1e-4, atol=1e-7)
  top = set(np.asarray(masks.topk_indices(ours, 100)).tolist())
  assert top == set(np.argsort(-np.asarray(acc))[:100].tolist())


def test_sample_batch_draws_real_rows_first():
  """A client of `count` real rows padded to `num`: batches hold real rows
  only while count >= |B|, all of them otherwise; count == num is the
  unpadded draw."""
  client_lib = local_training
  keys = jax.random.split(jax.random.PRNGKey(0), 200)
  for key in keys[:50]:
    idx = np.asarray(client_lib.sample_batch(key, 20, 5, jnp.int32(8)))
    assert len(set(idx)) == 5 and idx.max() < 8
    small = np.asarray(client_lib.sample_batch(key, 20, 5, jnp.int32(3)))
    assert set(range(3)) <= set(small) and len(set(small)) == 5
    np.testing.assert_array_equal(client_lib.sample_batch(key, 20, 5, jnp.int32(20)),
                                  client_lib.sample_batch(key, 20, 5))
  # Every real row is drawn equally often: chi-square against uniform over the
  # 8 accepted, against a draw favouring one row 1.3 : 1 rejected.
  many = jax.random.split(jax.random.PRNGKey(1), 2000)
  drawn = jax.vmap(lambda k: client_lib.sample_batch(k, 20, 5, jnp.int32(8)))(many)
  counts = np.bincount(np.asarray(drawn).ravel(), minlength=20)
  assert counts[8:].sum() == 0 and counts.sum() == 10_000
  uniform = np.full(8, 10_000 / 8)
  favoured = np.array([1.3] + [1.0] * 7) / 8.3 * 10_000
  assert stats.chisquare(counts[:8], uniform).pvalue > 1e-3
  assert stats.chisquare(counts[:8], favoured).pvalue < 1e-6


def test_the_losss_key_is_independent_of_the_steps_batch():
  """Dropout draws from ``loss_key(step_key)``; the batch from ``step_key``,
  whose permutation sorts by ``split(step_key)[1]``. The old loss key,
  ``fold_in(step_key, 1)``, is that very key under partitionable threefry:
  the uniforms it drew at the batched rows averaged 0.15, not 0.5. Over
  2,000 steps the new key's uniforms at the batched rows average 0.5
  (z < 4.5), and the key is neither child of ``split(step_key)``."""
  step_keys = jax.random.split(jax.random.PRNGKey(7), 2000)

  def at_batch(step_key):
    batch = local_training.sample_batch(step_key, 20, 5)
    return jax.random.uniform(local_training.loss_key(step_key), (20,))[batch]

  u = np.asarray(jax.vmap(at_batch)(step_keys), np.float64).ravel()
  assert abs(u.mean() - 0.5) / (np.sqrt(1 / 12) / np.sqrt(u.size)) < 4.5
  loss, children = local_training.loss_key(step_keys[0]), jax.random.split(step_keys[0])
  assert not any(bool(jnp.all(loss == c)) for c in children)
