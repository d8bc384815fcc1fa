"""Partitions of any in-memory data set over clients, as :class:`ClientData`.

:func:`partition` takes arrays of any numeric dtype and shape: uint8 images,
float features, and so on. Three methods (:data:`METHODS`) deal out equal-sized
clients without replacement:

* ``"iid"``: a uniform shuffle; deals out exactly the samples that
  :func:`~fedjax_dp.data.federated.partition_iid` deals out for the same seed.
* ``"dirichlet"``: label skew controlled by a concentration ``alpha`` (Hsu, Qi
  and Brown 2019, "Measuring the Effects of Non-Identical Data Distribution
  for Federated Visual Classification", arXiv:1909.06335).
* ``"shards"``: each client holds ``shards_per_client`` shards of the
  label-sorted examples (McMahan et al. 2017, "Communication-Efficient
  Learning of Deep Networks from Decentralized Data", AISTATS, Sec. 3,
  pathological non-IID).

:func:`partition_indices` gives the same partitions as index arrays (numpy
only), and :func:`from_client_indices` turns any user partition, e.g. one
client per writer, into :class:`ClientData`.

Padding convention (whole simulator): client data is dense, x of shape
``(num_clients, width, ...)`` and y of shape ``(num_clients, width)``. A client
holding fewer than ``width`` examples has its examples first, then padding
rows whose example is all zeros and whose label is :data:`PADDING_LABEL`.
Local training draws its batches from the non-padding rows only, and losses
ignore padding rows. :func:`client_sizes` counts the non-padding rows and
:func:`label_summary` describes the label skew of a partition.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np

from fedjax_dp.data.federated import ClientData, iid_order
from fedjax_dp.errors import ConfigError

PADDING_LABEL = -1
METHODS = ("iid", "dirichlet", "shards")


def _check_method(method, alpha, shards_per_client):
  """Validates the method and its parameters."""
  if method not in METHODS:
    raise ValueError(f"unknown partition method {method!r}; supported: {', '.join(METHODS)}")
  if alpha is not None and method != "dirichlet":
    raise ValueError(f"alpha only applies to method='dirichlet', got method={method!r}")
  if shards_per_client is not None and method != "shards":
    raise ValueError(f"shards_per_client only applies to method='shards', got method={method!r}")
  if method == "dirichlet":
    if alpha is None:
      raise ValueError("method='dirichlet' needs alpha > 0")
    if not np.isfinite(alpha) or alpha <= 0:
      raise ConfigError("alpha", f"must be > 0, got {alpha}")
  if method == "shards":
    if shards_per_client is None:
      raise ValueError("method='shards' needs shards_per_client >= 1")
    if not isinstance(shards_per_client, (int, np.integer)) or shards_per_client < 1:
      raise ConfigError("shards_per_client",
                        f"must be an integer >= 1, got {shards_per_client!r}")


def _check_xy(x, y) -> tuple[np.ndarray, np.ndarray]:
  """Validates examples and labels; returns them as numpy arrays."""
  x, y = np.asarray(x), np.asarray(y)
  if not np.issubdtype(x.dtype, np.number) or x.ndim < 1:
    raise ValueError(f"x must be a numeric array of shape (N, ...), got {x.dtype} {x.shape}")
  _check_y(y)
  if len(x) != len(y):
    raise ValueError(f"x has {len(x)} examples but y has {len(y)} labels")
  return x, y


def _check_y(y: np.ndarray):
  """Validates 1-D integer labels."""
  if not np.issubdtype(y.dtype, np.integer) or y.ndim != 1:
    raise ValueError(f"y must be integer labels of shape (N,), got {y.dtype} {y.shape}")


def _streams(seed: int, n: int) -> list[np.random.Generator]:
  """Independent generators ``default_rng(SeedSequence(seed).spawn(n)[i])``."""
  return [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(n)]


def _class_pools(y: np.ndarray, rng: np.random.Generator):
  """Shuffles each class' examples once.

  Returns:
    ``(pools, start, counts)``: all example indices, grouped by class (in the
    order of ``np.unique(y)``) and shuffled within each class; the offset of
    each class in ``pools``; the number of examples of each class.
  """
  _, inv, counts = np.unique(y, return_inverse=True, return_counts=True)
  order = rng.permutation(len(y))
  # A stable sort of a random order by class keeps each class shuffled.
  pools = order[np.argsort(inv[order], kind="stable")]
  start = np.concatenate([[0], np.cumsum(counts)[:-1]])
  return pools, start, counts


def _renormalise(q: np.ndarray, remaining: np.ndarray) -> np.ndarray:
  """Proportions ``q`` (rows) restricted to classes with examples left.

  A row with no mass on any class left falls back to the remaining examples'
  class frequencies.
  """
  q = q * (remaining > 0)
  total = q.sum(axis=-1, keepdims=True)
  fallback = remaining / remaining.sum()
  return np.where(total > 0, q / np.where(total > 0, total, 1.0), fallback)


def _dirichlet_counts(num_clients, samples_per_client, alpha, counts, rng):
  """How many examples of each class each client takes (Hsu et al. 2019).

  Equivalent to drawing each client's examples one at a time, clients in
  order: a class from the client's proportions restricted to the classes with
  examples left, then the next example of that class' pool. Vectorised: whole
  blocks of clients draw multinomial counts at once; at the first client that
  would overdraw a class, the block stops, that client takes what is left and
  redraws its excess over the remaining classes, and the clients after it
  redraw. Each stop exhausts a class, so there are at most num_classes stops.
  """
  p = counts / counts.sum()
  q = rng.dirichlet(alpha * p, size=num_clients)
  remaining = counts.astype(np.int64)
  taken = np.zeros((num_clients, len(counts)), np.int64)
  k0 = 0
  while k0 < num_clients:
    block = rng.multinomial(samples_per_client, _renormalise(q[k0:], remaining))
    demand = np.cumsum(block, axis=0)
    over = (demand > remaining).any(axis=1)
    if not over.any():
      taken[k0:] = block
      break
    b = int(np.argmax(over))  # the first client that would overdraw
    taken[k0:k0 + b] = block[:b]
    if b:
      remaining -= demand[b - 1]
    want = block[b]
    while True:
      got = np.minimum(want, remaining)
      taken[k0 + b] += got
      remaining -= got
      excess = int((want - got).sum())
      if not excess:
        break
      want = rng.multinomial(excess, _renormalise(q[k0 + b], remaining))
    k0 += b + 1
  return taken


def partition_indices(y, num_clients: int, samples_per_client: int, seed: int = 0, *,
                      method: str = "iid", alpha: float | None = None,
                      shards_per_client: int | None = None) -> np.ndarray:
  """Which examples each client holds, without replacement (numpy only).

  * ``"iid"``: the examples are shuffled with ``np.random.default_rng(seed)``
    and the first ``num_clients * samples_per_client`` are dealt out in order
    (as :func:`~fedjax_dp.data.federated.partition_iid`).
  * ``"dirichlet"`` (Hsu, Qi, Brown 2019): with p the pooled class
    frequencies of y, client k draws class proportions
    ``q_k ~ Dir(alpha * p)``, then draws its examples one class at a time from
    q_k, taking the next example of that class' pool; the pools are shuffled
    once. Clients draw in order; once a class' pool is exhausted, the class is
    removed and each later draw uses q_k renormalised over the classes with
    examples left (if q_k has no mass on any of them, the remaining examples'
    class frequencies). Small alpha concentrates each client on few classes;
    large alpha approaches IID.
  * ``"shards"`` (McMahan et al. 2017, Sec. 3: "sort the data by digit
    label, divide it into 200 shards of size 300, and assign each of 100
    clients 2 shards"): with shard size ``s = samples_per_client /
    shards_per_client``, the examples sorted by label (each class shuffled)
    are cut into ``floor(n / s)`` shards of s consecutive examples;
    ``num_clients * shards_per_client`` of them are picked uniformly at
    random and dealt to clients at random. A shard spans two classes where
    a class ends inside it, so a client holds at most ``shards_per_client``
    classes when every class' size is a multiple of s, and at most twice
    that otherwise (MNIST's 100 x 2 x 300: 9 of the 200 shards span two).

  Random streams: IID uses ``np.random.default_rng(seed)`` alone. The other
  methods use the generators of ``np.random.SeedSequence(seed).spawn(3)``:
  stream 0 shuffles the class pools, stream 1 draws the dirichlet proportions
  and classes, or picks and deals the shards, and stream 2 shuffles the order
  of each client's examples (which would otherwise be grouped by class).

  Args:
    y: Integer labels of shape (N,); any integer values are classes.
    num_clients: Number of clients, at least 1.
    samples_per_client: Examples per client, at least 1.
    seed: Seed of the partition.
    method: One of :data:`METHODS`.
    alpha: Dirichlet concentration (> 0); only with ``method="dirichlet"``.
    shards_per_client: Shards per client (>= 1, dividing
      samples_per_client); only with ``method="shards"``.

  Returns:
    int64 indices into y of shape (num_clients, samples_per_client); no index
    appears twice.

  Raises:
    ValueError: An unknown method, a parameter of another method, an invalid
      alpha or shards_per_client, non-integer or non-1-D y, a count below 1,
      more examples requested than y holds, or (shards) more shards than the
      data allows.
  """
  _check_method(method, alpha, shards_per_client)
  y = np.asarray(y)
  _check_y(y)
  if num_clients < 1:
    raise ConfigError("num_clients", f"must be >= 1, got {num_clients}")
  if samples_per_client < 1:
    raise ConfigError("samples_per_client", f"must be >= 1, got {samples_per_client}")
  total = num_clients * samples_per_client
  if total > len(y):
    raise ValueError(f"num_clients * samples_per_client = {total} "
                     f"exceeds the {len(y)} examples")
  if method == "iid":
    return iid_order(len(y), total, seed).astype(np.int64).reshape(num_clients, samples_per_client)

  if method == "shards" and samples_per_client % shards_per_client:
    raise ValueError(f"shards: samples_per_client ({samples_per_client}) must be a multiple "
                     f"of shards_per_client ({shards_per_client})")
  pool_rng, draw_rng, order_rng = _streams(seed, 3)
  pools, start, counts = _class_pools(y, pool_rng)

  if method == "dirichlet":
    idx = _dirichlet_indices(num_clients, samples_per_client, float(alpha), pools, start,
                             counts, draw_rng)
  else:
    idx = _shard_indices(num_clients, samples_per_client, shards_per_client, pools, draw_rng)
  return order_rng.permuted(idx, axis=1).astype(np.int64)


def _dirichlet_indices(num_clients, samples_per_client, alpha, pools, start, counts, rng):
  """Each client's examples (clients in rows, grouped by class) of :func:`_dirichlet_counts`."""
  taken = _dirichlet_counts(num_clients, samples_per_client, alpha, counts, rng)
  # Pools are consumed in client order: client k's class-c examples start
  # after those taken by clients 0..k-1.
  offset = start + np.cumsum(taken, axis=0) - taken
  rows, cols = np.nonzero(taken)  # row-major, so each client's runs are contiguous
  lengths = taken[rows, cols]
  run_start = np.repeat(np.cumsum(lengths) - lengths, lengths)
  idx = (np.repeat(offset[rows, cols], lengths) + np.arange(num_clients * samples_per_client)
         - run_start)
  return pools[idx].reshape(num_clients, samples_per_client)


def _shard_indices(num_clients, samples_per_client, shards_per_client, pools, rng):
  """Each client's examples: ``shards_per_client`` shards of the label-sorted
  examples (``pools``: class by class, each class shuffled), dealt at random."""
  size = samples_per_client // shards_per_client
  # N K shards of s examples fit whenever N K s examples do (checked before).
  available, need = len(pools) // size, num_clients * shards_per_client
  # A random choice without replacement comes in random order: dealing it
  # out in order assigns the shards to clients at random.
  chosen = rng.choice(available, size=need, replace=False)
  idx = (chosen * size).reshape(num_clients, shards_per_client, 1) + np.arange(size)
  return pools[idx.reshape(num_clients, samples_per_client)]


def partition(x, y, num_clients: int, samples_per_client: int, seed: int = 0, *,
              method: str = "iid", alpha: float | None = None,
              shards_per_client: int | None = None) -> ClientData:
  """Splits a data set over equal-sized clients, without replacement.

  The examples dealt to each client are those of :func:`partition_indices`
  for the same arguments; see it for the methods. With ``method="iid"`` the
  examples are shuffled with ``np.random.default_rng(seed)`` and the first
  ``num_clients * samples_per_client`` are dealt out in order, as
  :func:`~fedjax_dp.data.federated.partition_iid` does, so no example is held
  by two clients.

  Example::

    data = partition(features, labels, num_clients=100, samples_per_client=20)
    data.x.shape  # (100, 20, *features.shape[1:])
    skewed = partition(features, labels, 100, 20, method="dirichlet", alpha=0.1)

  Args:
    x: Examples of shape (N, ...), any numeric dtype (uint8 images are kept
      as uint8; the simulator scales them to [0, 1] on the fly).
    y: Integer labels of shape (N,); cast to int32.
    num_clients: Number of clients, at least 1.
    samples_per_client: Samples per client, at least 1.
    seed: Seed of the partition.
    method: How to split: ``"iid"``, ``"dirichlet"`` or ``"shards"``.
    alpha: Dirichlet concentration (> 0); only with ``method="dirichlet"``.
    shards_per_client: Class-pure shards per client; only with
      ``method="shards"``.

  Returns:
    :class:`ClientData` with x of shape (num_clients, samples_per_client, ...)
    and int32 y of shape (num_clients, samples_per_client), on the device.

  Raises:
    ValueError: An unknown method or invalid method parameters, non-numeric
      x, non-integer or non-1-D y, x and y of different lengths, a count below
      1, more samples requested than x holds, or more shards than the data
      allows.
  """
  _check_method(method, alpha, shards_per_client)
  x, y = _check_xy(x, y)
  idx = partition_indices(y, num_clients, samples_per_client, seed, method=method, alpha=alpha,
                          shards_per_client=shards_per_client)
  return ClientData(x=jnp.asarray(x[idx]), y=jnp.asarray(y[idx].astype(np.int32)))


def from_client_indices(x, y, client_indices: Sequence) -> ClientData:
  """Builds client data from any partition, e.g. one client per writer.

  Clients may hold different numbers of examples: each is padded to the
  largest with all-zero examples labelled :data:`PADDING_LABEL` (see the
  module docstring).

  Example::

    writers = [np.flatnonzero(writer_id == w) for w in np.unique(writer_id)]
    data = from_client_indices(images, labels, writers)
    client_sizes(data.y)  # examples per writer

  Args:
    x: Examples of shape (N, ...), any numeric dtype (kept).
    y: Non-negative integer labels of shape (N,); cast to int32.
    client_indices: One 1-D integer array of indices into x per client.

  Returns:
    :class:`ClientData` with x of shape (num_clients, width, ...) and int32 y
    of shape (num_clients, width), width being the largest client's size.

  Raises:
    ValueError: Invalid x or y, a negative label, no clients, a client that
      is empty or not a 1-D integer array, an index out of range, or an
      example held twice.
  """
  x, y = _check_xy(x, y)
  if len(y) and y.min() < 0:
    raise ValueError(f"y must be >= 0 ({PADDING_LABEL} marks padding), got {y.min()}")
  if len(client_indices) == 0:
    raise ValueError("client_indices holds no clients")
  clients = [np.asarray(ix) for ix in client_indices]
  for k, ix in enumerate(clients):
    if ix.ndim != 1 or (ix.size and not np.issubdtype(ix.dtype, np.integer)):
      raise ValueError(f"client {k} indices must be a 1-D integer array, got {ix.dtype} {ix.shape}")
    if ix.size == 0:
      raise ValueError(f"client {k} has no examples")
    bad = ix[(ix < 0) | (ix >= len(x))]
    if bad.size:
      raise ValueError(f"client {k} has index {bad[0]} outside [0, {len(x)})")
  lengths = np.array([len(ix) for ix in clients])
  flat = np.concatenate(clients).astype(np.int64)
  owner = np.repeat(np.arange(len(clients)), lengths)
  order = np.argsort(flat, kind="stable")
  dup = np.flatnonzero(flat[order][1:] == flat[order][:-1])
  if dup.size:
    a, b = owner[order[dup[0]]], owner[order[dup[0] + 1]]
    held = f"client {a} twice" if a == b else f"clients {a} and {b}"
    raise ValueError(f"example {flat[order][dup[0]]} is assigned more than once ({held})")
  width = int(lengths.max())
  col = np.arange(len(flat)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
  xs = np.zeros((len(clients), width, *x.shape[1:]), x.dtype)
  ys = np.full((len(clients), width), PADDING_LABEL, np.int32)
  xs[owner, col] = x[flat]
  ys[owner, col] = y[flat]
  return ClientData(x=jnp.asarray(xs), y=jnp.asarray(ys))


def client_sizes(y) -> np.ndarray:
  """Number of non-padding rows of each client.

  Args:
    y: Client labels of shape (num_clients, width), padded with
      :data:`PADDING_LABEL`; a numpy or jax array.

  Returns:
    int64 array of shape (num_clients,).

  Raises:
    ValueError: y is not 2-D.
  """
  y = np.asarray(y)
  if y.ndim != 2:
    raise ValueError(f"y must have shape (num_clients, width), got {y.shape}")
  return (y != PADDING_LABEL).sum(axis=1).astype(np.int64)


def label_summary(y, num_classes: int | None = None) -> dict:
  """Sizes and label skew of a partition, as JSON-ready numbers.

  Keys:

  * ``clients``: number of clients.
  * ``size_min``, ``size_mean``, ``size_max``: non-padding examples per
    client.
  * ``classes_per_client_min``, ``_mean``, ``_max``: distinct labels held by
    a client.
  * ``tv_distance_mean``, ``tv_distance_max``: over clients, the total
    variation distance ``0.5 * sum_c |q_k(c) - p(c)|`` between client k's
    label distribution q_k and the pooled label distribution p of all clients'
    examples; 0 when every client mirrors the pool, near 1 when clients hold
    single classes of a balanced pool. Clients without examples are left out
    of these two.
  * ``num_classes``: the number of classes (``max label + 1`` unless given).

  Args:
    y: Client labels of shape (num_clients, width), non-negative except for
      :data:`PADDING_LABEL` rows; a numpy or jax array.
    num_classes: Number of classes, or None to infer it.

  Returns:
    A dict of Python ints and floats.

  Raises:
    ValueError: y is not 2-D integer labels, holds no labels, holds a
      negative label other than padding, or a label >= num_classes.
  """
  y = np.asarray(y)
  if y.ndim != 2 or not np.issubdtype(y.dtype, np.integer):
    raise ValueError(f"y must be integer labels of shape (num_clients, width), "
                     f"got {y.dtype} {y.shape}")
  mask = y != PADDING_LABEL
  labels = y[mask].astype(np.int64)
  if labels.size == 0:
    raise ValueError("y holds no labels (only padding)")
  if labels.min() < 0:
    raise ValueError(f"y must be >= 0 apart from padding ({PADDING_LABEL}), got {labels.min()}")
  if num_classes is None:
    num_classes = int(labels.max()) + 1
  elif labels.max() >= num_classes:
    raise ValueError(f"num_classes is {num_classes} but y holds label {labels.max()}")
  num_clients = y.shape[0]
  rows = np.nonzero(mask)[0]
  counts = np.bincount(rows * num_classes + labels,
                       minlength=num_clients * num_classes).reshape(num_clients, num_classes)
  sizes = counts.sum(axis=1)
  held = (counts > 0).sum(axis=1)
  pooled = counts.sum(axis=0) / labels.size
  nonempty = sizes > 0
  q = counts[nonempty] / sizes[nonempty, None]
  tv = 0.5 * np.abs(q - pooled).sum(axis=1)
  return {
      "clients": int(num_clients),
      "size_min": int(sizes.min()),
      "size_mean": float(sizes.mean()),
      "size_max": int(sizes.max()),
      "classes_per_client_min": int(held.min()),
      "classes_per_client_mean": float(held.mean()),
      "classes_per_client_max": int(held.max()),
      "tv_distance_mean": float(tv.mean()),
      "tv_distance_max": float(tv.max()),
      "num_classes": int(num_classes),
  }
