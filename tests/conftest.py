"""Shared fixtures: the real data, loaded once per session."""

import os
import pathlib

import jax.numpy as jnp
import pytest

_SHARED = pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "data"
os.environ.setdefault("FEDJAX_DP_DATA", str(_SHARED))
os.environ.setdefault("FEDJAX_DP_NO_DOWNLOAD", "1")


@pytest.fixture(scope="session")
def small_federation():
  """600 real Fashion-MNIST clients of 10 images, the test set, 10 MNIST images."""
  from fedjax_dp import simulation
  from fedjax_dp.data import load_federated, public_batch
  fed, test_x, test_y = load_federated("fashion-mnist", 600, 10, seed=0)
  data = simulation.ClientData(jnp.asarray(fed.x), jnp.asarray(fed.y))
  return data, (test_x[:2000], test_y[:2000]), public_batch(10, seed=0)


@pytest.fixture(scope="session")
def cnn():
  from fedjax_dp.models import paper_cnn
  return paper_cnn()


def pytest_addoption(parser):
  parser.addoption("--update-golden", action="store_true",
                   help="rewrite tests/golden/*.json from the current code")
