"""--dataset svhn / cifar10 / imdb / femnist on small files in the official formats.

The files are built by tests/archive_files.py in ``$FEDJAX_DP_DATA`` (a tmp folder), their
size and SHA-256 put into ``archives.CHECKSUMS`` in place of the official ones; downloads
are forbidden and the network is cut.
"""

import sys

import numpy as np
import pytest
import scipy.ndimage

import archive_files as F
from fedjax_dp import datasets, models
from fedjax_dp.data import settings as data_settings
from fedjax_dp.cli import sweep
from fedjax_dp.data import PADDING_LABEL, archives, as_float
from fedjax_dp.data.sets import cifar10
from fedjax_dp.errors import ConfigError
from fedjax_dp.schemes import fedsmp

NEW = ("svhn", "cifar10", "imdb", "femnist")


@pytest.fixture
def files(tmp_path, monkeypatch):
  """Empty data and cache folders, no downloads, no network; ``files(name, file, bytes)``
  installs a file and its checksums."""
  F.isolate(monkeypatch, tmp_path)

  def install(name, file, content):
    for key, value in F.put(tmp_path, name, file, content).items():
      monkeypatch.setitem(archives.CHECKSUMS, key, value)

  yield install
  archives.clear_cache()


# --- the small data sets -----------------------------------------------------------------


def _svhn(install):
  """train 7 + extra 10 images (labels 1..10 as the files write them), test 5."""
  raw, train_x, train_y = F.svhn_mat(7, seed=1)
  install("svhn", "train_32x32.mat", raw)
  raw, extra_x, extra_y = F.svhn_mat(10, seed=2)
  install("svhn", "extra_32x32.mat", raw)
  raw, test_x, _ = F.svhn_mat(5, seed=3)
  install("svhn", "test_32x32.mat", raw)
  images = np.concatenate([np.moveaxis(train_x, 3, 0), np.moveaxis(extra_x, 3, 0)])
  labels = np.concatenate([train_y, extra_y]).reshape(-1) % 10
  return images, labels, np.moveaxis(test_x, 3, 0)


def _cifar(install, seed=0):
  """15 training images (3 a batch), 3 test images."""
  raw, data, labels = F.cifar_tar(per_batch=3, seed=seed)
  install("cifar10", "cifar-10-python.tar.gz", raw)
  order = [f"data_batch_{i}" for i in range(1, 6)]
  images = np.concatenate([data[b] for b in order]).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
  return images, np.array(sum((labels[b] for b in order), []))


IMDB_TRAIN = 12


def _imdb(install):
  """12 training reviews (6 negative, 6 positive), each with a word of its own; 4 test."""
  reviews = {}
  for i in range(IMDB_TRAIN):
    kind = "pos" if i % 2 else "neg"
    reviews[f"aclImdb/train/{kind}/{i}_7.txt"] = f"movie word{i} " + "good " * (i % 3)
  for i in range(4):
    reviews[f"aclImdb/test/{'pos' if i % 2 else 'neg'}/{i}_7.txt"] = f"movie good word{i}"
  install("imdb", "aclImdb_v1.tar.gz", F.imdb_tar(reviews))


WRITERS = 14


def _femnist(install, tmp_path):
  """14 writers with 2-5 training and 1-2 test examples; every pixel of writer w's images
  is ``(w + 1)`` in MNIST polarity (TFF stores ``1 - (w + 1) / 255``)."""
  rng = np.random.default_rng(0)
  ids = [f"f{w:04d}_{w % 7:02d}" for w in range(WRITERS)]  # sorted: index = w
  train, test, sizes = {}, {}, {}
  for w, writer in enumerate(ids):
    for split, n in (("train", 2 + w % 4), ("test", 1 + w % 2)):
      pixels = np.full((n, 28, 28), 1 - (w + 1) / 255, np.float32)
      (train if split == "train" else test)[writer] = (pixels, rng.integers(0, 62, n))
      sizes[(split, w)] = n
  install("femnist", "fed_emnist.tar.bz2", F.femnist_tar(tmp_path, train, test))
  return sizes


