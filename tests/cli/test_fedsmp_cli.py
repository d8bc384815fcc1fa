"""experiments/sweep.py with the Fed-SMP schemes: options, bad input, a small run.

The run uses the 7,850-weight linear model in place of the paper CNN (same
code path, seconds instead of minutes); tests/cli/test_cli.py covers the CNN.
"""

import json

import pytest

from fedjax_dp.cli import sweep
from scheme_helpers import refusal
from tiny_model import tiny_linear


def test_bad_momentum_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys):
  line = refusal(["--schemes", "Fed-SMP-randk", "--momentum", "1.0"], tmp_path / "out", capsys)
  assert "--momentum must be in [0, 1), got 1.0" in line


@pytest.mark.parametrize("args,needle", [
    (["--momentum", "-0.5"], "--momentum must be in [0, 1)"),
    (["--momentum", "fast"], "--momentum takes a number"),
    (["--lr-decay", "0"], "--lr-decay must be in (0, 1]"),
    (["--lr-decay", "1.5"], "--lr-decay must be in (0, 1]"),
    (["--server-steps", "0"], "--server-steps must be >= 1"),
    (["--public-holdout", "0"], "--public-holdout must be >= 1"),
    # 6,000 clients x 10 + 1,000 held out exceeds Fashion-MNIST's 60,000.
    (["--samples-per-client", "10"], "left after holding out 1000"),
    (["--ratio", "0"], "--ratio must be in (0, 1]"),
])
def test_bad_fedsmp_input_exits_2(args, needle, tmp_path, capsys):
  assert needle in refusal(["--schemes", "fed-smp-topk", *args, "--quiet"], tmp_path / "o",
                           capsys)


def test_fedavg_baselines_take_the_fedsmp_options():
  args = sweep.build_parser().parse_args([
      "--schemes", "FEDAVG-RANDK", "fedavg-topk", "--momentum", "0.9", "--lr-decay", "1",
      "--server-steps", "7", "--public-holdout", "300"])
  plan = sweep.resolve(args).runs
  assert [(r.scheme.name, r.ratio) for r in plan] == [("FedAvg-randk", 0.005),
                                                      ("FedAvg-topk", 0.005)]
  rand, top = (r.scheme for r in plan)
  assert (rand.momentum, rand.lr_decay, rand.server_steps, rand.public_holdout) == (
      0.9, 1.0, 7, 0)  # rand_k holds nothing out
  assert (top.momentum, top.public_holdout, top.dp) == (0.9, 300, False)


def test_sweep_runs_fedsmp_and_dp_fedavg(tmp_path, capsys, monkeypatch):
  # Three runs (each compiles its round). The FedAvg baselines are the same
  # code with dp=False; FedAvg-topk runs rounds in tests/schemes/test_fedsmp.py.
  monkeypatch.setattr("fedjax_dp.cli.resolve.get_model", lambda name, **_: tiny_linear())
  out = tmp_path / "res"
  code = sweep.main([
      "--schemes", "Fed-SMP-randk", "fed-smp-topk", "dp-fedavg", "--ratio", "0.1",
      "--rounds", "4", "--num-clients", "300",
      "--clients-per-round", "20", "--local-steps", "3", "--server-steps", "20",
      "--public-holdout", "200", "--momentum", "0.5", "--noise-multiplier", "0.3",
      "--eval-every", "4", "--out", str(out), "--quiet"])
  assert code == 0, capsys.readouterr().err
  table = capsys.readouterr().out
  assert "| 10% | Fed-SMP-topk |" in table and "| 100% | DP-FedAvg |" in table
  runs = {r["scheme"]: r for r in json.loads((out / "results.json").read_text())["runs"]}
  assert set(runs) == {"Fed-SMP-randk", "Fed-SMP-topk", "DP-FedAvg"}
  for name, r in runs.items():
    assert r["epsilon"] > 0 and r["downstream_values"] == 7850
    assert r["upstream_values"] == (7850 if name == "DP-FedAvg" else 785)
    assert r["num_clients"] == 300 and r["rounds"] == 4
  top = runs["Fed-SMP-topk"]  # public set held out of the clients' data
  assert top["public_holdout"] == 200 and top["samples_per_client"] == 9
  assert top["momentum"] == 0.5 and top["lr_decay"] == 0.99
  assert runs["Fed-SMP-randk"]["samples_per_client"] == 10
  assert runs["Fed-SMP-randk"]["lr"] == 0.1 and runs["Fed-SMP-randk"]["local_steps"] == 3
  # A short learning check on real data (chance: 0.1).
  assert runs["Fed-SMP-topk"]["best_accuracy"] > 0.4, runs["Fed-SMP-topk"]["history"]
  assert runs["Fed-SMP-randk"]["best_accuracy"] > 0.4, runs["Fed-SMP-randk"]["history"]

