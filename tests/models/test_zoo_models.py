"""The seeds' other models (issue 39): All-CNN-C, the IMDB CNN-LSTM, the EMNIST CNN.

Their weight counts (the thesis' where it gives one), shapes, the fast local
update against generic local SGD, All-CNN-C's dropout on the plain path, and
get_model's names and errors. Tiny cohorts (2 clients, 2 steps of batch 2).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_dp import local_training
from fedjax_dp.data import archives
from fedjax_dp.models import (DROPOUT_MODELS, MODELS, all_cnn_c, emnist_cnn, fast_train,
                              from_flax, get_model, imdb_cnn_lstm, svhn_cnn, zoo)

# name -> (builder, weights, logits per example, loss)
NEW = {
    "all-cnn-c": (all_cnn_c, 1_369_738, 10, "softmax_ce"),  # thesis l.2219
    "imdb-cnn-lstm": (imdb_cnn_lstm, 402_701, 1, "sigmoid_ce"),  # thesis l.2221
    "emnist-cnn": (emnist_cnn, 1_690_046, 62, "softmax_ce"),  # computed (this choice)
}


def _inputs(name, clients, samples, seed=0):
  """Random inputs of the model's sample shape: images in [0, 1) or tokens."""
  sample = zoo.ZOO[name][1]
  rng = np.random.default_rng(seed)
  shape = (clients, samples) + sample.shape[1:]
  if name == "all-cnn-c":  # every layer at 12x12 (12 -> 6 -> 3 -> 1), 1/7 of 32x32's FLOPs
    shape = (clients, samples, 12, 12, 3)
  if sample.dtype == np.int32:
    return jnp.asarray(rng.integers(0, zoo.IMDB_VOCAB, shape), jnp.int32)
  return jnp.asarray(rng.random(shape, np.float32))


@pytest.mark.parametrize("name", sorted(NEW))
def test_weight_counts_and_output_shapes(name):
  build, weights, out, loss = NEW[name]
  model = build()
  assert model.num_params == weights and model.name == name and model.loss_name == loss
  constructor, sample = zoo.ZOO[name]
  assert from_flax(constructor(), sample, loss=loss, fast=False).num_params == weights
  assert get_model(name).num_params == weights
  w = jax.ShapeDtypeStruct((weights,), jnp.float32)
  x = _inputs(name, 1, 3)[0]
  assert jax.eval_shape(model.eval_logits, w, x).shape == (3, out)
  assert jax.eval_shape(model.logits, w, x).shape == (3, out)


def test_existing_and_new_names_are_registered():
  assert {"cnn", "mlp", "lstm", "svhn-cnn", "all-cnn-c", "imdb-cnn-lstm",
          "emnist-cnn"} <= set(MODELS)
  assert {"mlp", "small-cnn", "svhn-cnn", "lstm", "all-cnn-c", "imdb-cnn-lstm",
          "emnist-cnn"} <= set(zoo.ZOO)
  assert DROPOUT_MODELS == ("mlp", "all-cnn-c")
  assert svhn_cnn().num_params == 3_431_754 and svhn_cnn().name == "svhn-cnn"
  assert svhn_cnn().local_update_fn is fast_train.local_update


def test_all_cnn_c_layers_and_imdb_constants():
  """Block 3's 3x3 convolution is 'valid' (8 -> 6, Springenberg's 6x6 average),
  the strided ones halve the size; the IMDB model's vocabulary and length are
  the data loader's."""
  module = zoo.AllCNNC()
  x = jnp.zeros((2, 32, 32, 3))
  variables = jax.eval_shape(module.init, jax.random.PRNGKey(0), x)
  _, state = jax.eval_shape(lambda v: module.apply(v, x, capture_intermediates=True,
                                                   mutable=["intermediates"]), variables)
  sizes = {k: v["__call__"][0].shape for k, v in state["intermediates"].items()
           if k.startswith("conv")}
  assert sizes == {"conv1": (2, 32, 32, 96), "conv2": (2, 32, 32, 96),
                   "conv3": (2, 16, 16, 96), "conv4": (2, 16, 16, 192),
                   "conv5": (2, 16, 16, 192), "conv6": (2, 8, 8, 192),
                   "conv7": (2, 6, 6, 192), "conv8": (2, 6, 6, 192), "conv9": (2, 6, 6, 10)}
  assert (zoo.IMDB_VOCAB, zoo.IMDB_LENGTH) == (archives.IMDB_VOCAB_SIZE,
                                               archives.IMDB_MAXLEN) == (5000, 400)
  imdb = zoo.ImdbCNNLSTM()
  assert (imdb.vocab, imdb.length, imdb.units) == (5000, 400, 70)
  with pytest.raises(ValueError, match=r"\(batch, 400\) tokens"):
    jax.eval_shape(imdb.init, jax.random.PRNGKey(0), jnp.zeros((1, 399), jnp.int32))


def _generic(model, w, steps, batch, lr):
  """Generic local SGD of ``model.loss``, vmapped over the clients."""
  return jax.jit(jax.vmap(lambda x, y, k: local_training.local_sgd(
      model.loss, w, x, y, k, steps=steps, batch_size=batch, lr=lr) - w))