def _writer_of(x: np.ndarray) -> np.ndarray:
  """The writer each image of :func:`_femnist` comes from (-1: an all-zero padding row)."""
  return x.reshape(*x.shape[:-3], -1)[..., 0].astype(int) - 1


def _rows(x) -> list[bytes]:
  x = np.asarray(x)
  return [r.tobytes() for r in x.reshape(-1, *x.shape[-3:])]


# --- svhn ----------------------------------------------------------------------------------


def test_svhn_trains_on_train_plus_extra_without_the_public_examples(files):
  images, labels, test_x = _svhn(files)
  fed = datasets.load("svhn", 5, 3, seed=0, public_size=2)
  x, y = np.asarray(fed.data.x), np.asarray(fed.data.y)
  assert x.shape == (5, 3, 32, 32, 3) and x.dtype == np.uint8 and y.dtype == np.int32
  assert y.min() >= 0 and y.max() <= 9
  by_image = {r: int(l) for r, l in zip(_rows(images), labels)}
  assert [by_image[r] for r in _rows(x)] == y.reshape(-1).tolist()  # images keep their labels
  public_x, public_y = fed.public
  assert public_x.dtype == np.float32 and public_x.shape == (2, 32, 32, 3)
  public = _rows(np.rint(public_x * 255).astype(np.uint8))
  assert [by_image[r] for r in public] == public_y.tolist()
  clients = _rows(x)
  # 15 client rows + 2 public = the 17 images of train + extra, each once.
  assert sorted(clients + public) == sorted(_rows(images))
  assert not set(clients) & set(public)
  np.testing.assert_array_equal(fed.test[0], test_x)
  assert fed.test[0].dtype == np.uint8 and fed.test[1].tolist() == [1, 2, 3, 4, 5]
  assert fed.summary["training_examples"] == 17 and fed.summary["public_examples"] == 2
  # top_k's own hold-out replaces the data set's public set size.
  assert len(datasets.load("svhn", 4, 3, seed=0, public_size=2, holdout=5).public[1]) == 5
  with pytest.raises(ValueError, match="exceeds the 15 training samples left after holding "
                                       "out 2 public examples"):
    datasets.load("svhn", 6, 3, seed=0, public_size=2)
  # A hold-out of the whole training set names the setting that asked it.
  for settings, field in ((dict(public_size=17), "public_size"),
                          (dict(public_size=2, holdout=17), "holdout")):
    with pytest.raises(ConfigError) as error:
      datasets.load("svhn", 1, 1, seed=0, **settings)
    assert (error.value.field, error.value.detail) == (
        field, "must be in [1, 16] (the training set less one), got 17")


# --- cifar10 -------------------------------------------------------------------------------


def test_cifar10_augmentation_is_keras_shift_and_flip_seeded(files):
  images, _ = _cifar(files)
  once = datasets.augment_cifar10(images, seed=4)
  assert once.shape == (150, 32, 32, 3) and once.dtype == np.uint8
  np.testing.assert_array_equal(once, datasets.augment_cifar10(images, seed=4))
  other = datasets.augment_cifar10(images, seed=5)
  assert (once != other).any(axis=(1, 2, 3)).mean() > 0.9  # nearly every row differs
  aug = datasets.AugmentedImages(images, seed=4)
  assert np.abs(aug.dy).max() <= 3.2 and np.abs(aug.dx).max() <= 3.2
  assert aug.dy.min() < -1 and aug.dy.max() > 1 and 0.3 < aug.flip.mean() < 0.7
  assert (aug.source(np.arange(150)) == np.tile(np.arange(15), 10)).all()
  # Each row: scipy's order-1 shift with the edge extended (Keras' resampling), then the flip.
  for j in (0, 17, 149):
    want = scipy.ndimage.shift(images[j % 15].astype(np.float64), (aug.dy[j], aug.dx[j], 0),
                               order=1, mode="nearest")
    if aug.flip[j]:
      want = want[:, ::-1]
    np.testing.assert_allclose(datasets.shift_flip(images[j % 15][None], aug.dy[j:j + 1],
                                                   aug.dx[j:j + 1], aug.flip[j:j + 1])[0],
                               want, atol=1e-3)
    assert np.abs(once[j].astype(int) - want).max() <= 1  # rounded to uint8
  # Rows made one by one are the rows of the whole set.
  np.testing.assert_array_equal(aug[np.array([[149, 3], [17, 0]])],
                                once[[149, 3, 17, 0]].reshape(2, 2, 32, 32, 3))
  # The federation: deterministic per seed, another seed another augmentation.
  a, b = (datasets.load("cifar10", 7, 20, seed=s, public_size=10) for s in (1, 1))
  np.testing.assert_array_equal(np.asarray(a.data.x), np.asarray(b.data.x))
  c = datasets.load("cifar10", 7, 20, seed=2, public_size=10)
  assert not np.array_equal(np.sort(_rows(a.data.x)), np.sort(_rows(c.data.x)))
  assert a.summary["augmentation"]["factor"] == datasets.CIFAR_AUGMENTATION == 10


