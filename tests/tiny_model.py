"""A 7,850-weight linear softmax model: fast rounds for the aggregation tests."""

import jax
import jax.numpy as jnp

from fedjax_dp.models.flat import FlatModel


def _init(key):
  return {"w": 0.01 * jax.random.normal(key, (784, 10)), "b": jnp.zeros((10,))}


def _apply(params, x):
  return x.reshape(x.shape[0], -1) @ params["w"] + params["b"]


def tiny_linear() -> FlatModel:
  """Softmax regression on flattened 28x28 images."""
  return FlatModel("tiny-linear", (("w", (784, 10)), ("b", (10,))), _init, _apply)
