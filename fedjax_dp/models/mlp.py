"""The medical MLP of the UAI 2021 paper (1,496,601 weights).

UAI 2021 FL-TOP paper, Appendix A.3 / thesis Section 8.3: a fully connected
network 7280 -> 200 -> 200 -> 1 with ReLU hidden units and a sigmoid output,
trained with binary cross-entropy on the in-hospital mortality task.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from fedjax_dp.models.flat import FlatModel, Params, glorot_uniform

MLP_SIZES = (7280, 200, 200, 1)

MLP_SHAPES = tuple(
    item for i, (a, b) in enumerate(zip(MLP_SIZES[:-1], MLP_SIZES[1:]))
    for item in ((f"dense{i + 1}_w", (a, b)), (f"dense{i + 1}_b", (b,))))


def mlp_apply(params: Params, x: jax.Array) -> jax.Array:
  """Logit of class 1 for features of shape (batch, 7280), shape (batch, 1)."""
  h = x.reshape(x.shape[0], -1)
  layers = len(MLP_SIZES) - 1
  for i in range(1, layers + 1):
    h = h @ params[f"dense{i}_w"] + params[f"dense{i}_b"]
    if i < layers:
      h = jax.nn.relu(h)
  return h


def mlp_init(key: jax.Array) -> Params:
  """Glorot-uniform kernels and zero biases, as Keras' defaults."""
  params = {}
  keys = jax.random.split(key, len(MLP_SIZES) - 1)
  for i, (a, b) in enumerate(zip(MLP_SIZES[:-1], MLP_SIZES[1:])):
    params[f"dense{i + 1}_w"] = glorot_uniform(keys[i], (a, b), a, b)
    params[f"dense{i + 1}_b"] = jnp.zeros((b,), jnp.float32)
  return params


def medical_mlp() -> FlatModel:
  """The medical-data MLP (n = 1,496,601), binary output."""
  return FlatModel("mlp", MLP_SHAPES, mlp_init, mlp_apply, "sigmoid_ce")
