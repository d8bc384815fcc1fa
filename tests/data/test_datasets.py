"""fedjax_dp.datasets: each data set's split, public batch, presets and errors."""

import numpy as np
import pytest

from fedjax_dp import datasets
from fedjax_dp.data import settings as data_settings
from fedjax_dp.paper import results as paper_results
from fedjax_dp.cli import sweep as experiment
from fedjax_dp.data import load_federated, load_federated_with_public, public_batch
from fedjax_dp.data.sets import base


def test_load_takes_the_data_set_or_its_name(monkeypatch):
  """A front end that looked the data set up hands it over: no second lookup."""
  dataset = datasets.get_dataset("mnist")
  by_name = datasets.load("mnist", 5, 10, test_size=20)
  monkeypatch.setattr(datasets, "get_dataset", lambda name: pytest.fail(f"looked up {name}"))
  given = datasets.load(dataset, 5, 10, test_size=20)
  np.testing.assert_array_equal(np.asarray(given.data.x), np.asarray(by_name.data.x))
  np.testing.assert_array_equal(given.test[1], by_name.test[1])
  with pytest.raises(ValueError, match="applies to femnist only, not to mnist"):
    datasets.load(dataset, 5, 10, writers_per_client=2)


def test_iid_and_held_out_splits_are_the_loaders_of_before():
  """IID and the Fed-SMP hold-out give the arrays the earlier loaders gave
  (the golden records' data), with the public batch of the other data set."""
  fed = datasets.load("fashion-mnist", 50, 10, seed=3)
  old, test_x, _ = load_federated("fashion-mnist", 50, 10, seed=3)
  np.testing.assert_array_equal(np.asarray(fed.data.x), old.x)
  np.testing.assert_array_equal(np.asarray(fed.data.y), old.y)
  np.testing.assert_array_equal(fed.test[0], test_x)
  np.testing.assert_array_equal(fed.public[0], public_batch(10, seed=3, dataset="mnist")[0])
  held = datasets.load("fashion-mnist", 50, 9, seed=3, holdout=100)
  old, _, _, public = load_federated_with_public("fashion-mnist", 50, 9, 100, seed=3)
  np.testing.assert_array_equal(np.asarray(held.data.x), old.x)
  np.testing.assert_array_equal(held.public[1], public[1])
  mnist = datasets.load("mnist", 20, 10, seed=0, public_size=4)
  np.testing.assert_array_equal(mnist.public[0],
                                public_batch(4, seed=0, dataset="fashion-mnist")[0])
  assert fed.summary["partition"] == "iid" and fed.summary["clients"] == 50


def test_dirichlet_and_shards_reach_the_clients_with_their_summary():
  """A non-IID split of real MNIST: skewed labels, in the summary too."""
  iid = datasets.load("mnist", 300, 20, seed=0)
  skew = datasets.load("mnist", 300, 20, seed=0,
                       partition=datasets.PartitionConfig("dirichlet", alpha=0.1))
  shards = datasets.load("mnist", 300, 20, seed=0,
                         partition=datasets.PartitionConfig("shards", shards_per_client=2))
  assert skew.summary["tv_distance_mean"] > iid.summary["tv_distance_mean"] + 0.3
  assert skew.summary["dirichlet_alpha"] == 0.1
  y = np.asarray(shards.data.y)
  # Two shards of 10 of the label-sorted examples: a shard spans at most 2 classes.
  assert max(len(np.unique(row)) for row in y) <= 4 and shards.summary["shards_per_client"] == 2
  # The images travel with their labels: every client's images are those of
  # its labels (class means match the pooled class means of MNIST).
  x = np.asarray(shards.data.x, np.float32).reshape(-1, 784)
  x_iid, y_iid = np.asarray(iid.data.x, np.float32).reshape(-1, 784), np.asarray(iid.data.y)
  for c in range(10):
    sel = y.reshape(-1) == c
    if sel.sum() > 50:
      ref = x_iid[y_iid.reshape(-1) == c].mean(0)
      assert np.corrcoef(x[sel].mean(0), ref)[0, 1] > 0.9


def test_medical_synth_federation(tmp_path, monkeypatch):
  """Hospitals of class-balanced, padded clients; uint8 test set; the public
  hospital's 12 + 12 as floats in [0, 1]; the summary says what it is."""
  monkeypatch.setenv("FEDJAX_DP_CACHE", str(tmp_path))
  fed = datasets.load("medical-synth", 30, 203, seed=1, test_size=500)
  x, y = np.asarray(fed.data.x), np.asarray(fed.data.y)
  assert x.shape[0] == 30 and x.shape[2] == 7280 and x.dtype == np.uint8
  real = y >= 0
  assert (y[real] == 1).sum() == (y[real] == 0).sum()  # class-balanced
  assert fed.test[0].shape == (500, 7280) and fed.test[0].dtype == np.uint8
  assert fed.public[0].dtype == np.float32 and fed.public[0].max() == 1.0
  assert sorted(np.bincount(fed.public[1])) == [12, 12]
  assert "synthetic stand-in" in fed.summary["note"]
  assert fed.summary["size_min"] < fed.summary["size_max"]  # unequal sizes, padded
  assert datasets.DATASETS["medical-synth"].label == "medical-synth (synthetic stand-in)"


