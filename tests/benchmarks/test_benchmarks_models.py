"""benchmarks/models.py run as a user runs it, on a tiny cohort (as
tests/test_entry_points.py runs the other benchmarks), and the weight counts
of the models of fedjax_dp.models.zoo that it times."""

import json
import math
import os
import pathlib
import subprocess
import sys

import pytest

import benchmark_modules
from fedjax_dp.models import from_flax, zoo
from xla_env import xla_flags

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name, weights, classes", [
    ("mlp", 1_333_770, 10), ("small-cnn", 30_762, 10), ("svhn-cnn", 3_431_754, 10),
    ("lstm", 817_872, 80), ("all-cnn-c", 1_369_738, 10), ("imdb-cnn-lstm", 402_701, 1),
    ("emnist-cnn", 1_690_046, 62)])
def test_zoo_models_wrap_with_the_documented_weight_counts(name, weights, classes):
  constructor, sample = zoo.ZOO[name]
  loss = "sigmoid_ce" if classes == 1 else "softmax_ce"
  for fast in (True, False):
    model = from_flax(constructor(), sample, loss=loss, fast=fast)
    assert model.num_params == weights
  assert zoo.CharLSTM().vocab == 80 and zoo.ZOO["lstm"][1].dtype == "int32"


def _script(*args, timeout=300):
  # Two XLA CPU devices: the cohort goes through shard_clients' shard_map.
  env = dict(os.environ, XLA_FLAGS=xla_flags(2))
  return subprocess.run([sys.executable, "benchmarks/models.py", *map(str, args)], cwd=ROOT,
                        env=env, capture_output=True, text=True, timeout=timeout)


def test_models_benchmark_runs_small(tmp_path):
  """The models with code of their own in the benchmark, in one run (each
  interpreter costs about 4 s): 2 clients of 2 examples, one step. The LSTM's
  and the IMDB model's FLOPs are analytic, the EMNIST CNN's XLA's count; the
  IMDB model is binary (labels 0/1, tokens of its 5,000-word vocabulary). The
  MLP and the small CNN (about 20 s with their matmul measurements) and
  All-CNN-C (20 s more) run the EMNIST CNN's code path (XLA's count, softmax);
  their weights are checked above, their training in
  tests/models/test_zoo_models.py."""
  out = tmp_path / "models.jsonl"
  proc = _script("--clients", "2", "--samples", "2", "--batch-size", "2", "--steps", "1",
                 "--repeats", "1", "--models", "emnist-cnn,imdb-cnn-lstm,lstm",
                 "--json", "--out", out)
  assert proc.returncode == 0, proc.stderr
  rows = [json.loads(line) for line in proc.stdout.strip().splitlines()]
  assert [json.loads(line) for line in out.read_text().splitlines()] == rows
  # The benchmark's own order, whatever the order asked for; no paper CNN, no x_paper_cnn.
  assert [r["model"] for r in rows] == ["lstm", "imdb-cnn-lstm", "emnist-cnn"]
  by_name = {r["model"]: r for r in rows}
  assert {k: r["num_params"] for k, r in by_name.items()} == {
      "lstm": 817_872, "imdb-cnn-lstm": 402_701, "emnist-cnn": 1_690_046}
  for r in rows:
    assert r["fast"] and r["clients"] == 2 and r["steps"] == 1 and r["devices"] == 2
    assert r["x_paper_cnn"] is None
    for key in ("clients_per_sec", "seconds_per_cohort", "forward_flops_per_example",
                "train_gflops_per_sec", "matmul_gflops_per_sec", "fraction_of_matmul",
                "max_abs_update"):
      assert math.isfinite(r[key]) and r[key] > 0, (r["model"], key, r[key])
    assert r["compile_seconds"] >= 0
    assert math.isclose(r["clients_per_sec"] * r["seconds_per_cohort"], 2.0)
    assert r["train_flops_per_cohort"] == 3 * r["forward_flops_per_example"] * 1 * 2 * 2
  lstm = by_name["lstm"]
  assert lstm["classes"] == 80 and lstm["input_dtype"] == "int32"
  assert lstm["flops_source"].startswith("analytic")
  # All 80 positions counted: ~128 MFLOP an example, XLA's count of the loop ~1/80 of it.
  assert 1.2e8 < lstm["forward_flops_per_example"] < 1.35e8
  assert lstm["xla_forward_flops_per_example"] < lstm["forward_flops_per_example"] / 20
  assert {k: (r["classes"], r["loss"]) for k, r in by_name.items()
          if k in ("imdb-cnn-lstm", "emnist-cnn")} == {
      "imdb-cnn-lstm": (2, "sigmoid_ce"), "emnist-cnn": (62, "softmax_ce")}
  imdb = by_name["imdb-cnn-lstm"]
  assert imdb["input_shape"] == [400] and imdb["input_dtype"] == "int32"
  # Conv 49.5 M + bias/ReLU 0.2 M + pooling 0.07 M + LSTM 132 x 180,390 + output 141.
  assert imdb["flops_source"].startswith("analytic")
  assert imdb["forward_flops_per_example"] == 73_575_621
  assert imdb["xla_forward_flops_per_example"] < 0.7 * imdb["forward_flops_per_example"]
  emnist = by_name["emnist-cnn"]
  assert emnist["flops_source"] == "xla"
  assert 2e7 < emnist["forward_flops_per_example"] < 2.3e7, emnist


