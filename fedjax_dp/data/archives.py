"""SVHN, CIFAR-10, EMNIST, federated EMNIST and IMDB from their official archives.

The seed papers train on these data sets besides (Fashion-)MNIST: SVHN
(Fed-SMP, Sec. 6.1, train set extended
with the 531,131 ``extra`` images), CIFAR-10 and IMDB (Kerkouche's thesis,
App. 8.3) and EMNIST grouped by writer (the compressive DP-FL poster: 25
participants holding the data of 50 writers each). Each loader reads the file
its authors distribute, unchanged:

- ``svhn``: ``train_32x32.mat``, ``test_32x32.mat``, ``extra_32x32.mat`` (MATLAB v5),
  http://ufldl.stanford.edu/housenumbers/;
- ``cifar10``: ``cifar-10-python.tar.gz`` (pickled batches),
  https://www.cs.toronto.edu/~kriz/cifar.html;
- ``emnist``: ``gzip.zip`` (gzipped idx files, images transposed), NIST;
- ``femnist``: ``fed_emnist.tar.bz2`` / ``fed_emnist_digitsonly.tar.bz2`` (HDF5, one
  group per writer; reading it needs ``h5py``), TensorFlow Federated;
- ``imdb``: ``aclImdb_v1.tar.gz`` (one text file per review),
  https://ai.stanford.edu/~amaas/data/sentiment/.

Locating a file works as for MNIST (:mod:`fedjax_dp.data.idx`): each folder of
:func:`~fedjax_dp.data.idx.data_dirs` (``$FEDJAX_DP_DATA``, then the user cache)
is searched for ``<folder>/<name>/<file>``; a file found there is verified and
used, a corrupt one raises :class:`~fedjax_dp.data.idx.DataError`; a missing
one is downloaded into ``<cache>/<name>/<file>`` (official URL first, then
mirrors; streamed to a temporary file, verified, then renamed into place with
:func:`fedjax_dp.atomic.atomic_file`) unless ``download=False`` or
``FEDJAX_DP_NO_DOWNLOAD`` is set to a value other than ``0``.

Verification: the size and SHA-256 of the *whole downloaded file* (unlike the
idx files, whose decompressed content is checked) against :data:`CHECKSUMS`,
copied from published tables, never computed here; the source of each is
noted beside it. Every loader takes ``checksums``, a table of the same shape
that replaces :data:`CHECKSUMS` (tests pass one for their small files).

Parsed data are cached in-process per loader, arguments and expected
checksums (verified content does not depend on the folder it came from); the
returned image and label arrays are shared and read-only (:func:`load_imdb`
pads fresh token arrays from its cached corpus). :func:`clear_cache` empties
that cache.
"""

from __future__ import annotations

import collections
import hashlib
import http.client
import io
import os
import pathlib
import pickle
import re
import tarfile
import urllib.request
import zipfile
import zlib
from collections.abc import Iterator, Mapping
from typing import NamedTuple

import numpy as np

from fedjax_dp.atomic import atomic_file
from fedjax_dp.data import idx
from fedjax_dp.data.idx import DataError, data_dirs, parse_idx

__all__ = [
    "CHECKSUMS",
    "EMNIST_SUBSETS",
    "IMDB_MAXLEN",
    "IMDB_VOCAB_SIZE",
    "PAD",
    "UNK",
    "URLS",
    "WriterData",
    "clear_cache",
    "imdb_vocabulary",
    "load_cifar10",
    "load_emnist",
    "load_femnist",
    "load_imdb",
    "load_svhn",
    "locate_file",
    "tokenize",
]

Checksums = Mapping[tuple[str, str], tuple[int | None, str | None]]

#: (name, file) -> official URL, then mirrors serving the same bytes.
URLS: dict[tuple[str, str], tuple[str, ...]] = {
    ("svhn", "train_32x32.mat"): ("http://ufldl.stanford.edu/housenumbers/train_32x32.mat",),
    ("svhn", "test_32x32.mat"): ("http://ufldl.stanford.edu/housenumbers/test_32x32.mat",),
    ("svhn", "extra_32x32.mat"): ("http://ufldl.stanford.edu/housenumbers/extra_32x32.mat",),
    ("cifar10", "cifar-10-python.tar.gz"): (
        "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",),
    ("emnist", "gzip.zip"): (
        "https://biometrics.nist.gov/cs_links/EMNIST/gzip.zip",
        "https://www.itl.nist.gov/iaui/vip/cs_links/EMNIST/gzip.zip",),
    ("femnist", "fed_emnist.tar.bz2"): (
        "https://storage.googleapis.com/tff-datasets-public/fed_emnist.tar.bz2",),
    ("femnist", "fed_emnist_digitsonly.tar.bz2"): (
        "https://storage.googleapis.com/tff-datasets-public/fed_emnist_digitsonly.tar.bz2",),
    ("imdb", "aclImdb_v1.tar.gz"): (
        "https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz",
        "http://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz",),
}

