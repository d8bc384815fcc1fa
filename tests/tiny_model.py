"""A 7,850-weight linear softmax model: fast rounds for the aggregation tests."""

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_dp.data import ClientData
from fedjax_dp.models.flat import FlatModel


def _init(key):
  return {"w": 0.01 * jax.random.normal(key, (784, 10)), "b": jnp.zeros((10,))}


def _apply(params, x):
  return x.reshape(x.shape[0], -1) @ params["w"] + params["b"]


def tiny_linear() -> FlatModel:
  """Softmax regression on flattened 28x28 images."""
  return FlatModel("tiny-linear", (("w", (784, 10)), ("b", (10,))), _init, _apply)


def random_clients(num_clients: int = 40, seed: int = 0) -> ClientData:
  """``num_clients`` clients of 6 random 28x28 uint8 images and labels."""
  rng = np.random.default_rng(seed)
  return ClientData(
      jnp.asarray(rng.integers(0, 256, (num_clients, 6, 28, 28, 1), dtype=np.uint8)),
      jnp.asarray(rng.integers(0, 10, (num_clients, 6), dtype=np.int32)))


def random_public(seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
  """A public batch of 10 random images in [0, 1) and labels."""
  rng = np.random.default_rng(seed)
  return rng.random((10, 28, 28, 1), dtype=np.float32), rng.integers(0, 10, 10).astype(np.int32)
