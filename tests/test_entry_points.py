"""Documented entry points run as a user runs them: the example scheme, the
throughput benchmark (one scheme of every family, in-process on the tiny
model; the command line once on the paper CNN), the decoder benchmark, the
discrete Gaussian benchmark, the audit coverage benchmark and the Monte Carlo
accounting benchmark (small)."""

import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import pytest

import benchmark_modules
from fedjax_dp import schemes
from fedjax_dp.schemes import FAMILIES
from tiny_model import tiny_linear
from xla_env import xla_flags

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _script(*args, timeout=600):
  env = dict(os.environ, XLA_FLAGS=xla_flags(1))
  return subprocess.run([sys.executable, *map(str, args)], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=timeout)


def test_example_defines_registers_and_runs_a_new_scheme():
  proc = _script("experiments/examples/new_scheme.py", "--rounds", "3")
  assert proc.returncode == 0, proc.stderr
  out = json.loads(proc.stdout.strip().splitlines()[-1])
  assert out["scheme"] == "FedAvg-QSGD" and out["upstream_bits"] == 4
  assert out["best_accuracy"] > 0.6  # three blobs: learnt in 3 rounds


@pytest.mark.parametrize("levels", ["0", "-1", "100000000000"])
def test_example_refuses_bad_levels_in_one_line(levels, capsys, monkeypatch):
  """The example's main in this process (a fresh interpreter costs about 4 s);
  the scheme it registers is taken out of the registry again. --levels is
  checked before the scheme is registered (its traits' log2(2 levels + 1) was
  a math domain error at -1) and bounded (10**11 overflowed in the round)."""
  spec = importlib.util.spec_from_file_location(
      "new_scheme_example", ROOT / "experiments" / "examples" / "new_scheme.py")
  module = importlib.util.module_from_spec(spec)
  monkeypatch.setitem(sys.modules, spec.name, module)  # its dataclasses look it up
  spec.loader.exec_module(module)
  try:
    code, err = _exit_in_process(module.main, capsys, ["--levels", levels, "--rounds", "1"])
  finally:
    for registry in (schemes.SCHEMES, schemes.USER_FAMILY.schemes):
      registry.pop("FedAvg-QSGD", None)
  assert code == 2 and err.strip().count("\n") == 0, err
  assert f"--levels must be >= 1 and <= 2**24, got {levels}" in err
  assert "Traceback" not in err


# One scheme of every family, and two Gaussian DP schemes (FL-SIGN-DP's
# round, tables and all, runs in tests/schemes/test_sign_schemes.py and the golden
# records; here it would add ~30 s of compilation to the suite).
BENCH_SCHEMES = [next(iter(f.schemes)) for f in FAMILIES] + ["FL-TOP-DP", "FL-CS-DP"]
# FL-TOP-DP's case runs with banded noise over cyclic cohorts (--noise banded
# --cycle-length 2): the same compilations, one case fewer than its own test.
BENCH_NOISE = {"FL-TOP-DP": ("banded", None, None, 2)}


@pytest.mark.parametrize("name", BENCH_SCHEMES)
def test_throughput_measures_every_family(name, small_federation):
  data, (test_x, _), public = small_federation
  module = benchmark_modules.load("throughput")
  noise_case = module.NoiseCase(*BENCH_NOISE.get(name, ()))
  rec = module.measure(
      tiny_linear(), name, data, test_x[:500], public, clients=4, ratio=0.05, repeats=1,
      devices=1, noise_case=noise_case)
  assert rec["scheme"] == name and rec["clients_per_sec"] > 0
  assert not rec["recompiled"]
  assert all(v is None or v >= 0 for v in rec["seconds"].values())
  if name in BENCH_NOISE:  # the record says what ran: 2 bands over 2 cyclic groups
    assert (rec["noise"], rec["sampler"], rec["cycle_length"], rec["min_separation"]) == (
        "banded-2", "poisson", 2, 2)
    assert rec["slots"] >= 4
  else:
    assert (rec["noise"], rec["sampler"], rec["min_separation"]) == (
        "independent", "fixed", None)


