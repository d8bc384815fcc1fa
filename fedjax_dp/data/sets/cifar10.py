"""cifar10: the thesis' augmented CIFAR-10 (Table 8.1, Sec. 8.3.2).

The official archive (:mod:`fedjax_dp.data.archives`): the 500,000 training
images are 10 Keras-style random shifts and flips of each of the 50,000
(:data:`CIFAR_AUGMENTATION`, :class:`AugmentedImages`: seeded, deterministic,
made only for the rows the clients hold: 1.5 GB of uint8 for Table 8.1's
clients), split by partition; All-CNN-C in thesis Table 8.1's setting
(Adam). The server's public set is whole originals held out with every copy
of them: Table 8.1's 1,000 x 500 uses all 500,000, so N = 999 and one
client's share is public. The test set is the 10,000 test images.
"""

import math

import numpy as np

from fedjax_dp.data import archives, holdout_indices, settings
from fedjax_dp.data.sets import base

# Every scheme runs the base setting (thesis Table 8.1, the setting of every scheme the
# thesis runs here: FL-SIGN, FL-CS, FL-TOP, FL-STD).
SETTINGS = settings.DataSetting(
    settings.CIFAR10, "thesis Table 8.1 (CIFAR: |D_k| 500, |B| 50, T_gd 50, T_cl 400, Adam "
    "0.001, 500,000 augmented images); N = 999 and the public set this simulator's choice",
    {}, value_sources=settings.CIFAR10_SOURCES)

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

# The stream of the augmentation's draws.
_AUGMENT = 20
# Augmented images made at once (12 MB of float32 a pass; the fastest chunk measured).
_AUGMENT_CHUNK = 1024


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
    = 1.5 GB (the federation makes only the rows its clients hold).
  """
  augmented = AugmentedImages(images, factor, seed)
  return augmented[np.arange(len(augmented))]


def load(split: str, seed: int):
  """Thesis Sec. 8.3.2: 500,000 augmented training images; the 10,000 test images."""
  images, labels = archives.load_cifar10(split)
  if split == "train":
    return (AugmentedImages(images, CIFAR_AUGMENTATION, seed),
            np.tile(labels, CIFAR_AUGMENTATION))
  return images, labels


def hold_out_originals(images: AugmentedImages, size: int,
                       seed: int) -> tuple[np.ndarray, np.ndarray]:
  """(public rows, rows left for the clients): whole originals held out
  (``ceil(size / factor)`` of them, drawn by
  :func:`~fedjax_dp.data.holdout_indices`); the public set is their first
  ``size`` transforms, original by original, and no transform of them
  reaches a client.

  Raises:
    ValueError: ``size`` outside [1, (originals - 1) x factor].
  """
  n, factor = len(images.originals), images.factor
  if not 1 <= size <= (n - 1) * factor:
    raise ValueError(f"must be in [1, {(n - 1) * factor}] (the transforms of all originals "
                     f"but one), got {size}")
  held, rest = holdout_indices(n, math.ceil(size / factor), seed)
  copies = np.arange(factor)[:, None] * n
  public = (np.sort(held)[None, :] + copies).T.reshape(-1)[:size]
  return public, np.sort((rest[None, :] + copies).reshape(-1))


def describe(images: AugmentedImages, public_examples: int) -> dict:
  """The augmentation, as the federation's summary states it."""
  return {"augmentation": {
      "originals": len(images.originals), "factor": images.factor,
      "shift_pixels": images.shift, "flip_probability": images.flip_probability,
      "public_originals": math.ceil(public_examples / images.factor)}}


def federation(dataset: base.Dataset, request: base.Request) -> base.Federation:
  """Split by partition (:func:`~fedjax_dp.data.sets.base.partition_federation`),
  the public set whole originals with every copy of them
  (:func:`hold_out_originals`)."""
  return base.partition_federation(dataset, request, hold_out=hold_out_originals,
                                   describe=describe)


DATASET = base.Dataset(
    name="cifar10", model="all-cnn-c", settings=SETTINGS, federation=federation, loader=load,
    files=base.archive_files(("cifar10", "cifar-10-python.tar.gz")),
    public_source="one client's share held out of the training set: the 500 augmented "
                  "copies of 50 training images (this simulator's choice)",
    holds_out_public=True,
    about="augmented to 10x (All-CNN-C, thesis Table 8.1; the official files, the public "
          "set held out of the training set)",
    class_names=("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse",
                 "ship", "truck"))
