"""experiments/sweep.py: bad input exits 2 with one line; a small run writes results."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from fedjax_dp import experiment

ROOT = pathlib.Path(__file__).resolve().parents[1]
SWEEP = ROOT / "experiments" / "sweep.py"


def _run(args, tmp_path, env_extra=None):
  env = dict(os.environ, **(env_extra or {}))
  return subprocess.run([sys.executable, str(SWEEP), *args, "--out", str(tmp_path / "out")],
                        capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.parametrize("args,needle", [
    (["--ratio", "0"], "--ratio must be in (0, 1]"),
    (["--ratio", "1.5"], "--ratio must be in (0, 1]"),
    (["--schemes", "FL-NOPE"], "unknown scheme 'FL-NOPE'"),
    (["--noise-multiplier", "-1"], "--noise-multiplier must be >= 0"),
    (["--clients-per-round", "7000"], "exceeds the number of clients 6000"),
    (["--clip", "-2"], "--clip must be > 0"),
    (["--accountant", "magic"], "invalid choice: 'magic'"),
    (["--sampling", "fixed"], "assumes Poisson sampling"),
    (["--rounds", "many"], "invalid int value"),
    (["--devices", "99"], "--devices must be in [1,"),
    (["--cpu-devices", "0"], "--cpu-devices must be > 0"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(args, needle, tmp_path):
  proc = _run(args, tmp_path)
  assert proc.returncode == 2, proc.stderr
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1 and needle in lines[0], proc.stderr
  assert "Traceback" not in proc.stderr
  assert not (tmp_path / "out").exists()


def test_missing_data_is_one_line_exit_2(tmp_path):
  proc = _run(["--rounds", "1"], tmp_path, {
      "FEDJAX_DP_DATA": str(tmp_path / "nowhere"), "FEDJAX_DP_CACHE": str(tmp_path / "cache"),
      "FEDJAX_DP_NO_DOWNLOAD": "1"})
  assert proc.returncode == 2
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1 and "not found" in lines[0] and "FEDJAX_DP_DATA" in lines[0]
  assert not (tmp_path / "out").exists()


def test_small_sweep_writes_table_json_and_csv(tmp_path, capsys):
  out = tmp_path / "res"
  code = experiment.main([
      "--ratio", "0.005", "--schemes", "fl-top-dp", "FL-STD", "--rounds", "2",
      "--num-clients", "120", "--clients-per-round", "8", "--out", str(out), "--quiet"])
  assert code == 0
  table = capsys.readouterr().out
  assert "| 0.5% | FL-TOP-DP |" in table and "(0.81)" in table  # paper figure beside ours
  assert "| 100% | FL-STD |" in table and "(0.86)" in table
  results = json.loads((out / "results.json").read_text())
  runs = {r["scheme"]: r for r in results["runs"]}
  required = {"scheme", "ratio", "best_accuracy", "best_round", "downstream_kb",
              "upstream_kb", "epsilon", "delta", "accountant", "noise_multiplier",
              "clip_norm", "rounds", "num_params", "seconds"}
  for r in runs.values():
    assert required <= set(r)
    assert r["num_params"] == 1_663_370 and r["rounds"] == 2
  dp = runs["FL-TOP-DP"]
  assert dp["epsilon"] > 0 and dp["delta"] == 1e-5 and "moments" in dp["accountant"]
  assert dp["clip_source"].startswith("calibrated") and dp["clip_norm"] > 0
  assert runs["FL-STD"]["epsilon"] is None
  csv_lines = (out / "results.csv").read_text().strip().splitlines()
  assert len(csv_lines) == 3 and csv_lines[0].startswith("scheme,ratio,best_accuracy")
