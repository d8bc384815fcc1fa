"""Tests for fedjax_dp.data: idx verification/loading, download, IID partition."""

import gzip
import hashlib
import io
import os
import pathlib
import urllib.error
import urllib.request

import numpy as np
import pytest

from fedjax_dp.data import (
    CHECKSUMS,
    DATASETS,
    DataError,
    FederatedData,
    data_dirs,
    load_dataset,
    load_federated,
    locate,
    parse_idx,
    partition_iid,
    public_batch,
)

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
REAL_DATA = pathlib.Path(
    os.environ.get("FEDJAX_DP_DATA") or REPO_ROOT.parent / "shared" / "data").resolve()
LABELS = "t10k-labels-idx1-ubyte"


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch, tmp_path):
    """Real data dir, a private empty cache, and no network access."""
    monkeypatch.setenv("FEDJAX_DP_DATA", str(REAL_DATA))
    monkeypatch.setenv("FEDJAX_DP_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("FEDJAX_DP_NO_DOWNLOAD", "1")

    def no_network(*args, **kwargs):
        raise AssertionError(f"unexpected network access: {args}")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)


def _real_gz(name, file):
    return (REAL_DATA / name / f"{file}.gz").read_bytes()


def _serve(monkeypatch, payloads):
    """Makes urlopen serve ``payloads`` in turn (bytes, or an exception to raise)."""
    calls = []

    def fake_urlopen(url, timeout=None):
        calls.append((url, timeout))
        payload = payloads[len(calls) - 1]
        if isinstance(payload, Exception):
            raise payload
        return io.BytesIO(payload)

    monkeypatch.setattr(urllib.request, "urlopen", fake_urlopen)
    return calls


# ----------------------------------------------------------------- real files

@pytest.mark.parametrize("name,file", sorted(CHECKSUMS))
def test_real_files_pass_checksums(name, file):
    raw = locate(name, file, download=False)
    size, sha = CHECKSUMS[(name, file)]
    assert len(raw) == size
    assert hashlib.sha256(raw).hexdigest() == sha


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_load_test_split_shapes_dtypes_range(name):
    x, y = load_dataset(name, "test")
    assert x.shape == (10000, 28, 28, 1) and x.dtype == np.float32
    assert y.shape == (10000,) and y.dtype == np.int32
    assert x.min() == 0.0 and x.max() == 1.0
    assert set(np.unique(y).tolist()) == set(range(10))
    x8, y8 = load_dataset(name, "test", as_uint8=True)
    assert x8.dtype == np.uint8 and x8.shape == (10000, 28, 28, 1)
    np.testing.assert_array_equal(x8.astype(np.float32) / 255.0, x)
    np.testing.assert_array_equal(y8, y)


def test_load_train_split_and_cache():
    x, y = load_dataset("fashion-mnist", "train", as_uint8=True)
    assert x.shape == (60000, 28, 28, 1) and x.dtype == np.uint8
    assert y.shape == (60000,) and y.dtype == np.int32
    np.testing.assert_array_equal(np.bincount(y), np.full(10, 6000))
    again = load_dataset("fashion-mnist", "train", as_uint8=True)
    assert again[0] is x and again[1] is y  # parsed once per process
    assert not x.flags.writeable and not y.flags.writeable  # cache can't be mutated


def test_load_dataset_rejects_unknown_name_and_split():
    with pytest.raises(ValueError, match="unknown data set 'cifar10'"):
        load_dataset("cifar10", "train")
    with pytest.raises(ValueError, match="unknown split 'valid'"):
        load_dataset("mnist", "valid")