@pytest.mark.parametrize("args, says", [
    (["--models", "small-cnn,resnet"], "'resnet'"),
    (["--steps", "0"], "--steps must be > 0, got 0"),
    (["--clients", "many"], "--clients")])
def test_models_benchmark_bad_flags_exit_2_in_one_line(args, says, capsys):
  with pytest.raises(SystemExit) as exit_:
    benchmark_modules.load("models").main(args)
  lines = capsys.readouterr().err.strip().splitlines()
  assert exit_.value.code == 2 and len(lines) == 1, (args, lines)
  assert lines[0].startswith("benchmarks/models.py: error:") and says in lines[0]


def test_models_benchmark_keeps_going_past_a_failing_model_and_keeps_a_cut_run(
    tmp_path, monkeypatch, capsys):
  """The GPU suite's step: a model that crashes (as the LSTM did on jax 0.11)
  leaves an error record and the others run (exit 1); interrupted (the suite's
  deadline sends SIGINT), the run writes what it measured and exits 130; the
  file is rewritten after every model."""
  module = benchmark_modules.load("models")
  monkeypatch.setattr(module, "matmul_gflops", lambda mesh: 100.0)
  seen = []

  def fake(name, fast, mesh, args, matmul):
    seen.append(name)
    if name == "lstm":
      raise KeyError("num_consts")
    if name == "imdb-cnn-lstm":
      raise KeyboardInterrupt
    if name == "emnist-cnn":
      assert [json.loads(line)["model"] for line in open(out)] == [
          "paper-cnn", "mlp", "lstm"]  # on disk before the next model
    return {"model": name, "architecture": name, "seconds_per_cohort": 2.0 if name == "mlp"
            else 1.0, "train_gflops_per_sec": 10.0, "flops_source": "xla", "num_params": 1,
            "compile_seconds": 0.0, "clients_per_sec": 1.0, "fraction_of_matmul": None}

  monkeypatch.setattr(module, "measure", fake)
  out = tmp_path / "m.jsonl"
  assert module.main(["--models", "paper-cnn,mlp,lstm,emnist-cnn", "--json",
                      "--out", str(out)]) == 1
  rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
  assert [json.loads(line) for line in out.read_text().splitlines()] == rows
  assert [r["model"] for r in rows] == ["paper-cnn", "mlp", "lstm", "emnist-cnn"]
  assert rows[1]["x_paper_cnn"] == 2.0 and rows[1]["fraction_of_matmul"] == 0.1
  assert rows[2]["error"] == "KeyError: 'num_consts'" and "x_paper_cnn" not in rows[2]
  seen.clear()
  # Its file is another run's records now: refused, unless --overwrite (issue 62).
  with pytest.raises(SystemExit) as refused:
    module.main(["--models", "mlp", "--out", str(out)])
  err = capsys.readouterr().err.strip().splitlines()
  assert refused.value.code == 2 and err == [
      f"benchmarks/models.py: error: --out {out} exists (another run's records): choose "
      "another --out, or add --overwrite to replace it"] and seen == []
  assert module.main(["--models", "mlp,imdb-cnn-lstm,emnist-cnn", "--out", str(out),
                      "--overwrite"]) == 130
  assert seen == ["mlp", "imdb-cnn-lstm"]
  assert [json.loads(line)["model"] for line in out.read_text().splitlines()] == ["mlp"]
  captured = capsys.readouterr()
  assert "interrupted in imdb-cnn-lstm; writing the 1 record(s) measured" in captured.err
