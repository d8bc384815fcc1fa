"""The paper models (weight counts, flat view, CNN forward paths, flax modules); from_flax."""

import dataclasses
import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_dp.models import (MedicalMLP, PaperCNN, flat, from_flax, get_model, medical_mlp,
                               paper_cnn)
from fedjax_dp.models import fast_train
from fedjax_dp.models.cnn import CNN_SHAPES, cnn_apply, cnn_from_flax, cnn_to_flax
from fedjax_dp.models.mlp import MLP_SHAPES, MLP_SIZES, mlp_from_flax, mlp_to_flax


def test_cnn_has_the_papers_weight_count():
  assert paper_cnn().num_params == 1_663_370
  assert jax.eval_shape(paper_cnn().init, jax.random.PRNGKey(0)).shape == (1_663_370,)


def test_mlp_has_the_papers_weight_count():
  assert medical_mlp().num_params == 1_496_601


def test_flat_view_round_trips():
  model = paper_cnn()
  params = model.init_fn(jax.random.PRNGKey(1))
  back = model.unflatten(model.flatten(params))
  for name, _ in model.shapes:
    np.testing.assert_array_equal(back[name], params[name])


def test_binary_mlp_predicts_and_scores():
  model = medical_mlp()
  w = model.init(jax.random.PRNGKey(0))
  x = jax.random.normal(jax.random.PRNGKey(1), (5, 7280))
  preds, scores = model.predict(w, x)
  np.testing.assert_array_equal(preds, (scores > 0).astype(jnp.int32))
  loss = model.loss(w, x, jnp.array([0, 1, 0, 1, 1]))
  assert np.isfinite(loss) and loss > 0


def test_unknown_model_is_rejected():
  with pytest.raises(ValueError, match="unknown model"):
    get_model("resnet")


def _f64_sums(a):
  a = np.asarray(a, np.float64)
  return a.sum(), np.abs(a).sum()


def test_paper_models_keep_their_numbers():
  # Sums computed with the pre-flax code (same keys, same inputs), to 1e-9 of
  # the sum of magnitudes: float32 round-off of the initialisers' arithmetic
  # as the compiler orders it (tests/conftest.py compiles at LLVM -O0: 5e-6 on
  # the CNN's signed sum), while any change of key, scale or layout moves a
  # sum by far more.
  cnn, mlp = paper_cnn(), medical_mlp()
  wc, wm = cnn.init(jax.random.PRNGKey(7)), mlp.init(jax.random.PRNGKey(7))
  for w, sums in ((wc, (11.164829790191835, 34143.22189361453)),
                  (wm, (13.092187004226199, 23091.46141376974))):
    np.testing.assert_allclose(_f64_sums(w), sums, rtol=0, atol=1e-9 * sums[1])
  xc = jax.random.uniform(jax.random.PRNGKey(3), (4, 28, 28, 1))
  xm = jax.random.normal(jax.random.PRNGKey(3), (4, 7280))
  np.testing.assert_allclose(_f64_sums(cnn.logits(wc, xc)), (0.6616644484456629, 3.820536505198106),
                             rtol=1e-5)
  np.testing.assert_allclose(mlp.logits(wm, xm).sum(), -2.0022222995758057, rtol=1e-5)
  # The CNN trains through the generic fast path and evaluates natively.
  assert cnn.eval_apply_fn is cnn_apply and cnn.local_update_fn is fast_train.local_update
  np.testing.assert_allclose(cnn.eval_logits(wc, xc), cnn.logits(wc, xc), rtol=1e-6)


def test_paper_cnn_module_computes_the_flat_models_function():
  model = paper_cnn()
  params = model.unflatten(model.init(jax.random.PRNGKey(2)))
  x = jax.random.uniform(jax.random.PRNGKey(3), (4, 28, 28, 1))
  variables = cnn_to_flax(params)
  want = jax.eval_shape(PaperCNN().init, jax.random.PRNGKey(0), x)
  assert jax.tree.map(jnp.shape, variables) == jax.tree.map(jnp.shape, want)
  out = PaperCNN().apply(variables, x)
  np.testing.assert_allclose(out, cnn_apply(params, x), rtol=1e-5, atol=1e-6)
  back = cnn_from_flax(variables)
  assert list(back) == [name for name, _ in CNN_SHAPES]
  np.testing.assert_array_equal(model.flatten(back), model.flatten(params))