def test_throughput_privacy_stage_adds_the_correlated_noise(small_federation):
  """The privacy stage of a round with correlated noise is the clipped sum plus
  the feature's S sigma (C^-1 z)_t (its begin and total hooks): the noise's
  cost is timed where independent noise's is. Banded noise of 2 bands (C^-1
  not the identity) through the same feature and hooks as BLT: a BLT strategy's
  optimisation took 15-20 of the test's 21 s; BLT's stream is checked in
  tests/features/test_correlated_noise.py."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  from fedjax_dp import simulation  # pylint: disable=import-outside-toplevel
  data, _, public = small_federation
  module, model = benchmark_modules.load("throughput"), tiny_linear()
  # 2 bands need a client's rounds 2 apart: cyclic Poisson over 2 groups.
  state, plan = module.prepared_round(model, "FL-STD-DP", data, public, 4, 1.0, 1, rounds=3,
                                      noise_case=module.NoiseCase("banded", cycle_length=2))
  t = jnp.int32(2)
  messages, privacy, _ = module.stage_fns(model, plan, plan.run_key, t)
  msgs = messages(state, data)
  inputs = simulation.round_inputs(plan, state, plan.run_key, t)
  clipped = jax.vmap(lambda m: m * jnp.minimum(1.0, plan.clip_norm / jnp.linalg.norm(m)))(msgs)
  which = [f.kind for f in plan.features].index("correlated_noise")
  added = plan.clip_norm * plan.noise_multiplier * inputs.features[which].noise
  assert float(jnp.linalg.norm(added)) > 1.0
  real = jnp.where(inputs.cohort.mask[:, None], clipped, 0.0).sum(0)
  np.testing.assert_allclose(privacy(state, msgs), real + added, atol=1e-4)


def test_throughput_privacy_stage_draws_the_noise_as_the_round_does(small_federation):
  """FL-STD-DP's privacy stage is the clipped sum plus the shares' sum drawn
  once (``Plan.noise_once``) from the round's own key, as in the round."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  from fedjax_dp import simulation  # pylint: disable=import-outside-toplevel
  from fedjax_dp.privacy import noise  # pylint: disable=import-outside-toplevel
  data, _, public = small_federation
  module, model = benchmark_modules.load("throughput"), tiny_linear()
  state, plan = module.prepared_round(model, "FL-STD-DP", data, public, 4, 1.0, 1, rounds=3)
  assert plan.noise_once
  t = jnp.int32(2)
  messages, privacy, _ = module.stage_fns(model, plan, plan.run_key, t)
  msgs = messages(state, data)
  inputs = simulation.round_inputs(plan, state, plan.run_key, t)
  mask = inputs.cohort.mask
  clipped = jax.vmap(lambda m: m * jnp.minimum(1.0, plan.clip_norm / jnp.linalg.norm(m)))(msgs)
  real = jnp.where(mask[:, None], clipped, 0.0).sum(0)
  added = noise.aggregate_noise(inputs.keys.aggregate_noise, real.shape, plan.clip_norm,
                                plan.noise_multiplier, jnp.sum(mask), jnp.sum(mask))
  assert float(jnp.linalg.norm(added)) > 1.0
  np.testing.assert_allclose(privacy(state, msgs), real + added, atol=1e-4)


def _fake_torch(module, monkeypatch, calls, oom_chunk=None):
  """torch_loop and torch_func replaced by counters (torch is an optional extra)."""
  info = {"version": "fake", "device": "cpu", "device_name": "cpu", "tf32": False}

  def fake_loop(model, w, x, y, steps, batch_size, lr, clients=None):
    assert x.shape[0] == y.shape[0] and 0.0 <= x.min() and x.max() <= 1.0
    assert (steps, batch_size, lr) == (5, 10, 0.215)
    return lambda: calls.append(("loop", clients)), 1e-6

  def fake_func(model, w, x, y, steps, batch_size, lr, chunk):
    def run():
      if chunk == oom_chunk:
        raise RuntimeError("CUDA out of memory. Tried to allocate 40.00 GiB")
      calls.append(("func", chunk))
    return run, 2e-6, info

  monkeypatch.setattr(module, "torch_loop", fake_loop)
  monkeypatch.setattr(module, "torch_func", fake_func)
  monkeypatch.setattr(module, "torch_settings", lambda: info)


def test_throughput_alternates_the_round_with_pytorch(small_federation, monkeypatch):
  """PyTorch beside the round: the loop (on its first clients) and torch.func at
  each chunk get round 1's cohort in [0, 1], are warmed up, then timed once per
  repeat; a chunk above the cohort is the cohort, duplicates run once; the
  record gives our clients/s over each."""
  data, (test_x, _), public = small_federation
  module, calls = benchmark_modules.load("throughput"), []
  _fake_torch(module, monkeypatch, calls)
  rec = module.measure(tiny_linear(), "FL-STD", data, test_x[:500], public, clients=4,
                       ratio=1.0, repeats=2, devices=1, torch=True,
                       torch_func_chunks=(2, 128, None), torch_loop_clients=3)
  assert calls == [("loop", 3), ("func", 2), ("func", 4)] * 3  # warm-up and two repeats
  assert rec["torch_loop_clients"] == 3 and rec["torch_max_logit_diff"] == 1e-6
  assert rec["torch_loop_clients_per_sec"] > 0
  assert rec["ratio_to_torch"] == pytest.approx(
      rec["clients_per_sec"] / rec["torch_loop_clients_per_sec"])
  assert [(f["mode"], f["chunk"], f["clients"]) for f in rec["torch_func"]] == [
      ("torch.func vmap", 2, 4), ("torch.func vmap", 4, 4)]
  best = max(f["clients_per_sec"] for f in rec["torch_func"])
  assert rec["torch_func_clients_per_sec"] == best
  assert rec["ratio_to_torch_func"] == pytest.approx(rec["clients_per_sec"] / best)
  assert rec["train_ratio_to_torch_func"] == pytest.approx(rec["train_clients_per_sec"] / best)
  assert rec["torch"]["tf32"] is False and rec["torch"]["loop_error"] is None
  assert rec["seconds"]["torch_loop"] == pytest.approx(3 / rec["torch_loop_clients_per_sec"])