#: (name, file) -> (size in bytes or None, SHA-256 or None) of the official file as
#: downloaded. Sources (GitHub repository: path):
#:   svhn: tensorflow/datasets: tensorflow_datasets/url_checksums/svhn_cropped.txt.
#:   cifar10: SHA-256 from tensorflow/datasets: tensorflow_datasets/url_checksums/cifar10.csv
#:     (and tensorflow/tensorflow: tensorflow/python/keras/datasets/cifar10.py,
#:     ``file_hash``); that TFDS table gives no size, the 170,498,071 bytes are the
#:     archive's well-known size (torchvision's download), a pre-check only.
#:   emnist: tensorflow/datasets: tensorflow_datasets/url_checksums/emnist.txt (listed for
#:     the www.itl.nist.gov URL; biometrics.nist.gov is NIST's current host of the file).
#:   femnist: tensorflow/federated:
#:     tensorflow_federated/python/simulation/datasets/emnist.py (``load_data``'s
#:     ``sha256``, TFF releases that read the HDF5 files); no size is published.
#:   imdb: tensorflow/datasets: tensorflow_datasets/url_checksums/imdb_reviews.txt.
CHECKSUMS: dict[tuple[str, str], tuple[int | None, str | None]] = {
    ("svhn", "train_32x32.mat"): (
        182040794, "435e94d69a87fde4fd4d7f3dd208dfc32cb6ae8af2240d066de1df7508d083b8"),
    ("svhn", "test_32x32.mat"): (
        64275384, "cdce80dfb2a2c4c6160906d0bd7c68ec5a99d7ca4831afa54f09182025b6a75b"),
    ("svhn", "extra_32x32.mat"): (
        1329278602, "a133a4beb38a00fcdda90c9489e0c04f900b660ce8a316a5e854838379a71eb3"),
    ("cifar10", "cifar-10-python.tar.gz"): (
        170498071, "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce"),
    ("emnist", "gzip.zip"): (
        561753746, "fb9bb67e33772a9cc0b895e4ecf36d2cf35be8b709693c3564cea2a019fcda8e"),
    ("femnist", "fed_emnist.tar.bz2"): (
        None, "fe1ed5a502cea3a952eb105920bff8cffb32836b5173cb18a57a32c3606f3ea0"),
    ("femnist", "fed_emnist_digitsonly.tar.bz2"): (
        None, "55333deb8546765427c385710ca5e7301e16f4ed8b60c1dc5ae224b42bd5b14b"),
    ("imdb", "aclImdb_v1.tar.gz"): (
        84125825, "c40f74a18d3b61f90feba1e17730e0d38e8b97c05fde7008942e91923d1658fe"),
}

#: NIST EMNIST subsets (``emnist-<subset>-{train,test}-...`` in ``gzip.zip``).
EMNIST_SUBSETS = ("balanced", "byclass", "bymerge", "digits", "letters", "mnist")

#: Thesis defaults for IMDB (kerkouche-thesis-dp-fl-bandwidth-energy.txt l.2221: "the
#: vocabulary size is set to 5000 and the maximum length input to 400"; its 402,701
#: parameters need an embedding of exactly 5000 rows, padding and unknown included).
IMDB_VOCAB_SIZE = 5000
IMDB_MAXLEN = 400
#: Token index of padding and of words outside the vocabulary.
PAD, UNK = 0, 1

_CHUNK = 1 << 20
_CIFAR_DIR = "cifar-10-batches-py"
_CIFAR_FILES = {"train": tuple(f"data_batch_{i}" for i in range(1, 6)), "test": ("test_batch",)}
_IMDB_RE = re.compile(r"^aclImdb/(train|test)/(pos|neg)/(\d+)_(\d+)\.txt$")
_WORD_RE = re.compile(r"[^\W_]+")
_CACHE: dict[tuple, object] = {}


class WriterData(NamedTuple):
  """Federated EMNIST examples with the writer of each.

  Attributes:
    images: Read-only uint8 images of shape (N, 28, 28, 1): TFF's float pixels
      times 255, rounded (lossless: LEAF divided 8-bit grey levels by 255,
      leaf:data/femnist/preprocess/data_to_json.py), background 255 and ink 0
      as TFF stores them (the inverse of MNIST; use ``255 - images`` for MNIST
      polarity).
    labels: Read-only int32 labels of shape (N,): 0-9 digits, 10-35 upper
      case, 36-61 lower case letters (0-9 only for the digits-only file).
    writer: Read-only int32 of shape (N,): index into ``writer_ids``.
    writer_ids: TFF's client ids (NIST writer ids such as ``f0000_14``), sorted;
      examples are grouped by writer in this order.
  """

  images: np.ndarray
  labels: np.ndarray
  writer: np.ndarray
  writer_ids: tuple[str, ...]


