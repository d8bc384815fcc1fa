"""Shared setup of the round benchmarks: the paper's Fashion-MNIST setting.

The paper's Fashion-MNIST clients (UAI 2021 Table 5: 6,000 clients of 10
images) and a description of the machine.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from fedjax_dp import host_devices, simulation
from fedjax_dp.data import load_federated

NUM_CLIENTS = 6000


def load_paper_data():
  """(ClientData of 6000 clients, test images, test labels)."""
  fed, test_x, test_y = load_federated("fashion-mnist", NUM_CLIENTS, 10, seed=0)
  return simulation.ClientData(jnp.asarray(fed.x), jnp.asarray(fed.y)), test_x, test_y


def machine() -> str:
  """A one-line description of the host and JAX backend."""
  return host_devices.machine()