def test_throughput_records_a_torch_func_chunk_out_of_memory(small_federation, monkeypatch):
  """A chunk PyTorch cannot hold is recorded as such; the rest is still timed."""
  data, (test_x, _), public = small_federation
  module, calls = benchmark_modules.load("throughput"), []
  _fake_torch(module, monkeypatch, calls, oom_chunk=4)
  rec = module.measure(tiny_linear(), "FL-STD", data, test_x[:500], public, clients=4,
                       ratio=1.0, repeats=1, devices=1, torch=True,
                       torch_func_chunks=(1, None), torch_loop_clients=0, evaluate=False)
  assert calls == [("func", 1)] * 2
  assert rec["torch_func"][1] == {"mode": "torch.func vmap", "chunk": 4, "clients": 4,
                                  "clients_per_sec": None, "seconds": None,
                                  "error": "out of memory"}
  assert rec["torch_func_clients_per_sec"] == rec["torch_func"][0]["clients_per_sec"] > 0
  assert rec["torch_loop_clients_per_sec"] is None and rec["ratio_to_torch"] is None
  assert rec["seconds"]["evaluation"] is None and rec["evaluation_images"] is None


def test_torch_func_computes_the_loops_updates(cnn, small_federation):
  """torch.func (functional_call + grad + vmap, in chunks) sums the same updates as
  the per-client loop: with a batch of all 10 examples every step's gradient is
  the same whatever the order the two draw them in. The paper CNN, 3 real
  clients, 2 steps, on the CPU. (The two differ by float32 rounding, which
  can flip a max-pooling window whose two largest inputs nearly tie and so
  move a convolution's gradient by a few percent: random uniform images do
  that; the real ones, here, stay within 1e-4 of the largest update.)"""
  pytest.importorskip("torch")
  import jax  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  module = benchmark_modules.load("throughput")
  data, _, _ = small_federation
  x = np.asarray(data.x[:3], np.float32) / 255.0
  y = np.asarray(data.y[:3])
  w0 = cnn.init(jax.random.PRNGKey(0))
  loop, agree = module.torch_loop(cnn, w0, x, y, 2, 10, 0.215)
  expected = [t.numpy() for t in loop()]
  assert agree < 1e-4 and len(expected) == 8
  for chunk in (2, 3):
    run, agree_func, settings = module.torch_func(cnn, w0, x, y, 2, 10, 0.215, chunk=chunk)
    assert agree_func == agree and settings["device"] == "cpu" and not settings["tf32"]
    for got, want in zip(run(), expected):
      np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=1e-4 * np.abs(want).max())
  # One step of one client: the update is -lr x the gradient of its 10 examples.
  one, _ = module.torch_loop(cnn, w0, x, y, 1, 10, 0.215, clients=1)
  first, _, _ = module.torch_func(cnn, w0, x[:1], y[:1], 1, 10, 0.215, chunk=1)
  for got, want in zip(one(), first()):
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=0,
                               atol=1e-5 * np.abs(want.numpy()).max())


def test_throughput_command_line_with_pytorch(tmp_path):
  """The command the GPU suite's first step runs, tiny, on the CPU: the round
  beside the loop and torch.func, the ratios in the words and the record."""
  pytest.importorskip("torch")
  out = tmp_path / "r.jsonl"
  proc = _script("benchmarks/throughput.py", "--scheme", "FL-STD", "--clients-per-round", "2",
                 "--repeats", "1", "--torch-func", "1,all", "--torch-loop-clients", "1",
                 "--no-eval", "--split-max-clients", "0", "--out", out)
  assert proc.returncode == 0, proc.stderr
  assert "PyTorch torch.func vmap, 1 clients at a time:" in proc.stdout
  assert "PyTorch per-client loop (1 clients)" in proc.stdout
  assert "JAX/torch.func (its best chunk)" in proc.stdout and "TF32 off" in proc.stdout
  rec = json.loads(out.read_text())
  assert [(f["mode"], f["chunk"]) for f in rec["torch_func"]] == [
      ("torch.func vmap", 1), ("torch.func vmap", 2)]
  assert rec["ratio_to_torch_func"] > 0 and rec["torch_loop_clients"] == 1
  assert rec["ratio_to_torch"] > 0 and rec["train_ratio_to_torch_func"] is None
  assert rec["torch"]["device"] == "cpu" and rec["torch_max_logit_diff"] < 1e-4


def _exit_in_process(main, capsys, *argv) -> tuple[int, str]:
  """A script's ``main`` refusing its flags in this process (a fresh interpreter
  costs about 4 s): (exit code, stderr). A traceback would raise here."""
  try:
    code = main(*argv)
  except SystemExit as exit_:
    code = exit_.code
  return code, capsys.readouterr().err


