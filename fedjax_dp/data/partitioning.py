"""Partitions of any in-memory data set over clients, as :class:`ClientData`.

:func:`partition` takes arrays of any numeric dtype and shape: uint8 images,
float features, and so on. The IID method deals out exactly the samples that
:func:`~fedjax_dp.data.federated.partition_iid` deals out for the same seed.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from fedjax_dp.data.federated import ClientData, iid_order

METHODS = ("iid",)


def partition(x, y, num_clients: int, samples_per_client: int, seed: int = 0, *,
              method: str = "iid") -> ClientData:
  """Splits a data set over clients, without replacement.

  With ``method="iid"`` the examples are shuffled with
  ``np.random.default_rng(seed)`` and the first
  ``num_clients * samples_per_client`` are dealt out in order, as
  :func:`~fedjax_dp.data.federated.partition_iid` does, so no example is held
  by two clients.

  Example::

    data = partition(features, labels, num_clients=100, samples_per_client=20)
    data.x.shape  # (100, 20, *features.shape[1:])

  Args:
    x: Examples of shape (N, ...), any numeric dtype (uint8 images are kept
      as uint8; the simulator scales them to [0, 1] on the fly).
    y: Integer labels of shape (N,); cast to int32.
    num_clients: Number of clients, at least 1.
    samples_per_client: Samples per client, at least 1.
    seed: Seed of the shuffle.
    method: How to split; only ``"iid"`` for now.

  Returns:
    :class:`ClientData` with x of shape (num_clients, samples_per_client, ...)
    and int32 y of shape (num_clients, samples_per_client), on the device.

  Raises:
    ValueError: An unknown method, non-numeric x, non-integer or non-1-D y,
      x and y of different lengths, a count below 1, or more samples
      requested than x holds.
  """
  if method not in METHODS:
    raise ValueError(f"unknown partition method {method!r}; supported: {', '.join(METHODS)}")
  x, y = np.asarray(x), np.asarray(y)
  if not np.issubdtype(x.dtype, np.number) or x.ndim < 1:
    raise ValueError(f"x must be a numeric array of shape (N, ...), got {x.dtype} {x.shape}")
  if not np.issubdtype(y.dtype, np.integer) or y.ndim != 1:
    raise ValueError(f"y must be integer labels of shape (N,), got {y.dtype} {y.shape}")
  if len(x) != len(y):
    raise ValueError(f"x has {len(x)} examples but y has {len(y)} labels")
  for arg, value in (("num_clients", num_clients), ("samples_per_client", samples_per_client)):
    if value < 1:
      raise ValueError(f"{arg} must be >= 1, got {value}")
  if num_clients * samples_per_client > len(x):
    raise ValueError(f"num_clients * samples_per_client = {num_clients * samples_per_client} "
                     f"exceeds the {len(x)} examples in x")
  total = num_clients * samples_per_client
  idx = iid_order(len(x), total, seed).reshape(num_clients, samples_per_client)
  return ClientData(x=jnp.asarray(x[idx]), y=jnp.asarray(y[idx].astype(np.int32)))