def test_image_test_size_draws_test_examples_uniformly_from_the_seed():
  """Not the first N: the files are ordered (IMDB's negatives first, MNIST's
  cleaner half first). N of the 10,000, drawn from the seed, in file order."""
  whole, part = datasets.load("mnist", 5, 10), datasets.load("mnist", 5, 10, test_size=300)
  assert len(whole.test[1]) == 10000 and part.test[0].shape[0] == len(part.test[1]) == 300
  rows = base.draw(0, base._TEST_STREAM, 10000, 300)  # pylint: disable=protected-access
  assert rows[-1] > 5000 and len(np.unique(rows)) == 300  # not the first 300
  np.testing.assert_array_equal(part.test[0], whole.test[0][rows])
  np.testing.assert_array_equal(part.test[1], whole.test[1][rows])
  np.testing.assert_array_equal(part.data.x, whole.data.x)  # the clients' data unchanged
  assert part.summary["test_subset"] == 300 and "test_subset" not in whole.summary
  # Spread over the file: a uniform draw's mean index is 5,000 within a few SE.
  assert abs(rows.mean() - 4999.5) < 4 * 2887 / np.sqrt(300)
  other = datasets.load("mnist", 5, 10, test_size=300, seed=1)
  assert not np.array_equal(other.test[1], part.test[1])


def test_a_binary_test_subset_of_one_class_is_refused():
  """An ordered binary test set (negatives first) whose draw holds one class
  has no AUROC: refused when the data is loaded, naming test_size."""
  labels = {"train": np.tile([0, 1], 40), "test": np.r_[np.zeros(199), np.ones(1)].astype(int)}
  images = {k: np.zeros((len(v), 28, 28, 1), np.uint8) for k, v in labels.items()}
  binary = base.Dataset(
      name="binary-toy", model="toy-linear", num_classes=2,
      settings=data_settings.DataSetting(
          {"num_clients": 4, "samples_per_client": 10, "clients_per_round": 2, "rounds": 1,
           "local_steps": 1, "batch_size": 5, "lr": 0.1, "delta": 1e-5,
           "noise_multiplier": 1.0, "init_steps": 1, "public_batch": 2}, "a test's", {}),
      federation=base.partition_federation, loader=lambda split, seed: (images[split],
                                                                        labels[split]),
      public_source="none", about="a test's")
  request = base.Request(num_clients=4, samples_per_client=10, seed=0, public_size=2,
                         test_size=3)
  with pytest.raises(ValueError, match="test_size 3 test examples of binary-toy hold one class"):
    base.partition_federation(binary, request)


@pytest.mark.parametrize("call,needle", [
    (lambda: datasets.get_dataset("cifar"), "unknown dataset 'cifar'"),
    (lambda: datasets.load("medical-synth", 5, 203,
                           partition=datasets.PartitionConfig("dirichlet", alpha=1.0)),
     "split by hospital"),
    (lambda: datasets.load("mnist", 5, 10, test_size=10001),
     r"test_size must be in \[1, 10000\] for mnist, got 10001"),
    (lambda: datasets.load("medical-synth", 5, 203, public_size=5), "must be even"),
    (lambda: datasets.load("mnist", 5001, 12,
                           partition=datasets.PartitionConfig("shards", shards_per_client=2)),
     "num_clients \\* samples_per_client = 60012 exceeds the 60000 examples"),
])
def test_bad_settings_raise_one_line(call, needle):
  with pytest.raises(ValueError, match=needle) as info:
    call()
  assert "\n" not in str(info.value)


def test_each_data_set_takes_its_setting_and_sources_from_one_table():
  """Each data set's module declares its setting, its source and its own
  per-scheme presets once (datasets.DATASETS reads them); where it gives its
  values' sources, every value has one."""
  for name, dataset in datasets.DATASETS.items():
    own = dataset.settings
    assert (dataset.setting, dataset.setting_source, dataset.scheme_presets,
            dataset.preset_sources) == (own.setting, own.source, own.scheme_presets,
                                        own.preset_sources), name
    assert set(own.preset_sources) == set(own.scheme_presets or {}), name
    assert not own.value_sources or set(own.value_sources) == set(own.setting), name
  assert datasets.DATASETS["cifar10"].settings.value_sources is data_settings.CIFAR10_SOURCES


def test_presets_follow_the_dataset():
  """medical-synth: UAI Table 5's medical row for every scheme, T_gd = 5 for
  the CS family (thesis Table 8.5), UAI Table 7's S; MNIST: the image
  presets and thesis Table 4.1's figures."""
  top = experiment.scheme_setting("FL-TOP-DP", "medical-synth")
  assert (top["num_clients"], top["local_steps"], top["lr"], top["rounds"],
          top["init_steps"], top["noise_multiplier"]) == (5010, 40, 0.1, 100, 40, 1.49)
  assert experiment.scheme_setting("FL-CS-DP", "medical-synth")["local_steps"] == 5
  # The sign family's image preset does not leak onto the medical data.
  assert experiment.scheme_setting("FL-SIGN", "medical-synth")["num_clients"] == 5010
  assert experiment.scheme_setting("FL-SIGN", "mnist")["local_steps"] == 30  # Table 8.1
  assert paper_results.paper_clip_norm("FL-TOP-DP", 0.001, "medical-synth") == 0.59
  assert paper_results.paper_clip_norm("FL-STD-DP", 1.0, "medical-synth") == 1.40
  assert paper_results.paper_clip_norm("FL-TOP-DP", 0.001) == 0.50  # Fashion-MNIST, UAI Table 6
  assert paper_results.paper_result("FL-SIGN", 1.0, "mnist").accuracy == 0.98
  assert paper_results.paper_result("FL-TOP-DP", 0.005, "medical-synth") is None
  assert (paper_results.paper_result("FL-SIGN", 1.0, "mnist")
          != paper_results.paper_result("FL-SIGN", 1.0))