def test_data_dirs_order(monkeypatch, tmp_path):
    assert data_dirs() == [REAL_DATA, tmp_path / "cache"]
    monkeypatch.delenv("FEDJAX_DP_DATA")
    monkeypatch.delenv("FEDJAX_DP_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert data_dirs() == [tmp_path / "xdg" / "fedjax_dp"]
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert data_dirs() == [pathlib.Path.home() / ".cache" / "fedjax_dp"]


# ------------------------------------------------------- corrupt and missing

def _corrupted_copy(tmp_path):
    raw = bytearray(gzip.decompress(_real_gz("mnist", LABELS)))
    raw[100] ^= 0xFF
    folder = tmp_path / "data" / "mnist"
    folder.mkdir(parents=True)
    (folder / f"{LABELS}.gz").write_bytes(gzip.compress(bytes(raw)))
    return folder


def test_corrupt_file_raises_not_skipped(monkeypatch, tmp_path):
    _corrupted_copy(tmp_path)
    # A good copy in the cache must not mask the corrupt one.
    good = tmp_path / "cache" / "mnist"
    good.mkdir(parents=True)
    (good / f"{LABELS}.gz").write_bytes(_real_gz("mnist", LABELS))
    monkeypatch.setenv("FEDJAX_DP_DATA", str(tmp_path / "data"))
    with pytest.raises(DataError, match=rf"{LABELS}.*sha256") as info:
        locate("mnist", LABELS)
    assert str(tmp_path / "data" / "mnist" / f"{LABELS}.gz") in str(info.value)
    assert "\n" not in str(info.value)


def test_bad_gzip_and_wrong_size_raise(monkeypatch, tmp_path):
    folder = tmp_path / "data" / "mnist"
    folder.mkdir(parents=True)
    monkeypatch.setenv("FEDJAX_DP_DATA", str(tmp_path / "data"))
    (folder / f"{LABELS}.gz").write_bytes(_real_gz("mnist", LABELS)[:-20])
    with pytest.raises(DataError, match=rf"corrupt gzip.*{LABELS}\.gz"):
        locate("mnist", LABELS)
    (folder / f"{LABELS}.gz").unlink()
    (folder / LABELS).write_bytes(gzip.decompress(_real_gz("mnist", LABELS))[:-1])
    with pytest.raises(DataError, match=rf"{LABELS}.*size 10007 bytes, expected 10008"):
        locate("mnist", LABELS)


def test_uncompressed_file_accepted(monkeypatch, tmp_path):
    raw = gzip.decompress(_real_gz("mnist", LABELS))
    (tmp_path / "data" / "mnist").mkdir(parents=True)
    (tmp_path / "data" / "mnist" / LABELS).write_bytes(raw)
    monkeypatch.setenv("FEDJAX_DP_DATA", str(tmp_path / "data"))
    assert locate("mnist", LABELS) == raw


def test_missing_file_without_download_says_where_to_put_it(monkeypatch, tmp_path):
    monkeypatch.setenv("FEDJAX_DP_DATA", str(tmp_path / "empty"))
    with pytest.raises(DataError) as info:
        locate("fashion-mnist", "train-images-idx3-ubyte")
    msg = str(info.value)
    assert "\n" not in msg
    assert "fashion-mnist/train-images-idx3-ubyte.gz not found" in msg
    assert f"$FEDJAX_DP_DATA={tmp_path / 'empty'}" in msg
    assert str(tmp_path / "cache") in msg
    assert "FEDJAX_DP_NO_DOWNLOAD" in msg
    target = tmp_path / "empty" / "fashion-mnist" / "train-images-idx3-ubyte.gz"
    assert f"put the official file at {target}" in msg


def test_locate_rejects_unknown_file():
    with pytest.raises(ValueError, match="unknown file"):
        locate("mnist", "train-images-idx9-ubyte")


# ------------------------------------------------------------------ download

@pytest.fixture
def download_env(monkeypatch, tmp_path):
    monkeypatch.delenv("FEDJAX_DP_DATA")
    monkeypatch.delenv("FEDJAX_DP_NO_DOWNLOAD")
    return tmp_path / "cache"


def test_download_lands_verified_in_cache(monkeypatch, download_env):
    gz = _real_gz("mnist", LABELS)
    calls = _serve(monkeypatch, [urllib.error.URLError("mirror down"), gz])
    raw = locate("mnist", LABELS)
    assert hashlib.sha256(raw).hexdigest() == CHECKSUMS[("mnist", LABELS)][1]
    assert [url for url, _ in calls] == [m + f"{LABELS}.gz" for m in DATASETS["mnist"]]
    assert all(timeout is not None and timeout > 0 for _, timeout in calls)
    assert sorted(p.name for p in (download_env / "mnist").iterdir()) == [f"{LABELS}.gz"]
    assert (download_env / "mnist" / f"{LABELS}.gz").read_bytes() == gz
    _serve(monkeypatch, [])  # second call is served from the cache, no network
    assert locate("mnist", LABELS) == raw


def test_download_of_wrong_bytes_leaves_nothing(monkeypatch, download_env):
    wrong = gzip.compress(gzip.decompress(_real_gz("fashion-mnist", LABELS)))
    calls = _serve(monkeypatch, [wrong] * len(DATASETS["mnist"]))
    with pytest.raises(DataError, match=rf"download failed.*checksum mismatch.*{LABELS}"):
        locate("mnist", LABELS)
    assert len(calls) == len(DATASETS["mnist"])  # every mirror tried
    assert not download_env.exists() or not any(download_env.rglob("*"))


def test_download_disabled_by_flag_or_argument(monkeypatch, download_env):
    calls = _serve(monkeypatch, [])
    with pytest.raises(DataError, match="download=False"):
        locate("mnist", LABELS, download=False)
    monkeypatch.setenv("FEDJAX_DP_NO_DOWNLOAD", "1")
    with pytest.raises(DataError, match="FEDJAX_DP_NO_DOWNLOAD"):
        locate("mnist", LABELS)
    assert calls == []


# ----------------------------------------------------------------- parse_idx

def _idx(magic, dims, body):
    header = magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in dims)
    return header + bytes(body)


