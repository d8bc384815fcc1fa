"""A run killed after k evaluations and resumed from its checkpoint computes
exactly what the uninterrupted run computes."""

import json
import os
import pathlib
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest

from fedjax_dp import checkpoint, simulation
from fedjax_dp.schemes import get_scheme
from scheme_helpers import Killed, kill_after
from tiny_model import tiny_linear
from xla_env import xla_flags


def _interrupted(small_federation, tmp_path, name, **settings):
  """A 3-round run of ``name`` killed after its second round, its checkpoint
  kept: ``(run, path)``, ``run(**kw)`` runs it again (``simulation.run``)."""
  data, test, public = small_federation
  model, scheme = tiny_linear(), get_scheme(name)
  cfg = simulation.RunConfig.of(rounds=3, clients_per_round=10, eval_every=1, **settings)
  path = tmp_path / "run.npz"
  with pytest.raises(Killed):
    simulation.run(model, scheme, data, test, public, cfg, progress=kill_after(2),
                   checkpoint=path)
  return (lambda **kw: simulation.run(model, scheme, data, test, public, cfg,
                                      checkpoint=path, **kw)), path


# Schemes with server state beyond the weights (Top-K set and its public-data
# start; FL-CS's momentum and error feedback; Fed-SMP's rounds), and DP noise;
# CDP-LQ's measured coded streams (their sizes carried in the checkpoint).
@pytest.mark.parametrize("name", ["FL-TOP-DP", "FL-CS-DP", "Fed-SMP-randk", "CDP-LQ"])
def test_resumed_run_equals_the_uninterrupted_run(name, small_federation, tmp_path):
  data, test, public = small_federation
  model, scheme = tiny_linear(), get_scheme(name)
  cfg = simulation.RunConfig.of(ratio=0.05, rounds=5, clients_per_round=10, clip_norm=1.0,
                             eval_every=1)
  whole, whole_state = simulation.run(model, scheme, data, test, public, cfg,
                                      return_state=True)
  path = tmp_path / "run.npz"
  with pytest.raises(Killed):
    simulation.run(model, scheme, data, test, public, cfg, progress=kill_after(2),
                   checkpoint=path)
  assert path.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
  with np.load(path) as f:
    earlier = json.loads(str(f["meta"]))["seconds"]  # the killed process' training
  assert earlier > 0
  resumed_rounds, each_round = [], []
  started = time.perf_counter()
  record, state = simulation.run(model, scheme, data, test, public, cfg,
                                 progress=resumed_rounds.append, return_state=True,
                                 checkpoint=path, on_round=each_round.append)
  this_process = time.perf_counter() - started
  # The record's wall time counts the killed process' training too.
  assert this_process < record["seconds"] <= this_process + earlier
  assert resumed_rounds[0] == 2  # the two checkpointed rounds, then one a call
  assert each_round == [2, 3, 4, 5]  # the checkpoint's round, then each round
  assert record["history"] == whole["history"]
  np.testing.assert_array_equal(state.weights, whole_state.weights)
  timing = {"seconds", "mc_seconds"}
  assert {k: v for k, v in record.items() if k not in timing} == \
      {k: v for k, v in whole.items() if k not in timing}
  assert not path.exists()  # a finished run leaves no checkpoint


def test_a_checkpoint_of_another_run_or_version_is_refused_not_overwritten(
    small_federation, tmp_path):
  """Another seed's checkpoint, or one of another format version, stops the
  run with one line naming the file (``checkpoint.Mismatch``, a ValueError)
  before any round, and the file is left as it was; an unreadable file is
  replaced, with a warning."""
  data, test, public = small_federation
  model, scheme = tiny_linear(), get_scheme("FL-STD")
  cfg = simulation.RunConfig.of(rounds=3, clients_per_round=10, eval_every=1)
  path = tmp_path / "run.npz"
  with pytest.raises(Killed):
    simulation.run(model, scheme, data, test, public, cfg, progress=kill_after(2),
                   checkpoint=path)
  saved = path.read_bytes()
  other = simulation.RunConfig.of(rounds=3, clients_per_round=10, eval_every=1, seed=1)
  rounds = []
  with pytest.raises(checkpoint.Mismatch, match="of another run") as refused:
    simulation.run(model, scheme, data, test, public, other, progress=rounds.append,
                   checkpoint=path)
  assert str(refused.value) == (f"{path} holds a checkpoint of another run (other "
                                "settings, data or model)")
  assert rounds == [] and path.read_bytes() == saved
  key = simulation.loop.checkpoint_key(model, scheme, data, test, public, cfg)
  assert checkpoint.verify(path, key)["round"] == 2  # this run's: continued
  with pytest.raises(checkpoint.Mismatch, match="of another run"):
    checkpoint.verify(path, simulation.loop.checkpoint_key(model, scheme, data, test, public,
                                                          other))
  # Version 1's format (before the features' states were saved): refused.
  meta = checkpoint.peek(path)
  with np.load(path) as f:
    arrays = {name: f[name] for name in f.files if name != "meta"}
  np.savez(path, meta=np.array(json.dumps(dict(meta, version=1))), **arrays)
  with pytest.raises(checkpoint.Mismatch, match=r"of another version of fedjax_dp "
                                                r"\(format 1; this version reads format 2\)"):
    simulation.run(model, scheme, data, test, public, cfg, checkpoint=path)
  # Garbage, a truncated zip (a copy cut short), an empty file: each ignored.
  for content in (b"not a checkpoint", saved[:100], b""):
    path.write_bytes(content)
    with pytest.warns(UserWarning, match="unreadable checkpoint .*; the run starts at round 1 "
                                         "and replaces it$"):
      assert checkpoint.load(path, "key", None) is None
    with pytest.warns(UserWarning, match="unreadable checkpoint"):
      assert checkpoint.verify(path, "key") is None
    assert checkpoint.peek(path) is None


