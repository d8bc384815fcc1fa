"""The medical MLP of the UAI 2021 paper (1,496,601 weights).

UAI 2021 FL-TOP paper, Appendix A.3 / thesis Section 8.3: a fully connected
network 7280 -> 200 -> 200 -> 1 with ReLU hidden units and a sigmoid output,
trained with binary cross-entropy on the in-hospital mortality task.

The architecture is the flax module :class:`MedicalMLP`; :func:`mlp_to_flax`
and :func:`mlp_from_flax` map the flat layout onto its variables and back.
The :class:`FlatModel` keeps its own init (Keras' glorot-uniform with this
file's key splits) and applies the module.
"""

from __future__ import annotations

import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from fedjax_dp.models import fast_train
from fedjax_dp.models.flat import FlatModel, Params, glorot_uniform
from fedjax_dp.models.flax_model import layers_from_flax, layers_to_flax

MLP_SIZES = (7280, 200, 200, 1)

MLP_SHAPES = tuple(
    item for i, (a, b) in enumerate(zip(MLP_SIZES[:-1], MLP_SIZES[1:]))
    for item in ((f"dense{i + 1}_w", (a, b)), (f"dense{i + 1}_b", (b,))))


class MedicalMLP(nn.Module):
  """The medical MLP as a flax module: features to the logit of class 1.

  Attributes:
    dropout: Rate of the dropout after each hidden layer in training mode
      (thesis Sec. 8.3.1: 0.5 between the layers); 0 for none.
  """

  dropout: float = 0.0

  @nn.compact
  def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
    h = x.reshape(x.shape[0], -1)
    for i, size in enumerate(MLP_SIZES[1:-1], start=1):
      h = nn.relu(nn.Dense(size, name=f"dense{i}")(h))
      h = nn.Dropout(self.dropout, deterministic=not train)(h)
    return nn.Dense(MLP_SIZES[-1], name=f"dense{len(MLP_SIZES) - 1}")(h)


def mlp_to_flax(params: Params) -> dict[str, Any]:
  """:class:`MedicalMLP` variables of flat-layout parameters (:data:`MLP_SHAPES`)."""
  return layers_to_flax(params, {name[:-2]: shape for name, shape in MLP_SHAPES[::2]})


def mlp_from_flax(variables: dict[str, Any]) -> Params:
  """Flat-layout parameters of :class:`MedicalMLP` variables."""
  return layers_from_flax(variables, MLP_SHAPES)


def mlp_apply(params: Params, x: jax.Array) -> jax.Array:
  """Logit of class 1 for features of shape (batch, 7280), shape (batch, 1)."""
  return MedicalMLP().apply(mlp_to_flax(params), x)


def mlp_init(key: jax.Array) -> Params:
  """Glorot-uniform kernels and zero biases, as Keras' defaults."""
  params = {}
  keys = jax.random.split(key, len(MLP_SIZES) - 1)
  for i, (a, b) in enumerate(zip(MLP_SIZES[:-1], MLP_SIZES[1:])):
    params[f"dense{i + 1}_w"] = glorot_uniform(keys[i], (a, b), a, b)
    params[f"dense{i + 1}_b"] = jnp.zeros((b,), jnp.float32)
  return params


def mlp_apply_train(params: Params, x: jax.Array, key: jax.Array, *,
                    dropout: float) -> jax.Array:
  """:func:`mlp_apply` in training mode: dropout drawn from ``key``."""
  return MedicalMLP(dropout).apply(mlp_to_flax(params), x, train=True,
                                   rngs={"dropout": key})


def medical_mlp(dropout: float = 0.0) -> FlatModel:
  """The medical-data MLP (n = 1,496,601), binary output.

  Args:
    dropout: Dropout rate after each hidden layer during local training
      (thesis Sec. 8.3.1 uses 0.5); 0, the default, trains without.

  Raises:
    ValueError: A rate outside [0, 1).
  """
  if not 0.0 <= dropout < 1.0:
    raise ValueError(f"dropout must be in [0, 1), got {dropout}")
  if dropout == 0:  # the dense layers factored (fedjax_dp.models.fast_train)
    return FlatModel("mlp", MLP_SHAPES, mlp_init, mlp_apply, "sigmoid_ce",
                     local_update_fn=fast_train.local_update)
  return FlatModel(f"mlp (dropout {dropout:g})", MLP_SHAPES, mlp_init, mlp_apply,
                   "sigmoid_ce",
                   train_apply_fn=functools.partial(mlp_apply_train, dropout=dropout))