def _mlp_reference(params, x):
  """The pre-flax forward pass of the medical MLP."""
  h = x.reshape(x.shape[0], -1)
  layers = len(MLP_SIZES) - 1
  for i in range(1, layers + 1):
    h = h @ params[f"dense{i}_w"] + params[f"dense{i}_b"]
    if i < layers:
      h = jax.nn.relu(h)
  return h


def test_medical_mlp_module_is_bit_identical_to_the_matrix_products():
  model = medical_mlp()
  reference = dataclasses.replace(model, apply_fn=_mlp_reference)
  # Perturbed so that the biases are nonzero.
  w = model.init(jax.random.PRNGKey(0))
  w = w + 0.01 * jax.random.normal(jax.random.PRNGKey(1), w.shape)
  x = jax.random.normal(jax.random.PRNGKey(2), (2, 16, 7280))
  y = (jax.random.uniform(jax.random.PRNGKey(3), (2, 16)) > 0.5).astype(jnp.int32)
  np.testing.assert_array_equal(model.logits(w, x[0]), reference.logits(w, x[0]))
  grads = [jax.jit(jax.vmap(jax.grad(m.loss), (None, 0, 0)))(w, x, y) for m in (model, reference)]
  np.testing.assert_array_equal(*grads)
  variables = mlp_to_flax(model.unflatten(w))
  np.testing.assert_array_equal(MedicalMLP().apply(variables, x[0]), reference.logits(w, x[0]))
  assert list(mlp_from_flax(variables)) == [name for name, _ in MLP_SHAPES]
  np.testing.assert_array_equal(model.flatten(mlp_from_flax(variables)), w)


class _UserMLP(nn.Module):
  """A user-defined two-layer MLP with nested parameter scopes."""
  classes: int = 10

  @nn.compact
  def __call__(self, x):
    x = x.reshape(x.shape[0], -1)
    x = nn.relu(nn.Dense(32, name="hidden")(x))
    return nn.Dense(self.classes, name="out")(x)


def test_from_flax_round_trips_a_user_module():
  module = _UserMLP()
  x = jax.random.uniform(jax.random.PRNGKey(0), (6, 28, 28, 1))
  y = jnp.arange(6) % 10
  model = from_flax(module, x[:1])
  assert model.name == "_UserMLP" and model.loss_name == "softmax_ce"
  assert [name for name, _ in model.shapes] == ["hidden/bias", "hidden/kernel", "out/bias",
                                                "out/kernel"]
  assert model.num_params == 784 * 32 + 32 + 32 * 10 + 10
  key = jax.random.PRNGKey(1)
  w = model.init(key)
  assert w.shape == (model.num_params,) and w.dtype == jnp.float32
  flax_params = module.init(key, x[:1])["params"]
  np.testing.assert_array_equal(model.unflatten(w)["hidden/kernel"],
                                flax_params["hidden"]["kernel"])
  np.testing.assert_array_equal(model.flatten(model.unflatten(w)), w)
  np.testing.assert_array_equal(jax.jit(model.logits)(w, x),
                                jax.jit(module.apply)({"params": flax_params}, x))
  loss, grad = jax.jit(jax.value_and_grad(model.loss))(w, x, y)
  assert np.isfinite(loss) and np.any(grad != 0)


def test_from_flax_binary_model():
  model = from_flax(_UserMLP(classes=1), jnp.zeros((1, 5)), loss="sigmoid_ce", name="bin")
  w = model.init(jax.random.PRNGKey(0))
  x = jax.random.normal(jax.random.PRNGKey(1), (4, 5))
  preds, scores = model.predict(w, x)
  assert model.name == "bin" and preds.shape == scores.shape == (4,)
  assert np.isfinite(model.loss(w, x, jnp.array([0, 1, 1, 0])))


class _WithBatchNorm(nn.Module):

  @nn.compact
  def __call__(self, x):
    return nn.BatchNorm(use_running_average=False)(nn.Dense(3)(x))


class _WithDropout(nn.Module):

  @nn.compact
  def __call__(self, x):
    return nn.Dense(3)(nn.Dropout(0.5, deterministic=False)(x))


class _TwoOutputs(nn.Module):

  @nn.compact
  def __call__(self, x):
    return nn.Dense(3)(x), nn.Dense(2)(x)