def test_parse_idx_valid():
    arr = parse_idx(_idx(0x803, (2, 3, 4), range(24)))
    assert arr.dtype == np.uint8 and arr.shape == (2, 3, 4)
    np.testing.assert_array_equal(arr.ravel(), np.arange(24))
    np.testing.assert_array_equal(parse_idx(_idx(0x801, (3,), [7, 8, 9])), [7, 8, 9])


@pytest.mark.parametrize("raw,match", [
    (_idx(0x802, (4,), range(4)), "magic number 0x00000802"),
    (_idx(0x901, (4,), range(4)), "magic number 0x00000901"),
    (_idx(0x803, (2, 3, 4), range(23)), "body has 23 bytes"),
    (_idx(0x801, (3,), range(4)), "body has 4 bytes"),
    (_idx(0x803, (2,), []), "header needs 16"),
    (b"\x00\x00", "too short"),
])
def test_parse_idx_rejects_malformed(raw, match):
    with pytest.raises(DataError, match=match):
        parse_idx(raw)


# ------------------------------------------------------------ partition_iid

def _synthetic(n=1000):
    """Images whose first two pixels encode the sample id; label = id % 10."""
    ids = np.arange(n)
    images = np.zeros((n, 28, 28, 1), np.uint8)
    images[:, 0, 0, 0] = ids % 256
    images[:, 0, 1, 0] = ids // 256
    return images, (ids % 10).astype(np.int64)


def _ids(x):
    return x[..., 0, 0, 0].astype(int) + 256 * x[..., 0, 1, 0].astype(int)


def test_partition_iid_distinct_paired_and_shaped():
    images, labels = _synthetic()
    fed = partition_iid(images, labels, num_clients=30, samples_per_client=7, seed=3)
    assert isinstance(fed, FederatedData)
    assert fed.x.shape == (30, 7, 28, 28, 1) and fed.x.dtype == np.uint8
    assert fed.y.shape == (30, 7) and fed.y.dtype == np.int32
    assert (fed.num_clients, fed.samples_per_client) == (30, 7)
    ids = _ids(fed.x)
    assert len(np.unique(ids)) == 210  # no sample in two clients
    np.testing.assert_array_equal(fed.y, ids % 10)  # images stay with their labels
    assert not np.array_equal(ids.ravel(), np.arange(210))  # actually shuffled


def test_partition_iid_seeded():
    images, labels = _synthetic()
    a = partition_iid(images, labels, 10, 10, seed=0)
    b = partition_iid(images, labels, 10, 10, seed=0)
    c = partition_iid(images, labels, 10, 10, seed=1)
    np.testing.assert_array_equal(a.x, b.x)
    np.testing.assert_array_equal(a.y, b.y)
    assert not np.array_equal(a.x, c.x)


@pytest.mark.parametrize("clients,per_client,match", [
    (101, 10, "1010 exceeds the 1000"),
    (0, 10, "must both be >= 1"),
    (10, 0, "must both be >= 1"),
])
def test_partition_iid_rejects_bad_sizes(clients, per_client, match):
    images, labels = _synthetic()
    with pytest.raises(ValueError, match=match):
        partition_iid(images, labels, clients, per_client, seed=0)


