"""Flax modules as flat-vector models.

:func:`from_flax` turns any stateless ``flax.linen`` module into the
:class:`~fedjax_dp.models.flat.FlatModel` that every scheme takes. The
``*_to_flax`` / ``*_from_flax`` helpers map the papers' flat parameter layout
(``"<layer>_w"``, ``"<layer>_b"``) onto flax variables and back.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp

from fedjax_dp.models import fast_apply, fast_train
from fedjax_dp.models.flat import FlatModel, Params

LOSSES = ("softmax_ce", "sigmoid_ce")


def _flat_names(tree: Mapping[str, Any]) -> list[tuple[str, Any]]:
  """(name, leaf) pairs of a nested dict in jax.tree_util order, names "/"-joined."""
  leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
  return [(jax.tree_util.keystr(path, simple=True, separator="/"), leaf)
          for path, leaf in leaves]


def _nest(params: Params) -> dict[str, Any]:
  """Inverse of :func:`_flat_names`: {"a/b": v} -> {"a": {"b": v}}."""
  tree: dict[str, Any] = {}
  for name, value in params.items():
    *scopes, leaf = name.split("/")
    node = tree
    for scope in scopes:
      node = node.setdefault(scope, {})
    node[leaf] = value
  return tree


def _shapes_of(name: str, fn, *args):
  """``jax.eval_shape(fn, *args)``; a module drawing random numbers refused in one line."""
  try:
    return jax.eval_shape(fn, *args)
  except flax.errors.InvalidRngError as e:
    raise ValueError(
        f"{name} draws random numbers as it runs (dropout?): from_flax needs a "
        "deterministic module; build a FlatModel with a train_apply_fn for "
        "training-mode randomness (as models.zoo.all_cnn_c does)") from e


def _check_logits(name: str, out, loss: str) -> None:
  """Raises ValueError unless ``out`` (the output's shapes) is one array of
  logits that fits ``loss``."""
  if not isinstance(out, jax.ShapeDtypeStruct):
    raise ValueError(f"{name} returns {type(out).__name__}, not one array of logits")
  fits = out.ndim == 2 and (out.shape[1] == 1 if loss == "sigmoid_ce" else out.shape[1] >= 2)
  if not fits:
    need = "(batch, 1)" if loss == "sigmoid_ce" else "(batch, classes >= 2)"
    raise ValueError(f"{name} outputs shape {out.shape}, but {loss} needs logits of shape {need}")


def from_flax(module: nn.Module, sample_input: jax.Array, loss: str = "softmax_ce",
              name: str | None = None, *, fast: bool = True) -> FlatModel:
  """Wraps a stateless flax module as a :class:`FlatModel`.

  The module's parameters (a possibly nested dict of arrays) are laid out in
  ``jax.tree_util`` flatten order under "/"-joined names, e.g.
  ``"Dense_0/kernel"``. ``init`` is ``module.init(key, sample_input)["params"]``
  and the logits are ``module.apply({"params": params}, x)``; evaluation runs
  the module as it is, training its forward pass rewritten for the cohort
  (``fedjax_dp.models.fast_apply``). Parameters of any float dtype
  (bfloat16 included) are held and trained as float32 weights.

  Example::

    class TwoLayer(nn.Module):
      @nn.compact
      def __call__(self, x):
        x = nn.relu(nn.Dense(64)(x.reshape(x.shape[0], -1)))
        return nn.Dense(10)(x)

    model = from_flax(TwoLayer(), jnp.zeros((1, 28, 28, 1)))
    w0 = model.init(jax.random.PRNGKey(0))  # flat float32, model.num_params long

  Args:
    module: A ``flax.linen`` module mapping a batch to logits of shape
      (batch, classes), or (batch, 1) for ``"sigmoid_ce"``; it may hold no
      collection other than ``"params"``.
    sample_input: A batch shaped like the model's input (as the simulator
      feeds it: uint8 images arrive scaled to float32 in [0, 1]); only its
      shape and dtype are used to build the parameters.
    loss: ``"softmax_ce"`` (multi-class) or ``"sigmoid_ce"`` (binary).
    name: Model name; defaults to the module's class name.
    fast: Train through ``fedjax_dp.models.fast_train`` (the default):
      convolutions and max pooling batched over the cohort by custom rules,
      dense kernels of at least ``fast_train.FACTOR_MIN_SIZE`` weights
      factored; the same numbers as ``fast=False`` up to float32 round-off.
      ``fast=False``: the plain path, ``vmap`` of the module's own ops.

  Returns:
    The model as a :class:`FlatModel`.

  Raises:
    ValueError: Unknown loss, a module with state besides its parameters, no
      parameters, a parameter that is not a float, a module that draws
      random numbers (dropout) as it runs, or an output that is not one
      array of logits that fit the loss.
  """
  if loss not in LOSSES:
    raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")
  name = name or type(module).__name__
  variables = _shapes_of(name, module.init, jax.random.PRNGKey(0), sample_input)
  extra = sorted(set(variables) - {"params"})
  if extra:
    raise ValueError(f"{name} has variable collections {extra} besides 'params'; "
                     "only stateless modules are supported")
  layout = _flat_names(variables.get("params", {}))
  if not layout:
    raise ValueError(f"{name} has no parameters")
  ints = [n for n, leaf in layout if not jnp.issubdtype(leaf.dtype, jnp.floating)]
  if ints:
    raise ValueError(f"{name} has parameters that are not floats ({', '.join(ints)}); "
                     "every parameter is trained as a float32 weight")
  _check_logits(name, _shapes_of(name, module.apply, variables, sample_input), loss)

  def init_fn(key: jax.Array) -> Params:
    return dict(_flat_names(module.init(key, sample_input)["params"]))

  def apply_fn(params: Params, x: jax.Array) -> jax.Array:
    return module.apply({"params": _nest(params)}, x)

  shapes = tuple((n, tuple(int(d) for d in leaf.shape)) for n, leaf in layout)
  if not fast:
    return FlatModel(name, shapes, init_fn, apply_fn, loss)
  return FlatModel(name, shapes, init_fn, fast_apply.fast_apply(apply_fn, shapes), loss,
                   eval_apply_fn=apply_fn, local_update_fn=fast_train.local_update)


def layers_to_flax(params: Params,
                   kernel_shapes: Mapping[str, Sequence[int]]) -> dict[str, Any]:
  """Flax variables of parameters in the papers' flat layout.

  Args:
    params: ``"<layer>_w"`` kernels and ``"<layer>_b"`` biases.
    kernel_shapes: The flax kernel shape of each layer, in module order; a
      flat kernel is reshaped to it (e.g. a (25 * cin, cout) patch kernel to
      the (5, 5, cin, cout) of ``nn.Conv``: the same memory order).

  Returns:
    ``{"params": {layer: {"kernel": ..., "bias": ...}}}``.
  """
  return {"params": {layer: {"kernel": jnp.reshape(params[f"{layer}_w"], shape),
                             "bias": params[f"{layer}_b"]}
                     for layer, shape in kernel_shapes.items()}}


def layers_from_flax(variables: Mapping[str, Any],
                     shapes: Sequence[tuple[str, tuple[int, ...]]]) -> Params:
  """Inverse of :func:`layers_to_flax` for a flat layout ``shapes``."""
  params = {}
  for name, shape in shapes:
    layer, kind = name.rsplit("_", 1)
    leaf = variables["params"][layer]["kernel" if kind == "w" else "bias"]
    params[name] = jnp.reshape(leaf, shape)
  return params
