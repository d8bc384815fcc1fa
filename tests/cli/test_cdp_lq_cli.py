"""experiments/sweep.py with CDP-LQ: bad lattice input exits 2 with one line; a tiny
real-data run (the paper CNN, one round, one client) reports bits per value,
the compression factor and the record-level epsilon."""

import json

import pytest

from fedjax_dp.cli import sweep as experiment
from scheme_helpers import refusal


@pytest.mark.parametrize("args,needle", [
    (["--lattice-step", "0"], "--lattice-step must be > 0, got 0"),
    (["--lattice-step", "-0.5"], "--lattice-step must be > 0"),
    (["--lattice", "cubic"], "invalid choice: 'cubic'"),
    (["--lattice", "hexagonal", "--lattice-dim", "5"], "must be even"),
    (["--lattice-dim", "0"], "--lattice-dim must be > 0"),
    (["--lattice-dim", "1663371"], "--lattice-dim must be at most the model's size "
     "n = 1663370, got 1663371"),
    (["--lq-step-epsilon", "-1"], "--lq-step-epsilon must be > 0"),
])
def test_bad_lattice_input_is_one_line_exit_2(args, needle, tmp_path, capsys):
  assert needle in refusal(["--schemes", "CDP-LQ", *args], tmp_path / "o", capsys)


def test_bad_step_of_a_lowercase_scheme_name_is_one_line_exit_2(tmp_path, capsys):
  line = refusal(["--schemes", "cdp-lq", "--lattice-step", "0"], tmp_path / "o", capsys)
  assert "--lattice-step must be > 0" in line


def test_tiny_cdp_lq_sweep_reports_bits_compression_and_epsilon(tmp_path, capsys):
  out = tmp_path / "res"
  code = experiment.main([
      "--schemes", "cdp-lq", "--rounds", "1", "--num-clients", "1", "--samples-per-client",
      "8", "--batch-size", "4", "--clients-per-round", "all", "--clip", "1",
      "--lattice", "hexagonal", "--lattice-step", "0.5", "--lq-step-epsilon", "3.11",
      "--delta", "1e-4", "--lq-microbatch", "4", "--accountant", "pld", "--out", str(out),
      "--test-size", "1000", "--quiet"])
  assert code == 0
  table = capsys.readouterr().out
  assert "| 100% | CDP-LQ |" in table and "| CDP-LQ | hexagonal | 0.5 | 2 |" in table
  assert "(8.03x)" in table  # the poster's compression beside ours
  run = json.loads((out / "results.json").read_text())["runs"][0]
  assert run["num_params"] == 1_663_370 and run["lattice"] == "hexagonal"
  assert run["measured_streams"] == 1 and 1 < run["coded_bits_per_value"] < 8
  assert run["compression_factor"] == pytest.approx(32 / run["coded_bits_per_value"])
  assert run["upstream_bits"] == run["coded_bits_per_value"]
  assert run["epsilon_step_agm"] == pytest.approx(3.11, rel=1e-6)  # sigma from the AGM
  assert 0 < run["epsilon"] < 3.11  # one Poisson-subsampled step (q = 1/2) is tighter
  assert run["accountant"].startswith("record-level: pld") and run["delta"] == 1e-4
  assert run["lq_step_epsilon"] == 3.11 and run["paper_compression_factor"] == 8.03
  header = (out / "results.csv").read_text().splitlines()[0]
  assert "coded_bits_per_value,compression_factor" in header
