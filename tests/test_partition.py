"""fedjax_dp.data.partition: any in-memory data set dealt out IID over clients."""

import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_dp.data import ClientData, partition, partition_iid


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
  cfg = simulation.RunConfig(ratio=0.5, rounds=3, clients_per_round=10)
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
    ((np.zeros((5, 2)), np.zeros(5, int), 1, 1), {"method": "dirichlet"},
     "unknown partition method 'dirichlet'; supported: iid"),
])
def test_invalid_requests_are_rejected(args, kwargs, match):
  with pytest.raises(ValueError, match=match):
    partition(*args, **kwargs)
