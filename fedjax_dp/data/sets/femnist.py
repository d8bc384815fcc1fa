"""femnist: TFF's federated EMNIST, split by writer (the CDP-LQ poster).

The official archive (``archives.load_femnist``, needs h5py): each client
the examples of ``writers_per_client`` (the poster's 50,
:data:`FEMNIST_WRITERS_PER_CLIENT`) writers drawn by a seeded permutation,
padded (label -1) to the largest, capped at ``samples_per_client``; images
in MNIST polarity (``255 - x``); the server's public set is drawn from the
writers no client holds; the test set is the test examples of the clients'
writers. A 62-class CNN (``emnist-cnn``) in the poster's setting, its gaps
this simulator's choice.
"""

import numpy as np

from fedjax_dp import options
from fedjax_dp.data import DataError, archives, from_client_indices, label_summary, settings
from fedjax_dp.data.sets import base
from fedjax_dp.errors import ConfigError

# Writers held by each client (the CDP-LQ poster, l.107: 50 users each).
FEMNIST_WRITERS_PER_CLIENT = 50

# Every scheme runs the base setting (the poster's, its only source here).
SETTINGS = settings.DataSetting(
    settings.FEMNIST, "CDP-LQ poster (25 participants of 50 writers, delta 1e-4, sigma 0.25, "
    "one gradient a round); model, |K|, |B|, eta, T_cl this simulator's choice", {},
    value_sources=settings.FEMNIST_SOURCES)

OPTIONS = (
    options.Option("writers_per_client", options.positive_int, FEMNIST_WRITERS_PER_CLIENT,
                   "writers whose examples one client holds (the CDP-LQ poster's)"),
)

# Streams of the federation's draws.
_PUBLIC, _TEST, _WRITERS, _CAP = 11, 12, 13, 14


def _writer_rows(bounds: np.ndarray, writers) -> np.ndarray:
  """Example indices of the given writers, writer by writer: writer w's examples are
  rows ``bounds[w]:bounds[w + 1]`` (the loader groups them by writer)."""
  return np.concatenate([np.arange(bounds[w], bounds[w + 1]) for w in writers] or
                        [np.zeros(0, np.int64)]).astype(np.int64)


def federation(dataset: base.Dataset, request: base.Request) -> base.Federation:
  """The CDP-LQ poster's EMNIST: each client the data of ``writers_per_client`` writers.

  Raises:
    ValueError: A setting the data does not allow (a ``ConfigError`` naming
      the parameter).
    DataError: Missing or corrupt files, or h5py missing.
  """
  num_clients, samples_per_client, seed = (request.num_clients, request.samples_per_client,
                                           request.seed)
  writers_per_client = request.options["writers_per_client"]
  if (isinstance(writers_per_client, bool) or
      not isinstance(writers_per_client, (int, np.integer)) or writers_per_client < 1):
    raise ValueError("writers_per_client must be an integer >= 1 for femnist, got "
                     f"{writers_per_client!r}")
  try:
    train, test = archives.load_femnist("train"), archives.load_femnist("test")
  except ImportError as err:  # h5py: the data cannot be read here
    raise DataError(" ".join(str(err).split())) from err
  total = len(train.writer_ids)
  need = num_clients * writers_per_client
  if need >= total:
    raise ValueError(f"num_clients x writers_per_client = {num_clients} x "
                     f"{writers_per_client} = {need} must be below femnist's {total} writers "
                     "(the others' examples hold the public set)")
  order = np.random.default_rng([seed, _WRITERS]).permutation(total)
  bounds = np.searchsorted(train.writer, np.arange(total + 1))
  groups = np.sort(order[:need].reshape(num_clients, writers_per_client), axis=1)
  cap = np.random.default_rng([seed, _CAP])
  clients, capped = [], 0
  for group in groups:
    rows = _writer_rows(bounds, group)
    if len(rows) > samples_per_client:  # a seeded subset, in order
      rows = rows[np.sort(cap.choice(len(rows), samples_per_client, replace=False))]
      capped += 1
    clients.append(rows)
  flat = np.concatenate(clients)
  sizes = np.array([len(rows) for rows in clients])
  # TFF stores ink 0 on a background of 255: MNIST's polarity is 255 - x.
  data = from_client_indices(255 - train.images[flat], train.labels[flat],
                             np.split(np.arange(len(flat)), np.cumsum(sizes)[:-1]))
  holdout = request.holdout
  size = holdout or request.public_size
  pool = _writer_rows(bounds, np.sort(order[need:]))
  if not 1 <= size <= len(pool):
    raise ConfigError("holdout" if holdout else "public_size",
                      f"must be in [1, {len(pool)}] for femnist (the training examples of "
                      f"the {total - need} writers no client holds), got {size}")
  rows = pool[base.draw(seed, _PUBLIC, len(pool), size)]
  public = (base.scaled(255 - train.images[rows]), train.labels[rows].astype(np.int32))
  index = {writer: i for i, writer in enumerate(test.writer_ids)}
  chosen = [index[train.writer_ids[w]] for w in order[:need] if train.writer_ids[w] in index]
  mine = np.flatnonzero(np.isin(test.writer, chosen))
  if len(mine) == 0:
    raise ValueError(f"the {need} writers of {num_clients} femnist clients have no test "
                     "example; choose more clients")
  test_size = request.test_size
  if test_size is not None:
    if not 1 <= test_size <= len(mine):
      raise ConfigError("test_size", f"must be in [1, {len(mine)}] for femnist (the test "
                        f"examples of the clients' writers), got {test_size}")
    if test_size < len(mine):
      mine = mine[base.draw(seed, _TEST, len(mine), test_size)]
  summary = {"partition": f"by writer ({writers_per_client} writers a client)",
             **label_summary(data.y, num_classes=dataset.num_classes),
             "writers": total, "writers_per_client": writers_per_client,
             "writers_used": need, "clients_capped": capped,
             "public_examples": size,
             "public_source": "training examples of writers no client holds",
             "test_examples": len(mine)}
  return base.Federation(data, (255 - test.images[mine], test.labels[mine].copy()), public,
                         summary)


_ARCHIVE = base.archive_files(("femnist", "fed_emnist.tar.bz2"))


def files(dataset: base.Dataset) -> None:
  """h5py (to read TFF's HDF5 files) and ``fed_emnist.tar.bz2``.

  Raises:
    DataError: h5py missing, or the archive missing or corrupt.
  """
  try:
    import h5py  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
  except ImportError:
    raise DataError("reading TFF's HDF5 files needs h5py: pip install h5py") from None
  _ARCHIVE(dataset)


DATASET = base.Dataset(
    name="femnist", model="emnist-cnn", settings=SETTINGS, federation=federation,
    files=files, options=OPTIONS,
    public_source="1,000 training examples of writers no client holds (this simulator's "
                  "choice)",
    split_by="writer", holds_out_public=True, num_classes=62,
    about=f"TFF's federated EMNIST, each client {FEMNIST_WRITERS_PER_CLIENT} writers (CDP-LQ "
          "poster; needs h5py; the official files, the public set drawn from writers no "
          "client holds)")