def clear_cache() -> None:
  """Forgets the arrays parsed in this process (the files stay on disk)."""
  _CACHE.clear()


def _one_line(err: BaseException) -> str:
  return " ".join(str(err).split())


def _table(checksums: Checksums | None) -> Checksums:
  return CHECKSUMS if checksums is None else checksums


def _expected(name: str, file: str, checksums: Checksums) -> tuple[int | None, str | None]:
  if (name, file) not in URLS:
    raise ValueError(f"unknown file {name}/{file}; expected one of "
                     f"{sorted(f'{n}/{f}' for n, f in URLS)}")
  if (name, file) not in checksums:
    raise ValueError(f"no checksum for {name}/{file} in the checksum table")
  size, sha256 = checksums[(name, file)]
  if size is None and sha256 is None:
    raise ValueError(f"the checksum table gives neither size nor SHA-256 for {name}/{file}")
  return size, sha256


def _check(name: str, file: str, size: int, digest: str | None, origin: str,
           checksums: Checksums) -> None:
  """Raises DataError unless ``size`` and ``digest`` are the official ones."""
  want_size, want_sha = _expected(name, file, checksums)
  fix = f"replace it with the official file from {URLS[(name, file)][0]}"
  if want_size is not None and size != want_size:
    raise DataError(f"checksum mismatch for {name}/{file} from {origin}: size {size} bytes, "
                    f"expected {want_size}; {fix}")
  if want_sha is not None and digest != want_sha:
    raise DataError(f"checksum mismatch for {name}/{file} from {origin}: sha256 {digest}, "
                    f"expected {want_sha}; {fix}")


def _copy_hashing(source, out=None) -> tuple[int, str]:
  """Reads ``source`` to the end (copying it to ``out``); returns (size, sha256)."""
  digest, size = hashlib.sha256(), 0
  while chunk := source.read(_CHUNK):
    digest.update(chunk)
    size += len(chunk)
    if out is not None:
      out.write(chunk)
  return size, digest.hexdigest()


def _verify_file(name: str, file: str, path: pathlib.Path, checksums: Checksums) -> None:
  want_size, _ = _expected(name, file, checksums)
  try:
    size = path.stat().st_size
    if want_size is not None and size != want_size:  # fail fast, before hashing
      _check(name, file, size, None, str(path), checksums)
    with open(path, "rb") as f:
      size, digest = _copy_hashing(f)
  except OSError as err:
    raise DataError(f"cannot read {path}: {_one_line(err)}") from err
  _check(name, file, size, digest, str(path), checksums)


def _download(name: str, file: str, target: pathlib.Path, checksums: Checksums) -> None:
  """Streams the file from each URL in turn into ``target``, verified, atomically.

  The bytes go to a temporary file beside ``target`` while being hashed; a
  mismatch raises inside :func:`atomic_file`, which then deletes it, so no
  unverified or half-written file is left.
  """
  try:
    target.parent.mkdir(parents=True, exist_ok=True)
  except OSError as err:
    raise DataError(f"cannot create {target.parent}: {_one_line(err)}; "
                    "set FEDJAX_DP_CACHE to a writable folder") from err
  errors = []
  for url in URLS[(name, file)]:
    try:
      with urllib.request.urlopen(url, timeout=idx.DOWNLOAD_TIMEOUT) as response:
        with atomic_file(target) as out:
          size, digest = _copy_hashing(response, out)
          _check(name, file, size, digest, url, checksums)
      return
    except (OSError, http.client.HTTPException, ValueError, DataError) as err:
      errors.append(f"{url}: {_one_line(err)}")
  raise DataError("; ".join(errors))


def _download_disabled(download: bool) -> str | None:
  if not download:
    return "download=False"
  if os.environ.get("FEDJAX_DP_NO_DOWNLOAD", "") not in ("", "0"):
    return "download disabled by FEDJAX_DP_NO_DOWNLOAD"
  return None