def test_throughput_command_line_on_the_paper_cnn(capsys, monkeypatch):
  """The script's main in this process, on its one CPU device (the script runs
  as a user runs it in test_throughput_command_line_with_pytorch; an
  interpreter and the data's load cost 5-8 s in the suite). Its evaluation
  on the first 500 test images: the same jitted evaluation, FLOP count and
  timing as on all 10,000, whose two passes took 10 of the test's 25 s."""
  module = benchmark_modules.load("throughput")
  load = module.load_paper_data

  def first_500_test_images(*args):
    data, test_x, test_y = load(*args)
    return data, test_x[:500], test_y[:500]

  monkeypatch.setattr(module, "load_paper_data", first_500_test_images)
  main = module.main
  assert main(["--scheme", "FL-TOP-DP", "--clients-per-round", "4", "--repeats", "1",
               "--no-torch", "--json"]) is None  # the script's exit status 0
  rec = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
  assert rec["clients_per_round"] == 4 and rec["clients_per_sec"] > 0
  code, err = _exit_in_process(main, capsys, ["--scheme", "FL-NOPE", "--no-torch"])
  assert code == 2 and "unknown scheme" in err
  assert "Traceback" not in err


def test_throughput_summary_compares_schemes_with_fl_std(capsys):
  """Several schemes in one run: a record each, then the table against FL-STD's
  round of the same cohort."""
  module = benchmark_modules.load("throughput")
  fake = lambda name, clients, round_s: {
      "scheme": name, "clients_per_sec": 10.0, "clients_per_round": clients,
      "model": "paper-cnn", "cohort_batching": "auto",
      "seconds": {"round": round_s, "local_training": None if clients > 10 else 1.0,
                  "privacy_sum": 0.5, "compile": 4.0}}
  module._summary([fake("FL-STD", 10, 2.0), fake("FL-SIGN-DP", 10, 3.0),
                   fake("FL-STD", 100, 4.0), fake("FL-SIGN-DP", 100, 5.0)])
  out = capsys.readouterr().out.splitlines()
  assert out[-3].split()[:4] == ["FL-SIGN-DP", "10", "3.00", "1.50"]
  assert out[-1].split()[:4] == ["FL-SIGN-DP", "100", "5.00", "1.25"]


def test_throughput_without_the_split_and_with_a_profile(small_federation, tmp_path):
  """A large cohort's record has no stage times (the split would hold every
  update at once); the profile is a trace of one more round."""
  data, (test_x, _), public = small_federation
  rec = benchmark_modules.load("throughput").measure(
      tiny_linear(), "FL-STD-DP", data, test_x[:500], public, clients=4, ratio=1.0,
      repeats=1, devices=1, split=False, profile=str(tmp_path / "trace"))
  assert rec["seconds"]["local_training"] is None and rec["train_clients_per_sec"] is None
  assert rec["clients_per_sec"] > 0 and rec["cohort_batching"] == "auto"
  assert rec["evaluation_images"] == 500 and rec["forward_flops_per_example"] > 0
  assert list((tmp_path / "trace").rglob("*.xplane.pb"))
  # Beside it the module that ran, by which trace_summary.py reads its ops.
  traces = benchmark_modules.load("trace_summary")
  ops = traces.parse_hlo((tmp_path / "trace/round.hlo.txt").read_text())
  s = traces.summarize_cpu(traces.load(tmp_path / "trace"), ops)
  assert s["ops"] > 0 and s["cpu_ms"] > 0
  assert any(r["role"] == "matrix product" and r["gflop"] > 0 for r in s["roles"]), s["roles"]


