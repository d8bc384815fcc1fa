"""Small files in the official formats of fedjax_dp.data.archives' data sets (no network).

Shared by tests/data/test_archives.py (the loaders) and tests/data/test_datasets_archives.py
(the federations built on them). Each builder returns the file's bytes and what it holds.
"""

import gzip
import hashlib
import io
import pathlib
import pickle
import struct
import tarfile
import zipfile

import numpy as np
import scipy.io


def isolate(monkeypatch, tmp_path: pathlib.Path) -> None:
  """Empty data and cache folders under ``tmp_path``, downloads forbidden, the network
  cut (a test that reaches for it fails), no cached arrays."""
  import urllib.request  # pylint: disable=import-outside-toplevel

  import pytest  # pylint: disable=import-outside-toplevel

  from fedjax_dp.data import archives  # pylint: disable=import-outside-toplevel

  monkeypatch.setenv("FEDJAX_DP_DATA", str(tmp_path / "data"))
  monkeypatch.setenv("FEDJAX_DP_CACHE", str(tmp_path / "cache"))
  monkeypatch.setenv("FEDJAX_DP_NO_DOWNLOAD", "1")

  def no_network(url, *args, **kwargs):
    pytest.fail(f"network access attempted: {url}")

  monkeypatch.setattr(urllib.request, "urlopen", no_network)
  archives.clear_cache()


def put(root: pathlib.Path, name: str, file: str, content: bytes,
        folder: str = "data") -> dict:
  """Writes ``root/<folder>/<name>/<file>``; returns a checksum table for it."""
  path = root / folder / name / file
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_bytes(content)
  return {(name, file): (len(content), hashlib.sha256(content).hexdigest())}


def svhn_mat(n=7, seed=0, labels=None):
  """An SVHN ``<split>_32x32.mat``: X (32, 32, 3, n) uint8, y (n, 1) in 1..10 (10: digit 0).

  Returns:
    (bytes, X, y).
  """
  rng = np.random.default_rng(seed)
  x = rng.integers(0, 256, (32, 32, 3, n), dtype=np.uint8)
  if labels is None:
    labels = np.arange(n) % 10 + 1
  y = np.asarray(labels, np.uint8).reshape(n, 1)
  buf = io.BytesIO()
  scipy.io.savemat(buf, {"X": x, "y": y})  # MATLAB v5, as the official files
  return buf.getvalue(), x, y


def py2_pickle(obj) -> bytes:
  """A pickle read like the Python 2 originals: numpy.core path, byte-string dtype args."""
  raw = pickle.dumps(obj, protocol=3)
  return (raw.replace(b"cnumpy._core.multiarray\n", b"cnumpy.core.multiarray\n")
          .replace(b"X\x02\x00\x00\x00u1", b"U\x02u1").replace(b"X\x01\x00\x00\x00|", b"U\x01|"))


def tar(members: dict, mode: str) -> bytes:
  """A tar archive (``mode``: ``"w:gz"``, ``"w:bz2"``) of name -> bytes."""
  buf = io.BytesIO()
  with tarfile.open(fileobj=buf, mode=mode) as archive:
    for name, content in members.items():
      info = tarfile.TarInfo(name)
      info.size = len(content)
      archive.addfile(info, io.BytesIO(content))
  return buf.getvalue()


def cifar_tar(per_batch=3, seed=0, batch_bytes=None):
  """``cifar-10-python.tar.gz``: five training batches and a test batch of ``per_batch``.

  Returns:
    (bytes, {batch: data (per_batch, 3072) uint8}, {batch: labels list}).
  """
  rng = np.random.default_rng(seed)
  members, data, labels = {}, {}, {}
  for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
    data[name] = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
    labels[name] = [int(v) for v in rng.integers(0, 10, per_batch)]
    members[f"cifar-10-batches-py/{name}"] = batch_bytes or py2_pickle(
        {b"batch_label": b"batch", b"labels": labels[name], b"data": data[name],
         b"filenames": [b"f.png"] * per_batch})
  members["cifar-10-batches-py/batches.meta"] = py2_pickle({b"label_names": [b"airplane"]})
  members["cifar-10-batches-py/readme.html"] = b"<html></html>"
  return tar(members, "w:gz"), data, labels


def idx_file(array: np.ndarray) -> bytes:
  """An idx file of uint8 (1-D labels or 3-D images)."""
  magic = 0x803 if array.ndim == 3 else 0x801
  return struct.pack(f">I{array.ndim}I", magic, *array.shape) + array.astype(np.uint8).tobytes()


def emnist_zip(true_images, labels, subset="digits"):
  """gzip.zip as NIST ships it: each image stored transposed."""
  buf = io.BytesIO()
  with zipfile.ZipFile(buf, "w") as archive:
    for split in ("train", "test"):
      stem = f"gzip/emnist-{subset}-{split}"
      archive.writestr(f"{stem}-images-idx3-ubyte.gz",
                       gzip.compress(idx_file(true_images.transpose(0, 2, 1))))
      archive.writestr(f"{stem}-labels-idx1-ubyte.gz", gzip.compress(idx_file(labels)))
    archive.writestr(f"gzip/emnist-{subset}-mapping.txt", "0 48\n1 49\n")
  return buf.getvalue()


def femnist_h5(path: pathlib.Path, clients: dict) -> None:
  """A TFF federated EMNIST HDF5 file: ``examples/<writer>/{pixels,label}``.

  Args:
    path: The file to write.
    clients: writer id -> (pixels (n, 28, 28) float32 in [0, 1], labels (n,) int).
  """
  import h5py  # pylint: disable=import-outside-toplevel  (the test extra)
  with h5py.File(path, "w") as f:
    for client, (pixels, label) in clients.items():
      group = f.create_group(f"examples/{client}")
      group["pixels"] = np.asarray(pixels, np.float32)
      group["label"] = np.asarray(label, np.int32)


def femnist_tar(folder: pathlib.Path, train: dict, test: dict,
                prefix: str = "fed_emnist") -> bytes:
  """``<prefix>.tar.bz2`` holding ``<prefix>_train.h5`` and ``<prefix>_test.h5``
  (:func:`femnist_h5`'s ``clients`` for each), written through ``folder``."""
  members = {}
  for split, clients in (("train", train), ("test", test)):
    h5 = folder / f"{prefix}_{split}.h5"
    femnist_h5(h5, clients)
    members[f"{prefix}_{split}.h5"] = h5.read_bytes()
    h5.unlink()
  return tar(members, "w:bz2")


IMDB_REVIEWS = {
    "aclImdb/train/pos/1_9.txt": "Great great movie.<br /><br />Loved it",
    "aclImdb/train/pos/0_10.txt": "great acting, GREAT fun",
    "aclImdb/train/neg/3_1.txt": "Bad movie. Bad bad_plot",
    "aclImdb/train/neg/2_2.txt": "boring",
    "aclImdb/test/pos/0_8.txt": "great zebra",
    "aclImdb/test/neg/0_3.txt": "bad movie bad",
    "aclImdb/train/unsup/0_0.txt": "zebra zebra zebra zebra zebra",
    "aclImdb/imdb.vocab": "the\nzebra\n",
    "aclImdb/train/labeledBow.feat": "0:1 1:2\n",
}


def imdb_tar(reviews=None):
  """``aclImdb_v1.tar.gz`` of path -> text (default :data:`IMDB_REVIEWS`)."""
  return tar({k: v.encode() for k, v in (reviews or IMDB_REVIEWS).items()}, "w:gz")