def locate_file(name: str, file: str, download: bool = True,
                checksums: Checksums | None = None) -> pathlib.Path:
  """Finds (or downloads) one official archive and verifies it.

  Args:
    name: Data set folder name, e.g. ``"svhn"`` (see :data:`URLS`).
    file: The official file name, e.g. ``"train_32x32.mat"``.
    download: Whether a missing file may be downloaded (also forbidden by
      ``FEDJAX_DP_NO_DOWNLOAD``).
    checksums: Expected (size, sha256) per (name, file); default
      :data:`CHECKSUMS`.

  Returns:
    The path of the verified file: ``<folder>/<name>/<file>`` in the first
    folder of :func:`~fedjax_dp.data.idx.data_dirs` holding it, or the cache.

  Raises:
    ValueError: Unknown file, or none of its checksums in ``checksums``.
    DataError: The file found is corrupt, or it is missing and could not be
      downloaded.
  """
  checksums = _table(checksums)
  _expected(name, file, checksums)
  dirs = data_dirs()
  for folder in dirs:
    path = folder / name / file
    if path.is_file():
      _verify_file(name, file, path, checksums)
      return path
  target = dirs[-1] / name / file  # data_dirs() ends with the user cache.
  reason = _download_disabled(download)
  if reason is None:
    try:
      _download(name, file, target, checksums)
      return target
    except DataError as err:
      reason = f"download failed ({err})"
  where = ", ".join(
      f"$FEDJAX_DP_DATA={d}" if os.environ.get("FEDJAX_DP_DATA") and i == 0 else str(d)
      for i, d in enumerate(dirs))
  raise DataError(
      f"{name}/{file} not found in {where} and {reason}; put the official file "
      f"({URLS[(name, file)][0]}) at {dirs[0] / name / file} or set FEDJAX_DP_DATA to a "
      f"folder holding {name}/{file}")


def _cached(key: tuple, files: list[tuple[str, str]], checksums: Checksums, build):
  """``build()``'s result, cached per key and the expected checksums of ``files``."""
  full = key + tuple(_expected(n, f, checksums) for n, f in files)
  if full not in _CACHE:
    _CACHE[full] = build()
  return _CACHE[full]


def _readonly(*arrays: np.ndarray) -> None:
  for a in arrays:
    a.setflags(write=False)


def _check_choice(what: str, value, choices) -> None:
  if value not in choices:
    raise ValueError(f"unknown {what} {value!r}; expected one of {sorted(choices)}")


# --- SVHN -------------------------------------------------------------------------------


def _parse_svhn(path: pathlib.Path) -> tuple[np.ndarray, np.ndarray]:
  import scipy.io  # pylint: disable=import-outside-toplevel

  try:
    mat = scipy.io.loadmat(path, variable_names=("X", "y"))
  except (scipy.io.matlab.MatReadError, ValueError, TypeError, OSError, EOFError) as err:
    raise DataError(f"malformed SVHN .mat file {path}: {_one_line(err)}") from err
  x, y = mat.get("X"), mat.get("y")
  if (not isinstance(x, np.ndarray) or x.dtype != np.uint8 or x.ndim != 4
      or x.shape[:3] != (32, 32, 3)):
    raise DataError(f"malformed SVHN .mat file {path}: X must be uint8 of shape (32, 32, 3, N)")
  n = x.shape[3]
  if not isinstance(y, np.ndarray) or y.size != n or y.dtype.kind not in "uif":
    raise DataError(f"malformed SVHN .mat file {path}: y must hold {n} numeric labels")
  y = y.reshape(n)
  if np.any(y != np.round(y)) or np.any((y < 1) | (y > 10)):
    raise DataError(f"malformed SVHN .mat file {path}: labels outside 1..10")
  labels = (y.astype(np.int32) % 10).astype(np.int32)  # SVHN writes digit 0 as 10.
  images = np.ascontiguousarray(np.moveaxis(x, 3, 0))
  _readonly(images, labels)
  return images, labels


def load_svhn(split: str, download: bool = True,
              checksums: Checksums | None = None) -> tuple[np.ndarray, np.ndarray]:
  """Loads an SVHN split (cropped 32x32 digits) from its official ``.mat`` file.

  Fed-SMP (Sec. 6.1) trains on ``train`` + ``extra`` (73,257 + 531,131 images)
  and tests on ``test`` (26,032).

  Args:
    split: ``"train"``, ``"test"`` or ``"extra"`` (``<split>_32x32.mat``).
    download: Whether a missing file may be downloaded.
    checksums: Replaces :data:`CHECKSUMS` (see :func:`locate_file`).

  Returns:
    ``(images, labels)``: read-only uint8 images of shape (N, 32, 32, 3)
    (the file's X of shape (32, 32, 3, N), moved) and read-only int32 labels
    0-9 (the file's label 10 is digit 0).

  Raises:
    ValueError: Unknown split.
    DataError: The file is missing and cannot be downloaded, or is corrupt.
  """
  _check_choice("split", split, ("train", "test", "extra"))
  file = f"{split}_32x32.mat"
  checksums = _table(checksums)
  return _cached(("svhn", split), [("svhn", file)], checksums,
                 lambda: _parse_svhn(locate_file("svhn", file, download, checksums)))


# --- CIFAR-10 ---------------------------------------------------------------------------


def _numpy_reconstruct():
  try:
    from numpy._core.multiarray import _reconstruct  # pylint: disable=import-outside-toplevel
  except ImportError:  # numpy < 2
    from numpy.core.multiarray import _reconstruct  # pylint: disable=import-outside-toplevel
  return _reconstruct


