"""The data sets a run can use: the registry, loading, and the data options.

=================  =============  =============================  ===============================
data set           model          base preset                    public set
=================  =============  =============================  ===============================
``fashion-mnist``  paper CNN      UAI Table 5                    10 MNIST images (UAI Sec. 4)
``mnist``          paper CNN      UAI Table 5                    10 Fashion-MNIST images
``medical-synth``  medical MLP    UAI Table 5, medical row       public hospital, 12 + 12
``shakespeare``    char LSTM      Fed-SMP Sec. 6.1-6.2           1,000 held-out windows
``svhn``           svhn-cnn       Fed-SMP Sec. 6.1-6.2           2,000 held-out images
``cifar10``        all-cnn-c      thesis Table 8.1 (Adam)        one client's share held out
``imdb``           imdb-cnn-lstm  thesis Table 8.1 (Adam)        one client's share held out
``femnist``        emnist-cnn     CDP-LQ poster                  1,000 images of unused writers
=================  =============  =============================  ===============================

A data set is one module of :mod:`fedjax_dp.data.sets` declaring its
:class:`Dataset` (its model, its setting, its loader, its own federation
builder and the files it reads; the module's docstring says what it is) and
one line of :data:`DATASETS`, the registry. Research and test code add one
with :func:`register`. :func:`load` splits a data set over clients (the
builder the data set declares: no branch here knows a data set), and
:func:`reachable` says whether its files are here.

:data:`OPTIONS` declares the data options as data
(:class:`~fedjax_dp.options.Option`): the command line makes its data flags
from them, and names their flags in the errors :func:`load` raises
(``fedjax_dp.cli.errors.DATA_FLAGS``).

The data sets split by partition (the image data sets and IMDB) are split by
:func:`fedjax_dp.data.partition_indices`: IID (the papers'), Dirichlet label
skew or label shards; the others by what one client is (a hospital, a role,
a group of writers).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from typing import Any

import numpy as np

from fedjax_dp import options
from fedjax_dp.data import DataError
from fedjax_dp.data.medical import MedicalSynthConfig
from fedjax_dp.data.partitioning import METHODS as PARTITION_METHODS
from fedjax_dp.data.sets import (cifar10, fashion_mnist, femnist, imdb, medical_synth, mnist,
                                 shakespeare, svhn)
from fedjax_dp.data.sets.base import Dataset, Federation, PartitionConfig, Request
from fedjax_dp.errors import ConfigError

# What other code reads here, each data set's own names among them.
ConcatRows = svhn.ConcatRows
AugmentedImages, augment_cifar10, shift_flip = (cifar10.AugmentedImages,
                                                cifar10.augment_cifar10, cifar10.shift_flip)
CIFAR_AUGMENTATION, CIFAR_SHIFT, CIFAR_FLIP_PROBABILITY = (
    cifar10.CIFAR_AUGMENTATION, cifar10.CIFAR_SHIFT, cifar10.CIFAR_FLIP_PROBABILITY)
FEMNIST_WRITERS_PER_CLIENT = femnist.FEMNIST_WRITERS_PER_CLIENT
SHAKESPEARE_TEST_SIZE = shakespeare.TEST_SIZE

# The registry: one line per data set (its module's DATASET), in --dataset's order.
DATASETS: dict[str, Dataset] = {d.name: d for d in (
    fashion_mnist.DATASET,
    mnist.DATASET,
    medical_synth.DATASET,
    shakespeare.DATASET,
    svhn.DATASET,
    cifar10.DATASET,
    imdb.DATASET,
    femnist.DATASET,
)}

DEFAULT = "fashion-mnist"


def register(dataset: Dataset) -> Dataset:
  """Adds a data set to :data:`DATASETS` (research or test code's own).

  Its name is then a ``--dataset`` choice and a :func:`load` name.

  Returns:
    ``dataset``.

  Raises:
    ValueError: A name already registered (one line).
  """
  if dataset.name in DATASETS:
    raise ValueError(f"dataset {dataset.name!r} is already registered")
  DATASETS[dataset.name] = dataset
  return dataset


def unregister(name: str) -> Dataset:
  """Removes a data set from :data:`DATASETS` (a test's, once done with it).

  Returns:
    The data set removed.

  Raises:
    ValueError: An unknown name.
  """
  return DATASETS.pop(get_dataset(name).name)


def get_dataset(name: str) -> Dataset:
  """The :class:`Dataset` called ``name``.

  Raises:
    ValueError: An unknown name.
  """
  if name not in DATASETS:
    raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")
  return DATASETS[name]


def option_value(values: Mapping[str, Any], name: str, default: Any = None) -> Any:
  """A scheme family's option ``name`` for a run: the value given in
  ``values`` (a family's ``configure`` values, None where not given), else
  the run's data set's (``values["dataset"]``, :attr:`Dataset.option_defaults`),
  else ``default``.

  >>> option_value({"dataset": "shakespeare", "lr_decay_every": None}, "lr_decay_every", 1)
  50
  >>> option_value({"dataset": "shakespeare", "lr_decay_every": 7}, "lr_decay_every", 1)
  7
  >>> option_value({"dataset": "fashion-mnist"}, "lr_decay_every", 1)
  1
  """
  given = values.get(name)
  if given is not None:
    return given
  dataset = DATASETS.get(values.get("dataset"))
  return default if dataset is None else dataset.option_defaults.get(name, default)


def _check_count(field: str, value: Any, least: int) -> None:
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
    raise ConfigError(field, f"must be an integer >= {least}, got {value!r}")


def load(name: str | Dataset, num_clients: int, samples_per_client: int, seed: int = 0, *,
         partition: PartitionConfig = PartitionConfig(), public_size: int | None = None,
         holdout: int = 0, test_size: int | None = None, **own: Any) -> Federation:
  """Loads a data set split over clients, its test set and the public batch.

  The data set's own federation builder does the work
  (``Dataset.federation``; its module's docstring says what each
  argument means for it).

  Args:
    name: A key of :data:`DATASETS`, or the :class:`Dataset` itself (a
      front end that looked it up already).
    num_clients: N (medical-synth: hospitals; shakespeare: a seeded subset
      of its roles; femnist: groups of ``writers_per_client`` writers).
    samples_per_client: |D_k| (medical-synth: patients per hospital, before
      the class-balanced downsample; shakespeare, femnist: the cap on a
      client's training examples, a seeded subset kept).
    seed: Seed of the split, the public draw, the generator, CIFAR-10's
      augmentation and femnist's writer groups.
    partition: How the data sets split by partition are split; any other
      data set refuses a partition but IID.
    public_size: Public set size (default: the data set's setting's
      ``public_batch``). The data sets that hold their public set out of
      the training set (``Dataset.holds_out_public``) hold this many out.
    holdout: Hold this many training examples out of the clients' data as
      the public set (Fed-SMP Sec. 6.1, top_k); 0: none (fashion-mnist,
      mnist: the public batch comes from the other data set). The data
      sets that always hold their public set out hold ``holdout`` examples
      if given, else ``public_size``.
    test_size: Examples evaluated: medical-synth's generated test set size;
      fashion-mnist, mnist, svhn, cifar10, imdb: ``test_size`` examples of
      the official test set drawn uniformly from the seed, not the first
      ones (default all); shakespeare: a
      seeded draw of the clients' test windows (default
      :data:`SHAKESPEARE_TEST_SIZE`, or all if fewer); femnist: a seeded
      draw of the test examples of the clients' writers (default all).
    **own: The data set's own options (``Dataset.options``: femnist's
      ``writers_per_client``); None: its default.

  Raises:
    ValueError: A bad setting (one line; a ``ConfigError`` naming the
      parameter where one is at fault).
    DataError: Missing or corrupt data files (femnist: also h5py missing).
  """
  dataset = name if isinstance(name, Dataset) else get_dataset(name)
  name = dataset.name
  _check_count("num_clients", num_clients, 1)
  _check_count("samples_per_client", samples_per_client, 1)
  _check_count("holdout", holdout, 0)
  if public_size is not None:
    _check_count("public_size", public_size, 1)
  if test_size is not None:
    _check_count("test_size", test_size, 1)
  declared = {o.name: o.default for o in dataset.options}
  for key in own.keys() - declared.keys():
    takers = [d.name for d in DATASETS.values() if key in {o.name for o in d.options}]
    if not takers:
      raise ValueError(f"unknown option {key!r} of {name}: no data set takes it")
    if own[key] is not None:
      raise ValueError(f"{key} applies to {', '.join(takers)} only, not to {name}")
  if not dataset.partitioned and partition != PartitionConfig():
    raise ValueError(f"{name} is split {dataset.split}; partition {partition.method!r} "
                     "applies to the data sets split by partition only")
  request = Request(
      num_clients, samples_per_client, seed,
      dataset.setting["public_batch"] if public_size is None else public_size,
      holdout, test_size, partition,
      {k: default if own.get(k) is None else own[k] for k, default in declared.items()})
  return dataset.federation(dataset, request)


def reachable(name: str) -> str:
  """Whether a data set's files are on this machine: "" if so, else one line saying why.

  Looks for (and verifies, against the checksum tables) every file
  :func:`load` reads, in the folders the loaders search
  (:func:`fedjax_dp.data.data_dirs`), never downloading
  (``Dataset.files``): svhn's three ``.mat`` files, cifar10's and imdb's
  archives, femnist's ``fed_emnist.tar.bz2`` (and ``h5py``), the idx files
  of fashion-mnist and mnist with the other one's training split (the
  public batch), the shakespeare texts; medical-synth is generated and
  always reachable. Verifying hashes every file (a few seconds for SVHN's
  1.3 GB ``extra``).

  Args:
    name: A key of :data:`DATASETS`.

  Returns:
    "" or ``"<name>: <reason>"``, e.g. ``"cifar10: cifar10/cifar-10-python.tar.gz not
    found in ... and download=False; put the official file ..."``.

  Raises:
    ValueError: An unknown name (missing or corrupt data never raises).
  """
  dataset = get_dataset(name)
  try:
    dataset.files(dataset)
  except DataError as err:
    return f"{name}: {' '.join(str(err).split())}"
  return ""


# --- The data options -----------------------------------------------------------------------


class _Names(Collection):
  """The registered data sets' names, read when asked: ``--dataset``'s
  choices, checked when the flags are parsed (a data set registered after
  this module's import included)."""

  def __contains__(self, name: object) -> bool:
    return name in DATASETS

  def __iter__(self) -> Iterator[str]:
    return iter(DATASETS)

  def __len__(self) -> int:
    return len(DATASETS)


def _public_sizes() -> str:
  return ", ".join(f"{n} {d.setting['public_batch']}" for n, d in DATASETS.items())


# The federation's size: the scheme's preset, else the data set's setting (the sweep
# offers them with the run's preset-able settings).
FEDERATION_OPTIONS = (
    options.Option("num_clients", int, None, "N, the clients", preset="scheme"),
    options.Option("samples_per_client", int, None, "|D_k|, each client's examples",
                   preset="scheme"),
)

# load's ``holdout``: Fed-SMP top_k's public set, a scheme's setting whose flag its family
# declares (fedjax_dp.schemes.fedsmp.OPTIONS); named here so that load's errors name it.
PUBLIC_HOLDOUT = options.Option(
    "public_holdout", int, 0, "training examples held out of the clients' data as the "
    "server's public set (Fed-SMP Sec. 6.1, top_k)", field="holdout")

# The data set's flags (the command line's data group), in their order.
OPTIONS = (
    options.Option(
        "dataset", str, DEFAULT,
        "the data set (docs/datasets.md): " + "; ".join(
            f"{n}: {d.about}" for n, d in DATASETS.items()),
        choices=_Names()),
    options.Option(
        "partition", str, "iid",
        "split over clients of the data sets split by partition: iid (the papers'), "
        "dirichlet (label skew, Hsu et al. 2019) or shards (label shards, McMahan et al. "
        "2017)", choices=PARTITION_METHODS),
    options.Option("dirichlet_alpha", options.positive, None,
                   "alpha of --partition dirichlet (small: few labels per client; large: "
                   "close to IID)", field="alpha"),
    options.Option("shards_per_client", options.positive_int, None,
                   "label shards per client of --partition shards (it must divide "
                   "--samples-per-client)"),
    options.Option("dropout", options.unit_interval, 0.0,
                   "dropout rate in local training: medical-synth's MLP (after each hidden "
                   "layer) and cifar10's All-CNN-C (after blocks 1 and 2); the thesis uses "
                   "0.5 for both (App. 8.3.1); 0 trains on the fast path"),
    options.Option(
        "test_size", options.positive_int, None,
        "test examples evaluated: medical-synth: patients in the generated test set "
        f"(default {MedicalSynthConfig().test_size}); fashion-mnist, mnist, svhn, cifar10, "
        "imdb: N of the official test set, drawn uniformly from --seed (not the first N; "
        "default all of it), for quick runs; "
        "shakespeare: a seeded uniform draw of the clients' test windows (default "
        f"{SHAKESPEARE_TEST_SIZE}); femnist: a seeded draw of the test examples of the "
        "clients' writers (default all)"),
    options.Option("public_size", int, None,
                   f"the server's public set size ({_public_sizes()}; docs/datasets.md)",
                   preset="dataset"),
)

# Every parameter of load as an option, by the field its errors name.
LOAD_OPTIONS = (*OPTIONS, *FEDERATION_OPTIONS, PUBLIC_HOLDOUT)


__all__ = ["AugmentedImages", "CIFAR_AUGMENTATION", "CIFAR_FLIP_PROBABILITY", "CIFAR_SHIFT",
           "ConcatRows", "DATASETS", "DEFAULT", "Dataset", "FEDERATION_OPTIONS",
           "FEMNIST_WRITERS_PER_CLIENT", "Federation", "LOAD_OPTIONS", "OPTIONS",
           "PUBLIC_HOLDOUT", "PartitionConfig", "Request", "SHAKESPEARE_TEST_SIZE",
           "augment_cifar10", "get_dataset", "load", "option_value", "reachable", "register",
           "shift_flip", "unregister"]