def test_throughput_flops_are_counted_before_the_backend_compiles(cnn):
  """XLA's count of the paper CNN's forward pass, lowered (a GPU backend's
  compiled count misses the convolutions it hands to cuDNN): 2 x the
  multiply-adds that touch the image, the 'same' padding's border excluded."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  common = benchmark_modules.load("common")
  flops = common.lowered_flops(jax.jit(cnn.predict), cnn.init(jax.random.PRNGKey(0)),
                               jnp.zeros((2, 28, 28, 1)))
  dense = 2 * (3136 * 512 + 512 * 10)
  convs = 2 * (28 * 28 * 32 * 25 + 14 * 14 * 64 * 25 * 32)  # with the padding's zeros
  assert 0.8 * (dense + convs) < flops / 2 < dense + convs


@pytest.mark.parametrize("args, says", [
    (["--batching", "map,loop"], "unknown batching loop"),
    (["--model", "resnet"], "unknown model resnet"),
    (["--clients-per-round", "100,0"], "expected positive integers"),
    (["--client-chunk", "0", "--no-torch", "--clients-per-round", "2"],
     "--client-chunk must be > 0, got 0"),  # was the config's, after the data loaded
    (["--torch-func", "128,0"], "expected positive integers or 'all'"),
    (["--torch-loop-clients", "-1"], "expected a count >= 0 or 'all'"),
    (["--noise", "independent,gaussian"], "unknown noise gaussian"),
    (["--noise", "banded", "--bands", "4"], "--bands 4 needs a client's participations 4"),
    (["--noise", "blt", "--bands", "2", "--cycle-length", "2"], "--bands needs --noise banded"),
    (["--min-separation", "2", "--cycle-length", "2"], "--min-separation needs --noise"),
    (["--noise", "blt", "--min-separation", "3", "--cycle-length", "2"],
     "set --cycle-length 3"),
    (["--cycle-length", "0"], "expected a positive integer"),
    # At parse time, naming the flag (was "min() arg is an empty sequence" after
    # the data loaded and the round compiled).
    (["--repeats", "0"], "argument --repeats: expected a positive integer: '0'"),
    (["--rounds-per-call", "0"], "argument --rounds-per-call: expected a positive integer")])
def test_throughput_bad_flags_exit_2_in_one_line(args, says, capsys):
  with pytest.raises(SystemExit) as exit_:
    benchmark_modules.load("throughput").main(args)
  assert exit_.value.code == 2
  lines = capsys.readouterr().err.strip().splitlines()
  assert len(lines) == 1 and says in lines[0], lines


@pytest.mark.parametrize("name, argv, says", [
    # An --out that cannot take the records is refused before anything is timed.
    ("throughput", ["--out", "/nonexistent/t.jsonl"], "--out: folder '/nonexistent' does not"),
    ("peers", ["--out", "."], "--out . is a folder; give a file"),
    ("models", ["--out", "/nonexistent/m.jsonl"], "--out: folder '/nonexistent' does not"),
    # argparse's own errors, one line without its usage block.
    ("monte_carlo", ["--rate", "nan"], "--rate must be in (0, 1], got nan"),
    ("monte_carlo", ["--rounds", "x"], "argument --rounds: invalid int value: 'x'"),
    ("processes", ["--repeats", "x"], "--repeats takes an int, got 'x'"),
    # Before the data and the workers (a layout timed out after 0 seconds, exit 1).
    ("processes", ["--timeout", "0"], "--timeout must be > 0, got 0"),
    ("cs_decoder", ["--bogus"], "unrecognized arguments: --bogus"),
    ("discrete_gaussian", ["--bogus"], "unrecognized arguments: --bogus"),
    ("local_training", ["--bogus"], "unrecognized arguments: --bogus")])
def test_benchmark_argument_errors_are_one_line_exit_2(name, argv, says, capsys, monkeypatch):
  monkeypatch.setattr(sys, "argv", [f"{name}.py", *argv])  # as the script reads them
  with pytest.raises(SystemExit) as exit_:
    benchmark_modules.load(name).main()
  assert exit_.value.code == 2
  lines = capsys.readouterr().err.strip().splitlines()
  assert len(lines) == 1 and says in lines[0] and "error: " in lines[0], lines


def test_gpu_suite_commands_parse(tmp_path):
  """benchmarks/gpu_suite.sh, dry run: every benchmark command it would run
  on the device is a valid command line of its script, and the cases the
  issues ask for are there (the suite itself: tests/benchmarks/test_benchmarks_gpu_suite.py)."""
  env = dict(os.environ, GPU_SUITE_DRY_RUN="1", OUT=str(tmp_path))
  proc = subprocess.run(["bash", "benchmarks/gpu_suite.sh", "run"], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=60)
  assert proc.returncode == 0, proc.stderr
  commands = [line.split()[1:] for line in proc.stdout.splitlines()
              if line.startswith("      ") and "benchmarks/throughput.py" in line]
  commands = [c[c.index("benchmarks/throughput.py") + 1:] for c in commands]
  assert len(commands) == 7
  module = benchmark_modules.load("throughput")
  runs = [module.parse_args(c) for c in commands]
  schemes = {n for r in runs for n in r.scheme.split(",")}
  assert {"FL-STD", "FL-TOP-DP", "FL-STD-DP", "FL-SIGN-DP", "FL-CS-DP"} <= schemes
  assert {1000, 10000} <= {c for r in runs for c in r.clients_per_round}
  assert {"map", "vmap", "product"} <= {b for r in runs for b in r.batching}
  assert any("paper-cnn-flax" in r.model for r in runs)
  first = runs[0]  # the most telling first: the round at 1,000 beside PyTorch, profiled
  assert first.scheme == "FL-STD-DP,FL-TOP-DP" and first.clients_per_round == [1000]
  assert not first.no_torch and first.torch_func == [128, None] and first.profile
  assert first.torch_loop_clients == 50
  assert all(r.no_torch for r in runs[1:]) and all(r.out == runs[0].out for r in runs)
  assert any(r.client_chunk == 1000 for r in runs)  # 1,000 clients in one piece
  usage = subprocess.run(["bash", "benchmarks/gpu_suite.sh"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
  assert usage.returncode == 2 and "usage" in usage.stderr


def _json_lines(capsys) -> list[dict]:
  return [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]


# The benchmarks below run through their ``main`` in this process (what the
# script runs; a fresh interpreter costs about 4 s), on its one CPU device.
def test_discrete_gaussian_benchmark_runs_small(capsys, monkeypatch):
  module = benchmark_modules.load("discrete_gaussian")
  monkeypatch.setattr(sys, "argv", ["benchmarks/discrete_gaussian.py", "--size", "20000",
                                    "--repeats", "1", "--scales", "3.5", "--no-paper-vector",
                                    "--json"])
  assert module.main() is None  # the script's exit status 0
  rows = _json_lines(capsys)
  assert [(r["case"], r["sampler"]) for r in rows] == [
      ("DG(0, 3.5)", "table"), ("DG(0, 3.5)", "rejection"),
      ("jax.random.normal", "continuous"), ("threefry uint32 words", "bits")]
  assert all(r["samples_per_s"] > 0 for r in rows)
  assert rows[0]["table_build_s"] >= 0 and rows[1]["table_build_s"] is None
  monkeypatch.setattr(sys, "argv", ["benchmarks/discrete_gaussian.py", "--scales", "-1"])
  code, err = _exit_in_process(module.main, capsys)
  assert code == 2 and "--scales" in err and "Traceback" not in err


def test_cs_decoder_benchmark_runs_small(capsys):
  assert benchmark_modules.load("cs_decoder").main([
      "--num-params", "5000", "--chunks", "10", "--iters", "5", "--repeats", "1",
      "--json"]) == 0
  rec = _json_lines(capsys)[-1]
  assert rec["num_params"] == 5000 and rec["chunks"] == 10


@pytest.mark.parametrize("argv, says", [
    (["--repeats", "0"], "--repeats must be > 0, got 0"),  # was a ZeroDivisionError
    (["--iters", "0"], "--iters must be > 0, got 0"),
    (["--num-params", "0"], "--num-params must be > 0, got 0"),
    (["--num-params", str(2 ** 31)], "--num-params must be at most 2147483647"),
    (["--chunks", "0"], "--chunks must be > 0, got 0"),
    (["--chunks", "5001"], "--chunks 5001 exceeds --num-params 5000"),
    (["--ratio", "nan"], "--ratio must be in (0, 1], got nan"),
    (["--ratio", "1.5"], "--ratio must be in (0, 1], got 1.5"),
    (["--tol", "inf"], "--tol must be finite and >= 0, got inf"),
    (["--lam", "-1"], "--lam must be finite and >= 0, got -1.0"),
    (["--spikes", "nan"], "--spikes must be in (0, 1]"),  # was a ValueError traceback
    (["--spikes", "-1"], "--spikes must be in (0, 1]"),  # was accepted (one spike)
    (["--spikes", "2"], "--spikes must be in (0, 1]"),
    (["--seed", "-1"], "--seed must be in [0, 2**63), got -1"),  # was a ValueError traceback
    (["--seed", str(2 ** 63)], "--seed must be in [0, 2**63)")])
def test_cs_decoder_refuses_a_numeric_flag_out_of_range(argv, says, capsys, monkeypatch):
  """Every numeric flag's range, up front in one line: the operator is never built."""
  module = benchmark_modules.load("cs_decoder")
  monkeypatch.setattr(module.dct_cs, "make_operator",
                      lambda *a, **k: pytest.fail("the operator was built"))
  code, err = _exit_in_process(module.main, capsys, ["--num-params", "5000", "--chunks", "10",
                                                     *argv])
  lines = err.strip().splitlines()
  assert code == 2 and len(lines) == 1 and says in lines[0], err
  assert lines[0].startswith("cs_decoder.py: error: ")