class _BatchUnpickler(pickle.Unpickler):
  """Unpickles a CIFAR batch: plain Python data and numpy arrays, nothing else.

  The batches were pickled by Python 2 (hence ``encoding="bytes"`` and the
  ``numpy.core`` path); refusing every other global means a crafted file cannot
  run code.
  """

  _ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
              ("numpy", "ndarray"), ("numpy", "dtype")}

  def find_class(self, module, name):
    if (module, name) not in self._ALLOWED:
      raise pickle.UnpicklingError(f"global {module}.{name} is not allowed in a CIFAR batch")
    return _numpy_reconstruct() if name == "_reconstruct" else getattr(np, name)


def _parse_cifar_batch(raw: bytes, member: str) -> tuple[np.ndarray, np.ndarray]:
  try:
    batch = _BatchUnpickler(io.BytesIO(raw), encoding="bytes").load()
  except (pickle.UnpicklingError, ValueError, TypeError, EOFError, AttributeError,
          IndexError, KeyError) as err:
    raise DataError(f"malformed CIFAR-10 batch {member}: {_one_line(err)}") from err
  data = batch.get(b"data") if isinstance(batch, dict) else None
  labels = batch.get(b"labels") if isinstance(batch, dict) else None
  if (not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2
      or data.shape[1] != 3072):
    raise DataError(f"malformed CIFAR-10 batch {member}: b'data' must be uint8 of shape (N, 3072)")
  labels = np.asarray(labels if labels is not None else [], dtype=np.int64)
  if labels.shape != (data.shape[0],) or np.any((labels < 0) | (labels > 9)):
    raise DataError(f"malformed CIFAR-10 batch {member}: b'labels' must be {data.shape[0]} "
                    "labels in 0..9")
  # Each row: 1024 red, 1024 green, 1024 blue values, each plane row-major 32x32.
  return data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1), labels.astype(np.int32)


def _tar_members(path: pathlib.Path, mode: str, wanted) -> Iterator[tuple[str, bytes]]:
  """(name, content) of the regular members for which ``wanted(name)``, in one pass."""
  try:
    with tarfile.open(path, mode) as tar:
      for member in tar:
        if member.isfile() and wanted(member.name):
          yield member.name, tar.extractfile(member).read()
  except (tarfile.TarError, OSError, EOFError, zlib.error) as err:
    raise DataError(f"corrupt archive {path}: {_one_line(err)}") from err