def test_cifar10_public_originals_never_reach_a_client(files, monkeypatch):
  """Without shifts and flips every augmented row is its original: the public set is the
  10 copies of one held-out image, and the clients hold 10 copies of each of the others."""
  monkeypatch.setattr(cifar10, "CIFAR_SHIFT", 0.0)  # the data set's module holds them
  monkeypatch.setattr(cifar10, "CIFAR_FLIP_PROBABILITY", 0.0)
  images, labels = _cifar(files)
  fed = datasets.load("cifar10", 14, 10, seed=3, public_size=10)
  x, y = np.asarray(fed.data.x), np.asarray(fed.data.y)
  assert x.shape == (14, 10, 32, 32, 3) and x.dtype == np.uint8
  index = {r: i for i, r in enumerate(_rows(images))}
  sources = np.array([index[r] for r in _rows(x)])
  assert (labels[sources] == y.reshape(-1)).all()
  public = [index[r] for r in _rows(np.rint(fed.public[0] * 255).astype(np.uint8))]
  assert len(set(public)) == 1 and len(public) == 10
  assert (fed.public[1] == labels[public[0]]).all()
  counts = np.bincount(sources, minlength=15)
  assert counts[public[0]] == 0 and sorted(counts)[1:] == [10] * 14
  assert fed.summary["augmentation"]["public_originals"] == 1
  assert fed.test[0].shape == (3, 32, 32, 3) and fed.test[0].dtype == np.uint8
  # A public set of 7: 7 copies of one original; all 14 x 10 others stay available.
  seven = datasets.load("cifar10", 14, 10, seed=3, public_size=7)
  assert len({index[r] for r in _rows(np.rint(seven.public[0] * 255).astype(np.uint8))}) == 1
  with pytest.raises(ValueError, match="exceeds the 130 training samples"):
    datasets.load("cifar10", 14, 10, seed=3, public_size=11)  # two originals held out


# --- imdb ----------------------------------------------------------------------------------


