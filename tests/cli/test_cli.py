"""experiments/sweep.py: bad input exits 2 with one line; a small run writes results."""

import argparse
import json
import os
import pathlib
import subprocess
import sys

import pytest

from fedjax_dp import runlock
from fedjax_dp.cli import sweep
from fedjax_dp.schemes import get_scheme
from tiny_model import tiny_linear

ROOT = pathlib.Path(__file__).resolve().parents[2]
SWEEP = ROOT / "experiments" / "sweep.py"


@pytest.fixture
def tiny_model(monkeypatch):
  """The 7,850-weight linear model in place of the paper CNN, where the record
  of a flag, not the model, is checked (seconds of compilation instead of
  minutes); test_small_sweep_writes_table_json_and_csv runs the CNN."""
  monkeypatch.setattr("fedjax_dp.cli.resolve.get_model", lambda name, **_: tiny_linear())


def _run(args, tmp_path, env_extra=None):
  env = dict(os.environ, **(env_extra or {}))
  return subprocess.run([sys.executable, str(SWEEP), *args, "--out", str(tmp_path / "out")],
                        capture_output=True, text=True, env=env, timeout=300)


# Through the script (a fresh interpreter each, about 4 s): an argparse error,
# a validation error (--devices, checked once JAX runs), and the device flags,
# which act before JAX starts. The other messages through sweep.main below.
@pytest.mark.parametrize("args,needle", [
    (["--rounds", "many"], "--rounds takes an int, got 'many'"),
    (["--devices", "99"], "--devices must be in [1,"),
    (["--cpu-devices", "0"], "--cpu-devices must be an int in [1, 1024], got '0'"),
    (["--cpu-devices", "99999999999"], "--cpu-devices must be an int in [1, 1024]"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(args, needle, tmp_path):
  proc = _run(args, tmp_path)
  assert proc.returncode == 2, proc.stderr
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1 and needle in lines[0], proc.stderr
  assert "Traceback" not in proc.stderr
  assert not (tmp_path / "out").exists()


# The rest through ``sweep.main``, which the script runs (the cases above
# show that its exit code and message are the script's).
@pytest.mark.parametrize("args,needle", [
    (["--ratio", "0"], "--ratio must be in (0, 1]"),
    (["--schemes", "FL-NOPE"], "unknown scheme 'FL-NOPE'"),
    (["--noise-multiplier", "inf"], "--noise-multiplier must be a finite number, got inf"),
    (["--ratio", "1.5"], "--ratio must be in (0, 1]"),
    (["--noise-multiplier", "-1"], "--noise-multiplier must be >= 0"),
    (["--clients-per-round", "7000"], "exceeds the number of clients 6000"),
    (["--clip", "-2"], "--clip must be > 0"),
    (["--cycle-length", "300"], "--cycle-length 300 makes groups of 20 clients, fewer than the "
     "100 a round asks (a round samples one group, at rate min(1, B q)): at most 60"),
    (["--clip-ratio", "2"], "--clip-ratio must be in (0, 1]"),
    (["--aggregator", "krum"], "invalid choice: 'krum'"),
    (["--attack", "in-backdoor", "--malicious-fraction", "0.1"],
     "--attack in-backdoor needs --backdoor SRC:DST"),
    (["--attack", "in-backdoor", "--malicious-fraction", "0.1", "--backdoor", "5:5"],
     "backdoor source and target must differ"),
    (["--attack", "out-backdoor", "--malicious-fraction", "0.1", "--backdoor", "Sandal:Cat"],
     "unknown class 'Cat' of fashion-mnist"),
    (["--attack", "random-update", "--malicious-fraction", "1"],
     "--malicious-fraction must be in [0, 1)"),
    (["--malicious-fraction", "0.1"], "--malicious-fraction needs --attack"),
    (["--boost", "3"], "--boost needs --attack"),
    (["--clip-lr", "0.1"], "--clip-lr needs --adaptive-clip"),
    (["--audit-confidence", "0.9"], "--audit-confidence needs --audit-canaries"),
    (["--attack", "random-update", "--malicious-fraction", "0.1", "--attackers-skip-noise",
      "--schemes", "FL-STD"], "--attackers-skip-noise applies to DP schemes; FL-STD adds no noise"),
    (["--attack", "random-update", "--malicious-fraction", "0.1", "--max-cohort", "120",
      "--accountant", "pld"],
     "--max-cohort (truncated Poisson sampling) would cut the malicious share of the "
     "cohort; sample the attackers like every client (selection 'fixed')"),
    (["--attack", "random-update", "--malicious-fraction", "0.1",
      "--malicious-selection", "some"], "invalid choice: 'some'"),
    (["--audit-canaries", "-1"], "--audit-canaries must be >= 0, got -1"),
    (["--audit-canaries", "10", "--schemes", "FL-TOP-DP", "FL-STD"],
     "--audit-canaries audits a DP release; FL-STD adds no noise"),
    (["--audit-canaries", "7000", "--schemes", "FL-TOP-DP"],
     "--audit-canaries 7000 exceeds the 6000 clients"),
    (["--audit-canaries", "10", "--schemes", "CDP-LQ"],
     "--audit-canaries audits client-level DP; CDP-LQ's DP is record-level"),
    (["--aggregator", "median", "--schemes", "FL-STD-DP"],
     "--aggregator median needs the individual updates; FL-STD-DP's noise shares"),
    (["--aggregator", "median", "--schemes", "FL-SIGN", "--secure-aggregation"],
     "--aggregator median needs the individual updates, which secure aggregation hides"),
    (["--aggregator", "trimmed-mean", "--trim-fraction", "0.5", "--schemes", "FL-STD"],
     "--trim-fraction must be in [0, 0.5)"),
    (["--aggregator", "norm-bound", "--schemes", "FL-STD"],
     "--norm-bound must be > 0 for aggregator norm-bound"),
    # A rule's own setting for another rule, which ignored it in silence.
    (["--trim-fraction", "0.2", "--schemes", "FL-STD"],
     "--trim-fraction needs --aggregator trimmed-mean"),
    (["--aggregator", "median", "--norm-bound", "1", "--schemes", "FL-STD"],
     "--norm-bound needs --aggregator norm-bound"),
    (["--schemes", "FL-STD-DP", "--mc-samples", "10"],
     "--mc-samples needs --accountant monte-carlo"),
    (["--schemes", "FL-SIGN", "--gamma", "-1"], "--gamma must be > 0, got -1"),
    # A count beyond int32, which overflowed in the first jitted call.
    (["--local-steps", "99999999999"], "--local-steps must be at most 2147483647"),
    (["--schemes", "FL-CS", "--decoder-iters", "99999999999"],
     "--decoder-iters must be at most 2147483647"),
    # l >= |K|: shares for at most one client, each the whole noise.
    (["--clients-per-round", "10", "--max-dropouts", "10"],
     "--max-dropouts must be below |K| = 10, the clients a round asks"),
    # The decoder's own checks, under the flag's name.
    (["--schemes", "FL-CS", "--decoder-iters", "0"],
     "--decoder-iters must be an int >= 1 (decoder steps), got 0"),
    (["--schemes", "FL-CS", "--decoder-tol", "-1"],
     "--decoder-tol must be >= 0 (decoder tolerance), got -1.0"),
    (["--schemes", "FL-CS", "--cs-lambda", "-1"], "--cs-lambda must be >= 0 (lambda), got -1.0"),
    (["--schemes", "CDP-LQ", "--lq-step-epsilon", "1", "--target-epsilon", "2"],
     "--lq-step-epsilon and --target-epsilon both set CDP-LQ's sigma; give one"),
    # Secure aggregation's own settings without it, or for schemes it leaves in the clear.
    (["--schemes", "FL-STD-DP", "--secure-bits", "20"], "--secure-bits needs --secure-aggregation"),
    (["--schemes", "FL-STD-DP", "--secure-frac-bits", "10"],
     "--secure-frac-bits needs --secure-aggregation"),
    (["--schemes", "FL-STD", "FL-TOP", "--secure-aggregation"],
     "--secure-aggregation applies to DP schemes and to integer messages (FL-SIGN, signSGD); "
     "FL-STD, FL-TOP send real values in the clear"),
    # A scheme family's flag that no scheme of the sweep reads.
    (["--schemes", "FL-TOP", "--gamma", "0.1"],
     "--gamma applies to FL-SIGN, FL-SIGN-DP, signSGD; this sweep runs FL-TOP"),
    (["--schemes", "FL-TOP", "FL-RND", "--chunks", "10"],
     "--chunks applies to FL-CS, FL-CS-DP, FL-FREQ, FL-FREQ-DP; this sweep runs FL-TOP, FL-RND"),
    (["--schemes", "FL-FREQ", "--decoder-restart"],
     "--decoder-restart applies to FL-CS, FL-CS-DP; this sweep runs FL-FREQ"),
    (["--schemes", "DP-FedAvg", "--momentum", "0.9"],
     "--momentum applies to Fed-SMP-randk, FedAvg-randk, Fed-SMP-topk, FedAvg-topk; this "
     "sweep runs DP-FedAvg"),
    (["--schemes", "Fed-SMP-randk", "--server-steps", "3"],
     "--server-steps applies to Fed-SMP-topk, FedAvg-topk; this sweep runs Fed-SMP-randk"),
    (["--schemes", "FL-STD", "--lattice", "hexagonal"], "--lattice applies to CDP-LQ"),
    (["--schemes", "FL-TOP-DP", "--server-optimizer", "fedadam"],
     "--server-optimizer applies to FL-STD, FL-STD-DP; this sweep runs FL-TOP-DP"),
    (["--schemes", "FL-STD-DP", "--server-optimizer-lr", "0.5"],
     "--server-optimizer-lr applies to the server optimisers fedavgm and fedadam; sgd adds "
     "the mean update as it is"),
    (["--clip", "0.5", "--clip-ratio", "1"], "--clip-ratio applies to a calibrated S"),
    (["--accountant", "magic"], "invalid choice: 'magic'"),
    (["--sampling", "fixed"], "assumes Poisson sampling"),
    # A DP flag that no scheme of the sweep reads would be ignored.
    (["--schemes", "FL-STD", "--noise-multiplier", "2"],
     "--noise-multiplier applies to DP schemes; FL-STD adds no noise"),
    (["--schemes", "FL-STD", "FL-TOP", "--target-epsilon", "1"],
     "--target-epsilon applies to DP schemes; FL-STD, FL-TOP add no noise"),
    (["--schemes", "FL-TOP", "--delta", "1e-6"], "--delta applies to DP schemes"),
    (["--rounds", "100000000000000000000"], "--rounds must be at most 2147483647"),
    (["--num-clients", "3000000000"], "--num-clients must be at most 2147483647"),
    (["--seed", "-1"], "--seed must be in [0, 2**63), got -1"),
    (["--seed", str(2 ** 64)], f"--seed must be in [0, 2**63), got {2 ** 64}"),
])
def test_bad_input_is_one_line_exit_2_in_process(args, needle, tmp_path, capsys):
  out = tmp_path / "out"
  assert sweep.main([*args, "--out", str(out)]) == 2
  err = capsys.readouterr().err
  lines = err.strip().splitlines()
  assert len(lines) == 1 and needle in lines[0] and lines[0].startswith("sweep.py: error: "), err
  assert not out.exists()


def test_an_unreachable_target_epsilon_is_one_line_and_leaves_no_folder(tmp_path, capsys):
  """No sigma up to 1e4 reaches epsilon 1e-9: found once the run's data is
  there (after --out is claimed), said in one line naming the flag, and the
  folders this command made for --out are removed (it was a traceback and an
  empty folder)."""
  out = tmp_path / "made" / "out"
  code = sweep.main(["--dataset", "medical-synth", "--rounds", "2", "--num-clients", "20",
                     "--clients-per-round", "5", "--local-steps", "1", "--test-size", "200",
                     "--quiet", "--schemes", "FL-STD-DP", "--target-epsilon", "1e-9",
                     "--out", str(out)])
  lines = capsys.readouterr().err.strip().splitlines()
  assert code == 2 and len(lines) == 1, lines
  assert lines[0] == ("sweep.py: error: --target-epsilon: no noise multiplier up to 1e4 "
                      "reaches epsilon 1e-09 for FL-STD-DP r=1")
  assert not (tmp_path / "made").exists()


@pytest.mark.parametrize("args,needle", [
    (["--dataset", "cifar"], "invalid choice: 'cifar'"),
    (["--partition", "dirichlet", "--dirichlet-alpha", "0"], "--dirichlet-alpha must be > 0"),
    (["--partition", "dirichlet"], "--partition dirichlet needs --dirichlet-alpha"),
    (["--dirichlet-alpha", "1"], "--dirichlet-alpha needs --partition dirichlet"),
    (["--partition", "shards", "--shards-per-client", "3"],
     "--samples-per-client (10) must be a multiple of --shards-per-client (3)"),
    (["--dataset", "mnist", "--partition", "shards", "--shards-per-client", "2",
      "--num-clients", "5001", "--samples-per-client", "12"],
     "num_clients * samples_per_client = 60012 exceeds the 60000 examples"),
    (["--dataset", "medical-synth", "--partition", "dirichlet", "--dirichlet-alpha", "1"],
     "split by hospital"),
    (["--dropout", "0.5"], "--dropout applies to the medical MLP"),
    (["--dataset", "medical-synth", "--dropout", "1.5"], "--dropout must be in [0, 1)"),
    (["--test-size", "10001"], "--test-size must be in [1, 10000] for fashion-mnist, got 10001"),
    (["--dataset", "medical-synth", "--public-size", "5"], "--public-size must be even"),
    (["--public-size", "60001"],
     "--public-size must be in [1, 60000] (drawn from the mnist training split), got 60001"),
    (["--schemes", "Fed-SMP-topk", "--public-holdout", "60000"],
     "--public-holdout must be in [1, 59999] (the training set less one), got 60000"),
    # One shard a client: an out-backdoor that takes class 0 leaves clients empty.
    (["--dataset", "mnist", "--partition", "shards", "--shards-per-client", "1",
      "--num-clients", "100", "--clients-per-round", "10", "--schemes", "FL-STD",
      "--attack", "out-backdoor", "--backdoor", "0:1", "--malicious-fraction", "0.1"],
     "--backdoor 0:1 leaves client 17 and 5 more without examples"),
])
def test_bad_data_flags_are_one_line_exit_2_in_process(args, needle, tmp_path, capsys):
  """The data flags' errors, through ``sweep.main`` (the subprocess
  tests above show that main's exit code and message are the script's)."""
  out = tmp_path / "out"
  assert sweep.main([*args, "--out", str(out)]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and needle in err[0] and err[0].startswith("sweep.py: error: ")
  assert not out.exists()


# A non-finite float flag would only train a non-finite model.
@pytest.mark.parametrize("args,message", [
    (["--noise-multiplier", "inf"], "--noise-multiplier must be a finite number, got inf"),
    (["--noise-multiplier", "nan"], "--noise-multiplier must be a finite number, got nan"),
    (["--noise-multiplier", "infinity"],
     "--noise-multiplier must be a finite number, got infinity"),
    (["--noise-multiplier=-inf"], "--noise-multiplier must be a finite number, got -inf"),
    (["--noise-multiplier", "-1"], "--noise-multiplier must be >= 0, got -1.0"),
    (["--lr", "nan"], "--lr must be a finite number, got nan"),
    (["--ratio", "0.01", "inf"], "--ratio must be a finite number, got inf"),
    (["--clip", "inf"], "--clip must be a finite number, got inf"),
    (["--delta", "nan"], "--delta must be a finite number, got nan"),
    (["--partition", "dirichlet", "--dirichlet-alpha", "inf"],
     "--dirichlet-alpha must be a finite number, got inf"),
    (["--gamma", "inf"], "--gamma must be a finite number, got inf"),  # a family's flag
    # Finite here, inf in float32 on the device (it trained a NaN model).
    (["--lr", "1e308"], "--lr must be at most 3.403e+38 in magnitude (float32), got 1e308"),
])
def test_non_finite_floats_are_refused(args, message, tmp_path, capsys):
  out = tmp_path / "out"
  assert sweep.main([*args, "--out", str(out)]) == 2
  assert capsys.readouterr().err.splitlines() == [f"sweep.py: error: {message}"]
  assert not out.exists()


def test_every_float_flag_refuses_nan_and_inf():
  """Each flag that parses a float (the families' own included) refuses
  the non-finite ones with the flag's one-line message."""
  floats = 0
  for action in sweep.build_parser()._actions:  # pylint: disable=protected-access
    if action.type is None or not action.option_strings:
      continue
    parsed = []
    for value in ("0.5", "1.5"):
      try:
        parsed.append(action.type(value))
      except (argparse.ArgumentTypeError, ValueError):
        pass
    if not any(isinstance(v, float) for v in parsed):
      continue  # an int, a choice or a string
    floats += 1
    for value in ("nan", "inf", "-inf", "Infinity"):
      with pytest.raises(argparse.ArgumentTypeError, match="must be a finite number"):
        action.type(value)
  assert floats >= 25


def test_a_batch_above_a_clients_examples_is_the_whole_client(tmp_path, capsys):
  """|B| >= a client's examples is full-batch training (docs/cli.md), not an
  error: Fed-SMP-topk's preset (|B| 10, |D_k| 9) relies on it, and
  medical-synth's class-balanced hospitals (here 2 to 6 patients of
  --samples-per-client 10) hold fewer than |B| = 10."""
  out = tmp_path / "res"
  code = sweep.main([
      "--dataset", "medical-synth", "--schemes", "FL-STD", "--rounds", "1",
      "--num-clients", "60", "--samples-per-client", "10", "--batch-size", "10",
      "--clients-per-round", "3", "--local-steps", "1", "--quiet", "--test-size", "100",
      "--out", str(out)])
  assert code == 0, capsys.readouterr().err
  run = json.loads((out / "results.json").read_text())["runs"][0]
  assert run["batch_size"] == 10 and run["samples_per_client"] == 10
  assert run["data_summary"]["size_max"] < 10 and run["best_accuracy"] >= 0
  fedsmp = sweep.resolve(sweep.build_parser().parse_args(["--schemes", "Fed-SMP-topk"])).runs
  assert fedsmp[0].setting["batch_size"] == 10 and fedsmp[0].setting["samples_per_client"] == 9


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
  code = sweep.main([
      "--ratio", "0.005", "--schemes", "fl-top-dp", "FL-STD", "--rounds", "2",
      "--num-clients", "120", "--clients-per-round", "8", "--out", str(out), "--quiet",
      "--test-size", "1000", "--plot"])
  assert code == 0
  for png in ("accuracy.png", "accuracy_vs_upstream.png"):
    assert (out / png).read_bytes()[:4] == b"\x89PNG"
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
  assert dp["data_summary"]["test_subset"] == 1000  # --test-size, said under the table
  assert "Accuracy on the first 1000 examples of the test set" in table
  csv_lines = (out / "results.csv").read_text().strip().splitlines()
  assert len(csv_lines) == 3 and csv_lines[0].startswith("dataset,scheme,ratio,best_accuracy")


def test_medical_synth_sweep_reports_balanced_accuracy_and_auroc(tmp_path, capsys,
                                                                 monkeypatch):
  """--dataset medical-synth: the medical MLP on the stand-in, selected by
  balanced accuracy with the AUROC of that round, labelled a synthetic
  stand-in and never set beside the thesis' medical figures."""
  monkeypatch.setenv("FEDJAX_DP_CACHE", str(tmp_path / "cache"))
  out = tmp_path / "res"
  code = sweep.main([
      "--dataset", "medical-synth", "--schemes", "FL-TOP-DP", "FL-STD-DP", "--ratio", "0.01",
      "--num-clients", "30", "--clients-per-round", "5", "--rounds", "2", "--local-steps", "2",
      "--test-size", "500", "--dropout", "0.5", "--out", str(out), "--quiet"])
  assert code == 0
  table = capsys.readouterr().out
  assert "synthetic stand-in" in table and "Balanced accuracy | AUROC" in table
  assert "(0." not in table  # no paper figure beside the stand-in's
  results = json.loads((out / "results.json").read_text())
  assert results["config"]["dataset"] == "medical-synth (synthetic stand-in)"
  for run in results["runs"]:
    assert run["num_params"] == 1_496_601 and run["selection_metric"] == "balanced_accuracy"
    best = max(run["history"], key=lambda h: (h["balanced_accuracy"], -h["round"]))
    assert run["best_round"] == best["round"] and run["auroc"] == best["auroc"]
    assert 0.0 <= run["balanced_accuracy"] <= 1.0 and 0.0 <= run["auroc"] <= 1.0
    # The preset's source, and the flags this short run moved it by.
    assert run["setting_source"].startswith("UAI Table 5, medical row, except ")
    assert "--rounds 2" in run["setting_source"]
    assert run["noise_multiplier"] == 1.49 and run["data_summary"]["size_min"] >= 2
    assert run["paper_source"] is None


def test_mnist_dirichlet_sweep_compares_with_thesis_table_4_1(tmp_path, capsys, tiny_model):
  """--dataset mnist with a Dirichlet split: the thesis' MNIST figure beside
  FL-STD's, the partition's label statistics in the record."""
  out = tmp_path / "res"
  code = sweep.main([
      "--dataset", "mnist", "--partition", "dirichlet", "--dirichlet-alpha", "0.1",
      "--schemes", "FL-STD", "--rounds", "1", "--num-clients", "100",
      "--clients-per-round", "4", "--out", str(out), "--quiet", "--test-size", "1000"])
  assert code == 0
  assert "| 100% | FL-STD |" in capsys.readouterr().out
  run = json.loads((out / "results.json").read_text())["runs"][0]
  assert run["paper_source"] == "thesis Table 4.1 (MNIST)"
  assert "(0.99)" in (out / "results.md").read_text()
  summary = run["data_summary"]
  assert summary["partition"] == "dirichlet" and summary["dirichlet_alpha"] == 0.1
  assert summary["tv_distance_mean"] > 0.4 and "balanced_accuracy" not in run


def test_sweep_with_a_robust_aggregator_records_the_rule(tmp_path, capsys, tiny_model):
  out = tmp_path / "res"
  code = sweep.main([
      "--schemes", "FL-STD", "--aggregator", "trimmed-mean", "--trim-fraction", "0.25",
      "--rounds", "1", "--num-clients", "100", "--clients-per-round", "8",
      "--out", str(out), "--quiet", "--test-size", "1000"])
  assert code == 0, capsys.readouterr().err
  run = json.loads((out / "results.json").read_text())["runs"][0]
  assert run["aggregator"] == {"name": "trimmed-mean", "trim": 0.25, "norm_bound": None}
  assert run["best_accuracy"] > 0.0


def test_the_record_says_where_each_runs_s_came_from(tmp_path, capsys, tiny_model):
  """The command line passes the S it was given; the run decides what applies
  (a sign vector's is fixed) and the record names it."""
  out = tmp_path / "res"
  code = sweep.main([
      "--schemes", "FL-STD-DP", "FL-SIGN-DP", "--clip", "0.5", "--rounds", "1",
      "--num-clients", "100", "--clients-per-round", "8", "--out", str(out), "--quiet",
      "--test-size", "1000"])
  assert code == 0, capsys.readouterr().err
  runs = {r["scheme"]: r for r in json.loads((out / "results.json").read_text())["runs"]}
  assert (runs["FL-STD-DP"]["clip_norm"], runs["FL-STD-DP"]["clip_source"]) == (0.5, "user")
  sign = runs["FL-SIGN-DP"]
  assert sign["clip_source"] == get_scheme("FL-SIGN-DP").traits.sensitivity_reason
  assert sign["clip_norm"] == pytest.approx(7850 ** 0.5)  # sqrt(n), not the given 0.5


def test_sweep_under_a_backdoor_attack_reports_its_metrics(tmp_path, capsys, tiny_model):
  out = tmp_path / "res"
  code = sweep.main([
      "--dataset", "mnist", "--schemes", "FL-STD", "--attack", "in-backdoor",
      "--malicious-fraction", "0.2", "--boost", "3", "--backdoor", "5:7",
      "--pool-training", "epochs",
      "--rounds", "1", "--num-clients", "50", "--clients-per-round", "10",
      "--out", str(out), "--quiet", "--test-size", "1000"])
  assert code == 0, capsys.readouterr().err
  run = json.loads((out / "results.json").read_text())["runs"][0]
  assert run["attack"]["kind"] == "in-backdoor" and run["attack"]["source"] == 5
  assert run["attack"]["target"] == 7 and run["attack"]["boost"] == 3
  assert 0 <= run["attack_accuracy"] <= 1 and 0 <= run["class_accuracy"] <= 1
  assert run["attack"]["selection"] == "cohort"  # the thesis' reading, the default
  assert run["attack"]["pool_training"] == "epochs"
  assert run["history"][0]["malicious_clients"] >= 0
  table = (out / "results.md").read_text()
  assert "| 100% | FL-STD | in-backdoor alpha=0.2 boost=3 5->7 pool-epochs |" in table
  csv_row = (out / "results.csv").read_text().splitlines()[1]
  assert "in-backdoor alpha=0.2 boost=3 5->7 pool-epochs" in csv_row


@pytest.mark.parametrize("out", ["/proc/fedjax_dp_test/out", "FILE/sub"])
def test_an_unwritable_out_stops_before_any_work(out, tmp_path, capsys, monkeypatch):
  """--out that cannot be written ends the sweep at once (exit 2, one line),
  before any data is loaded or any round run, and leaves no folder behind."""
  (tmp_path / "FILE").write_text("a file, not a folder")
  out = out.replace("FILE", str(tmp_path / "FILE"))
  monkeypatch.setattr(sweep, "load_data", lambda *a: pytest.fail("data loaded"))
  assert sweep.main(["--schemes", "FL-STD", "--rounds", "1", "--out", out]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and err[0].startswith(f"sweep.py: error: --out {out} cannot be written")
  assert not pathlib.Path("/proc/fedjax_dp_test").exists()


@pytest.mark.parametrize("name,folder,needle", [
    ("results.csv", True, "holds a folder results.csv where the sweep writes a file"),
    ("accuracy.png", True, "holds a folder accuracy.png where the sweep writes a file"),
    (runlock.NAME, True, f"holds a folder {runlock.NAME} where the sweep writes a file"),
    (".checkpoints", False, "holds a file .checkpoints where the sweep keeps its checkpoints"),
])
def test_an_out_holding_the_wrong_kind_of_entry_stops_before_any_work(
    name, folder, needle, tmp_path, capsys, monkeypatch):
  """A folder where the sweep writes a file (or a file where it keeps its
  checkpoints) failed after training with a traceback, half the results
  written: refused at once, in one line."""
  out = tmp_path / "res"
  out.mkdir()
  if folder:
    (out / name).mkdir()
  else:
    (out / name).write_text("")
  monkeypatch.setattr(sweep, "load_data", lambda *a: pytest.fail("data loaded"))
  assert sweep.main(["--schemes", "FL-STD", "--rounds", "1", "--out", str(out)]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert err == [f"sweep.py: error: --out {out} {needle}"]


def test_an_out_in_use_by_another_sweep_is_refused(tmp_path, capsys):
  """Two sweeps continuing one checkpoint would overwrite each other's saves:
  the second exits 2 with one line naming the first, writing nothing; once
  the first has ended the same command runs, and leaves no lock behind."""
  out = tmp_path / "res"
  argv = ["--dataset", "medical-synth", "--schemes", "FL-STD", "--rounds", "1",
          "--num-clients", "60", "--samples-per-client", "10", "--clients-per-round", "3",
          "--local-steps", "1", "--quiet", "--test-size", "100", "--out", str(out)]
  out.mkdir()
  with runlock.hold(out / runlock.NAME):  # as a sweep in another process holds it
    assert sweep.main(argv) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert err == [f"sweep.py: error: --out {out} is in use by another sweep (process "
                 f"{os.getpid()}): wait for it to end, or choose another --out"]
  assert list(out.iterdir()) == []
  assert sweep.main(argv) == 0
  assert sorted(p.name for p in out.iterdir()) == ["results.csv", "results.json", "results.md"]


def test_each_finished_run_is_written_at_once(tmp_path, capsys, monkeypatch, tiny_model):
  """A sweep interrupted during its second run keeps the first: results.*
  are written after every run, atomically."""
  out = tmp_path / "deep" / "res"
  calls = []
  real_run = sweep.simulation.run

  def run_then_interrupt(*args, **kwargs):
    calls.append(1)
    if len(calls) == 2:
      assert json.loads((out / "results.json").read_text())["runs"][0]["scheme"] == "FL-TOP"
      raise KeyboardInterrupt
    return real_run(*args, **kwargs)

  monkeypatch.setattr(sweep.simulation, "run", run_then_interrupt)
  code = sweep.main(["--schemes", "FL-STD", "FL-TOP", "--rounds", "1", "--num-clients",
                     "60", "--clients-per-round", "3", "--out", str(out), "--quiet",
                     "--test-size", "1000"])
  assert code == 130 and len(calls) == 2
  assert "the 1 finished runs are in" in capsys.readouterr().err
  runs = json.loads((out / "results.json").read_text())["runs"]
  assert [r["scheme"] for r in runs] == ["FL-TOP"]  # Table 1 order: FL-STD last
  assert len((out / "results.csv").read_text().strip().splitlines()) == 2
  assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporary files


def test_the_same_command_again_resumes_an_interrupted_sweep(tmp_path, capsys, monkeypatch):
  """Killed in its second run after one evaluation: the same command again
  keeps the first run's record, continues the second from its checkpoint,
  and ends with the records of an uninterrupted sweep."""
  argv = ["--dataset", "medical-synth", "--schemes", "FL-STD", "FL-TOP", "--rounds", "3",
          "--num-clients", "60", "--samples-per-client", "10", "--clients-per-round", "3",
          "--local-steps", "1", "--quiet", "--test-size", "100"]
  whole = tmp_path / "whole"
  assert sweep.main([*argv, "--out", str(whole)]) == 0
  out = tmp_path / "res"
  real_run = sweep.simulation.run
  calls = []

  def run_killed_in_second(*args, **kwargs):
    calls.append(kwargs["checkpoint"])
    if len(calls) == 2:
      evaluations = []

      def progress(rounds):
        evaluations.append(rounds)
        if len(evaluations) == 2:
          raise KeyboardInterrupt
      kwargs["progress"] = progress
    return real_run(*args, **kwargs)

  monkeypatch.setattr(sweep.simulation, "run", run_killed_in_second)
  assert sweep.main([*argv, "--out", str(out)]) == 130
  assert calls[1].exists()  # FL-STD's checkpoint after two rounds
  monkeypatch.setattr(sweep.simulation, "run", real_run)
  capsys.readouterr()
  assert sweep.main([*argv, "--out", str(out)]) == 0
  assert "resuming: 1 finished run kept" in capsys.readouterr().err
  got = json.loads((out / "results.json").read_text())["runs"]
  want = json.loads((whole / "results.json").read_text())["runs"]
  assert [r["scheme"] for r in got] == [r["scheme"] for r in want] == ["FL-TOP", "FL-STD"]
  for g, w in zip(got, want):
    assert g["history"] == w["history"] and g["best_accuracy"] == w["best_accuracy"]
  assert not calls[1].exists()


def test_sweep_with_an_audit_reports_empirical_beside_accountant_epsilon(tmp_path, capsys):
  out = tmp_path / "res"
  code = sweep.main([
      "--dataset", "medical-synth", "--schemes", "FL-TOP-DP", "--audit-canaries", "40",
      "--rounds", "2", "--num-clients", "200", "--samples-per-client", "10",
      "--clients-per-round", "20", "--local-steps", "1", "--out", str(out), "--quiet",
      "--test-size", "100"])
  assert code == 0, capsys.readouterr().err
  run = json.loads((out / "results.json").read_text())["runs"][0]
  audit = run["audit"]
  assert audit["inserted"] + audit["held_out"] == 80
  for model in ("final_model", "every_round"):
    assert audit[model]["empirical_epsilon"] >= 0 and audit[model]["epsilon_lower_bound"] >= 0
  assert run["empirical_epsilon"] == audit["final_model"]["empirical_epsilon"]
  table = (out / "results.md").read_text()
  assert "| empirical ε: final model | every round |" in table
  header = (out / "results.csv").read_text().splitlines()[0]
  assert header.endswith("empirical_epsilon,empirical_epsilon_every_round,"
                         "epsilon_lower_bound,epsilon_lower_bound_every_round")


def test_fl_sign_in_uai_setting_is_compared_with_table_4_4_and_says_which_flags_moved_it():
  """FL-SIGN's preset is thesis Table 8.1's (compared with Table 4.1); run in
  UAI Table 5's data setting by flags, its record names Table 4.4 and the
  flags that moved it off the preset, and the table prints Table 4.4's figure."""
  from fedjax_dp.cli import results as report  # pylint: disable=import-outside-toplevel
  from fedjax_dp.paper import results as paper_results  # pylint: disable=import-outside-toplevel
  parser = sweep.build_parser()
  (default,) = sweep.resolve(parser.parse_args(["--schemes", "FL-SIGN"])).runs
  (uai,) = sweep.resolve(parser.parse_args(
      ["--schemes", "FL-SIGN", "--num-clients", "6000", "--samples-per-client", "10",
       "--local-steps", "5", "--batch-size", "10", "--rounds", "200"])).runs
  source = lambda run: sweep.setting_source(run.scheme, "fashion-mnist", run.setting)
  assert source(default) == "thesis Table 8.1"
  assert source(uai) == ("thesis Table 8.1, except --local-steps 5, --num-clients 6000, "
                         "--rounds 200, --samples-per-client 10")
  figure = lambda run: paper_results.paper_source("FL-SIGN", 1.0, "fashion-mnist", run.setting)
  assert (figure(default), figure(uai)) == ("thesis Table 4.1", "thesis Table 4.4")
  record = {"scheme": "FL-SIGN", "ratio": 1.0, "dataset": "fashion-mnist", **uai.setting}
  assert report._paper(record, "round", "d") == "197"  # pylint: disable=protected-access
  assert report._paper({**record, **default.setting}, "round", "d") == "68"


def test_an_empty_out_is_refused_and_nothing_is_written(tmp_path, monkeypatch, capsys):
  """``--out ""`` once wrote results.* into the working folder."""
  monkeypatch.chdir(tmp_path)
  assert sweep.main(["--out", ""]) == 2
  assert capsys.readouterr().err.strip() == "sweep.py: error: --out must name a folder, got ''"
  assert list(tmp_path.iterdir()) == []
