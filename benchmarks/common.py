"""Shared setup of the round benchmarks: the paper's Fashion-MNIST setting.

UAI 2021 Table 5: the CNN of 1,663,370 weights, T_gd = 5 local steps of
|B| = 10, eta = 0.215, sigma = 1.54; a fixed cohort of ``clients`` slots
(every slot a real client) so that clients/s is exact.
"""

from __future__ import annotations

import os
import platform

import jax
import jax.numpy as jnp

from fedjax_dp import simulation
from fedjax_dp.compression import masks
from fedjax_dp.data import load_federated
from fedjax_dp.models import paper_cnn
from fedjax_dp.schemes import get_scheme

NUM_CLIENTS = 6000


def load_paper_data():
  """(ClientData of 6000 clients, test images, test labels)."""
  fed, test_x, test_y = load_federated("fashion-mnist", NUM_CLIENTS, 10, seed=0)
  return simulation.ClientData(jnp.asarray(fed.x), jnp.asarray(fed.y)), test_x, test_y


def paper_round(scheme_name: str, clients: int, ratio: float = 0.005, clip_norm: float = 0.6,
                mesh=None):
  """(model, RoundConfig, initial ServerState) of one scheme in the paper setting.

  FL-TOP's subset is a fixed random one (its cost does not depend on which).
  """
  model = paper_cnn()
  n = model.num_params
  scheme = get_scheme(scheme_name)
  k = scheme.num_values(n, ratio)
  cfg = simulation.RoundConfig(
      scheme=scheme, num_clients=NUM_CLIENTS, clients_per_round=clients, capacity=clients,
      sampler="fixed", num_kept=k, local_steps=5, batch_size=10, lr=0.215,
      noise_multiplier=1.54, clip_norm=clip_norm, mesh=mesh)
  fixed = (masks.random_indices(jax.random.PRNGKey(1), n, k) if scheme.uses_ratio
           else jnp.zeros((0,), jnp.int32))
  state = simulation.ServerState(model.init(jax.random.PRNGKey(0)), fixed)
  return model, cfg, state


def machine() -> str:
  """A one-line description of the host and JAX backend."""
  cpu = platform.processor() or platform.machine()
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
    cpu = names[0] if names else cpu
  except OSError:
    pass
  devices = jax.devices()
  return f"{cpu}, {os.cpu_count()} cores, {len(devices)} {devices[0].platform} device(s)"
