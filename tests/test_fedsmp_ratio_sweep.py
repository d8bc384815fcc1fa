"""experiments/fedsmp_ratio_sweep.py: sigma calibrated to the target epsilon,
the table, bad input (tiny linear model in place of the paper CNN)."""

import json
import os
import pathlib

import pytest

from fedjax_dp import runlock
from fedjax_dp.cli import sweep as experiment
from tiny_model import tiny_linear

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _ratio_sweep():
  import importlib.util
  spec = importlib.util.spec_from_file_location(
      "fedsmp_ratio_sweep", ROOT / "experiments" / "fedsmp_ratio_sweep.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


@pytest.mark.parametrize("args,needle", [
    (["--epsilon", "0"], "--epsilon must be > 0"),
    (["--noise-multiplier", "1"], "--noise-multiplier is set by this script"),
    (["--ratio=0.1"], "--ratio is set by this script"),
    (["--target-epsilon", "2"], "--target-epsilon is set by this script"),
    (["--noise", "2"], "--noise-multiplier is set by this script"),
    (["--momentum", "2"], "--momentum must be in [0, 1)"),
    (["--schemes", "Fed-SMP-nope"], "unknown scheme"),
    (["--clip-at", "0"], "--clip-at must be in (0, 1]"),
    (["--coordinator", "h:1", "--num-processes", "2", "--process-id", "0"],
     "--coordinator: this script runs in one process"),
])
def test_ratio_sweep_bad_input_exits_2(args, needle, tmp_path, capsys, monkeypatch):
  monkeypatch.setattr(experiment, "main", lambda argv: pytest.fail(f"ran a sweep: {argv}"))
  code = _ratio_sweep().main([*args, "--out", str(tmp_path / "o")])
  err = capsys.readouterr().err.strip().splitlines()
  assert code == 2 and len(err) == 1 and needle in err[0], err
  assert not (tmp_path / "o").exists()


def _tiny_sweep(monkeypatch, out, *flags, rounds=2):
  """The script's exit code on a tiny linear model: 300 clients, 20 a round,
  one local step, evaluated once at the last round, epsilon 2."""
  monkeypatch.setattr("fedjax_dp.cli.resolve.get_model", lambda name, **_: tiny_linear())
  return _ratio_sweep().main([
      "--epsilon", "2", "--rounds", str(rounds), "--num-clients", "300",
      "--clients-per-round", "20", "--local-steps", "1", "--eval-every", str(rounds),
      "--out", str(out), "--quiet", *flags])


def test_ratio_sweep_calibrates_sigma_to_the_target_epsilon(tmp_path, capsys, monkeypatch):
  out = tmp_path / "sweep"
  code = _tiny_sweep(monkeypatch, out, "--ratios", "0.1", "1.0", "--schemes", "fed-smp-randk")
  assert code == 0
  table = (out / "table.md").read_text()
  assert "| 0.1 |" in table and "| 1 |" in table and "Command:" in table
  runs = json.loads((out / "table.json").read_text())["runs"]
  assert [r["ratio"] for r in runs] == [0.1, 1.0]
  sigma = runs[0]["noise_multiplier"]
  assert runs[1]["noise_multiplier"] == sigma  # independent of r (sensitivity S)
  for r in runs:
    assert "rdp" in r["accountant"] and 1.9 < r["epsilon_final"] <= 2.0
  # One S for every ratio (Sec. 6.2), calibrated once at r = 1.
  assert runs[0]["clip_norm"] == runs[1]["clip_norm"] > 0
  assert runs[0]["clip_source"] == "user"
  from fedjax_dp.privacy import accounting
  assert accounting.epsilon(sigma - 1e-3, 20 / 300, 2, 1e-5, "rdp") > 2.0  # smallest sigma


def test_ratio_sweep_calibrates_sigma_for_the_sampler_that_runs(tmp_path, capsys, monkeypatch):
  """Cyclic Poisson (2 groups: 1 step in 2 at twice the rate) is accounted
  otherwise than Poisson: sigma meets --epsilon as the run's own record
  computes it (the Poisson sigma gave it epsilon 2.6 for a target of 2)."""
  out = tmp_path / "sweep"
  code = _tiny_sweep(monkeypatch, out, "--ratios", "0.1", "--schemes", "fed-smp-randk",
                     "--cycle-length", "2", rounds=4)
  assert code == 0, capsys.readouterr().err
  run, = json.loads((out / "table.json").read_text())["runs"]
  assert 1.9 < run["epsilon_final"] <= 2.0, run["epsilon_final"]


def test_ratio_sweep_runs_the_non_private_baseline(tmp_path, capsys, monkeypatch):
  """FedAvg-randk, the documented non-private baseline, beside Fed-SMP: no
  sigma is calibrated for it (the calibration read its epsilon, None)."""
  out = tmp_path / "sweep"
  code = _tiny_sweep(monkeypatch, out, "--ratios", "0.1", "--schemes", "FedAvg-randk",
                     "Fed-SMP-randk")
  assert code == 0, capsys.readouterr().err
  runs = {r["scheme"]: r for r in json.loads((out / "table.json").read_text())["runs"]}
  assert runs["FedAvg-randk"]["epsilon_final"] is None
  assert 1.9 < runs["Fed-SMP-randk"]["epsilon_final"] <= 2.0


def test_ratio_sweep_checks_out_before_any_run_and_is_held(tmp_path, capsys, monkeypatch):
  """An unwritable --out stops the script before any calibration run (it
  used to fail with a traceback after every sweep); an --out another run
  holds is refused."""
  monkeypatch.setattr(experiment, "execute", lambda *a, **kw: pytest.fail("ran"))
  (tmp_path / "FILE").write_text("a file, not a folder")
  args = ["--ratios", "0.1", "--schemes", "fed-smp-randk", "--rounds", "2",
          "--num-clients", "300", "--clients-per-round", "20", "--quiet"]
  assert _ratio_sweep().main([*args, "--out", str(tmp_path / "FILE" / "o")]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and "cannot be written" in err[0], err
  held = tmp_path / "held"
  held.mkdir()
  with runlock.hold(held / runlock.NAME):
    assert _ratio_sweep().main([*args, "--out", str(held)]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert err == [f"fedsmp_ratio_sweep.py: error: --out {held} is in use by another sweep "
                 f"(process {os.getpid()}): wait for it to end, or choose another --out"]


def test_ratio_sweep_run_again_keeps_its_finished_runs(tmp_path, capsys, monkeypatch):
  monkeypatch.setattr("fedjax_dp.cli.resolve.get_model", lambda name, **_: tiny_linear())
  out = tmp_path / "sweep"
  args = ["--epsilon", "2", "--ratios", "0.1", "1.0", "--schemes", "fed-smp-randk",
          "--rounds", "2", "--num-clients", "300", "--clients-per-round", "20",
          "--local-steps", "1", "--eval-every", "2", "--out", str(out), "--quiet"]
  module = _ratio_sweep()
  assert module.main(args) == 0
  first = json.loads((out / "table.json").read_text())["runs"]
  monkeypatch.setattr(experiment, "execute",
                      lambda *a, **kw: pytest.fail("ran a finished run"))
  assert module.main(args) == 0
  assert json.loads((out / "table.json").read_text())["runs"] == first
  assert not (out / runlock.NAME).exists()
  # Another command in its --out is refused (issue 62): one line, nothing written.
  capsys.readouterr()
  files = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
  other_epsilon = ["--epsilon", "3", *args[2:]]  # another sigma
  other_schemes = [a if a != "fed-smp-randk" else "fed-smp-topk" for a in args]
  for argv, says in (
      (other_epsilon, f"--out {out / 'Fed-SMP-randk'} holds the records of another sweep "
                      "(other --noise-multiplier): choose another --out, or add --overwrite"),
      (other_schemes, f"--out {out} holds the table of other schemes (Fed-SMP-randk): "
                      "choose another --out, or add --overwrite to replace it")):
    assert module.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fedsmp_ratio_sweep.py: error: ") and (
        says in err[0]), err
  assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == files
  # With --overwrite it goes on to run (here stopped at its first run).
  def interrupted(*a, **kw):
    raise KeyboardInterrupt
  monkeypatch.setattr(experiment, "execute", interrupted)
  assert module.main([*other_epsilon, "--overwrite"]) == 130