def test_imdb_clients_hold_int32_tokens_and_the_public_reviews_are_held_out(files):
  _imdb(files)
  fed = datasets.load("imdb", 5, 2, seed=0, public_size=2)
  x, y = np.asarray(fed.data.x), np.asarray(fed.data.y)
  assert x.shape == (5, 2, 400) and x.dtype == np.int32 and set(y.reshape(-1)) <= {0, 1}
  assert x.max() < archives.IMDB_VOCAB_SIZE and (x[..., :390] == archives.PAD).all()
  assert as_float(fed.data.x) is fed.data.x  # tokens reach the model unchanged
  public_x, public_y = fed.public
  assert public_x.dtype == np.int32 and public_x.shape == (2, 400)
  tokens, labels = archives.load_imdb("train")
  index = {t.tobytes(): i for i, t in enumerate(tokens)}
  assert len(index) == IMDB_TRAIN  # every review its own sequence
  clients = [index[t.tobytes()] for t in x.reshape(-1, 400)]
  public = [index[t.tobytes()] for t in public_x]
  assert not set(clients) & set(public) and len(set(clients)) == 10
  assert (labels[clients] == y.reshape(-1)).all() and (labels[public] == public_y).all()
  assert fed.test[0].dtype == np.int32 and fed.test[0].shape == (4, 400)
  assert fed.summary["num_classes"] == 2
  skew = datasets.load("imdb", 4, 2, seed=0, public_size=2,
                       partition=datasets.PartitionConfig("shards", shards_per_client=1))
  # Shards of the label-sorted reviews: a label per client, but for at most one
  # shard where the negatives end (McMahan's cut).
  mixed = [len(set(row)) for row in np.asarray(skew.data.y)]
  assert max(mixed) <= 2 and mixed.count(2) <= 1


# --- femnist -------------------------------------------------------------------------------


def test_femnist_clients_are_groups_of_writers_padded(files, tmp_path):
  sizes = _femnist(files, tmp_path)
  fed = datasets.load("femnist", 3, 100, seed=0, public_size=4, writers_per_client=2)
  x, y = np.asarray(fed.data.x), np.asarray(fed.data.y)
  assert x.dtype == np.uint8 and x.shape[2:] == (28, 28, 1) and y.dtype == np.int32
  writers = _writer_of(x)
  real = y != PADDING_LABEL
  assert (np.sort(~real, axis=1, kind="stable") == ~real).all()  # padding only at the end
  assert (x[~real] == 0).all() and (writers[~real] == -1).all()
  assert y.shape[1] == real.sum(axis=1).max()  # as wide as the largest client
  held = [sorted(set(writers[k][real[k]])) for k in range(3)]
  assert all(len(h) == 2 for h in held)  # two writers each, all their training examples
  for k, group in enumerate(held):
    assert real[k].sum() == sum(sizes[("train", w)] for w in group)
  used = sum(held, [])
  assert len(set(used)) == 6
  # MNIST polarity: the ink TFF stores as 0 is 255 here.
  assert (x[real] == (writers[real] + 1)[:, None, None, None]).all()
  public_writers = set(_writer_of(np.rint(fed.public[0] * 255).astype(np.uint8)))
  assert len(fed.public[1]) == 4 and not public_writers & set(used)
  test_writers = _writer_of(fed.test[0])
  assert set(test_writers) == set(used)
  assert len(test_writers) == sum(sizes[("test", w)] for w in used)
  assert fed.test[1].min() >= 0 and fed.test[1].max() <= 61
  assert fed.summary["writers_per_client"] == 2 and fed.summary["clients"] == 3
  assert datasets.FEMNIST_WRITERS_PER_CLIENT == 50
  # Seeded: the same writers for the same seed, others for another.
  again = datasets.load("femnist", 3, 100, seed=0, public_size=4, writers_per_client=2)
  np.testing.assert_array_equal(np.asarray(again.data.x), x)
  other = datasets.load("femnist", 3, 100, seed=1, public_size=4, writers_per_client=2)
  assert set(_writer_of(np.asarray(other.data.x)).reshape(-1)) != set(writers.reshape(-1))
  # samples_per_client caps each client at a subset of its writers' examples.
  capped = datasets.load("femnist", 3, 3, seed=0, public_size=4, writers_per_client=2)
  assert np.asarray(capped.data.y).shape == (3, 3)
  assert capped.summary["clients_capped"] == 3 and capped.summary["size_max"] == 3
  assert len(datasets.load("femnist", 3, 100, seed=0, writers_per_client=2, public_size=4,
                           test_size=2).test[1]) == 2


