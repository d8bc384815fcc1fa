"""Documented entry points run as a user runs them: the example scheme, the
throughput benchmark (one scheme of every family, in-process on the tiny
model; the command line once on the paper CNN), the decoder benchmark and
the discrete Gaussian benchmark (small)."""

import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import pytest

from fedjax_dp.schemes import FAMILIES
from tiny_model import tiny_linear

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _script(*args, timeout=600):
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=1")
  return subprocess.run([sys.executable, *map(str, args)], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=timeout)


def test_example_defines_registers_and_runs_a_new_scheme():
  proc = _script("experiments/examples/new_scheme.py", "--rounds", "3")
  assert proc.returncode == 0, proc.stderr
  out = json.loads(proc.stdout.strip().splitlines()[-1])
  assert out["scheme"] == "FedAvg-QSGD" and out["upstream_bits"] == 4
  assert out["best_accuracy"] > 0.6  # three blobs: learnt in 3 rounds
  bad = _script("experiments/examples/new_scheme.py", "--levels", "0")
  assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0
  assert "levels must be >= 1" in bad.stderr


def _throughput():
  spec = importlib.util.spec_from_file_location(
      "throughput", ROOT / "benchmarks" / "throughput.py",
      submodule_search_locations=None)
  sys.path.insert(0, str(ROOT / "benchmarks"))  # its sibling common.py
  try:
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
  finally:
    sys.path.remove(str(ROOT / "benchmarks"))
  return module


# One scheme of every family, and two Gaussian DP schemes (FL-SIGN-DP's
# round, tables and all, runs in tests/test_sign_schemes.py and the golden
# records; here it would add ~30 s of compilation to the suite).
BENCH_SCHEMES = [next(iter(f.schemes)) for f in FAMILIES] + ["FL-TOP-DP", "FL-CS-DP"]


@pytest.mark.parametrize("name", BENCH_SCHEMES)
def test_throughput_measures_every_family(name, small_federation):
  data, (test_x, _), public = small_federation
  rec = _throughput().measure(tiny_linear(), name, data, test_x[:500], public, clients=4,
                              ratio=0.05, repeats=1, devices=1)
  assert rec["scheme"] == name and rec["clients_per_sec"] > 0
  assert not rec["recompiled"]
  assert all(v is None or v >= 0 for v in rec["seconds"].values())


def test_throughput_alternates_the_round_with_the_torch_loop(small_federation, monkeypatch):
  """The PyTorch comparison (torch is an optional extra, absent here): the
  loop gets round 1's cohort in [0, 1], is warmed up, then timed once per
  repeat beside the JAX round."""
  data, (test_x, _), public = small_federation
  module, calls = _throughput(), []

  def fake_loop(model, w, x, y, steps, batch_size, lr):
    assert x.shape[0] == y.shape[0] == 4 and 0.0 <= x.min() and x.max() <= 1.0
    assert (steps, batch_size, lr) == (5, 10, 0.215)
    return lambda: calls.append(1), 1e-6

  monkeypatch.setattr(module, "torch_loop", fake_loop)
  rec = module.measure(tiny_linear(), "FL-STD", data, test_x[:500], public, clients=4,
                       ratio=1.0, repeats=2, devices=1, torch=True)
  assert len(calls) == 3  # warm-up and two repeats
  assert rec["torch_loop_clients_per_sec"] > 0 and rec["torch_max_logit_diff"] == 1e-6
  assert rec["ratio_to_torch"] == pytest.approx(
      rec["clients_per_sec"] / rec["torch_loop_clients_per_sec"])


def test_throughput_command_line_on_the_paper_cnn():
  proc = _script("benchmarks/throughput.py", "--scheme", "FL-TOP-DP", "--clients-per-round",
                 "4", "--repeats", "1", "--no-torch", "--json")
  assert proc.returncode == 0, proc.stderr
  rec = json.loads(proc.stdout.strip().splitlines()[-1])
  assert rec["clients_per_round"] == 4 and rec["clients_per_sec"] > 0
  bad = _script("benchmarks/throughput.py", "--scheme", "FL-NOPE", "--no-torch")
  assert bad.returncode == 2 and "unknown scheme" in bad.stderr
  assert "Traceback" not in bad.stderr


