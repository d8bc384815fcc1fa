"""What a data set declares, and what the data sets' modules share.

A data set is a :class:`Dataset`: its model, its setting
(:class:`~fedjax_dp.data.settings.DataSetting`), its loader and its federation
builder, a function ``federation(dataset, request) -> Federation`` that
splits the data over clients for one :class:`Request` (what
``fedjax_dp.datasets.load`` was asked). The data sets split by partition
(IID, Dirichlet label skew, label shards) use :func:`partition_federation`
with their loader; the others (by hospital, role, writer) bring their own.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, NamedTuple

import jax.numpy as jnp
import numpy as np

from fedjax_dp.data import (ClientData, holdout_indices, idx, label_summary, load_dataset,
                            partition_indices, public_batch)
from fedjax_dp.data import archives
from fedjax_dp.data.settings import DataSetting
from fedjax_dp.errors import ConfigError
from fedjax_dp.options import Option

# The keys every data set's setting holds (the run's preset-able settings and its defaults).
SETTING_KEYS = ("num_clients", "samples_per_client", "clients_per_round", "rounds",
                "local_steps", "batch_size", "lr", "delta", "noise_multiplier", "init_steps",
                "public_batch")
SELECTION_METRICS = ("accuracy", "balanced_accuracy")
# load's own parameters: a data set's options take other names.
LOAD_PARAMETERS = ("name", "num_clients", "samples_per_client", "seed", "partition",
                   "public_size", "holdout", "test_size")


@dataclasses.dataclass(frozen=True)
class PartitionConfig:
  """How a data set split by partition is split over clients (``data.partition_indices``).

  Attributes:
    method: ``"iid"`` (the papers'), ``"dirichlet"`` or ``"shards"``.
    alpha: Dirichlet concentration (method ``"dirichlet"``).
    shards_per_client: Label shards per client (method ``"shards"``).
  """

  method: str = "iid"
  alpha: float | None = None
  shards_per_client: int | None = None


class Federation(NamedTuple):
  """A data set split over clients, ready for ``simulation.run``.

  Attributes:
    data: The clients' data (padded rows carry label -1).
    test: (examples, labels) of the test set.
    public: (examples, labels) of the server's public batch.
    summary: JSON-ready facts about the split (label statistics, and what
      the data set's builder adds: a generator's statistics, a hold-out, a
      test draw, an augmentation, writers).
  """

  data: ClientData
  test: tuple[np.ndarray, np.ndarray]
  public: tuple[np.ndarray, np.ndarray]
  summary: dict


@dataclasses.dataclass(frozen=True)
class Request:
  """What a data set's federation builder is asked for (``datasets.load``'s arguments).

  Attributes:
    num_clients: N.
    samples_per_client: |D_k| (or the data set's cap on it).
    seed: Seed of every draw of the split.
    public_size: The public set's size (the data set's ``public_batch``
      unless given).
    holdout: Training examples held out of the clients' data as the public
      set (Fed-SMP Sec. 6.1, top_k); 0: none asked for.
    test_size: Test examples evaluated; None: the data set's default.
    partition: The split of a data set split by partition.
    options: The data set's own options (:attr:`Dataset.options`), every
      one of them, the declared default where not given.
  """

  num_clients: int
  samples_per_client: int
  seed: int
  public_size: int
  holdout: int = 0
  test_size: int | None = None
  partition: PartitionConfig = PartitionConfig()
  options: Mapping[str, Any] = dataclasses.field(default_factory=dict)


def no_files(dataset: Dataset) -> None:
  """A generated data set reads no file."""
  del dataset


@dataclasses.dataclass(frozen=True)
class Dataset:
  """One data set: its model, setting, loader, federation builder and files.

  Attributes:
    name: The ``--dataset`` value.
    model: ``fedjax_dp.models.get_model`` name.
    settings: Its base setting, the setting's source, per-scheme presets and
      the values' sources (:class:`~fedjax_dp.data.settings.DataSetting`).
    federation: Its builder: ``federation(dataset, request)`` gives the
      :class:`Federation` of a :class:`Request` (the data sets split by
      partition: :func:`partition_federation`).
    about: One phrase for ``--dataset``'s help.
    files: Raises ``DataError`` (one line) unless every file the data set
      reads is here and verified (:func:`no_files` for a generated one).
    loader: ``loader(split, seed)`` gives the split's ``(examples, labels)``
      as stored (uint8 images, int32 tokens), ``split`` ``"train"`` or
      ``"test"``; the training examples may be any object indexed by integer
      arrays with ``len`` (SVHN's two files, CIFAR-10's augmented images).
      Needed by :func:`partition_federation`; None for a builder that
      reads its data itself.
    options: The data set's own settings beyond ``load``'s (femnist's
      ``writers_per_client``), each with its default; ``load`` refuses them
      for any other data set.
    selection_metric: The metric that picks a run's best round
      (:data:`SELECTION_METRICS`).
    public_source: What the server's public set is: the data set it is
      drawn from (fashion-mnist, mnist: ``data.public_batch``), else a
      description.
    synthetic: A generated stand-in, never compared with paper figures.
    split_by: ``"partition"`` (``--partition`` applies), or what one client
      is (``"hospital"``, ``"role"``, ``"writer"``).
    split_note: Said after ``split_by`` in messages (shakespeare: ``LEAF``).
    holds_out_public: The server's public set is held out of the training
      set for every scheme (``public_size`` examples, or ``holdout``), not
      drawn from another data set.
    num_classes: Classes of the labels (for the split's label summary).
    class_names: Each class's name, in label order, for the backdoor
      attacks' ``--backdoor SRC:DST`` (``Sandal:Sneaker``); empty: the data
      set has no backdoor classes.
    class_aliases: Other names of classes, lower case, by label
      (fashion-mnist: ``t-shirt`` for 0).
    option_defaults: The data set's values of scheme options where its
      setting differs from a family's default; a given option wins. Read by
      the families that take them: Fed-SMP's ``lr_decay_every``,
      ``server_epochs`` (top_k's server period in passes over its public
      set) and ``public_holdout`` (top_k's public set), FL-CS's
      ``server_lr`` (eta_G).
  """

  name: str
  model: str
  settings: DataSetting
  federation: Callable[[Dataset, Request], Federation]
  about: str = ""
  files: Callable[[Dataset], None] = no_files
  loader: Callable[[str, int], tuple[Any, np.ndarray]] | None = None
  options: tuple[Option, ...] = ()
  selection_metric: str = "accuracy"
  public_source: str = ""
  synthetic: bool = False
  split_by: str = "partition"
  split_note: str = ""
  holds_out_public: bool = False
  num_classes: int = 10
  class_names: tuple[str, ...] = ()
  class_aliases: Mapping[str, int] = dataclasses.field(default_factory=dict)
  option_defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)

  def __post_init__(self):
    missing = [k for k in SETTING_KEYS if k not in self.settings.setting]
    problems = [
        (not missing, f"its setting lacks {', '.join(missing)}"),
        (self.selection_metric in SELECTION_METRICS,
         f"selection_metric must be one of {', '.join(SELECTION_METRICS)}, got "
         f"{self.selection_metric!r}"),
        (not self.partitioned or self.loader is not None,
         "a data set split by partition needs a loader"),
        (not {o.name for o in self.options} & set(LOAD_PARAMETERS),
         f"its options may not take load's names ({', '.join(LOAD_PARAMETERS)})"),
        (len(self.class_names) in (0, self.num_classes),
         f"class_names names {len(self.class_names)} classes of {self.num_classes}"),
        (all(0 <= label < len(self.class_names) for label in self.class_aliases.values()),
         "class_aliases name a label outside class_names"),
    ]
    for ok, message in problems:
      if not ok:
        raise ValueError(f"dataset {self.name!r}: {message}")

  @property
  def setting(self) -> Mapping[str, Any]:
    """Every scheme's setting unless its own preset says otherwise."""
    return self.settings.setting

  @property
  def setting_source(self) -> str:
    """Where :attr:`setting` comes from."""
    return self.settings.source

  @property
  def scheme_presets(self) -> Mapping[str, Mapping[str, Any]] | None:
    """Per scheme, the settings that differ from :attr:`setting`; None: the
    scheme families' presets (written for the image data)."""
    return self.settings.scheme_presets

  @property
  def preset_sources(self) -> Mapping[str, str]:
    """Per scheme of :attr:`scheme_presets`, its source."""
    return self.settings.preset_sources

  @property
  def chance(self) -> float:
    """The selection metric of a model that learned nothing: a guess uniform
    over the :attr:`num_classes` labels (the majority class's share on a
    balanced test set; 0.5 for a balanced accuracy)."""
    return 0.5 if self.selection_metric == "balanced_accuracy" else 1.0 / self.num_classes

  @property
  def label(self) -> str:
    """The name as outputs show it (with "synthetic stand-in" if it is one)."""
    return f"{self.name} (synthetic stand-in)" if self.synthetic else self.name

  @property
  def partitioned(self) -> bool:
    """Split by partition: ``--partition`` applies."""
    return self.split_by == "partition"

  @property
  def split(self) -> str:
    """How it is split, as messages say it (``"by role (LEAF)"``)."""
    return f"by {self.split_by}" + (f" ({self.split_note})" if self.split_note else "")

  def defaults(self) -> dict[str, Any]:
    """The settings a run leaves unset that the data set's setting gives, by
    their option names: sigma, delta, T_init and the public set's size."""
    s = self.setting
    return {"noise_multiplier": s["noise_multiplier"], "delta": s["delta"],
            "init_steps": s["init_steps"], "public_size": s["public_batch"]}


# --- What the data sets' modules share ----------------------------------------------------


def scaled(x: np.ndarray) -> np.ndarray:
  """uint8 images as float32 in [0, 1]; tokens (int32) unchanged."""
  return x.astype(np.float32) / np.float32(255.0) if x.dtype == np.uint8 else x


# The random stream of the test subset ``--test-size`` draws (:func:`draw`).
_TEST_STREAM = 13


def draw(seed: int, stream: int, n: int, size: int) -> np.ndarray:
  """``size`` distinct indices of ``range(n)``, sorted, from ``default_rng([seed, stream])``."""
  return np.sort(np.random.default_rng([seed, stream]).choice(n, size, replace=False))


def hold_out_rows(images, size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
  """(public rows, rows left for the clients) of a training set:
  ``size`` rows drawn by :func:`~fedjax_dp.data.holdout_indices`.

  Raises:
    ValueError: ``size`` outside [1, rows - 1] (the message says what
      follows the setting's name).
  """
  if not 1 <= size < len(images):
    raise ValueError(f"must be in [1, {len(images) - 1}] (the training set less one), "
                     f"got {size}")
  return holdout_indices(len(images), size, seed)


def partition_federation(
    dataset: Dataset, request: Request, *,
    hold_out: Callable[[Any, int, int], tuple[np.ndarray, np.ndarray]] = hold_out_rows,
    describe: Callable[[Any, int], dict] | None = None) -> Federation:
  """The federation of a data set split by partition (``data.partition_indices``).

  The test set is ``test_size`` test examples drawn uniformly from the
  seed (default all, in the file's order). The
  public set is held out of the training set (``holdout`` examples if
  asked, else ``public_size`` where the data set :attr:`~Dataset.holds_out_public`),
  or drawn from the data set named by ``public_source`` (``data.public_batch``).

  Args:
    dataset: The data set (its ``loader``).
    request: What to build.
    hold_out: ``hold_out(images, size, seed)`` gives (public rows, rows left)
      (:func:`hold_out_rows`; cifar10 holds out whole originals).
    describe: ``describe(images, public_examples)`` gives facts the summary
      adds where the public set is held out (cifar10's augmentation).

  Raises:
    ValueError: A split the data does not allow (a ``ConfigError`` naming
      ``test_size``).
  """
  test_x, test_y = dataset.loader("test", request.seed)
  test_size = request.test_size
  if test_size is not None:
    if not 1 <= test_size <= len(test_y):
      raise ConfigError("test_size", f"must be in [1, {len(test_y)}] for {dataset.name}, "
                        f"got {test_size}")
    # A uniform draw, not the first N: the files are ordered (IMDB's
    # negatives first, MNIST's cleaner half first).
    chosen = draw(request.seed, _TEST_STREAM, len(test_y), test_size)
    test_x, test_y = test_x[chosen], test_y[chosen]
    if dataset.num_classes == 2 and len(np.unique(test_y)) < 2:  # AUROC needs both
      raise ConfigError("test_size", f"{test_size} test examples of {dataset.name} hold one "
                        "class only; take more")
  images, labels = dataset.loader("train", request.seed)
  n, k, seed = request.num_clients, request.samples_per_client, request.seed
  rest = None
  # Fed-SMP Sec. 6.1: a public set held out of the clients' data (top_k's ``holdout``,
  # or the data set's public set).
  held_out = request.holdout or (request.public_size if dataset.holds_out_public else 0)
  if held_out:
    try:
      held, rest = hold_out(images, held_out, seed)
    except ValueError as e:  # the size's range: named by the setting that asked it
      raise ConfigError("holdout" if request.holdout else "public_size", str(e)) from None
    if n * k > len(rest):
      raise ValueError(f"{n} clients x {k} samples = {n * k} exceeds the {len(rest)} "
                       f"training samples left after holding out {held_out} public examples")
    public = (scaled(images[held]), labels[held].astype(np.int32))
  else:
    public = public_batch(request.public_size, seed=seed, dataset=dataset.public_source)
  partition = request.partition
  pool = labels if rest is None else labels[rest]
  rows = partition_indices(pool, n, k, seed, method=partition.method, alpha=partition.alpha,
                           shards_per_client=partition.shards_per_client)
  if rest is not None:
    rows = rest[rows]
  y = labels[rows].astype(np.int32)
  data = ClientData(jnp.asarray(images[rows]), jnp.asarray(y))
  summary = {"partition": partition.method,
             **label_summary(y, num_classes=dataset.num_classes)}
  if partition.alpha is not None:
    summary["dirichlet_alpha"] = partition.alpha
  if partition.shards_per_client is not None:
    summary["shards_per_client"] = partition.shards_per_client
  if test_size is not None:
    summary["test_subset"] = test_size
  if dataset.holds_out_public:
    summary.update(training_examples=len(images), public_examples=len(public[1]),
                   public_source="held out of the training set")
    if describe is not None:
      summary.update(describe(images, len(public[1])))
  return Federation(data, (test_x, test_y), public, summary)


def idx_loader(name: str) -> Callable[[str, int], tuple[np.ndarray, np.ndarray]]:
  """The loader of an idx data set (``fedjax_dp.data.idx``): uint8 training
  images, float32 test images."""
  def load_split(split: str, seed: int):
    del seed
    return load_dataset(name, split, as_uint8=split == "train")
  return load_split


def idx_files(dataset: Dataset) -> None:
  """An idx data set's files, and the training split of the data set its
  public batch comes from (``public_source``).

  Raises:
    DataError: A file missing or corrupt.
  """
  needed = [(dataset.name, f) for files in idx.SPLITS.values() for f in files]
  if dataset.public_source in idx.DATASETS:
    needed += [(dataset.public_source, f) for f in idx.SPLITS["train"]]
  for name, file in needed:
    idx.check(name, file)


def archive_files(*files: tuple[str, str]) -> Callable[[Dataset], None]:
  """The check that each (folder, file) of the official archives is here
  and verified (``archives.locate_file``, never downloading)."""
  def check(dataset: Dataset) -> None:
    del dataset
    for folder, file in files:
      archives.locate_file(folder, file, download=False)
  return check


__all__ = ["Dataset", "Federation", "PartitionConfig", "Request",
           "SELECTION_METRICS", "SETTING_KEYS", "archive_files", "draw", "hold_out_rows",
           "idx_files", "idx_loader", "no_files", "partition_federation", "scaled"]
