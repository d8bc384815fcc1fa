"""The paper models: weight counts, flat view, both CNN forward paths."""

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_dp.models import get_model, medical_mlp, paper_cnn
from fedjax_dp.models.cnn import cnn_apply, cnn_apply_conv


def test_cnn_has_the_papers_weight_count():
  assert paper_cnn().num_params == 1_663_370
  assert paper_cnn().init(jax.random.PRNGKey(0)).shape == (1_663_370,)


def test_mlp_has_the_papers_weight_count():
  assert medical_mlp().num_params == 1_496_601


def test_flat_view_round_trips():
  model = paper_cnn()
  params = model.init_fn(jax.random.PRNGKey(1))
  back = model.unflatten(model.flatten(params))
  for name, _ in model.shapes:
    np.testing.assert_array_equal(back[name], params[name])


def test_patch_cnn_equals_native_convolution():
  model = paper_cnn()
  params = model.unflatten(model.init(jax.random.PRNGKey(2)))
  x = jax.random.uniform(jax.random.PRNGKey(3), (4, 28, 28, 1))
  np.testing.assert_allclose(cnn_apply(params, x), cnn_apply_conv(params, x),
                             rtol=1e-4, atol=1e-5)


def test_patch_conv_matches_reference_convolution():
  # conv1 alone against lax.conv with the kernel laid out (row, col, cin).
  from fedjax_dp.models.cnn import patches_5x5
  x = jax.random.normal(jax.random.PRNGKey(4), (2, 8, 8, 3))
  w = jax.random.normal(jax.random.PRNGKey(5), (5, 5, 3, 4))
  ref = jax.lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
  ours = patches_5x5(x) @ w.reshape(75, 4)
  np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-5)


def test_binary_mlp_predicts_and_scores():
  model = medical_mlp()
  w = model.init(jax.random.PRNGKey(0))
  x = jax.random.normal(jax.random.PRNGKey(1), (5, 7280))
  preds, scores = model.predict(w, x)
  np.testing.assert_array_equal(preds, (scores > 0).astype(jnp.int32))
  loss = model.loss(w, x, jnp.array([0, 1, 0, 1, 1]))
  assert np.isfinite(loss) and loss > 0


def test_unknown_model_is_rejected():
  import pytest
  with pytest.raises(ValueError, match="unknown model"):
    get_model("resnet")