class _IntegerParam(nn.Module):

  @nn.compact
  def __call__(self, x):
    return nn.Dense(3)(x) + self.param("count", lambda k: jnp.zeros((), jnp.int32))


@pytest.mark.parametrize("module, loss, match", [
    (_UserMLP(), "mse", "loss must be one of"),
    (_WithBatchNorm(), "softmax_ce", "only stateless modules are supported"),
    (_WithDropout(), "softmax_ce", r"^_WithDropout draws random numbers as it runs \(dropout\?\)"),
    (_TwoOutputs(), "softmax_ce", "^_TwoOutputs returns tuple, not one array of logits$"),
    (_IntegerParam(), "softmax_ce", r"^_IntegerParam has parameters that are not floats \(count\)"),
    (_UserMLP(), "sigmoid_ce", r"needs logits of shape \(batch, 1\)"),
    (_UserMLP(classes=1), "softmax_ce", r"needs logits of shape \(batch, classes >= 2\)"),
])
def test_from_flax_rejects_what_it_cannot_wrap(module, loss, match):
  with pytest.raises(ValueError, match=match):
    from_flax(module, jnp.zeros((2, 5)), loss=loss)


def test_loss_ignores_padding_rows_and_both_losses_match_references():
  """Rows labelled -1 count for nothing in either cross-entropy; the real
  rows' loss is the textbook formula (log-softmax, log-sigmoid)."""
  logits = jnp.array([[2.0, -1.0, 0.5], [0.1, 0.2, 0.3], [5.0, 5.0, -9.0]])
  y = jnp.array([0, 2, -1])
  ce = float(flat.cross_entropy(logits, y, "softmax_ce"))
  ref = -np.mean([np.log(np.exp(2.0) / np.exp([2.0, -1.0, 0.5]).sum()),
                  np.log(np.exp(0.3) / np.exp([0.1, 0.2, 0.3]).sum())])
  assert abs(ce - ref) < 1e-6
  z = jnp.array([[1.5], [-0.3], [40.0]])
  yb = jnp.array([1, 0, -1])
  bce = float(flat.cross_entropy(z, yb, "sigmoid_ce"))
  ref_b = -np.mean([np.log(1 / (1 + np.exp(-1.5))), np.log(1 - 1 / (1 + np.exp(0.3)))])
  assert abs(bce - ref_b) < 1e-6
  assert float(flat.cross_entropy(z, jnp.array([-1, -1, -1]), "sigmoid_ce")) == 0.0


def test_medical_mlp_dropout_trains_differently_and_evaluates_deterministically():
  """--dropout: local training draws dropout masks (the update changes with
  the rate and with the key), evaluation does not (the same logits)."""
  plain, dropped = medical_mlp(), medical_mlp(0.5)
  assert dropped.num_params == plain.num_params == 1_496_601
  w = plain.init(jax.random.PRNGKey(0))
  x = jax.random.bernoulli(jax.random.PRNGKey(1), 0.05, (12, 7280)).astype(jnp.float32)
  y = jnp.arange(12) % 2
  np.testing.assert_array_equal(plain.logits(w, x), dropped.logits(w, x))
  # Jitted (one program per model and setting; eagerly, the fast path's
  # small ops compile one by one, 170 compilations).
  update = lambda model, **kw: jax.jit(functools.partial(model.local_update, **kw))
  kw = dict(steps=3, batch_size=6, lr=0.1)
  u0 = update(plain, **kw)(w, x, y, jax.random.PRNGKey(2))
  dropped_update = update(dropped, **kw)
  u1 = dropped_update(w, x, y, jax.random.PRNGKey(2))
  u2 = dropped_update(w, x, y, jax.random.PRNGKey(3))
  assert float(jnp.abs(u1 - u0).max()) > 1e-4 and float(jnp.abs(u2 - u1).max()) > 1e-4
  # One step on one example (dropout masks are drawn per example): the
  # dropped half of the first hidden layer gets no gradient, so about half as
  # many units move as without dropout.
  one = dict(steps=1, batch_size=1, lr=0.1)

  def moved(model):
    u = update(model, **one)(w, x, y, jax.random.PRNGKey(2))
    return np.asarray(jnp.any(model.unflatten(u)["dense1_w"] != 0, axis=0)).mean()

  assert moved(plain) > 0.2 and 0.3 < moved(dropped) / moved(plain) < 0.7
  with pytest.raises(ValueError, match="dropout must be in"):
    medical_mlp(1.0)