def test_partition_iid_rejects_float_images_and_length_mismatch():
    images, labels = _synthetic()
    with pytest.raises(ValueError, match="must be uint8"):
        partition_iid(images / 255.0, labels, 10, 10, seed=0)
    with pytest.raises(ValueError, match="1000 images but 999 labels"):
        partition_iid(images, labels[:-1], 10, 10, seed=0)


def test_load_federated_paper_default_uses_every_training_image():
    fed, test_x, test_y = load_federated()
    assert fed.x.shape == (6000, 10, 28, 28, 1) and fed.x.dtype == np.uint8
    assert fed.y.shape == (6000, 10) and fed.y.dtype == np.int32
    np.testing.assert_array_equal(np.bincount(fed.y.ravel()), np.full(10, 6000))
    train_x, _ = load_dataset("fashion-mnist", "train", as_uint8=True)
    assert int(fed.x.sum(dtype=np.int64)) == int(train_x.sum(dtype=np.int64))
    assert test_x.shape == (10000, 28, 28, 1) and test_x.dtype == np.float32
    assert test_y.shape == (10000,) and test_y.dtype == np.int32


# ------------------------------------------------------------- public_batch

def test_public_batch_is_mnist_not_fashion():
    x, y = public_batch()
    assert x.shape == (10, 28, 28, 1) and x.dtype == np.float32
    assert y.shape == (10,) and y.dtype == np.int32
    assert x.min() >= 0.0 and x.max() <= 1.0 and x.max() > 0.5
    assert y.min() >= 0 and y.max() <= 9
    as_bytes = [bytes(row) for row in np.rint(x * 255).astype(np.uint8).reshape(10, -1)]
    assert len(set(as_bytes)) == 10
    mnist, mnist_y = load_dataset("mnist", "train", as_uint8=True)
    fashion, _ = load_dataset("fashion-mnist", "train", as_uint8=True)
    mnist_index = {bytes(row): i for i, row in enumerate(mnist.reshape(len(mnist), -1))}
    fashion_set = {bytes(row) for row in fashion.reshape(len(fashion), -1)}
    assert all(b in mnist_index for b in as_bytes)
    assert not any(b in fashion_set for b in as_bytes)
    np.testing.assert_array_equal(y, [mnist_y[mnist_index[b]] for b in as_bytes])


def test_public_batch_seeded_and_sized():
    a, _ = public_batch(seed=0)
    np.testing.assert_array_equal(a, public_batch(seed=0)[0])
    assert not np.array_equal(a, public_batch(seed=1)[0])
    assert public_batch(size=3)[0].shape == (3, 28, 28, 1)
    with pytest.raises(ValueError, match=r"public_size must be in \[1, 60000\]"):
        public_batch(size=0)


def test_check_reads_a_file_once_until_it_changes(monkeypatch, tmp_path):
    """``idx.check`` (a data set's reachability) verifies a file the first
    time and again only once it changed; a corrupt or missing one raises as
    ``locate`` does."""
    from fedjax_dp.data import idx
    folder = tmp_path / "data" / "mnist"
    folder.mkdir(parents=True)
    path = folder / f"{LABELS}.gz"
    path.write_bytes(_real_gz("mnist", LABELS))
    monkeypatch.setenv("FEDJAX_DP_DATA", str(tmp_path / "data"))
    reads = []
    real = idx.decompress_gz
    monkeypatch.setattr(idx, "decompress_gz",
                        lambda gz, origin: reads.append(origin) or real(gz, origin))
    idx.check("mnist", LABELS)
    idx.check("mnist", LABELS)
    assert reads == [str(path)]
    raw = bytearray(gzip.decompress(path.read_bytes()))
    raw[100] ^= 0xFF
    path.write_bytes(gzip.compress(bytes(raw)))  # changed: read again, and refused
    os.utime(path, ns=(1, 1))
    with pytest.raises(DataError, match=rf"{LABELS}.*sha256"):
        idx.check("mnist", LABELS)
    path.unlink()
    with pytest.raises(DataError, match=rf"mnist/{LABELS}.gz not found"):
        idx.check("mnist", LABELS)