def test_a_resume_at_another_calibrated_sigma_is_another_run(small_federation, tmp_path):
  """A target epsilon's sigma is calibrated at every start: if it came out
  otherwise (another machine, a Monte Carlo cache), the kept rounds ran at
  another sigma than the record's epsilon counts. The checkpoint keeps the
  sigma its rounds ran at, and a resume at another is refused before any
  round; at the same sigma it continues."""
  run, path = _interrupted(small_federation, tmp_path, "FL-STD-DP", clip_norm=1.0,
                           target_epsilon=20.0)
  meta = checkpoint.peek(path)
  sigma = meta["noise_multiplier"]
  assert 0 < sigma < 1.54  # calibrated, not the config's placeholder
  with np.load(path) as f:
    arrays = {name: f[name] for name in f.files if name != "meta"}
  np.savez(path, meta=np.array(json.dumps(dict(meta, noise_multiplier=sigma + 0.01))),
           **arrays)
  rounds = []
  with pytest.raises(checkpoint.Mismatch, match=f"its rounds ran at sigma {sigma + 0.01:g}; "
                     f"this run's is {sigma:g}"):
    run(progress=rounds.append)
  assert rounds == []
  np.savez(path, meta=np.array(json.dumps(meta)), **arrays)
  record = run(progress=rounds.append)
  assert rounds[0] == 2 and record["noise_multiplier"] == sigma


def test_a_resume_on_another_device_count_is_said_in_one_warning(small_federation, tmp_path):
  """The checkpoint keeps the device count its rounds' sums were split over.
  A resume on another count sums in another order from there, so it is not
  the uninterrupted run of either count: one warning says so and how to
  continue it as it ran. A checkpoint written before the count was kept
  (no ``devices``) and a resume on the same count continue without one."""
  run, path = _interrupted(small_federation, tmp_path, "FL-STD")
  meta = checkpoint.peek(path)
  assert meta["devices"] == 1
  with np.load(path) as f:
    arrays = {name: f[name] for name in f.files if name != "meta"}
  for kept, warned in ((2, True), (None, False), (1, False)):
    np.savez(path, meta=np.array(json.dumps(dict(meta, devices=kept))), **arrays)
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter("always")
      record = run()
    said = [str(w.message) for w in caught if "device" in str(w.message)]
    assert record["devices"] == 1 and len(record["history"]) == 3
    assert said == ([
        "FL-STD: resuming at round 3 on 1 device(s) from a checkpoint whose rounds ran on 2: "
        "the sums run in another order from here, so the numbers are not an uninterrupted "
        "run's (run it where it has 2 devices to continue it as it ran: on a CPU, "
        "--cpu-devices 2)"] if warned else []), (kept, said)


# The run of _interrupted resumed in a process of the device count XLA_FLAGS
# sets (what --cpu-devices does): its record's devices, and the warnings.
_RESUME_ELSEWHERE = """
import json, sys, warnings
sys.path.insert(0, sys.argv[2])
import jax.numpy as jnp
from fedjax_dp import simulation
from fedjax_dp.data import load_federated, public_batch
from fedjax_dp.schemes import get_scheme
from tiny_model import tiny_linear
fed, test_x, test_y = load_federated("fashion-mnist", 600, 10, seed=0)
data = simulation.ClientData(jnp.asarray(fed.x), jnp.asarray(fed.y))
cfg = simulation.RunConfig.of(rounds=3, clients_per_round=10, eval_every=1)
resumed = []
with warnings.catch_warnings(record=True) as caught:
  warnings.simplefilter("always")
  record = simulation.run(tiny_linear(), get_scheme("FL-STD"), data,
                          (test_x[:2000], test_y[:2000]), public_batch(10, seed=0), cfg,
                          checkpoint=sys.argv[1], progress=resumed.append)
print(json.dumps({"devices": record["devices"], "resumed": resumed[0],
                  "warned": [str(w.message) for w in caught]}))
"""


def test_the_device_warnings_advice_continues_the_checkpoint(small_federation, tmp_path):
  """Following the warning's advice (2 CPU devices, as --cpu-devices 2
  makes them) resumes the same checkpoint, without a warning: the device
  count is not part of the run's key."""
  _, path = _interrupted(small_federation, tmp_path, "FL-STD")
  meta = checkpoint.peek(path)
  with np.load(path) as f:
    arrays = {name: f[name] for name in f.files if name != "meta"}
  np.savez(path, meta=np.array(json.dumps(dict(meta, devices=2))), **arrays)
  env = dict(os.environ, XLA_FLAGS=xla_flags(2), JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, "-c", _RESUME_ELSEWHERE, str(path),
                         str(pathlib.Path(__file__).parent)], env=env, capture_output=True,
                        text=True, timeout=600, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  out = json.loads(proc.stdout.strip().splitlines()[-1])
  assert out == {"devices": 2, "resumed": 2, "warned": []}