@pytest.mark.parametrize("kwargs,needle", [
    ({"num_clients": 7, "writers_per_client": 2}, r"7 x 2 = 14 must be below femnist's 14 "),
    ({"num_clients": 3, "writers_per_client": 2, "public_size": 10 ** 6},
     r"public_size must be in \[1, "),
    ({"num_clients": 3, "writers_per_client": 2,
      "partition": datasets.PartitionConfig("dirichlet", alpha=1.0)}, "split by writer"),
    ({"num_clients": 3, "writers_per_client": 0}, "writers_per_client must be an integer"),
])
def test_bad_femnist_settings_raise_one_line(files, tmp_path, kwargs, needle):
  _femnist(files, tmp_path)
  with pytest.raises(ValueError, match=needle) as info:
    datasets.load("femnist", samples_per_client=100, **kwargs)
  assert "\n" not in str(info.value)


def test_writers_per_client_is_femnist_only(files):
  with pytest.raises(ValueError, match="applies to femnist only"):
    datasets.load("svhn", 5, 3, writers_per_client=2)


# --- reachable -----------------------------------------------------------------------------


def test_reachable_with_and_without_the_files(files, tmp_path, monkeypatch):
  for name in NEW:
    reason = datasets.reachable(name)
    assert reason.startswith(f"{name}: ") and "\n" not in reason and "not found" in reason
  assert "svhn/train_32x32.mat" in datasets.reachable("svhn")
  assert "cifar10/cifar-10-python.tar.gz" in datasets.reachable("cifar10")
  assert datasets.reachable("medical-synth") == ""
  monkeypatch.delenv("FEDJAX_DP_NO_DOWNLOAD")  # downloads allowed: still none (no_network)
  assert "download=False" in datasets.reachable("imdb")
  _svhn(files)
  _cifar(files)
  _imdb(files)
  _femnist(files, tmp_path)
  assert {name: datasets.reachable(name) for name in NEW} == dict.fromkeys(NEW, "")
  (tmp_path / "data" / "svhn" / "extra_32x32.mat").unlink()  # one file of three
  assert "svhn/extra_32x32.mat not found" in datasets.reachable("svhn")
  (tmp_path / "data" / "cifar10" / "cifar-10-python.tar.gz").write_bytes(b"corrupt")
  assert "checksum mismatch for cifar10/cifar-10-python.tar.gz" in datasets.reachable("cifar10")
  monkeypatch.setitem(sys.modules, "h5py", None)
  assert datasets.reachable("femnist") == "femnist: reading TFF's HDF5 files needs h5py: pip " \
                                          "install h5py"
  with pytest.raises(ValueError, match="unknown dataset"):
    datasets.reachable("cifar100")


# --- presets and the command line ---------------------------------------------------------


