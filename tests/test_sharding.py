"""The client axis sharded over 4 host devices gives the one-device results."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from xla_env import xla_flags

_CHECK = pathlib.Path(__file__).with_name("sharded_round_check.py")


def test_sharded_rounds_equal_single_device_rounds():
  # The device count must be set before JAX starts: run in a fresh process.
  env = dict(os.environ, XLA_FLAGS=xla_flags(4),
             JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, str(_CHECK), "--cnn"], env=env,
                        capture_output=True, text=True, timeout=600, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  out = json.loads(proc.stdout.strip().splitlines()[-1])
  assert out["devices"] == 4 and out["mesh"] == 4
  assert len(out["cases"]) == 4
  for case in out["cases"]:
    assert case["same_cohorts"], case
    assert case["compiled"] == 1, case  # round 2 in the same compiled program
    # Same keys, same clients: equal up to the order of float sums.
    assert case["max_abs_diff"] <= 1e-5 * max(case["scale"], 1.0), case
  # The clip count summed over the devices (rows 5-8 of 9 real slots: first
  # values 3, 6, 9, 12), each all-reduce reading the contributions.
  counts = out["privatize_count"]
  assert counts["counted"]["count"] == 4 and counts["constant"]["count"] == 0
  for case in counts.values():
    assert case["all_reduces"] >= 1 and case["of_constants"] == 0, counts
  run = out["run"]  # simulation.run on one device, then on all four
  assert run["capacity"][1] % 4 == 0
  assert run["accuracy"][0] == run["accuracy"][1]


def test_client_mesh_validates_the_device_count():
  from fedjax_dp import sharding
  import jax
  assert sharding.client_mesh(1) is None
  with pytest.raises(ValueError, match="--devices"):
    sharding.client_mesh(len(jax.devices()) + 1)