def test_audit_coverage_benchmark_runs_small(capsys, tmp_path):
  module = benchmark_modules.load("audit_coverage")
  out = tmp_path / "coverage.json"
  assert module.main(["--mus", "1", "--draws", "3", "--candidates", "200", "--samples", "50",
                      "--out", str(out)]) == 0
  table = capsys.readouterr().out
  assert "| 1 | 4.38 | 3 |" in table and "basic (reported)" in table
  rec = json.loads(out.read_text())
  assert rec["draws"] == 3 and rec["bootstrap_samples"] == 50
  (row,) = rec["results"]
  assert set(row["intervals"]) == {"interval", "percentile_interval"}
  for summary in row["intervals"].values():
    low, high = summary["coverage_ci95"]
    assert 0 <= low <= summary["coverage"] <= high <= 1
    assert summary["covers"] == round(3 * summary["coverage"])
    assert summary["above"] + summary["below"] + summary["coverage"] == pytest.approx(1)
  assert len(row["per_draw"]["interval"]) == 3
  code, err = _exit_in_process(module.main, capsys, ["--mus", "0,1"])
  assert code == 2 and err.count("\n") == 1 and "--mus" in err and "Traceback" not in err
  # The record is this run's: another run into it is refused, unless --overwrite.
  written = out.read_bytes()
  code, err = _exit_in_process(module.main, capsys, ["--mus", "1", "--draws", "1", "--out",
                                                     str(out)])
  assert code == 2 and err == (f"audit_coverage.py: error: --out {out} exists (another "
                               "run's record): choose another --out, or add --overwrite "
                               "to replace it\n") and out.read_bytes() == written
  assert module.main(["--mus", "1", "--draws", "2", "--candidates", "200", "--samples", "50",
                      "--out", str(out), "--overwrite", "--json"]) == 0
  assert json.loads(out.read_text())["draws"] == 2