def test_presets_and_their_sources():
  settings = {"svhn": data_settings.SVHN, "cifar10": data_settings.CIFAR10,
              "imdb": data_settings.IMDB, "femnist": data_settings.FEMNIST}
  sources = {"svhn": data_settings.SVHN_SOURCES, "cifar10": data_settings.CIFAR10_SOURCES,
             "imdb": data_settings.IMDB_SOURCES, "femnist": data_settings.FEMNIST_SOURCES}
  keys = set(data_settings.SHAKESPEARE)
  for name, setting in settings.items():
    extra = {"local_optimizer"} if name in ("cifar10", "imdb") else set()
    assert set(setting) == keys | extra and set(sources[name]) == set(setting), name
    assert all(sources[name].values()), name
    dataset = datasets.get_dataset(name)
    assert dataset.setting is setting and dataset.setting_source
    for scheme in ("FL-STD", "FL-TOP-DP", "FL-SIGN", "Fed-SMP-topk", "CDP-LQ", "FL-CS-DP"):
      assert sweep.scheme_setting(scheme, name) == setting, (name, scheme)  # no leak
  svhn = data_settings.SVHN
  assert (svhn["num_clients"], svhn["samples_per_client"], svhn["public_batch"]) == (6000, 100,
                                                                                    2000)
  assert svhn["local_steps"] * svhn["batch_size"] == 5 * svhn["samples_per_client"]  # 5 epochs
  assert svhn["num_clients"] * svhn["samples_per_client"] <= 73257 + 531131 - 2000
  for key in ("clients_per_round", "rounds", "batch_size", "lr", "noise_multiplier"):
    source = data_settings.SVHN_SOURCES[key]
    assert "lost" in source and "paper.presets.FEDSMP" in source
  cifar, imdb = data_settings.CIFAR10, data_settings.IMDB
  assert ((cifar["samples_per_client"], cifar["batch_size"], cifar["local_steps"],
           cifar["rounds"], cifar["lr"]) == (500, 50, 50, 400, 0.001))
  assert ((imdb["samples_per_client"], imdb["batch_size"], imdb["local_steps"],
           imdb["rounds"], imdb["lr"]) == (25, 25, 5, 100, 0.001))
  for setting, total in ((cifar, 500_000), (imdb, 25_000)):
    assert setting["local_optimizer"] == "adam" and setting["clients_per_round"] == 100
    # One client's share is the public set: N x |D_k| + public = the whole training set.
    assert (setting["num_clients"] + 1) * setting["samples_per_client"] == total
    assert setting["public_batch"] == setting["samples_per_client"]
  for source in (data_settings.CIFAR10_SOURCES, data_settings.IMDB_SOURCES):
    for key in ("num_clients", "delta", "noise_multiplier", "public_batch"):
      assert "this simulator's choice" in source[key], key
    assert "Table 8.1" in source["rounds"] and "Table 8.1" in source["local_optimizer"]
  femnist = data_settings.FEMNIST
  assert (femnist["num_clients"], femnist["delta"], femnist["noise_multiplier"]) == (25, 1e-4,
                                                                                    0.25)
  for key in ("num_clients", "delta", "noise_multiplier"):
    assert "poster" in data_settings.FEMNIST_SOURCES[key], key
  for key in ("clients_per_round", "batch_size", "lr", "rounds", "public_batch"):
    assert "this simulator's choice" in data_settings.FEMNIST_SOURCES[key], key
  assert {n: datasets.get_dataset(n).model for n in NEW} == {
      "svhn": "svhn-cnn", "cifar10": "all-cnn-c", "imdb": "imdb-cnn-lstm",
      "femnist": "emnist-cnn"}
  assert datasets.get_dataset("femnist").split_by == "writer"
  assert datasets.get_dataset("imdb").num_classes == 2


def _plan(*argv):
  request = sweep.resolve(sweep.build_parser().parse_args(["--ratio", "0.1", *argv]))
  return request, {r.scheme.name: r for r in request.runs}


def test_command_line_takes_each_data_set_s_setting(files):
  _, runs = _plan("--dataset", "svhn", "--schemes", "Fed-SMP-topk", "FL-STD")
  top = runs["Fed-SMP-topk"]
  assert top.setting == {**data_settings.SVHN, "local_optimizer": "sgd"}
  # Fed-SMP Sec. 6.1-6.2 on SVHN: 2,000 public examples, the server's 5 epochs over them,
  # the learning rate decaying every round.
  assert (top.scheme.public_holdout, top.scheme.server_epochs, top.scheme.lr_decay_every) == (
      2000, 5, 1)
  assert top.scheme._server_steps(fedsmp.LocalTraining(50, 10, 0.1), 2000) == 1000
  _, mine = _plan("--dataset", "svhn", "--schemes", "Fed-SMP-topk", "--public-holdout", "7")
  assert mine["Fed-SMP-topk"].scheme.public_holdout == 7
  _, image = _plan("--schemes", "Fed-SMP-topk")
  assert image["Fed-SMP-topk"].scheme.public_holdout == fedsmp.PUBLIC_HOLDOUT == 1000
  for name in ("cifar10", "imdb"):
    _, runs = _plan("--dataset", name, "--schemes", "FL-STD")
    assert runs["FL-STD"].config.training.local_optimizer == "adam"
    assert runs["FL-STD"].setting["num_clients"] == 999
  # The sweep's data loading on the small SVHN files: every scheme the same clients.
  _svhn(files)
  request, runs = _plan("--dataset", "svhn", "--schemes", "Fed-SMP-topk", "FL-STD",
                     "--num-clients", "5", "--samples-per-client", "3", "--public-size", "2",
                     "--public-holdout", "2", "--clients-per-round", "2")
  data = sweep.load_data(request, list(runs.values()))
  a, b = (data.of(runs[s]) for s in ("Fed-SMP-topk", "FL-STD"))
  np.testing.assert_array_equal(np.asarray(a.data.x), np.asarray(b.data.x))
  np.testing.assert_array_equal(a.public[0], b.public[0])
  # top_k's hold-out is the public set every scheme holds out: loaded once.
  assert a is b


