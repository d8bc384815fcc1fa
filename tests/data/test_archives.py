"""Tests for fedjax_dp.data.archives on small files in the official formats (no network)."""

import hashlib
import io
import os
import pickle
import sys
import urllib.request

import numpy as np
import pytest
import scipy.io

from archive_files import cifar_tar as _cifar_tar
from archive_files import emnist_zip as _emnist_zip
from archive_files import imdb_tar as _imdb_tar
from archive_files import isolate as _isolate
from archive_files import put as _put
from archive_files import svhn_mat as _svhn_mat
from archive_files import tar as _tar
from fedjax_dp.data import archives
from fedjax_dp.data.idx import DataError


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
  """Empty data and cache folders, downloads forbidden, no network, no cached arrays."""
  _isolate(monkeypatch, tmp_path)
  yield
  archives.clear_cache()


def _one_line_error(excinfo) -> str:
  text = str(excinfo.value)
  assert "\n" not in text
  return text


# --- SVHN ---------------------------------------------------------------------------------


def test_svhn_parses_the_mat_file_and_maps_label_10_to_0(tmp_path):
  raw, x, y = _svhn_mat()
  table = _put(tmp_path, "svhn", "test_32x32.mat", raw)
  images, labels = archives.load_svhn("test", checksums=table)
  assert images.shape == (7, 32, 32, 3) and images.dtype == np.uint8
  np.testing.assert_array_equal(images, np.moveaxis(x, 3, 0))
  np.testing.assert_array_equal(labels, [1, 2, 3, 4, 5, 6, 7, 8, 9, 0][:7])
  assert labels.dtype == np.int32 and not images.flags.writeable
  raw10, _, _ = _svhn_mat(n=10)
  table = _put(tmp_path, "svhn", "extra_32x32.mat", raw10)
  assert archives.load_svhn("extra", checksums=table)[1][9] == 0


def test_svhn_rejects_bad_labels_and_unknown_split(tmp_path):
  buf = io.BytesIO()
  scipy.io.savemat(buf, {"X": np.zeros((32, 32, 3, 2), np.uint8), "y": np.array([[0], [3]])})
  table = _put(tmp_path, "svhn", "train_32x32.mat", buf.getvalue())
  with pytest.raises(DataError, match="labels outside 1..10") as excinfo:
    archives.load_svhn("train", checksums=table)
  _one_line_error(excinfo)
  with pytest.raises(ValueError, match="unknown split"):
    archives.load_svhn("validation")


# --- CIFAR-10 -----------------------------------------------------------------------------