@pytest.mark.parametrize("where, extra, says", [
    ("nodir/coverage.json", [], "--out: folder '{tmp}/nodir' does not exist"),
    ("folder", [], "--out {tmp}/folder is a folder; give a file"),
    ("folder", ["--overwrite"], "--out {tmp}/folder is a folder; give a file")])
def test_audit_coverage_refuses_an_unwritable_out_before_measuring(where, extra, says, tmp_path,
                                                                   capsys, monkeypatch):
  """A missing folder was a FileNotFoundError after the draws, a folder an
  IsADirectoryError with --overwrite and "exists (another run's record)"
  without; now one line before anything is drawn, nothing written."""
  module = benchmark_modules.load("audit_coverage")
  monkeypatch.setattr(module, "measure", lambda *a: pytest.fail("measured"))
  (tmp_path / "folder").mkdir()
  before = sorted(p.name for p in tmp_path.rglob("*"))
  code, err = _exit_in_process(module.main, capsys, [
      "--mus", "1", "--draws", "2", "--candidates", "10", "--samples", "10",
      "--out", str(tmp_path / where), *extra])
  lines = err.strip().splitlines()
  assert code == 2 and len(lines) == 1, err
  assert lines[0] == "audit_coverage.py: error: " + says.format(tmp=tmp_path)
  assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing written


def test_local_training_benchmark_runs_small(capsys):
  module = benchmark_modules.load("local_training")
  assert module.main(["--clients", "2", "--steps", "3", "--samples", "20", "--repeats", "1",
                      "--json"]) == 0
  rec = _json_lines(capsys)[-1]
  forms = rec["forms"]
  assert set(forms) == {"factored", "per-client"} and rec["history_rows"] == 30
  assert forms["factored"]["time_over_factored"] == 1.0
  assert forms["per-client"]["max_abs_diff_from_factored"] < 1e-3 * rec["max_abs_update"]
  code, err = _exit_in_process(module.main, capsys, ["--steps", "0"])
  assert code == 2 and "--steps" in err and "Traceback" not in err


def test_masked_gradients_benchmark_runs_small(capsys):
  """The gathered weight-gradient entries equal the whole gradient's there
  (float32 round-off over 1,960 products each)."""
  module = benchmark_modules.load("masked_gradients")
  assert module.main(["--clients", "1", "--entries", "50", "--repeats", "1", "--json"]) == 0
  rec = _json_lines(capsys)[-1]
  assert {"forward", "input_grad", "weight_grad", "gathered_50"} <= set(rec["seconds"])
  assert 0 <= rec["max_abs_diff"]["gathered_50"] < 1e-2
  code, err = _exit_in_process(module.main, capsys, ["--entries", "51201"])
  assert code == 2 and err.count("\n") == 1 and "--entries" in err


@pytest.mark.parametrize("name, argv", [("throughput", ["--no-torch"]), ("processes", [])])
def test_benchmarks_without_data_end_in_one_line_exit_2(name, argv, tmp_path, capsys,
                                                        monkeypatch):
  """Through the script's main, in this process, its parsed arrays set aside
  (a fresh interpreter costs about 4 s)."""
  from fedjax_dp.data import idx  # pylint: disable=import-outside-toplevel
  monkeypatch.setenv("FEDJAX_DP_DATA", str(tmp_path / "nowhere"))
  monkeypatch.setenv("FEDJAX_DP_CACHE", str(tmp_path / "cache"))
  monkeypatch.setenv("FEDJAX_DP_NO_DOWNLOAD", "1")
  monkeypatch.setattr(idx, "_ARRAY_CACHE", {})
  monkeypatch.setattr(sys, "argv", [f"benchmarks/{name}.py", *argv])
  code, err = _exit_in_process(benchmark_modules.load(name).main, capsys)
  lines = err.strip().splitlines()
  assert code == 2 and len(lines) == 1, err[-3000:]
  assert "not found" in lines[0] and "FEDJAX_DP_DATA" in lines[0]


@pytest.mark.parametrize("argv, says", [
    (["--scheme", "FL-NOPE"], "unknown scheme 'FL-NOPE'"),
    (["--ratio", "2"], "ratio must be in (0, 1], got 2.0"),
    (["--num-clients", "40", "--clients-per-round", "50"],
     "clients_per_round 50 exceeds the number of clients 40")])
def test_processes_benchmark_refuses_a_bad_run_before_its_workers(argv, says, capsys,
                                                                  monkeypatch):
  """Checked once in the script's own process: no worker is started (one would
  fail in a traceback of its own, as the layouts' error said before)."""
  module = benchmark_modules.load("processes")
  monkeypatch.setattr(module, "_layout", lambda *a: pytest.fail("a worker was started"))
  monkeypatch.setattr(sys, "argv", ["benchmarks/processes.py", "--num-clients", "40",
                                    "--repeats", "1", *argv])
  code, err = _exit_in_process(module.main, capsys)
  lines = err.strip().splitlines()
  assert code == 2 and len(lines) == 1 and says in lines[0], err[-3000:]


