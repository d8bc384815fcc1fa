"""fedjax_dp.data.partitioning: IID and non-IID partitions, padded client data, summaries."""

import json

import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_dp.data import (PADDING_LABEL, ClientData, client_sizes, from_client_indices,
                            label_summary, partition, partition_iid, partition_indices)
from fedjax_dp.data.partitioning import METHODS


def _features(n=100, d=6):
  rng = np.random.default_rng(0)
  # Column 0 holds the example's index, so dealt examples can be traced back.
  x = np.concatenate([np.arange(n)[:, None], rng.normal(size=(n, d - 1))], axis=1)
  return x.astype(np.float32), rng.integers(0, 3, n, dtype=np.int64)


def test_shapes_and_dtypes():
  x, y = _features()
  data = partition(x, y, num_clients=7, samples_per_client=9)
  assert isinstance(data, ClientData)
  assert data.x.shape == (7, 9, 6) and data.x.dtype == jnp.float32
  assert data.y.shape == (7, 9) and data.y.dtype == jnp.int32


def test_no_example_is_dealt_twice_and_labels_follow_their_examples():
  x, y = _features()
  data = partition(x, y, 10, 10, seed=3)  # all 100 examples
  idx = np.asarray(data.x[..., 0]).astype(int)
  assert sorted(idx.ravel()) == list(range(100))
  np.testing.assert_array_equal(data.x, x[idx])
  np.testing.assert_array_equal(data.y, y[idx])


def test_the_seed_fixes_the_partition():
  x, y = _features()
  a, b, c = (partition(x, y, 5, 4, seed=s) for s in (1, 1, 2))
  np.testing.assert_array_equal(a.x, b.x)
  np.testing.assert_array_equal(a.y, b.y)
  assert not np.array_equal(a.x, c.x)


def test_uint8_images_are_dealt_as_partition_iid_deals_them():
  rng = np.random.default_rng(1)
  images = rng.integers(0, 256, (300, 28, 28, 1), dtype=np.uint8)
  labels = rng.integers(0, 10, 300, dtype=np.uint8)
  data = partition(images, labels, 20, 13, seed=5)
  ref = partition_iid(images, labels, 20, 13, 5)
  assert data.x.dtype == jnp.uint8
  np.testing.assert_array_equal(data.x, ref.x)
  np.testing.assert_array_equal(data.y, ref.y)


def test_a_flax_model_trains_on_partitioned_float_features():
  import flax.linen as nn

  from fedjax_dp import simulation
  from fedjax_dp.models import from_flax
  from fedjax_dp.schemes import get_scheme

  class Net(nn.Module):

    @nn.compact
    def __call__(self, x):
      return nn.Dense(1)(nn.relu(nn.Dense(16)(x)))

  rng = np.random.default_rng(2)
  x = rng.normal(size=(400, 12)).astype(np.float32)
  y = (x[:, 0] > 0).astype(np.int64)
  model = from_flax(Net(), x[:1], loss="sigmoid_ce")
  cfg = simulation.RunConfig.of(ratio=0.5, rounds=3, clients_per_round=10)
  record = simulation.run(model, get_scheme("FL-STD"), partition(x, y, 40, 10),
                          (x[:100], y[:100]), (x[:10], y[:10]), cfg)
  assert record["num_params"] == model.num_params
  assert record["best_accuracy"] > 0.6, record["history"]


@pytest.mark.parametrize("args, kwargs, match", [
    ((np.zeros((5, 2)), np.zeros(4, int), 1, 1), {}, "x has 5 examples but y has 4"),
    ((np.zeros((5, 2)), np.zeros(5, int), 0, 1), {}, "num_clients must be >= 1"),
    ((np.zeros((5, 2)), np.zeros(5, int), 1, 0), {}, "samples_per_client must be >= 1"),
    ((np.zeros((5, 2)), np.zeros(5, int), 2, 3), {}, "num_clients \\* samples_per_client = 6"),
    ((np.zeros((5, 2)), np.zeros(5), 1, 1), {}, "y must be integer labels"),
    ((np.array(["a"] * 5), np.zeros(5, int), 1, 1), {}, "x must be a numeric array"),
    ((np.zeros((5, 2)), np.zeros(5, int), 1, 1), {"method": "bogus"},
     "unknown partition method 'bogus'; supported: iid, dirichlet, shards"),
    ((np.zeros((5, 2)), np.zeros(5, int), 1, 1), {"alpha": 0.5}, "alpha only applies"),
    ((np.zeros((5, 2)), np.zeros(5, int), 1, 1), {"method": "dirichlet", "alpha": -1.0},
     "alpha must be > 0, got -1.0"),
])
def test_invalid_requests_are_rejected(args, kwargs, match):
  with pytest.raises(ValueError, match=match):
    partition(*args, **kwargs)