def test_cifar10_reads_the_python_batches_into_nhwc(tmp_path):
  raw, data, labels = _cifar_tar()
  table = _put(tmp_path, "cifar10", "cifar-10-python.tar.gz", raw)
  images, y = archives.load_cifar10("train", checksums=table)
  assert images.shape == (15, 32, 32, 3) and images.dtype == np.uint8
  order = [f"data_batch_{i}" for i in range(1, 6)]
  flat = np.concatenate([data[b] for b in order])
  np.testing.assert_array_equal(y, sum((labels[b] for b in order), []))
  # Row layout: 1024 red, then green, then blue, each plane row-major.
  i, r, c, ch = 4, 5, 17, 2
  assert images[i, r, c, ch] == flat[i, ch * 1024 + r * 32 + c]
  np.testing.assert_array_equal(images, flat.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
  test_images, test_y = archives.load_cifar10("test", checksums=table)
  np.testing.assert_array_equal(test_images.reshape(3, -1),
                                data["test_batch"].reshape(3, 3, 32, 32)
                                .transpose(0, 2, 3, 1).reshape(3, -1))
  assert test_y.tolist() == labels["test_batch"]


class _Evil:
  def __reduce__(self):
    return (os.system, ("echo pwned",))


def test_cifar10_refuses_pickles_that_call_other_code(tmp_path):
  raw, _, _ = _cifar_tar(batch_bytes=pickle.dumps({b"data": _Evil()}, protocol=2))
  table = _put(tmp_path, "cifar10", "cifar-10-python.tar.gz", raw)
  with pytest.raises(DataError, match="malformed CIFAR-10 batch .* not allowed") as excinfo:
    archives.load_cifar10("test", checksums=table)
  _one_line_error(excinfo)


# --- EMNIST (NIST) -----------------------------------------------------------------------


def test_emnist_undoes_nist_transposition(tmp_path):
  true = np.zeros((3, 28, 28), np.uint8)
  true[0, 2, 20] = 255  # row 2, column 20: not symmetric under transposition
  true[1, 27, 0] = 7
  true[2] = np.arange(28 * 28).reshape(28, 28) % 256
  raw = _emnist_zip(true, np.array([4, 0, 9]))
  table = _put(tmp_path, "emnist", "gzip.zip", raw)
  images, labels = archives.load_emnist("train", subset="digits", checksums=table)
  assert images.shape == (3, 28, 28, 1) and images.dtype == np.uint8
  np.testing.assert_array_equal(images[..., 0], true)
  assert images[0, 2, 20, 0] == 255 and images[0, 20, 2, 0] == 0
  assert labels.tolist() == [4, 0, 9] and labels.dtype == np.int32
  with pytest.raises(DataError, match="corrupt or incomplete EMNIST archive") as excinfo:
    archives.load_emnist("train", subset="letters", checksums=table)  # not in this zip
  _one_line_error(excinfo)
  with pytest.raises(ValueError, match="unknown subset"):
    archives.load_emnist("train", subset="writers")


# --- federated EMNIST (TFF HDF5) ----------------------------------------------------------


def test_femnist_groups_examples_by_writer(tmp_path):
  import h5py  # pylint: disable=import-outside-toplevel  (the test extra)
  rng = np.random.default_rng(0)
  h5 = tmp_path / "fed_emnist_train.h5"
  clients = {"f0001_02": 3, "f0000_14": 2}
  ints = {c: rng.integers(0, 256, (n, 28, 28)) for c, n in clients.items()}
  pixels = {c: (v / 255).astype(np.float32) for c, v in ints.items()}  # as TFF stores them
  with h5py.File(h5, "w") as f:
    for client, n in clients.items():
      group = f.create_group(f"examples/{client}")
      group["pixels"] = pixels[client]
      group["label"] = np.arange(n, dtype=np.int32) + 59
  raw = _tar({"fed_emnist_train.h5": h5.read_bytes()}, "w:bz2")
  table = _put(tmp_path, "femnist", "fed_emnist.tar.bz2", raw)
  data = archives.load_femnist("train", checksums=table)
  assert data.writer_ids == ("f0000_14", "f0001_02")
  assert data.writer.tolist() == [0, 0, 1, 1, 1]
  assert data.labels.tolist() == [59, 60, 59, 60, 61]
  assert data.images.shape == (5, 28, 28, 1) and data.images.dtype == np.uint8
  np.testing.assert_array_equal(data.images[2:, ..., 0], ints["f0001_02"])
  sha = table[("femnist", "fed_emnist.tar.bz2")][1]
  assert (tmp_path / "cache" / "femnist" / sha[:16] / "fed_emnist_train.h5").is_file()


def test_femnist_without_h5py_says_how_to_install(monkeypatch):
  monkeypatch.setitem(sys.modules, "h5py", None)
  with pytest.raises(ImportError, match="pip install h5py"):
    archives.load_femnist("train")


# --- IMDB ---------------------------------------------------------------------------------


def test_tokenize():
  assert archives.tokenize("Don't<br />stop! Ça_va 42x") == ["don", "t", "stop", "ça", "va",
                                                             "42x"]


def test_imdb_vocabulary_and_sequences(tmp_path):
  table = _put(tmp_path, "imdb", "aclImdb_v1.tar.gz", _imdb_tar())
  # Training counts: great 4, bad 3, movie 2, then 1 each in alphabetical order.
  words = archives.imdb_vocabulary(7, checksums=table)
  assert words == ("great", "bad", "movie", "acting", "boring")
  ids = {w: i + 2 for i, w in enumerate(words)}
  tokens, labels = archives.load_imdb("train", vocab_size=7, maxlen=4, checksums=table)
  assert tokens.dtype == np.int32 and tokens.shape == (4, 4)
  assert labels.tolist() == [0, 0, 1, 1]  # neg then pos, each by review id
  # neg/2 "boring"; neg/3 "bad movie bad bad plot" (plot unknown); pos/0 "great acting great
  # fun"; pos/1 "great great movie loved it"; pre-padding and pre-truncation by default.
  assert tokens.tolist() == [
      [0, 0, 0, ids["boring"]],
      [ids["movie"], ids["bad"], ids["bad"], archives.UNK],
      [ids["great"], ids["acting"], ids["great"], archives.UNK],
      [ids["great"], ids["movie"], archives.UNK, archives.UNK],
  ]
  post, _ = archives.load_imdb("train", vocab_size=7, maxlen=6, padding="post",
                               truncating="post", checksums=table)
  assert post[0].tolist() == [ids["boring"], 0, 0, 0, 0, 0]
  assert post[1].tolist() == [ids["bad"], ids["movie"], ids["bad"], ids["bad"], archives.UNK, 0]
  test_tokens, test_labels = archives.load_imdb("test", vocab_size=7, maxlen=3, checksums=table)
  assert test_labels.tolist() == [0, 1]
  # "zebra" occurs only in the unlabelled reviews and imdb.vocab: unknown.
  assert test_tokens.tolist() == [[ids["bad"], ids["movie"], ids["bad"]],
                                  [0, ids["great"], archives.UNK]]
  with pytest.raises(ValueError, match="vocab_size"):
    archives.load_imdb("train", vocab_size=2, checksums=table)


def test_imdb_defaults_are_the_thesis_values():
  assert (archives.IMDB_VOCAB_SIZE, archives.IMDB_MAXLEN) == (5000, 400)


# --- locating, verifying, downloading, caching --------------------------------------------


def test_checksum_table_covers_every_official_file():
  assert set(archives.CHECKSUMS) == set(archives.URLS)
  for size, sha256 in archives.CHECKSUMS.values():
    assert sha256 is not None and len(sha256) == 64 and int(sha256, 16) >= 0
    assert size is None or size > 0


def test_corrupt_file_against_the_official_checksums(tmp_path):
  raw, _, _ = _svhn_mat()
  _put(tmp_path, "svhn", "test_32x32.mat", raw)
  with pytest.raises(DataError, match="checksum mismatch for svhn/test_32x32.mat") as excinfo:
    archives.load_svhn("test")  # the official table: wrong size
  text = _one_line_error(excinfo)
  assert "http://ufldl.stanford.edu/housenumbers/test_32x32.mat" in text
  table = _put(tmp_path, "svhn", "test_32x32.mat", raw)
  path = tmp_path / "data" / "svhn" / "test_32x32.mat"
  path.write_bytes(raw[:-1] + bytes([raw[-1] ^ 1]))  # same size, one bit flipped
  with pytest.raises(DataError, match="sha256 .* expected") as excinfo:
    archives.load_svhn("test", checksums=table)
  _one_line_error(excinfo)


@pytest.mark.parametrize("name,file,load", [
    ("svhn", "train_32x32.mat", lambda t: archives.load_svhn("train", checksums=t)),
    ("cifar10", "cifar-10-python.tar.gz", lambda t: archives.load_cifar10("train", checksums=t)),
    ("emnist", "gzip.zip", lambda t: archives.load_emnist("test", checksums=t)),
    ("imdb", "aclImdb_v1.tar.gz", lambda t: archives.load_imdb("test", checksums=t)),
])
def test_malformed_file_with_matching_checksum_raises_data_error(tmp_path, name, file, load):
  table = _put(tmp_path, name, file, b"not the official format" * 10)
  with pytest.raises(DataError) as excinfo:
    load(table)
  assert str(tmp_path) in _one_line_error(excinfo)


def test_missing_file_with_downloads_disabled_never_touches_the_network(tmp_path):
  with pytest.raises(DataError, match="disabled by FEDJAX_DP_NO_DOWNLOAD") as excinfo:
    archives.load_cifar10("test")
  text = _one_line_error(excinfo)
  assert str(tmp_path / "data" / "cifar10" / "cifar-10-python.tar.gz") in text
  assert "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz" in text


def test_download_false_forbids_download_even_when_allowed(tmp_path, monkeypatch):
  monkeypatch.setenv("FEDJAX_DP_NO_DOWNLOAD", "0")
  with pytest.raises(DataError, match="download=False") as excinfo:
    archives.load_imdb("train", download=False)
  _one_line_error(excinfo)


def _serve(monkeypatch, content: bytes, calls: list):
  def fake_urlopen(url, timeout=None):
    calls.append(url)
    return io.BytesIO(content)

  monkeypatch.setattr(urllib.request, "urlopen", fake_urlopen)


def test_download_is_verified_cached_on_disk_and_reused(tmp_path, monkeypatch):
  monkeypatch.delenv("FEDJAX_DP_NO_DOWNLOAD")
  raw, x, _ = _svhn_mat()
  table = {("svhn", "test_32x32.mat"): (len(raw), hashlib.sha256(raw).hexdigest())}
  calls = []
  _serve(monkeypatch, raw, calls)
  images, _ = archives.load_svhn("test", checksums=table)
  assert calls == ["http://ufldl.stanford.edu/housenumbers/test_32x32.mat"]
  cached = tmp_path / "cache" / "svhn" / "test_32x32.mat"
  assert cached.read_bytes() == raw
  assert sorted(p.name for p in cached.parent.iterdir()) == ["test_32x32.mat"]
  # Same process: the parsed arrays are reused without reading the file again.
  cached.unlink()
  assert archives.load_svhn("test", checksums=table)[0] is images
  # New process (cache cleared): the file in the cache folder, no second download.
  cached.write_bytes(raw)
  archives.clear_cache()
  _serve(monkeypatch, b"", calls)
  monkeypatch.setenv("FEDJAX_DP_NO_DOWNLOAD", "1")
  again, _ = archives.load_svhn("test", checksums=table)
  assert again is not images and len(calls) == 1
  np.testing.assert_array_equal(again, np.moveaxis(x, 3, 0))


def test_corrupt_download_leaves_no_file(tmp_path, monkeypatch):
  monkeypatch.delenv("FEDJAX_DP_NO_DOWNLOAD")
  calls = []
  _serve(monkeypatch, b"truncated", calls)
  with pytest.raises(DataError, match="download failed .* checksum mismatch") as excinfo:
    archives.load_emnist("train")
  _one_line_error(excinfo)
  assert len(calls) == 2  # NIST's current host, then the www.itl.nist.gov mirror
  folder = tmp_path / "cache" / "emnist"
  assert not folder.exists() or not any(folder.iterdir())


def test_data_folder_comes_before_the_cache(tmp_path):
  raw, x, _ = _svhn_mat(seed=1)
  table = _put(tmp_path, "svhn", "test_32x32.mat", raw)
  _put(tmp_path, "svhn", "test_32x32.mat", b"stale", folder="cache")
  images, _ = archives.load_svhn("test", checksums=table)
  np.testing.assert_array_equal(images, np.moveaxis(x, 3, 0))


def test_locate_file_rejects_unknown_files_and_incomplete_tables():
  with pytest.raises(ValueError, match="unknown file"):
    archives.locate_file("svhn", "train.mat")
  with pytest.raises(ValueError, match="no checksum"):
    archives.locate_file("svhn", "train_32x32.mat", checksums={})