def _parse_cifar(path: pathlib.Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
  members = {f"{_CIFAR_DIR}/{f}" for files in _CIFAR_FILES.values() for f in files}
  batches = {name: _parse_cifar_batch(raw, name)
             for name, raw in _tar_members(path, "r:gz", members.__contains__)}
  out = {}
  for split, files in _CIFAR_FILES.items():
    missing = [f for f in files if f"{_CIFAR_DIR}/{f}" not in batches]
    if missing:
      raise DataError(f"malformed CIFAR-10 archive {path}: no {_CIFAR_DIR}/{missing[0]}")
    parts = [batches[f"{_CIFAR_DIR}/{f}"] for f in files]
    images = np.concatenate([p[0] for p in parts])
    labels = np.concatenate([p[1] for p in parts])
    _readonly(images, labels)
    out[split] = images, labels
  return out


def load_cifar10(split: str, download: bool = True,
                 checksums: Checksums | None = None) -> tuple[np.ndarray, np.ndarray]:
  """Loads a CIFAR-10 split from ``cifar-10-python.tar.gz``, read in place.

  The archive is read once, sequentially, without extracting it; both splits
  are parsed and cached together.

  Args:
    split: ``"train"`` (``data_batch_1`` to ``_5``, 50,000 images, in that
      order) or ``"test"`` (``test_batch``, 10,000).
    download: Whether a missing file may be downloaded.
    checksums: Replaces :data:`CHECKSUMS` (see :func:`locate_file`).

  Returns:
    ``(images, labels)``: read-only uint8 NHWC images (N, 32, 32, 3) and
    read-only int32 labels 0-9 (airplane, automobile, bird, cat, deer, dog,
    frog, horse, ship, truck).

  Raises:
    ValueError: Unknown split.
    DataError: The file is missing and cannot be downloaded, or is corrupt.
  """
  _check_choice("split", split, tuple(_CIFAR_FILES))
  file = "cifar-10-python.tar.gz"
  checksums = _table(checksums)
  both = _cached(("cifar10",), [("cifar10", file)], checksums,
                 lambda: _parse_cifar(locate_file("cifar10", file, download, checksums)))
  return both[split]


# --- EMNIST (NIST idx files) ------------------------------------------------------------


def _parse_emnist(path: pathlib.Path, subset: str, split: str) -> tuple[np.ndarray, np.ndarray]:
  stem = f"gzip/emnist-{subset}-{split}"
  try:
    with zipfile.ZipFile(path) as archive:
      raw = [archive.read(f"{stem}-{kind}-ubyte.gz") for kind in ("images-idx3", "labels-idx1")]
  except (zipfile.BadZipFile, KeyError, OSError, EOFError) as err:
    raise DataError(f"corrupt or incomplete EMNIST archive {path}: {_one_line(err)}") from err
  gunzip = idx.decompress_gz
  try:  # gunzip raises DataError for bad gzip data, parse_idx for a bad idx file.
    images, labels = (parse_idx(gunzip(r, f"{path}:{stem}")) for r in raw)
  except DataError as err:
    raise DataError(f"EMNIST archive {path}, {stem}: {err}") from err
  if images.ndim != 3 or images.shape[1:] != (28, 28) or labels.shape != images.shape[:1]:
    raise DataError(f"malformed EMNIST files {path}:{stem}: images {images.shape}, labels "
                    f"{labels.shape}")
  # NIST stores each image transposed relative to MNIST (column-major).
  images = np.ascontiguousarray(images.transpose(0, 2, 1)[..., np.newaxis])
  labels = labels.astype(np.int32)
  _readonly(images, labels)
  return images, labels


def load_emnist(split: str, subset: str = "byclass", download: bool = True,
                checksums: Checksums | None = None) -> tuple[np.ndarray, np.ndarray]:
  """Loads an EMNIST split from NIST's ``gzip.zip`` (no writer ids; see :func:`load_femnist`).

  Args:
    split: ``"train"`` or ``"test"``.
    subset: One of :data:`EMNIST_SUBSETS` (``byclass``: 62 classes).
    download: Whether a missing file may be downloaded.
    checksums: Replaces :data:`CHECKSUMS` (see :func:`locate_file`).

  Returns:
    ``(images, labels)``: read-only uint8 images (N, 28, 28, 1), transposed
    back to MNIST orientation, and read-only int32 labels as NIST numbers them
    (``letters``: 1-26; the others from 0; ``emnist-<subset>-mapping.txt`` in the
    archive maps them to characters).

  Raises:
    ValueError: Unknown split or subset.
    DataError: The file is missing and cannot be downloaded, or is corrupt.
  """
  _check_choice("split", split, ("train", "test"))
  _check_choice("subset", subset, EMNIST_SUBSETS)
  checksums = _table(checksums)
  return _cached(("emnist", subset, split), [("emnist", "gzip.zip")], checksums,
                 lambda: _parse_emnist(locate_file("emnist", "gzip.zip", download, checksums),
                                       subset, split))


# --- Federated EMNIST (TFF HDF5, by writer) -----------------------------------------------


def _extract_member(archive: pathlib.Path, member: str, target: pathlib.Path) -> None:
  """Extracts the tar.bz2 member whose base name is ``member`` to ``target``, atomically."""
  try:
    target.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "r:bz2") as tar:
      for info in tar:
        if info.isfile() and info.name.rsplit("/", 1)[-1] == member:
          with atomic_file(target) as out:
            _copy_hashing(tar.extractfile(info), out)
          return
  except (tarfile.TarError, OSError, EOFError, zlib.error) as err:
    raise DataError(f"cannot extract {member} from {archive} to {target}: {_one_line(err)}; "
                    "set FEDJAX_DP_CACHE to a writable folder if it is not") from err
  raise DataError(f"malformed archive {archive}: no member {member}")


def _parse_femnist(path: pathlib.Path) -> WriterData:
  import h5py  # pylint: disable=import-outside-toplevel

  images, labels, writer = [], [], []
  try:
    with h5py.File(path, "r") as f:
      examples = f["examples"]
      writer_ids = tuple(sorted(examples))
      for i, client in enumerate(writer_ids):
        pixels = np.asarray(examples[client]["pixels"][()], dtype=np.float32)
        label = np.asarray(examples[client]["label"][()]).reshape(-1)
        if pixels.shape != (len(label), 28, 28):
          raise DataError(f"malformed federated EMNIST file {path}: client {client} has pixels "
                          f"{pixels.shape} and {len(label)} labels")
        images.append(pixels)
        labels.append(label)
        writer.append(np.full(len(label), i, np.int32))
  except (OSError, KeyError, TypeError, ValueError) as err:
    raise DataError(f"malformed federated EMNIST file {path}: {_one_line(err)}") from err
  if not writer_ids:
    raise DataError(f"malformed federated EMNIST file {path}: no clients under 'examples'")
  pixels = np.concatenate(images)
  label = np.concatenate(labels)
  if np.any((pixels < 0) | (pixels > 1)) or np.any((label < 0) | (label > 61)):
    raise DataError(f"malformed federated EMNIST file {path}: pixels outside [0, 1] or labels "
                    "outside 0..61")
  out = WriterData(np.rint(pixels * 255).astype(np.uint8)[..., np.newaxis],
                   label.astype(np.int32), np.concatenate(writer), writer_ids)
  _readonly(out.images, out.labels, out.writer)
  return out