def test_benchmark_federations_above_the_data_s_clients_repeat_them():
  """A cohort of 10,000 needs more clients than the data's 6,000: client i
  holds client i mod 6,000's images."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  common = benchmark_modules.load("common")
  data, _, _ = common.load_paper_data(common.NUM_CLIENTS + 3)
  assert data.x.shape[0] == data.y.shape[0] == common.NUM_CLIENTS + 3
  np.testing.assert_array_equal(data.x[common.NUM_CLIENTS + 1], data.x[1])
  assert common.load_paper_data()[0].x.shape[0] == common.NUM_CLIENTS


def test_monte_carlo_benchmark_calibrates_and_accounts_small(capsys):
  """Each case calibrated to its target on seed 1's draws, accounted on seed
  0's: near the target, and PLD's epsilon inside the independent case's
  interval; bad flags refused in one line. 8 rounds and 5 bins (a client's
  two participations at most, 5 apart, as 12 rounds' 10 bins give): the BLT
  optimisation, most of the test, costs 30% less than at 12 rounds."""
  module = benchmark_modules.load("monte_carlo")
  assert module.main(["--rounds", "8", "--rate", "0.1", "--delta", "1e-2", "--samples",
                      "10000", "--bands", "2", "--blt-bins", "5", "--blt-separations", "3",
                      "--calibrate", "--epsilon", "2", "--tolerance", "0.05", "--json"]) == 0
  rows = _json_lines(capsys)
  assert [r["case"] for r in rows] == ["independent, Poisson", "banded 2, b-min-sep b=2",
                                       "BLT (min-sep 3), balls-in-bins 5"]
  for r in rows:
    assert r["calibration_seconds"] is not None and abs(r["epsilon"] - 2) < 0.3, r
    assert r["epsilon_lower"] <= r["epsilon_estimate"] <= r["epsilon"]
  assert rows[0]["epsilon_lower"] <= rows[0]["pld_epsilon"] <= rows[0]["epsilon"]
  code, err = _exit_in_process(module.main, capsys, ["--samples", "10"])
  assert code == 2 and "--samples 10 cannot bound delta" in err and "Traceback" not in err
  code, err = _exit_in_process(module.main, capsys, ["--cases", "tree"])
  assert code == 2 and "--cases" in err and "Traceback" not in err


MC_SMALL = ["--cases", "independent", "--rounds", "3", "--rate", "0.1", "--delta", "1e-2",
            "--samples", "10000"]


@pytest.mark.parametrize("argv, says", [
    # Each was a traceback from sigma_for_epsilon ("target_epsilon must be > 0")
    # or, at inf, minutes of halving sigma towards 0.
    (["--calibrate", "--epsilon", "nan"], "--epsilon must be finite and > 0, got nan"),
    (["--calibrate", "--epsilon", "-1"], "--epsilon must be finite and > 0, got -1.0"),
    (["--calibrate", "--epsilon", "0"], "--epsilon must be finite and > 0, got 0.0"),
    (["--calibrate", "--epsilon", "inf"], "--epsilon must be finite and > 0, got inf"),
    # The target without the calibration was silently ignored.
    (["--epsilon", "2"], "--epsilon needs --calibrate"),
    (["--sigma", "inf"], "--sigma must be finite and > 0, got inf")])
def test_monte_carlo_refuses_a_bad_epsilon_before_accounting(argv, says, capsys, monkeypatch):
  module = benchmark_modules.load("monte_carlo")
  monkeypatch.setattr(module, "measure", lambda *a: pytest.fail("measured"))
  code, err = _exit_in_process(module.main, capsys, [*MC_SMALL, *argv])
  lines = err.strip().splitlines()
  assert code == 2 and len(lines) == 1 and says in lines[0], err
  assert "error: " in lines[0]


def test_monte_carlo_epsilon_out_of_reach_is_one_line(capsys, monkeypatch):
  """A target no sigma up to 1e4 reaches (--epsilon 1e-9 at the study's
  setting: a ValueError traceback after the search) ends in one line naming
  --epsilon and the case; the search itself is stood in for here."""
  module = benchmark_modules.load("monte_carlo")

  def unreachable(part, column, target, *args, **kwargs):
    raise ValueError(f"no sigma up to 1e4 reaches epsilon {target}")

  monkeypatch.setattr(module.monte_carlo, "sigma_for_epsilon", unreachable)
  code, err = _exit_in_process(module.main, capsys, [*MC_SMALL, "--calibrate", "--epsilon",
                                                     "1e-9"])
  lines = err.strip().splitlines()
  assert code == 2 and len(lines) == 1, err
  assert lines[0].endswith("error: --epsilon 1e-09 is out of reach in case 'independent, "
                           "Poisson': no sigma up to 1e4 reaches epsilon 1e-09")