@pytest.mark.parametrize("name,file", [
    ("svhn", "svhn/test_32x32.mat"), ("cifar10", "cifar10/cifar-10-python.tar.gz"),
    ("imdb", "imdb/aclImdb_v1.tar.gz"), ("femnist", "femnist/fed_emnist.tar.bz2")])
def test_missing_data_exits_2_with_one_line_and_writes_nothing(files, tmp_path, capsys, name,
                                                               file):
  out = tmp_path / "out" / "sweep"
  code = sweep.main(["--dataset", name, "--schemes", "FL-STD", "FL-TOP-DP", "--rounds", "1",
                         "--out", str(out)])
  err = capsys.readouterr().err
  assert code == 2 and err.count("\n") == 1
  assert err.startswith("sweep.py: error: ") and f"{file} not found" in err
  assert "FEDJAX_DP_NO_DOWNLOAD" in err
  assert not (tmp_path / "out").exists()


def test_dataset_help_names_every_data_set():
  parser = sweep.build_parser()
  actions = parser._actions  # pylint: disable=protected-access
  action = next(a for a in actions if a.dest == "dataset")
  assert set(action.choices) == set(datasets.DATASETS)
  for name in NEW:
    assert name in action.help
  assert parser.parse_args(["--dataset", "femnist"]).dataset == "femnist"


@pytest.mark.parametrize("name,extra", [
    ("cifar10", ["--dropout", "0.5", "--schemes", "FL-STD"]),  # Table 8.1: Adam, dropout
    ("imdb", ["--schemes", "FL-TOP-DP"]),  # binary, tokens, Adam on the masked path
])
def test_a_round_trains_the_seeds_model_on_the_small_files(files, tmp_path, capsys, name,
                                                             extra):
  """One round through ``sweep.py``'s code with the data set's real model and preset
  optimiser: the data, the model and the local optimiser fit together."""
  if name == "cifar10":
    _cifar(files)
    # One client, sampled every round (q = 1): with dropout All-CNN-C trains on
    # the plain path, whose vmap over several slots makes grouped convolutions
    # that the suite's unoptimised XLA:CPU code (tests/conftest.py) runs slowly
    # (110-180 s at several clients a round; 4 clients' 4 slots for a cohort
    # of 1: 40 s; 1 client, 1 slot: 10 s).
    size = ["--num-clients", "1", "--samples-per-client", "20", "--public-size", "20",
            "--clients-per-round", "1", "--local-steps", "1", "--batch-size", "1"]
  else:
    _imdb(files)
    size = ["--num-clients", "4", "--samples-per-client", "2", "--public-size", "2",
            "--ratio", "0.01", "--clients-per-round", "2", "--local-steps", "2",
            "--batch-size", "2"]
  out = tmp_path / "out"
  code = sweep.main(["--dataset", name, *extra, *size, "--rounds", "1", "--quiet",
                     "--out", str(out)])
  assert code == 0, capsys.readouterr().err
  import json  # pylint: disable=import-outside-toplevel
  (run,) = json.loads((out / "results.json").read_text())["runs"]
  model = models.get_model(datasets.get_dataset(name).model)
  assert run["num_params"] == model.num_params
  assert run["local_optimizer"] == "adam" and run["dataset"] == name
  assert 0.0 <= run["best_accuracy"] <= 1.0 and run["history"]