def load_femnist(split: str, only_digits: bool = False, download: bool = True,
                 checksums: Checksums | None = None) -> WriterData:
  """Loads federated EMNIST, grouped by writer, from TFF's HDF5 archive.

  This is the data the poster means by EMNIST "with each participant holding
  the data of 50 users": NIST's idx files (:func:`load_emnist`) carry no
  writer ids. TensorFlow Federated built it from LEAF's FEMNIST: 3,400 writers,
  62 classes, 671,585 train / 77,483 test examples (only digits: 3,383
  writers, 341,873 / 40,832); every writer has examples in both splits.

  The verified ``fed_emnist[_digitsonly].tar.bz2`` is found or downloaded
  like any other file; its ``..._{train,test}.h5`` member is extracted once
  into ``<cache>/femnist/<first 16 hex digits of the archive's SHA-256>/`` and
  read from there. Reading HDF5 needs the optional package ``h5py``.

  Example (the poster's 25 participants of 50 writers)::

    data = load_femnist("train")
    order = np.random.default_rng(0).permutation(len(data.writer_ids))[:25 * 50]
    clients = [np.flatnonzero(np.isin(data.writer, group))
               for group in order.reshape(25, 50)]
    fed = from_client_indices(data.images, data.labels, clients)

  Args:
    split: ``"train"`` or ``"test"``.
    only_digits: Use ``fed_emnist_digitsonly`` (10 classes) instead of the
      62-class ``fed_emnist``.
    download: Whether a missing archive may be downloaded.
    checksums: Replaces :data:`CHECKSUMS` (see :func:`locate_file`).

  Returns:
    :class:`WriterData`.

  Raises:
    ValueError: Unknown split.
    ImportError: ``h5py`` is not installed.
    DataError: The archive is missing and cannot be downloaded, or is corrupt.
  """
  _check_choice("split", split, ("train", "test"))
  try:
    import h5py  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
  except ImportError as err:
    raise ImportError("load_femnist reads TFF's HDF5 files and needs h5py: "
                      "pip install h5py") from err
  prefix = "fed_emnist_digitsonly" if only_digits else "fed_emnist"
  file = f"{prefix}.tar.bz2"
  checksums = _table(checksums)

  def build():
    archive = locate_file("femnist", file, download, checksums)
    _, sha256 = _expected("femnist", file, checksums)
    tag = sha256[:16] if sha256 else "size-only"
    h5 = idx.cache_dir() / "femnist" / tag / f"{prefix}_{split}.h5"
    if not h5.is_file():
      _extract_member(archive, f"{prefix}_{split}.h5", h5)
    return _parse_femnist(h5)

  return _cached(("femnist", prefix, split), [("femnist", file)], checksums, build)


# --- IMDB -------------------------------------------------------------------------------


def tokenize(text: str) -> list[str]:
  """Splits a review into words: the tokenisation of :func:`load_imdb`.

  Lower-cases, replaces the ``<br />`` line breaks of the source with spaces,
  then keeps the maximal runs of letters and digits (Unicode; ``_`` and every
  other character separate words): ``"Don't<br />stop!"`` gives
  ``["don", "t", "stop"]``.
  """
  return _WORD_RE.findall(text.lower().replace("<br />", " "))


class _ImdbCorpus(NamedTuple):
  words: tuple[str, ...]  # training-split words by frequency (ties alphabetical)
  splits: dict  # split -> (ranks of the review words, concatenated; offsets; labels)


def _parse_imdb(path: pathlib.Path) -> _ImdbCorpus:
  reviews = {"train": [], "test": []}
  for name, raw in _tar_members(path, "r:gz", _IMDB_RE.match):
    split, sentiment, review_id, _ = _IMDB_RE.match(name).groups()
    label = int(sentiment == "pos")
    reviews[split].append((label, int(review_id), tokenize(raw.decode("utf-8", "replace"))))
  for split, items in reviews.items():
    found = {label for label, _, _ in items}
    if found != {0, 1}:
      raise DataError(f"malformed IMDB archive {path}: no aclImdb/{split}/"
                      f"{'neg' if 0 not in found else 'pos'}/*.txt reviews")
    items.sort(key=lambda item: item[:2])  # negative then positive, by review id
  counts = collections.Counter(w for _, _, words in reviews["train"] for w in words)
  words = tuple(sorted(counts, key=lambda w: (-counts[w], w)))
  rank = {w: i for i, w in enumerate(words)}
  unknown = 1 << 62  # rank of test words never seen in training
  splits = {}
  for split, items in reviews.items():
    ranks = np.fromiter((rank.get(w, unknown) for _, _, ws in items for w in ws), np.int64)
    offsets = np.cumsum([0] + [len(ws) for _, _, ws in items])
    labels = np.array([label for label, _, _ in items], np.int32)
    splits[split] = ranks, offsets, labels
  return _ImdbCorpus(words, splits)