# ------------------------------------------------------------------ non-IID

SPLITS = {"iid": {}, "dirichlet": {"method": "dirichlet", "alpha": 0.5},
          "shards": {"method": "shards", "shards_per_client": 2}}


def _balanced_labels(n=20_000, classes=10, seed=0):
  """n labels, n / classes of each class, in random order."""
  return np.random.default_rng(seed).permutation(np.repeat(np.arange(classes), n // classes))


def test_methods_are_listed():
  assert METHODS == ("iid", "dirichlet", "shards")
  assert PADDING_LABEL == -1


def test_iid_indices_are_the_first_of_a_default_rng_shuffle():
  y = _balanced_labels(1000)
  idx = partition_indices(y, 30, 7, seed=4)
  assert idx.dtype == np.int64 and idx.shape == (30, 7)
  np.testing.assert_array_equal(idx.ravel(), np.random.default_rng(4).permutation(1000)[:210])


def test_dirichlet_alpha_controls_label_skew():
  y = _balanced_labels()
  iid = label_summary(y[partition_indices(y, 500, 20, seed=1)])
  skew, mid, flat = (label_summary(y[partition_indices(y, 500, 20, seed=1, method="dirichlet",
                                                        alpha=a)]) for a in (0.05, 1.0, 1000.0))
  # alpha = 0.05: nearly every client holds one or two classes.
  assert skew["classes_per_client_mean"] < 0.25 * iid["classes_per_client_mean"], (skew, iid)
  assert skew["classes_per_client_mean"] < 2
  assert skew["tv_distance_mean"] > 0.8
  # alpha = 1000: as close to the pooled distribution as an IID draw.
  assert abs(flat["tv_distance_mean"] - iid["tv_distance_mean"]) < 0.03, (flat, iid)
  assert flat["tv_distance_mean"] < skew["tv_distance_mean"] - 0.5
  assert flat["classes_per_client_mean"] > iid["classes_per_client_mean"] - 0.5
  # alpha = 1 lies in between.
  assert flat["tv_distance_mean"] + 0.2 < mid["tv_distance_mean"] < skew["tv_distance_mean"] - 0.05
  assert (skew["classes_per_client_mean"] + 1 < mid["classes_per_client_mean"]
          < flat["classes_per_client_mean"] - 1)


def test_dirichlet_centres_on_the_pooled_class_frequencies():
  # 90% class 0, 10% class 1: q_k ~ Dir(alpha * p) with large alpha is close
  # to p, not to the uniform (0.5, 0.5) that Dir(alpha) would give.
  y = np.random.default_rng(0).permutation(np.repeat([0, 1], [18_000, 2_000]))
  idx = partition_indices(y, 100, 20, seed=0, method="dirichlet", alpha=1000.0)
  fraction = (y[idx] == 1).mean(axis=1)
  assert abs(fraction.mean() - 0.1) < 0.02
  assert fraction.max() < 0.35


def test_shards_are_class_pure_and_equal_sized():
  y = _balanced_labels()
  idx = partition_indices(y, 900, 20, seed=2, method="shards", shards_per_client=2)
  assert idx.shape == (900, 20)
  labels = y[idx]
  for row in labels:
    _, counts = np.unique(row, return_counts=True)
    # Two class-pure shards of 10: one class x 20 or two classes x 10.
    assert len(counts) <= 2 and np.all(counts % 10 == 0), row
  summary = label_summary(labels)
  assert summary["classes_per_client_max"] == 2
  assert summary["classes_per_client_mean"] > 1.5, summary


def test_shards_with_one_shard_per_client_give_single_class_clients():
  y = _balanced_labels()
  # Shards of 20 divide the 2,000 of each class: none spans two classes.
  idx = partition_indices(y, 300, 20, seed=0, method="shards", shards_per_client=1)
  assert label_summary(y[idx])["classes_per_client_max"] == 1


def test_shards_are_cut_from_the_label_sorted_examples():
  """McMahan et al. Sec. 3: sorted by label, cut into shards of s consecutive
  examples. Classes of 25, 14 and 9, shards of 5: 48 examples give 9 shards
  (the last 3 examples unused), 8 of them dealt; the shards where a class
  ends inside span two classes (25 | 14 | 9 cut at 5s: 40 and 45 are
  boundaries, 39 is not: the shard [35, 40) holds 4 of class 1, 1 of class 2)."""
  y = np.random.default_rng(3).permutation(np.repeat([0, 1, 2], [25, 14, 9]))
  idx = partition_indices(y, 4, 10, seed=1, method="shards", shards_per_client=2)
  sorted_y = np.sort(y)
  cuts = [np.bincount(sorted_y[5 * i:5 * i + 5], minlength=3) for i in range(9)]
  assert any((c > 0).sum() == 2 for c in cuts)  # [35, 40): 4 of class 1, 1 of class 2
  for row in idx:  # each client's labels: two of the cuts
    have = np.bincount(y[row], minlength=3)
    assert any((cuts[i] + cuts[j] == have).all() for i in range(9) for j in range(i)), have
  assert len(np.unique(idx)) == 40  # no example twice


def test_mcmahan_s_own_mnist_setting_splits():
  """100 clients x 2 shards of 300 of MNIST's 60,000 (class sizes 5,421 to
  6,742, no multiple of 300): every example is dealt, and a client holds 1
  to 4 classes, mostly 2 (the class-pure cut this replaced allowed only 194
  shards and refused it)."""
  y = np.repeat(np.arange(10), [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949])
  idx = partition_indices(y, 100, 600, seed=0, method="shards", shards_per_client=2)
  assert len(np.unique(idx)) == 60000
  classes = np.array([len(np.unique(y[row])) for row in idx])
  assert classes.max() <= 4 and np.median(classes) == 2


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("num_clients", [400, 1000])  # 1000 x 20 deals out every example
def test_no_example_is_assigned_twice(method, num_clients):
  y = _balanced_labels()
  idx = partition_indices(y, num_clients, 20, seed=5, **SPLITS[method])
  assert idx.shape == (num_clients, 20) and idx.dtype == np.int64
  assert idx.min() >= 0 and idx.max() < len(y)
  assert len(np.unique(idx)) == idx.size


@pytest.mark.parametrize("alpha", [0.01, 1.0])
def test_dirichlet_deals_out_imbalanced_classes_when_pools_run_out(alpha):
  # Every example is needed, so classes run out and clients' proportions are
  # renormalised over what is left.
  y = np.random.default_rng(1).permutation(np.repeat([0, 1, 2], [30, 470, 500]))
  idx = partition_indices(y, 100, 10, seed=2, method="dirichlet", alpha=alpha)
  np.testing.assert_array_equal(np.sort(idx.ravel()), np.arange(1000))


@pytest.mark.parametrize("method", METHODS)
def test_the_seed_fixes_the_indices(method):
  y = _balanced_labels(4000)
  a, b, c = (partition_indices(y, 150, 20, seed=s, **SPLITS[method]) for s in (7, 7, 8))
  np.testing.assert_array_equal(a, b)
  assert not np.array_equal(a, c)
  assert set(a.ravel()) != set(c.ravel())  # not merely a reordering


@pytest.mark.parametrize("method", ["dirichlet", "shards"])
def test_partition_deals_the_examples_of_partition_indices(method):
  y = _balanced_labels(600, classes=3)
  x = np.concatenate([np.arange(600)[:, None], np.ones((600, 2))], axis=1).astype(np.float32)
  data = partition(x, y, 25, 20, seed=6, **SPLITS[method])
  idx = partition_indices(y, 25, 20, seed=6, **SPLITS[method])
  np.testing.assert_array_equal(data.x[..., 0], idx)
  np.testing.assert_array_equal(data.x, x[idx])
  np.testing.assert_array_equal(data.y, y[idx])
  assert data.y.dtype == jnp.int32


# ------------------------------------------------- user partitions, summaries

def test_from_client_indices_pads_with_zero_examples_and_padding_labels():
  x = np.arange(1, 21, dtype=np.uint8).reshape(10, 2)  # no all-zero example
  y = np.arange(10) % 3
  clients = [np.array([4, 0, 7]), [9], np.array([1, 2, 3, 5, 6], dtype=np.int32)]
  data = from_client_indices(x, y, clients)
  assert data.x.shape == (3, 5, 2) and data.x.dtype == jnp.uint8
  assert data.y.shape == (3, 5) and data.y.dtype == jnp.int32
  np.testing.assert_array_equal(client_sizes(data.y), [3, 1, 5])
  cx, cy = np.asarray(data.x), np.asarray(data.y)
  for k, ix in enumerate(clients):
    n = len(ix)
    np.testing.assert_array_equal(cx[k, :n], x[np.asarray(ix)])
    np.testing.assert_array_equal(cy[k, :n], y[np.asarray(ix)])
    np.testing.assert_array_equal(cx[k, n:], 0)
    np.testing.assert_array_equal(cy[k, n:], PADDING_LABEL)


def test_client_sizes_counts_non_padding_rows():
  y = np.array([[3, 0, -1, -1], [1, 1, 1, 1], [-1, -1, -1, -1]])
  np.testing.assert_array_equal(client_sizes(jnp.asarray(y)), [2, 4, 0])


def test_label_summary_on_a_hand_built_partition():
  y = np.array([[0, 0, 1, -1],
                [2, 2, 2, 2],
                [1, -1, -1, -1]])
  # Pooled: 2 x label 0, 2 x label 1, 4 x label 2 of 8 examples.
  pooled = np.array([2, 2, 4]) / 8
  clients = np.array([[2 / 3, 1 / 3, 0], [0, 0, 1], [0, 1, 0]])
  tv = [0.5 * sum(abs(q - p) for q, p in zip(row, pooled)) for row in clients]
  summary = label_summary(jnp.asarray(y, dtype=jnp.int32))
  json.dumps(summary)
  assert summary["clients"] == 3
  assert (summary["size_min"], summary["size_max"]) == (1, 4)
  assert summary["size_mean"] == pytest.approx((3 + 4 + 1) / 3)
  assert (summary["classes_per_client_min"], summary["classes_per_client_max"]) == (1, 2)
  assert summary["classes_per_client_mean"] == pytest.approx((2 + 1 + 1) / 3)
  assert summary["tv_distance_mean"] == pytest.approx(sum(tv) / 3)
  assert summary["tv_distance_max"] == pytest.approx(max(tv))
  assert summary["num_classes"] == 3
  for key in ("clients", "size_min", "size_max", "num_classes"):
    assert type(summary[key]) is int
  for key in ("size_mean", "tv_distance_mean", "tv_distance_max"):
    assert type(summary[key]) is float
  assert label_summary(y, num_classes=5)["num_classes"] == 5


def test_label_summary_is_zero_tv_when_every_client_mirrors_the_pool():
  # Each client holds exactly the pooled distribution.
  y = np.tile(np.array([0, 1, 2, 2]), (5, 1))
  summary = label_summary(y)
  assert summary["tv_distance_max"] == pytest.approx(0.0)
  assert summary["classes_per_client_mean"] == 3


# ------------------------------------------------------------------- errors

def _y(n=20):
  return np.arange(n) % 4


@pytest.mark.parametrize("args, kwargs, match", [
    ((_y(), 2, 5), {"method": "bogus"},
     "^unknown partition method 'bogus'; supported: iid, dirichlet, shards$"),
    ((_y(), 2, 5), {"alpha": 1.0}, "^alpha only applies to method='dirichlet'"),
    ((_y(), 2, 4), {"method": "shards", "shards_per_client": 2, "alpha": 1.0},
     "^alpha only applies to method='dirichlet', got method='shards'$"),
    ((_y(), 2, 5), {"method": "dirichlet", "alpha": 1.0, "shards_per_client": 1},
     "^shards_per_client only applies to method='shards', got method='dirichlet'$"),
    ((_y(), 2, 5), {"shards_per_client": 1}, "^shards_per_client only applies"),
    ((_y(), 2, 5), {"method": "dirichlet"}, "^method='dirichlet' needs alpha > 0$"),
    ((_y(), 2, 5), {"method": "dirichlet", "alpha": 0.0}, "^alpha must be > 0, got 0.0$"),
    ((_y(), 2, 5), {"method": "dirichlet", "alpha": -0.5}, "^alpha must be > 0, got -0.5$"),
    ((_y(), 2, 5), {"method": "dirichlet", "alpha": float("nan")}, "^alpha must be > 0, got nan$"),
    ((_y(), 2, 5), {"method": "dirichlet", "alpha": float("inf")}, "^alpha must be > 0, got inf$"),
    ((_y(), 2, 5), {"method": "shards"}, "^method='shards' needs shards_per_client >= 1$"),
    ((_y(), 2, 5), {"method": "shards", "shards_per_client": 0},
     "^shards_per_client must be an integer >= 1, got 0$"),
    ((_y(), 2, 4), {"method": "shards", "shards_per_client": 2.0},
     "^shards_per_client must be an integer >= 1, got 2.0$"),
    ((_y(), 2, 5), {"method": "shards", "shards_per_client": 2},
     r"^shards: samples_per_client \(5\) must be a multiple of shards_per_client \(2\)$"),
    # 20 examples: 3 clients x 9 of them do not fit (nor their 9 shards of 3).
    ((_y(), 3, 9), {"method": "shards", "shards_per_client": 3},
     r"^num_clients \* samples_per_client = 27 exceeds the 20 examples$"),
    ((_y(), 0, 5), {}, "^num_clients must be >= 1, got 0$"),
    ((_y(), 2, 0), {"method": "dirichlet", "alpha": 1.0},
     "^samples_per_client must be >= 1, got 0$"),
    ((_y(), 3, 7), {"method": "dirichlet", "alpha": 1.0},
     "^num_clients \\* samples_per_client = 21 exceeds the 20 examples$"),
    ((np.zeros(20), 2, 5), {}, "^y must be integer labels of shape"),
])
def test_partition_indices_rejects_invalid_requests(args, kwargs, match):
  with pytest.raises(ValueError, match=match):
    partition_indices(*args, **kwargs)


def test_shards_fit_whenever_their_examples_do():
  # 59,999 examples: 11,999 shards of 5 (4 left over), one short of 12,000,
  # as the examples are: the count of examples says so first.
  y = np.repeat(np.arange(10), [6000] * 9 + [5999])
  with pytest.raises(ValueError, match=r"^num_clients \* samples_per_client = 60000 exceeds "
                                       "the 59999 examples$"):
    partition_indices(y, 6000, 10, method="shards", shards_per_client=2)
  assert partition_indices(y[:-4], 5999, 10, method="shards", shards_per_client=2).shape == (
      5999, 10)


def test_exactly_as_many_shards_as_the_data_allows_is_valid():
  # 5 examples of each of 4 classes, shards of 2: 10 shards, all of them dealt.
  y = _y()
  idx = partition_indices(y, 5, 4, method="shards", shards_per_client=2)
  np.testing.assert_array_equal(np.bincount(y[idx].ravel()), [5, 5, 5, 5])


def test_partition_checks_the_method_parameters_too():
  x, y = np.zeros((20, 2)), _y()
  with pytest.raises(ValueError, match="^shards_per_client only applies"):
    partition(x, y, 2, 5, shards_per_client=1)
  with pytest.raises(ValueError, match="^shards: samples_per_client"):
    partition(x, y, 2, 5, method="shards", shards_per_client=2)


@pytest.mark.parametrize("clients, match", [
    ([], "^client_indices holds no clients$"),
    ([[0, 1], []], "^client 1 has no examples$"),
    ([[0, 1], [2, 10]], r"^client 1 has index 10 outside \[0, 10\)$"),
    ([[0, -1]], r"^client 0 has index -1 outside \[0, 10\)$"),
    ([[0, 1], [2, 1]], r"^example 1 is assigned more than once \(clients 0 and 1\)$"),
    ([[3, 4, 3]], r"^example 3 is assigned more than once \(client 0 twice\)$"),
    ([[0.0, 1.0]], "^client 0 indices must be a 1-D integer array"),
    ([[[0, 1]]], "^client 0 indices must be a 1-D integer array"),
])
def test_from_client_indices_rejects_invalid_partitions(clients, match):
  with pytest.raises(ValueError, match=match):
    from_client_indices(np.zeros((10, 2)), np.arange(10) % 3, clients)


def test_from_client_indices_rejects_labels_that_look_like_padding():
  with pytest.raises(ValueError, match="^y must be >= 0"):
    from_client_indices(np.zeros((3, 2)), np.array([0, -1, 1]), [[0, 1, 2]])


@pytest.mark.parametrize("fn, y, match", [
    (client_sizes, np.zeros(4, int), "^y must have shape"),
    (label_summary, np.zeros(4, int), "^y must be integer labels of shape"),
    (label_summary, np.zeros((2, 2)), "^y must be integer labels of shape"),
    (label_summary, np.full((2, 2), -1), "^y holds no labels"),
    (label_summary, np.array([[0, -2]]), "^y must be >= 0 apart from padding"),
])
def test_summaries_reject_invalid_labels(fn, y, match):
  with pytest.raises(ValueError, match=match):
    fn(y)


def test_label_summary_rejects_labels_beyond_num_classes():
  with pytest.raises(ValueError, match="^num_classes is 3 but y holds label 3$"):
    label_summary(np.array([[0, 3]]), num_classes=3)