def _fast(model, w, steps, batch, lr):
  return jax.jit(jax.vmap(lambda x, y, k: model.local_update(
      w, x, y, k, steps=steps, batch_size=batch, lr=lr)))


@pytest.mark.parametrize("name", sorted(NEW))
def test_fast_update_equals_local_sgd(name):
  """The round's vmap over 2 clients (the second padded to fewer rows than |B|);
  the reference is the plain model's (``fast=False``: the module's own ops,
  not the rewritten forward pass that the fast model's ``loss`` also runs)."""
  build, _, out, loss = NEW[name]
  model = build()
  constructor, sample = zoo.ZOO[name]
  plain = from_flax(constructor(), sample, loss=loss, fast=False)
  assert plain.shapes == model.shapes and plain.local_update_fn is None
  assert model.local_update_fn is fast_train.local_update and model.train_apply_fn is None
  x = _inputs(name, 2, 3)
  rng = np.random.default_rng(1)
  y = jnp.asarray(rng.integers(0, max(out, 2), (2, 3))).at[1, 1:].set(-1)
  k = jax.random.split(jax.random.PRNGKey(2), 2)
  w = jax.jit(model.init)(jax.random.PRNGKey(0))  # one program, not one per layer shape
  lr = 0.5 if name == "all-cnn-c" else 0.1  # All-CNN-C's first gradients are small
  ref = np.asarray(_generic(plain, w, 2, 2, lr)(x, y, k))
  got = np.asarray(_fast(model, w, 2, 2, lr)(x, y, k))
  scale = np.abs(ref).max()
  assert scale > 1e-4 and np.abs(ref[1]).max() > 1e-2 * scale  # both clients move
  np.testing.assert_allclose(got, ref, rtol=0, atol=1e-5 * scale)


def test_all_cnn_c_dropout_trains_on_the_plain_path():
  model = all_cnn_c(0.5)
  assert model.train_apply_fn is not None and model.local_update_fn is None
  assert model.num_params == 1_369_738 and "dropout 0.5" in model.name
  with pytest.raises(ValueError, match="dropout"):  # the fast path refuses it
    fast_train.local_update(model, jnp.zeros((model.num_params,)), jnp.zeros((2, 32, 32, 3)),
                            jnp.zeros((2,), jnp.int32), jax.random.PRNGKey(0), steps=1,
                            batch_size=2, lr=0.1)
  w = jax.jit(model.init)(jax.random.PRNGKey(0))
  x = _inputs("all-cnn-c", 1, 2)[0]
  y = jnp.array([3, 7])
  # Evaluation: no dropout, the dropout-free model's logits.
  plain = all_cnn_c()
  evaluate = jax.jit(model.eval_logits)
  np.testing.assert_array_equal(evaluate(w, x), evaluate(w, x))
  np.testing.assert_allclose(evaluate(w, x), jax.jit(plain.eval_logits)(w, x), rtol=1e-5,
                             atol=1e-6)
  # Training: two keys, two dropout draws; the same key, the same draw.
  k1, k2 = jax.random.PRNGKey(1), jax.random.PRNGKey(2)
  logits = jax.jit(model.train_apply_fn)
  a, b = logits(model.unflatten(w), x, k1), logits(model.unflatten(w), x, k2)
  np.testing.assert_array_equal(a, logits(model.unflatten(w), x, k1))
  assert np.abs(np.asarray(a) - np.asarray(b)).max() > 1e-3 * np.abs(np.asarray(a)).max()
  # The update through local_update (local_training.local_train with the keyed loss):
  # all |B| = 2 rows every step, so only the dropout differs between the keys.
  update = jax.jit(lambda m_key: model.local_update(w, x, y, m_key, steps=2, batch_size=2,
                                                    lr=0.5))
  u1, u2 = np.asarray(update(k1)), np.asarray(update(k2))
  scale = np.abs(u1).max()
  assert scale > 1e-4 and np.abs(u1 - u2).max() > 0.05 * scale
  np.testing.assert_array_equal(u1, np.asarray(update(k1)))


def test_get_model_dropout_and_errors():
  assert get_model("all-cnn-c", 0.5).train_apply_fn is not None
  assert get_model("mlp", 0.5).train_apply_fn is not None
  assert get_model("mlp").local_update_fn is fast_train.local_update
  assert get_model("all-cnn-c", 0.0).local_update_fn is fast_train.local_update
  assert get_model("cnn", 0.0).num_params == 1_663_370
  cases = [(("resnet",), "unknown model 'resnet'"),
           (("cnn", 0.5), "model 'cnn' has no dropout"),
           (("imdb-cnn-lstm", 0.2), "only mlp, all-cnn-c take one"),
           (("all-cnn-c", 1.0), r"dropout must be in \[0, 1\), got 1.0"),
           (("mlp", -0.1), r"dropout must be in \[0, 1\)"),
           (("lstm", 1.5), r"dropout must be in \[0, 1\)")]
  for args, says in cases:
    with pytest.raises(ValueError, match=says) as err:
      get_model(*args)
    assert "\n" not in str(err.value), args
  with pytest.raises(ValueError, match=r"\[0, 1\)"):
    all_cnn_c(-0.5)
