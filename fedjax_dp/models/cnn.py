"""The papers' Fashion-MNIST CNN (1,663,370 weights).

UAI 2021 FL-TOP paper, Appendix B.4 (after McMahan et al. 2016): two 5x5
convolutions (32 then 64 filters, 'same' padding, ReLU), each followed by 2x2
max pooling, a dense layer of 512 ReLU units and a 10-way softmax output.

The model trains through the same fast path as any ``from_flax`` model
(``fedjax_dp.models.fast_train``: per-client convolutions, the factored
dense layer). :class:`PaperCNN` is the same architecture as a flax module
(``nn.Conv`` / ``nn.Dense``); :func:`cnn_to_flax` and :func:`cnn_from_flax`
map the flat layout onto its variables and back. The :class:`FlatModel`
keeps its own init (Keras' glorot-uniform with this file's key splits) and
layout (patch-shaped convolution kernels, (25 * cin, cout)), as the
papers' records were made with them.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from fedjax_dp.models import fast_apply, fast_train
from fedjax_dp.models.flat import FlatModel, Params, glorot_uniform
from fedjax_dp.models.flax_model import layers_from_flax, layers_to_flax

_K = 5  # kernel size of both convolutions

CNN_SHAPES = (
    ("conv1_w", (_K * _K * 1, 32)),
    ("conv1_b", (32,)),
    ("conv2_w", (_K * _K * 32, 64)),
    ("conv2_b", (64,)),
    ("dense1_w", (7 * 7 * 64, 512)),
    ("dense1_b", (512,)),
    ("dense2_w", (512, 10)),
    ("dense2_b", (10,)),
)

# nn.Conv kernels are (row, col, cin, cout): the patch kernels' memory order.
_FLAX_KERNELS = {"conv1": (_K, _K, 1, 32), "conv2": (_K, _K, 32, 64),
                 "dense1": (7 * 7 * 64, 512), "dense2": (512, 10)}


class PaperCNN(nn.Module):
  """The paper CNN as a flax module: images (batch, 28, 28, 1) to 10 logits.

  Attributes:
    num_classes: Output logits: the papers' 10, or EMNIST's 62 for this
      simulator's ``emnist-cnn`` (``fedjax_dp.models.emnist_cnn``).
  """

  num_classes: int = 10

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    x = nn.relu(nn.Conv(32, (_K, _K), padding="SAME", name="conv1")(x))
    x = nn.max_pool(x, (2, 2), strides=(2, 2))
    x = nn.relu(nn.Conv(64, (_K, _K), padding="SAME", name="conv2")(x))
    x = nn.max_pool(x, (2, 2), strides=(2, 2))
    x = x.reshape(x.shape[0], -1)
    x = nn.relu(nn.Dense(512, name="dense1")(x))
    return nn.Dense(self.num_classes, name="dense2")(x)


def cnn_to_flax(params: Params) -> dict[str, Any]:
  """:class:`PaperCNN` variables of flat-layout parameters (:data:`CNN_SHAPES`)."""
  return layers_to_flax(params, _FLAX_KERNELS)


def cnn_from_flax(variables: dict[str, Any]) -> Params:
  """Flat-layout parameters of :class:`PaperCNN` variables."""
  return layers_from_flax(variables, CNN_SHAPES)


def _conv_same(x: jax.Array, w: jax.Array, b: jax.Array) -> jax.Array:
  """5x5 'same' convolution with a patch-layout kernel of shape (25*cin, cout)."""
  kernel = w.reshape(_K, _K, x.shape[-1], w.shape[-1])  # (row, col, cin): HWIO
  y = jax.lax.conv_general_dilated(x, kernel, (1, 1), "SAME",
                                   dimension_numbers=("NHWC", "HWIO", "NHWC"))
  return y + b


def cnn_apply(params: Params, x: jax.Array) -> jax.Array:
  """Logits of the paper CNN for images of shape (batch, 28, 28, 1)."""
  h = nn.max_pool(jax.nn.relu(_conv_same(x, params["conv1_w"], params["conv1_b"])), (2, 2),
                  strides=(2, 2))
  h = nn.max_pool(jax.nn.relu(_conv_same(h, params["conv2_w"], params["conv2_b"])), (2, 2),
                  strides=(2, 2))
  h = h.reshape(h.shape[0], -1)
  h = jax.nn.relu(h @ params["dense1_w"] + params["dense1_b"])
  return h @ params["dense2_w"] + params["dense2_b"]


def cnn_init(key: jax.Array) -> Params:
  """Glorot-uniform kernels and zero biases, as Keras' defaults."""
  k1, k2, k3, k4 = jax.random.split(key, 4)
  return {
      "conv1_w": glorot_uniform(k1, (25, 32), 25 * 1, 25 * 32),
      "conv1_b": jnp.zeros((32,), jnp.float32),
      "conv2_w": glorot_uniform(k2, (800, 64), 25 * 32, 25 * 64),
      "conv2_b": jnp.zeros((64,), jnp.float32),
      "dense1_w": glorot_uniform(k3, (3136, 512), 3136, 512),
      "dense1_b": jnp.zeros((512,), jnp.float32),
      "dense2_w": glorot_uniform(k4, (512, 10), 512, 10),
      "dense2_b": jnp.zeros((10,), jnp.float32),
  }


def paper_cnn() -> FlatModel:
  """The Fashion-MNIST CNN of UAI 2021 App. B.4 / thesis Sec. 8 (n = 1,663,370)."""
  return FlatModel("cnn", CNN_SHAPES, cnn_init, fast_apply.fast_apply(cnn_apply, CNN_SHAPES),
                   "softmax_ce", eval_apply_fn=cnn_apply,
                   local_update_fn=fast_train.local_update)