def test_throughput_summary_compares_schemes_with_fl_std(capsys):
  """Several schemes in one run: a record each, then the table against FL-STD."""
  module = _throughput()
  fake = lambda model, name, *a, **k: {
      "scheme": name, "clients_per_sec": 10.0, "clients_per_round": 10,
      "seconds": {"round": 2.0 if name == "FL-STD" else 3.0, "local_training": 1.0,
                  "privacy_sum": 0.5, "compile": 4.0}}
  module._summary([fake(None, "FL-STD"), fake(None, "FL-SIGN-DP")])
  out = capsys.readouterr().out.splitlines()
  assert out[-1].split()[:3] == ["FL-SIGN-DP", "3.00", "1.50"]


def test_discrete_gaussian_benchmark_runs_small():
  proc = _script("benchmarks/discrete_gaussian.py", "--size", "20000", "--repeats", "1",
                 "--scales", "3.5", "--no-paper-vector", "--json")
  assert proc.returncode == 0, proc.stderr
  rows = [json.loads(line) for line in proc.stdout.strip().splitlines()]
  assert [(r["case"], r["sampler"]) for r in rows] == [
      ("DG(0, 3.5)", "table"), ("DG(0, 3.5)", "rejection"),
      ("jax.random.normal", "continuous"), ("threefry uint32 words", "bits")]
  assert all(r["samples_per_s"] > 0 for r in rows)
  assert rows[0]["table_build_s"] >= 0 and rows[1]["table_build_s"] is None
  bad = _script("benchmarks/discrete_gaussian.py", "--scales", "-1")
  assert bad.returncode == 2 and "--scales" in bad.stderr and "Traceback" not in bad.stderr


def test_cs_decoder_benchmark_runs_small():
  proc = _script("benchmarks/cs_decoder.py", "--num-params", "5000", "--chunks", "10",
                 "--iters", "5", "--repeats", "1", "--json")
  assert proc.returncode == 0, proc.stderr
  rec = json.loads(proc.stdout.strip().splitlines()[-1])
  assert rec["num_params"] == 5000 and rec["chunks"] == 10


def test_local_training_benchmark_runs_small():
  proc = _script("benchmarks/local_training.py", "--clients", "2", "--steps", "3",
                 "--samples", "20", "--repeats", "1", "--json")
  assert proc.returncode == 0, proc.stderr
  rec = json.loads(proc.stdout.strip().splitlines()[-1])
  forms = rec["forms"]
  assert set(forms) == {"factored", "per-client"} and rec["history_rows"] == 30
  assert forms["factored"]["time_over_factored"] == 1.0
  assert forms["per-client"]["max_abs_diff_from_factored"] < 1e-3 * rec["max_abs_update"]
  bad = _script("benchmarks/local_training.py", "--steps", "0")
  assert bad.returncode == 2 and "--steps" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.parametrize("command", [["benchmarks/throughput.py", "--no-torch"],
                                     ["benchmarks/processes.py"]])
def test_benchmarks_without_data_end_in_one_line_exit_2(command, tmp_path):
  env = dict(os.environ, FEDJAX_DP_DATA=str(tmp_path / "nowhere"),
             FEDJAX_DP_CACHE=str(tmp_path / "cache"), FEDJAX_DP_NO_DOWNLOAD="1")
  proc = subprocess.run([sys.executable, *command], cwd=ROOT, env=env, capture_output=True,
                        text=True, timeout=300)
  lines = proc.stderr.strip().splitlines()
  assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-3000:]
  assert "not found" in lines[0] and "FEDJAX_DP_DATA" in lines[0]
