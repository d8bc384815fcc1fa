"""The golden-record cases: every registered scheme on a small, fixed setting.

``tests/test_golden.py`` runs each case and compares it with its record in
``tests/golden/``; ``pytest tests/test_golden.py --update-golden`` rewrites
the records (do that in a commit of its own that says why the numbers move).

A case is a short run (3 rounds, 10 clients a round out of 200 real
Fashion-MNIST clients, the first 1,000 test images) of one scheme on the
7,850-weight linear model, with and without secure aggregation where it
applies, plus the round's other paths (dropouts, chunked cohorts, the fixed
sampler, truncated Poisson with PLD) and two paper-CNN runs for the fast
training path (FL-TOP-DP for 3 rounds, FL-STD for 1).

The records are written at XLA's default LLVM optimisation level (-O2, what
users run), not the suite's -O0 (tests/conftest.py)::

  XLA_FLAGS=--xla_backend_optimization_level=2 \
      python -m pytest tests/test_golden.py --update-golden
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_dp import simulation
from fedjax_dp.data import load_federated, public_batch
from fedjax_dp.models import paper_cnn
from fedjax_dp.schemes import SCHEMES, get_scheme
from tiny_model import tiny_linear

GOLDEN_DIR = pathlib.Path(__file__).resolve().parent / "golden"

BASE = dict(ratio=0.1, rounds=3, clients_per_round=10, local_steps=2, batch_size=5, lr=0.1,
            noise_multiplier=1.0, seed=0, eval_every=1, devices=1, init_steps=2)

# Secure aggregation, one scheme of each family and message kind (FL-SIGN-DP's
# runs with dropouts below): real DP messages, redrawn subsets, the DCT family,
# integer signs, Fed-SMP's server mask, CDP-LQ's decoded lattice points.
SECURE = ("FL-STD-DP", "FL-TOP-DP", "FL-BASIC-DP", "FL-CS-DP", "FL-SIGN", "Fed-SMP-topk",
          "CDP-LQ")


@dataclasses.dataclass(frozen=True)
class Case:
  """One golden run: a scheme, a model and RunConfig overrides."""

  name: str
  scheme: str
  model: str = "tiny"
  config: tuple = ()

  def run_config(self) -> simulation.RunConfig:
    return simulation.RunConfig.of(**{**BASE, **dict(self.config)})


def cases() -> list[Case]:
  """Every registered scheme, its secure-aggregation variant, and the other paths."""
  out = []
  for name in SCHEMES:
    config = (("clients_per_round", 200),) if name == "signSGD" else ()
    if name != "FL-SIGN-DP":  # its discrete Gaussian compiles slowly: one case, below
      out.append(Case(name, name, config=config))
    if name in SECURE:
      out.append(Case(name + "+secagg", name, config=config + (("secure_aggregation", True),)))
  out += [
      Case("FL-TOP-DP+dropouts", "FL-TOP-DP",
           config=(("dropout_rate", 0.2), ("max_dropouts", 2))),
      Case("FL-SIGN-DP+dropouts+secagg", "FL-SIGN-DP",
           config=(("dropout_rate", 0.2), ("max_dropouts", 2), ("secure_aggregation", True))),
      Case("FL-STD-DP+chunked", "FL-STD-DP", config=(("client_chunk", 4),)),
      Case("FL-BASIC-DP+fixed-rdp", "FL-BASIC-DP",
           config=(("sampler", "fixed"), ("accountant", "rdp"))),
      Case("FL-TOP-DP+pld-truncated", "FL-TOP-DP",
           config=(("accountant", "pld"), ("max_cohort", 8))),
      Case("FL-TOP-DP+cnn", "FL-TOP-DP", model="cnn", config=(("ratio", 0.005), ("rounds", 2))),
      # One round: non-private training from a random model amplifies float32
      # round-off round after round (2 rounds: 1.9e-6 of the weights' absolute
      # sum between two compilations of the same code, 1 round: 1.1e-8).
      Case("FL-STD+cnn", "FL-STD", model="cnn", config=(("rounds", 1),)),
  ]
  return out


@functools.lru_cache(maxsize=None)
def setting():
  """(data, test, public): 200 clients of 10 images, 1,000 test images, 10 MNIST images."""
  fed, test_x, test_y = load_federated("fashion-mnist", 200, 10, seed=0)
  data = simulation.ClientData(jnp.asarray(fed.x), jnp.asarray(fed.y))
  return data, (test_x[:1000], test_y[:1000]), public_batch(10, seed=0)


@functools.lru_cache(maxsize=None)
def model(name: str):
  return tiny_linear() if name == "tiny" else paper_cnn()


# Record fields that are not numbers of the run.
IGNORED = ("seconds",)


def weight_summary(weights: jax.Array) -> dict:
  """A checksum of the final weights: sums, norm, a few coordinates and a hash."""
  w = np.asarray(weights, np.float32)
  picks = np.linspace(0, w.size - 1, 16).astype(int)
  return {"sum": float(w.astype(np.float64).sum()),
          "abs_sum": float(np.abs(w.astype(np.float64)).sum()),
          "l2": float(np.linalg.norm(w.astype(np.float64))),
          "picks": [float(v) for v in w[picks]],
          "sha256": hashlib.sha256(w.tobytes()).hexdigest()}


def run_case(case: Case) -> dict:
  """The golden record of one case (JSON-ready)."""
  data, test, public = setting()
  record, state = simulation.run(model(case.model), get_scheme(case.scheme), data, test,
                                 public, case.run_config(), return_state=True)
  record = {k: v for k, v in record.items() if k not in IGNORED}
  return {"case": case.name, "scheme": case.scheme, "model": case.model,
          "config": dict(case.config), "jax": jax.__version__,
          "record": json.loads(json.dumps(record)),
          "weights": weight_summary(state.weights)}


def path(case: Case) -> pathlib.Path:
  return GOLDEN_DIR / (case.name.replace("+", "__") + ".json")