def _imdb_corpus(download: bool, checksums: Checksums | None) -> _ImdbCorpus:
  file = "aclImdb_v1.tar.gz"
  checksums = _table(checksums)
  return _cached(("imdb",), [("imdb", file)], checksums,
                 lambda: _parse_imdb(locate_file("imdb", file, download, checksums)))


def _check_int(name: str, value, low: int) -> None:
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
    raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")


def imdb_vocabulary(vocab_size: int = IMDB_VOCAB_SIZE, download: bool = True,
                    checksums: Checksums | None = None) -> tuple[str, ...]:
  """The words of :func:`load_imdb`'s vocabulary: ``words[i]`` has token index ``i + 2``.

  Args:
    vocab_size: Number of token indices, :data:`PAD` and :data:`UNK` included.
    download: Whether a missing file may be downloaded.
    checksums: Replaces :data:`CHECKSUMS` (see :func:`locate_file`).

  Returns:
    The ``vocab_size - 2`` most frequent words of the training reviews (fewer
    if the training split has fewer distinct words), most frequent first, ties
    in alphabetical order.
  """
  _check_int("vocab_size", vocab_size, 3)
  return _imdb_corpus(download, checksums).words[:vocab_size - 2]


def load_imdb(split: str, vocab_size: int = IMDB_VOCAB_SIZE, maxlen: int = IMDB_MAXLEN,
              padding: str = "pre", truncating: str = "pre", download: bool = True,
              checksums: Checksums | None = None) -> tuple[np.ndarray, np.ndarray]:
  """Loads IMDB reviews from ``aclImdb_v1.tar.gz`` as padded token sequences.

  Reviews: ``aclImdb/<split>/{neg,pos}/<id>_<rating>.txt`` (12,500 each; the
  unlabelled ``train/unsup`` reviews, ``imdb.vocab`` and the bag-of-words
  files are not used), negative reviews first, each class by review id.
  Tokens: :func:`tokenize`. Vocabulary: built from the training reviews only,
  the ``vocab_size - 2`` most frequent words (ties alphabetical) get indices
  2.. in frequency order (:func:`imdb_vocabulary`); 0 is padding, 1 any other
  word. Defaults are the thesis' (:data:`IMDB_VOCAB_SIZE`, :data:`IMDB_MAXLEN`)
  and padding / truncation follow Keras' ``pad_sequences`` defaults (the thesis
  used Keras 2.2.0, l.2298): both at the start. Keras' own ``imdb.load_data``
  indexes differently (start mark 1, unknown 2, words from 3, its own
  tokenisation), so token ids are not interchangeable with it.

  Args:
    split: ``"train"`` or ``"test"`` (25,000 reviews each).
    vocab_size: Number of token indices, padding and unknown included (the
      embedding's rows); at least 3.
    maxlen: Sequence length, at least 1.
    padding: ``"pre"`` or ``"post"``: where shorter reviews get zeros.
    truncating: ``"pre"`` (keep the last ``maxlen`` tokens) or ``"post"``
      (keep the first).
    download: Whether a missing file may be downloaded.
    checksums: Replaces :data:`CHECKSUMS` (see :func:`locate_file`).

  Returns:
    ``(tokens, labels)``: int32 of shape (N, maxlen) with values in
    ``[0, vocab_size)``, and int32 labels (N,), 0 negative, 1 positive.

  Raises:
    ValueError: Unknown split, padding or truncating, or a bad size.
    DataError: The file is missing and cannot be downloaded, or is corrupt.
  """
  _check_choice("split", split, ("train", "test"))
  _check_choice("padding", padding, ("pre", "post"))
  _check_choice("truncating", truncating, ("pre", "post"))
  _check_int("vocab_size", vocab_size, 3)
  _check_int("maxlen", maxlen, 1)
  ranks, offsets, labels = _imdb_corpus(download, checksums).splits[split]
  ids = np.where(ranks < vocab_size - 2, ranks + 2, UNK).astype(np.int32)
  tokens = np.full((len(labels), maxlen), PAD, np.int32)
  for i, (start, end) in enumerate(zip(offsets[:-1], offsets[1:])):
    seq = ids[start:end]
    seq = seq[-maxlen:] if truncating == "pre" else seq[:maxlen]
    if len(seq):
      if padding == "pre":
        tokens[i, maxlen - len(seq):] = seq
      else:
        tokens[i, :len(seq)] = seq
  return tokens, labels.copy()
