"""The GPU suite (benchmarks/gpu_suite.py, .sh) and the trace reader
(benchmarks/trace_summary.py), on the CPU: the plan fits one device call, a
step past its deadline is cut and recorded and the suite goes on, what a cut
benchmark measured is kept, and the H200 trace reads as its records say."""

import gzip
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

import benchmark_modules

ROOT = pathlib.Path(__file__).resolve().parents[2]
H200_TRACE = ROOT / "benchmarks/records/trace-fl-top-dp-1000clients-h200-2026-11-27.json.gz"


@pytest.fixture(scope="module")
def suite():
  return benchmark_modules.load("gpu_suite")


@pytest.fixture(scope="module")
def traces():
  return benchmark_modules.load("trace_summary")


def _py(code: str) -> list[str]:
  return [sys.executable, "-c", code]


def test_plan_fits_one_device_call_most_telling_first(suite, tmp_path):
  proc = subprocess.run(["bash", "benchmarks/gpu_suite.sh", "plan"], cwd=ROOT,
                        env=dict(os.environ, OUT=str(tmp_path)), capture_output=True,
                        text=True, timeout=60)
  assert proc.returncode == 0, proc.stderr
  total = sum(s.deadline for s in suite.steps(str(tmp_path))
              if not s.background and not s.spare)
  assert proc.stdout.splitlines()[-1].startswith(f"sequential steps: {total:.0f} s of 540 s")
  plan = json.loads(subprocess.run([sys.executable, "benchmarks/gpu_suite.py", "plan", "--json"],
                                   cwd=ROOT, capture_output=True, text=True, timeout=60,
                                   env=dict(os.environ, OUT=str(tmp_path))).stdout)
  steps = plan["steps"]
  assert [s["name"] for s in steps] == ["env", "pytest-cpu", "anchor", "trace", "sign",
                                        "batching", "models", "pytest-gpu", "cs", "flax",
                                        "chunk", "10k", "pfl"]
  sequential = sum(s["deadline"] for s in steps if not s["background"] and not s["spare"])
  assert sequential == plan["sequential_s"] <= plan["steps_budget_s"] == 540
  # The run ends inside the device tool's 600 s: the steps, a cut step's grace, the summary.
  assert sequential + plan["kill_after_s"] <= plan["budget_s"] <= 575
  background = [s for s in steps if s["background"]]
  assert [s["name"] for s in background] == ["pytest-cpu"]
  assert background[0]["env"] == {"JAX_PLATFORMS": "cpu"}
  assert background[0]["deadline"] <= plan["budget_s"] - 60
  # Every case the issue asks for is in a step (the commands parse: test_entry_points).
  by_name = {s["name"]: " ".join(s["argv"]) for s in steps}
  assert "--torch-func 128,all" in by_name["anchor"] and "--profile" in by_name["anchor"]
  assert "FL-SIGN-DP" in by_name["sign"] and "models.py" in by_name["models"]
  for test_file in suite.FAST_PATH_TESTS:
    assert (ROOT / test_file).is_file() and test_file in by_name["pytest-gpu"]
    assert test_file in by_name["pytest-cpu"]


def test_every_batching_and_zoo_model_is_measured(suite, tmp_path):
  """The batching step times each mode cohort_ops lists (its deadline grows with
  them); the models step runs every zoo model and the paper CNN."""
  from fedjax_dp.models import cohort_ops, zoo  # pylint: disable=import-outside-toplevel
  modes = [m for m in cohort_ops.BATCHINGS if m != "auto"]
  assert suite.batching_modes() == modes
  step = {s.name: s for s in suite.steps(str(tmp_path))}
  assert step["batching"].argv[step["batching"].argv.index("--batching") + 1] == ",".join(modes)
  assert step["batching"].deadline == 20 + 13 * len(modes)
  argv = step["models"].argv
  models = argv[argv.index("--models") + 1].split(",")
  assert set(models) == set(zoo.ZOO) | {"paper-cnn"}
  args = benchmark_modules.load("models").parse_args(argv[argv.index("--models"):])
  assert args.out == f"{tmp_path}/models.jsonl" and args.json
  (tmp_path / "c.py").write_text("BATCHINGS = ('auto', 'map', 'tiled')\n")
  assert suite.batching_modes(tmp_path / "c.py") == ["map", "tiled"]
  (tmp_path / "d.py").write_text("BATCHINGS = tuple(m for m in MODES)\n")
  assert suite.batching_modes(tmp_path / "d.py") == ["map", "vmap", "product"]


def test_the_pfl_step_runs_last_on_the_time_saved(suite, tmp_path):
  """benchmarks/peers.py against pfl-research: a spare step, last, outside the sum
  of deadlines (it takes no step's time), skipped with less than its deadline
  left; its command parses; pfl's environment from the wheels `prepare` fetched;
  its records in the summary."""
  all_steps = suite.steps(str(tmp_path))
  step = all_steps[-1]
  assert step.name == "pfl" and step.spare and not step.background
  assert not any(s.spare for s in all_steps[:-1])
  argv = step.argv
  args = benchmark_modules.load("peers").parse_args(argv[argv.index("benchmarks/peers.py") + 1:])
  assert args.cases == ["FL-STD-DP", "pfl-dp-multiproc", "pfl-dp-default"]
  assert args.pfl_torch == "shared" and args.json and args.out == f"{tmp_path}/peers.jsonl"
  assert "--no-index" in args.pfl_pip_args and ".whl/pfl" in args.pfl_pip_args
  assert "pfl==0.6.0" in (ROOT / "benchmarks/gpu_suite.sh").read_text()
  s = suite.Suite(str(tmp_path), budget=100, kill_after=2)
  s.start = time.time() - 40  # 60 s left: a step of 10 would run, a spare one of 75 not
  skipped = s.run(suite.Step("spare", "", 75, _py("print('never')"), spare=True))
  assert skipped["status"] == "skipped" and "a spare step needs 75 s" in skipped["note"]
  assert s.run(suite.Step("spare2", "", 20, _py("print('ran')"), spare=True))["status"] == "ok"
  rec = {"case": "pfl-dp-multiproc", "clients_per_round": 100, "clients_per_sec": 50.0,
         "seconds_per_round": 2.0, "ratio_ours_over_pfl": {"FL-STD-DP": 3.0}}
  (tmp_path / "peers.jsonl").write_text(json.dumps(rec) + "\n" + json.dumps(
      {"case": "pfl-dp-default", "clients_per_round": 100, "error": "exit 1: boom"}) + "\n")
  text = suite.summary(tmp_path, {})
  assert "peers.py pfl-dp-multiproc   100 clients        50 clients/s" in text
  assert "FL-STD-DP/pfl 3.00x" in text and "pfl-dp-default     100 clients failed: exit 1" in text


def test_a_step_past_its_deadline_is_cut_and_the_suite_goes_on(suite, tmp_path):
  """SIGINT at the deadline: the step keeps what it measured (as throughput.py's
  records appended per case, models.py's file rewritten per model), a line
  says it was cut, the next step runs; a step that fails or has no time left
  is recorded too."""
  s = suite.Suite(str(tmp_path), budget=60, kill_after=2)
  measured = tmp_path / "records.jsonl"
  # The whole step under the handler: the interpreter's start can take the
  # deadline's seconds on a loaded 2-core machine, and SIGINT may come at once.
  slow = suite.Step("slow", "a case, then a long one", 4, _py(
      "import time\n"
      "try:\n"
      f"  open({str(measured)!r}, 'a').write('{{\"case\": 1}}\\n')\n"
      "  print('first case done', flush=True)\n"
      "  time.sleep(30)\n"
      f"except KeyboardInterrupt:\n  open({str(measured)!r}, 'a').write('{{\"cut\": 2}}\\n')\n"
      "  raise"))
  t0 = time.time()
  end = s.run(slow, later=1000)  # no time saved to give it
  assert end["status"] == "cut" and time.time() - t0 < 15
  assert [json.loads(line) for line in measured.read_text().splitlines()] == [
      {"case": 1}, {"cut": 2}]
  deaf = suite.Step("deaf", "ignores SIGINT", 1.0, _py(
      "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(30)"))
  assert s.run(deaf, later=1000)["status"] == "cut"  # SIGKILL after kill_after
  assert s.run(suite.Step("ok", "prints", 20, _py("print('fine')")))["status"] == "ok"
  failed = s.run(suite.Step("bad", "exits 3", 20, _py("import sys; sys.exit(3)")))
  assert failed["status"] == "failed" and failed["rc"] == 3
  s.start = time.time() - 55  # 5 s of the 60 left
  skipped = s.run(suite.Step("late", "no time", 20, _py("print('never')")))
  assert skipped["status"] == "skipped"
  log = (tmp_path / "log.txt").read_text()
  assert "first case done" in log and "slow: cut by its deadline after" in log
  assert "fine" in log and "bad: failed (exit 3)" in log and "never" not in log
  rows = [json.loads(line) for line in (tmp_path / "suite.jsonl").read_text().splitlines()]
  ends = [(r["step"], r["status"]) for r in rows if r.get("event") != "start"]
  assert ends == [("slow", "cut"), ("deaf", "cut"), ("ok", "ok"), ("bad", "failed"),
                  ("late", "skipped")]
  starts = [r for r in rows if r.get("event") == "start"]
  assert starts[0]["step"] == "slow" and "command" in starts[0] and starts[0]["deadline_s"] == 4


def test_a_step_sees_sigint_though_the_suite_ignores_it_and_nothing_forks(suite, tmp_path):
  """Started in the background by a non-interactive shell, the suite inherits
  SIGINT ignored: its steps still get the deadline's KeyboardInterrupt, and
  starting them does not fork this (JAX-threaded) process."""
  import warnings  # pylint: disable=import-outside-toplevel
  import jax  # pylint: disable=import-outside-toplevel
  jax.numpy.zeros(1).block_until_ready()  # JAX's threads running: a fork would warn
  s = suite.Suite(str(tmp_path), budget=60, kill_after=5)
  measured = tmp_path / "cut.txt"
  step = suite.Step("slow", "waits for SIGINT", 3, _py(
      "import time\ntry:\n  print('started', flush=True)\n  time.sleep(30)\n"
      f"except KeyboardInterrupt:\n  open({str(measured)!r}, 'w').write('cut')\n  raise"))
  before = signal.signal(signal.SIGINT, signal.SIG_IGN)
  try:
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter("always")
      end = s.run(step, later=1000)
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # the suite's own, kept
  finally:
    signal.signal(signal.SIGINT, before)
  assert end["status"] == "cut" and measured.read_text() == "cut"
  assert not [w for w in caught if "fork" in str(w.message)]


def test_time_saved_goes_to_the_next_step_never_a_later_steps_time(suite, tmp_path):
  s = suite.Suite(str(tmp_path), budget=100, kill_after=2)
  step = suite.Step("x", "", 20, [])
  assert s.deadline(step, later=30) == pytest.approx(70, abs=0.5)  # 50 s saved so far
  assert s.deadline(step, later=90) == 20  # behind plan: its own deadline still
  s.start = time.time() - 90
  assert s.deadline(step, later=0) == pytest.approx(8, abs=0.5)  # never past the budget


def test_background_steps_run_beside_and_are_cut_at_their_deadline(suite, tmp_path):
  s = suite.Suite(str(tmp_path), budget=60, kill_after=1)
  s.start_background(suite.Step("quick", "", 20, _py("print('done')"), background=True,
                                output="quick.txt"))
  s.start_background(suite.Step("long", "", 1, _py("import time; time.sleep(30)"),
                                background=True, output="long.txt"))
  s.finish_background()
  assert s.results["quick"]["status"] == "ok" and s.results["long"]["status"] == "cut"
  assert "done" in (tmp_path / "quick.txt").read_text()
  assert "cut by its deadline" in (tmp_path / "long.txt").read_text()


def test_run_records_the_machine_first_and_reads_the_trace(suite, tmp_path, monkeypatch):
  """The whole run on the CPU with stand-in benchmarks: the env step's line first
  (versions, the source's digest), the anchor's trace copied and summarised,
  the summary's table from the records."""
  profile = tmp_path / "profile"
  rec = {"scheme": "FL-TOP-DP", "model": "cnn", "cohort_batching": "auto", "client_chunk": 128,
         "clients_per_round": 1000, "clients_per_sec": 5267.0, "train_clients_per_sec": 5340.0,
         "seconds": {"compile": 7.4}, "ratio_to_torch_func": 2.46, "ratio_to_torch": 119.7,
         "torch_loop_clients_per_sec": 44.0,
         "torch": {"version": "2.11", "device_name": "NVIDIA H200", "tf32": True},
         "torch_func": [{"chunk": 128, "clients_per_sec": 2140.0},
                        {"chunk": 1000, "clients_per_sec": None, "error": "out of memory"}]}
  anchor = _py(
      "import os, shutil, json\n"
      f"os.makedirs({str(profile / 'plugins/profile/run')!r}, exist_ok=True)\n"
      f"shutil.copy({str(H200_TRACE)!r}, "
      f"{str(profile / 'plugins/profile/run/h.trace.json.gz')!r})\n"
      f"open({str(tmp_path / 'throughput.jsonl')!r}, 'a')"
      f".write({json.dumps(json.dumps(rec))} + '\\n')")
  models = _py(f"open({str(tmp_path / 'models.jsonl')!r}, 'w').write("
               "'{\"model\": \"lstm\", \"error\": \"KeyError: num_consts\"}\\n')")
  real = suite.steps(str(tmp_path))
  # The env step's own 15 s would not always hold its imports (JAX, flax, PyTorch)
  # on 2 loaded cores beside the other tests' workers.
  fake = [real[0]._replace(deadline=90), suite.Step("anchor", "", 60, anchor), real[3],
          suite.Step("models", "", 30, models)]
  monkeypatch.setattr(suite, "steps", lambda out: fake)
  monkeypatch.setattr(suite, "PROFILE_DIR", str(profile))
  assert suite.run(str(tmp_path)) == 0
  rows = [json.loads(line) for line in (tmp_path / "suite.jsonl").read_text().splitlines()]
  env = rows[0]["env"]
  assert rows[0]["step"] == "env" and env["jax"].startswith("0.") and env["cpus"] >= 1
  assert len(env["source"]["digest"]) == 16 and "nvidia_smi" in env
  assert [(r["step"], r["status"]) for r in rows if r.get("event") == "end"][1:] == [
      ("anchor", "ok"), ("trace", "ok"), ("models", "ok")]
  assert (tmp_path / "trace.json.gz").read_bytes() == H200_TRACE.read_bytes()
  summary = json.loads((tmp_path / "trace-summary.json").read_text())
  assert summary["busy_ms"] == pytest.approx(193.44, abs=0.01)
  log = (tmp_path / "log.txt").read_text()
  table = log[log.index("== summary"):]
  assert "FL-TOP-DP" in table and "5267" in table and "2.46" in table and "119.70" in table
  assert "chunk 128: 2140/s, chunk 1000: out of memory" in table and "TF32 on" in table
  assert "models.py lstm" in table and "failed: KeyError: num_consts" in table
  assert "products 36.6 ms = 18.9% of busy" in table


def test_run_without_a_trace_skips_its_summary(suite, tmp_path, monkeypatch):
  monkeypatch.setattr(suite, "PROFILE_DIR", str(tmp_path / "none"))
  real = suite.steps(str(tmp_path))
  monkeypatch.setattr(suite, "steps", lambda out: [
      suite.Step("env", "", 5, _py("print('{}')")), real[3]])
  suite.run(str(tmp_path))
  rows = [json.loads(line) for line in (tmp_path / "suite.jsonl").read_text().splitlines()]
  assert rows[-1]["step"] == "trace" and rows[-1]["status"] == "skipped"
  assert "no trace" in rows[-1]["note"] and not (tmp_path / "trace-summary.json").exists()


def test_prepare_identity_and_bad_arguments(suite, tmp_path):
  ident = suite.prepare_identity(tmp_path / "source.json")
  assert json.loads((tmp_path / "source.json").read_text()) == ident
  assert ident["digest"] == suite.source_identity()["digest"] and len(ident["commit"]) == 40
  for argv in (["plan", "--yaml"], ["launch"], []):
    proc = subprocess.run([sys.executable, "benchmarks/gpu_suite.py", *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "usage" in proc.stderr and "Traceback" not in proc.stderr


# ---------------------------------------------------------------- trace_summary


def test_h200_trace_reads_as_its_records_say(traces):
  """One FL-TOP-DP round of 1,000 clients on the H200 (jax 0.11.2): busy 193.4 ms
  (the README's 193.5 is the plain sum of durations, which counts 0.07 ms of
  kernels that overlap inside CUDA graphs twice) of a 199.2 ms span (the
  README's 198.7 ms runs from the compute stream's first kernel; the span from
  the arguments' copy to the device, 0.5 ms earlier); the products 36.6 ms."""
  s = traces.summarize(traces.load(H200_TRACE), top=6)
  assert s["gpus"] == 1 and s["events"] == 2299
  assert s["busy_ms"] == pytest.approx(193.44, abs=0.01)
  assert s["span_ms"] == pytest.approx(199.17, abs=0.01)
  assert s["product_ms"] == pytest.approx(36.55, abs=0.01)
  assert s["product_fraction"] == pytest.approx(0.189, abs=0.001)
  assert len(s["product_kernels"]) == 11
  assert all(k["count"] in (40, 80) for k in s["product_kernels"][:5])
  assert [(t["name"], t["count"]) for t in s["top"][:4]] == [
      ("input_reduce_fusion_1", 40), ("loop_concatenate_fusion", 40),
      ("input_reduce_fusion", 40), ("loop_concatenate_fusion_1", 40)]
  kinds = {k["kind"]: k["ms"] for k in s["kinds"]}
  assert kinds["reduce"] == pytest.approx(62.3, abs=0.05)
  assert kinds["concatenate"] == pytest.approx(57.52, abs=0.01)
  assert kinds["scatter"] == pytest.approx(13.0, abs=0.05)
  assert kinds["transpose"] == pytest.approx(6.93, abs=0.05)


@pytest.mark.parametrize("name, kind", [
    ("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32", "product"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x256_16x4_nt_align4>", "product"),
    ("gemm_fusion_dot_general_18", "product"),
    ("sm90_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32", "product"),
    ("void cudnn::cnn::conv2d_grouped_direct_kernel<float>", "product"),
    ("implicit_convolve_sgemm", "product"), ("loop_convert_fusion_3", "convert"),
    ("loop_concatenate_fusion_1", "concatenate"), ("input_reduce_select_fusion", "reduce_select"),
    ("MemcpyD2D", "MemcpyD2D")])
def test_kernel_kinds(traces, name, kind):
  assert traces.kind(name) == kind


def _trace(events):
  meta = [{"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/device:GPU:0"}},
          {"ph": "M", "pid": 9, "name": "process_name", "args": {"name": "/host:CPU"}}]
  return {"traceEvents": meta + [dict(ph="X", **e) for e in events]}


def test_busy_time_counts_overlapping_streams_once(traces):
  s = traces.summarize(_trace([
      {"pid": 1, "tid": 1, "ts": 0, "dur": 10, "name": "sm90_xmma_gemm_x"},
      {"pid": 1, "tid": 2, "ts": 5, "dur": 10, "name": "loop_add_fusion"},  # overlaps 5
      {"pid": 1, "tid": 1, "ts": 30, "dur": 10, "name": "loop_add_fusion_1"},
      {"pid": 9, "tid": 3, "ts": 0, "dur": 1000, "name": "host work"}]))
  assert (s["busy_ms"], s["span_ms"]) == (0.025, 0.04)
  assert s["product_ms"] == 0.01 and s["product_fraction"] == 0.4
  assert s["kinds"][0] == {"kind": "add", "ms": 0.02, "fraction": 0.8}
  none = traces.summarize(_trace([{"pid": 9, "tid": 3, "ts": 0, "dur": 5, "name": "cpu"}]))
  assert none["busy_ms"] is None and "no GPU events" in traces.report(none, "t")


def test_trace_summary_command_line(tmp_path, capsys):
  run = lambda *a: subprocess.run([sys.executable, "benchmarks/trace_summary.py", *map(str, a)],
                                  cwd=ROOT, capture_output=True, text=True, timeout=120)
  folder = tmp_path / "plugins/profile/r"
  folder.mkdir(parents=True)
  (folder / "h.trace.json.gz").write_bytes(H200_TRACE.read_bytes())
  proc = run(tmp_path, "--top", "3", "--out", tmp_path / "s.jsonl")  # the newest under a folder
  assert proc.returncode == 0, proc.stderr
  assert "GPU busy 193.4 ms of a 199.2 ms span (97.1%)" in proc.stdout
  assert "matrix products and convolutions 36.6 ms = 18.9% of busy" in proc.stdout
  assert "input_reduce_fusion_1" in proc.stdout
  assert json.loads((tmp_path / "s.jsonl").read_text())["top"][0]["ms"] == 41.111
  with gzip.open(tmp_path / "bad.json.gz", "wt") as f:
    f.write("{\"nothing\": 1}")
  # The refusals through the script's main, in this process (the command line
  # above is the script's; each fresh interpreter costs about 4 s).
  main = benchmark_modules.load("trace_summary").main
  capsys.readouterr()
  for args, says in [((tmp_path / "nope.json.gz",), "no such file"),
                     ((tmp_path / "bad.json.gz",), "not a Chrome trace"),
                     ((tmp_path / "plugins/profile/r", "--top", "0"), "--top must be >= 1"),
                     ((ROOT / "docs",), "no *.trace.json.gz under")]:
    try:
      code = main(list(map(str, args)))
    except SystemExit as exit_:  # argparse's errors
      code = exit_.code
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert says in err and "Traceback" not in err


_GPU = {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/device:GPU:0"}}


@pytest.mark.parametrize("events, says", [
    ([1, 2], "traceEvents[0] is int, not an object"),  # was an AttributeError
    ([_GPU, {"ph": "X", "pid": 1, "tid": 1, "dur": 3, "name": "k"}],  # a KeyError
     "traceEvents[1] is a complete event without ts"),
    ([_GPU, {"ph": "X", "pid": 1, "tid": 1, "ts": "0", "dur": 3, "name": "k"}],  # a TypeError
     "traceEvents[1] has ts '0', not a number"),
    ([_GPU, {"ph": "X", "pid": [1], "tid": 1, "ts": 0, "dur": 3, "name": "k"}],  # unhashable
     "traceEvents[1] has pid [1], not a scalar"),
    ([dict(_GPU, args="GPU")], "traceEvents[0] has args 'GPU', not an object")])
def test_trace_summary_refuses_a_malformed_trace_in_one_line(events, says, tmp_path, capsys):
  """A trace whose events the summaries cannot read: one line naming the file,
  exit 2, no --out line written."""
  path = tmp_path / "bad.trace.json"
  path.write_text(json.dumps({"traceEvents": events}))
  main = benchmark_modules.load("trace_summary").main
  code = main([str(path), "--out", str(tmp_path / "s.jsonl")])
  lines = capsys.readouterr().err.strip().splitlines()
  assert code == 2 and len(lines) == 1, lines
  assert lines[0] == f"benchmarks/trace_summary.py: error: {path}: not a Chrome trace ({says})"
  assert not (tmp_path / "s.jsonl").exists()


def test_trace_summary_refuses_an_unwritable_out_before_reading(tmp_path, capsys):
  """Was a FileNotFoundError after the trace was read and summarized."""
  main = benchmark_modules.load("trace_summary").main
  with pytest.raises(SystemExit) as bad:
    main([str(H200_TRACE), "--out", str(tmp_path / "nodir" / "s.jsonl")])
  lines = capsys.readouterr().err.strip().splitlines()
  assert bad.value.code == 2 and len(lines) == 1, lines
  assert "--out: folder" in lines[0] and "does not exist" in lines[0]
  assert not (tmp_path / "nodir").exists()


# A CPU module's HLO, as XLA:CPU prints it after optimisation: a fused
# forward convolution, a weight gradient in the canonical form (its window
# runs over the activations), an input gradient, a product, threefry's bits.
_HLO = """\
HloModule jit_rounds, entry_computation_layout={()->f32[2,3]{1,0}}

%fused_computation.1 (param_0.1: f32[1,4,4,3], param_1.1: f32[5,5,3,2]) -> f32[1,4,4,2] {
  %param_0.1 = f32[1,4,4,3]{3,2,1,0} parameter(0)
  %param_1.1 = f32[5,5,3,2]{3,2,1,0} parameter(1)
  ROOT %convolution.1 = f32[1,4,4,2]{3,2,1,0} convolution(%param_0.1, %param_1.1), \
window={size=5x5 pad=2_2x2_2}, dim_labels=b01f_01io->b01f, \
metadata={op_name="jit(rounds)/vmap()/jvp()/conv_general_dilated" stack_frame_id=1}
}

%fused_computation.2 (param_0.2: f32[3,4,4,1], param_1.2: f32[3,3,1,4]) -> f32[3,2,2,4] {
  %param_0.2 = f32[3,4,4,1]{3,2,1,0} parameter(0)
  %param_1.2 = f32[3,3,1,4]{3,2,1,0} parameter(1)
  ROOT %convolution.2 = f32[3,2,2,4]{3,2,1,0} convolution(%param_0.2, %param_1.2), \
window={size=3x3}, dim_labels=b01f_01io->b01f, \
metadata={op_name="jit(rounds)/transpose(jvp())/conv_general_dilated" stack_frame_id=2}
}

%region_0.1 (param.1: (s32[], f32[2,3])) -> (s32[], f32[2,3]) {
  %param.1 = (s32[], f32[2,3]{1,0}) parameter(0)
  ROOT %tuple.1 = (s32[], f32[2,3]{1,0}) tuple(%param.1, %param.1)
}

ENTRY %main.1 (a: f32[2,5], b: f32[5,3], x: f32[1,4,4,3]) -> f32[2,3] {
  %a = f32[2,5]{1,0} parameter(0)
  %b = f32[5,3]{1,0} parameter(1)
  %x = f32[1,4,4,3]{3,2,1,0} parameter(2)
  %ynn_fusion.1 = f32[1,4,4,2]{3,2,1,0} fusion(%x, %x), kind=kCustom, calls=%fused_computation.1, \
metadata={op_name="jit(rounds)/vmap()/jvp()/conv_general_dilated" stack_frame_id=1}
  %ynn_fusion.2 = f32[3,2,2,4]{3,2,1,0} fusion(%x, %x), kind=kCustom, calls=%fused_computation.2
  %convolution.3 = f32[1,6,6,3]{3,2,1,0} convolution(%x, %x), window={size=5x5 pad=2_2x2_2}, \
dim_labels=b01f_01oi->b01f, metadata={op_name="jit(rounds)/transpose(jvp())/conv_general_dilated"}
  %threefry2x32.1 = u32[8]{0} add(%x, %x), \
metadata={op_name="jit(rounds)/jit(_normal)/threefry2x32/add" stack_frame_id=3}
  %while.1 = (s32[], f32[2,3]{1,0}) while(%tuple.0), condition=%region_1.2, body=%region_0.1
  ROOT %dot.1 = f32[2,3]{1,0} dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}, \
metadata={op_name="jit(rounds)/dot_general" stack_frame_id=4}
}
""".replace("\\\n", "")


def test_hlo_roles_and_flops(traces):
  ops = traces.parse_hlo(_HLO)
  # Each output element sums window x the kernel's input features: 2 x 32 x 25 x 3.
  assert ops["ynn_fusion.1"] == ("convolution, forward", 2 * 32 * 25 * 3)
  assert ops["ynn_fusion.2"] == ("convolution, weight gradient", 2 * 48 * 9 * 1)
  assert ops["convolution.3"] == ("convolution, input gradient", 2 * 108 * 25 * 3)
  assert ops["dot.1"] == ("matrix product", 2 * 6 * 5)
  assert ops["threefry2x32.1"] == ("random numbers", 0.0)
  assert ops["while.1"] == ("while", 0.0)  # no op name: the opcode


def _cpu_trace(events):
  meta = [{"ph": "M", "pid": 9, "name": "process_name", "args": {"name": "/host:CPU"}}]
  return {"traceEvents": meta + [dict(ph="X", pid=9, **e) for e in events]}


def test_cpu_time_is_each_ops_own(traces):
  ops = traces.parse_hlo(_HLO)
  trace = _cpu_trace([  # microseconds; a while runs two ops on thread 1
      {"tid": 1, "ts": 0, "dur": 90, "name": "while.1"},
      {"tid": 1, "ts": 10, "dur": 30, "name": "ynn_fusion.1"},
      {"tid": 1, "ts": 50, "dur": 10, "name": "dot.1"},
      {"tid": 2, "ts": 0, "dur": 30, "name": "ynn_fusion.1"},
      {"tid": 2, "ts": 0, "dur": 500, "name": "ThunkExecutor::Execute"}])  # not an op
  s = traces.summarize_cpu(trace, ops, top=2, matmul_gflops=0.064, cores=2)
  assert (s["threads"], s["ops"], s["cpu_ms"], s["span_ms"]) == (2, 4, 0.12, 0.09)
  roles = {r["role"]: r for r in s["roles"]}
  assert roles["while"]["ms"] == 0.05 and roles["while"]["gflop"] is None
  conv = roles["convolution, forward"]
  assert (conv["ms"], conv["count"], conv["fraction"]) == (0.06, 2, 0.5)
  # 2 x 4,800 FLOPs in 60 us: 0.16 GFLOP/s, 5x one core's 0.032.
  assert conv["gflops_per_cpu_second"] == 0.16 and conv["of_matmul"] == 5.0
  assert [t["name"] for t in s["top"]] == ["ynn_fusion.1", "while.1"]
  words = traces.report_cpu(s, "t")
  assert "4 XLA ops on 2 thread(s), 0.1 CPU ms" in words
  assert "1 other roles" in words and "= 500% of matmul" in words
  assert traces.summarize_cpu(_cpu_trace([]), ops)["cpu_ms"] is None


def test_cpu_trace_command_line(traces, tmp_path, capsys):
  folder = tmp_path / "plugins/profile/r"
  folder.mkdir(parents=True)
  with gzip.open(folder / "h.trace.json.gz", "wt") as f:
    json.dump(_cpu_trace([{"tid": 1, "ts": 0, "dur": 30, "name": "ynn_fusion.1"}]), f)
  main = benchmark_modules.load("trace_summary").main
  assert main([str(tmp_path)]) == 2  # no HLO beside it
  err = capsys.readouterr().err
  assert len(err.strip().splitlines()) == 1 and "needs its module's HLO" in err
  (tmp_path / "round.hlo.txt").write_text(_HLO)  # what throughput.py --profile writes
  assert main([str(tmp_path), "--cores", "2", "--matmul-gflops", "1",
               "--out", str(tmp_path / "s.jsonl")]) == 0
  assert "1 XLA ops on 1 thread(s)" in capsys.readouterr().out
  record = json.loads((tmp_path / "s.jsonl").read_text())
  assert record["hlo"].endswith("round.hlo.txt") and record["matmul_gflops_per_core"] == 0.5
  for args, says in [(["--cores", "0"], "--cores must be >= 1"),
                     (["--matmul-gflops", "-1"], "--matmul-gflops must be > 0"),
                     (["--hlo", str(tmp_path / "none.txt")], "no such file")]:
    try:
      code = main([str(tmp_path), *args])
    except SystemExit as exit_:
      code = exit_.code
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and says in err, err


def test_amd_cpu_trace_reads_as_its_records_say(traces):
  """FL-STD's 100-client round on the 2-core AMD EPYC (family 25 model 1, jax
  0.10.2) before the barrier in ``sharding.shard_privatize``: one device's
  thread waits 1.44 s in the psum of the clip count (a constant 0 without DP)
  while the other trains; the convolutions' 313 GFLOP are most of the rest."""
  folder = ROOT / "benchmarks/records/issue60-cpu-profile"
  ops = traces.parse_hlo(traces.read_hlo(folder / "fl-std-100-clients-stalled.hlo.txt.gz"))
  s = traces.summarize_cpu(traces.load(folder / "fl-std-100-clients-stalled.trace.json.gz"),
                           ops, top=3, matmul_gflops=125.59, cores=2)
  assert (s["ops"], s["threads"]) == (14064, 4)
  assert s["cpu_ms"] == pytest.approx(10046.9, abs=0.1)
  assert [(t["name"], t["count"]) for t in s["top"]] == [
      ("ynn_fusion.6", 400), ("psum.7", 2), ("ynn_fusion.4", 400)]
  assert s["top"][1]["ms"] == pytest.approx(1443.8, abs=0.1)
  roles = {r["role"]: r for r in s["roles"]}
  assert sum(roles[f"convolution, {k}"]["gflop"] for k in
             ("forward", "input gradient", "weight gradient")) == pytest.approx(313.6, abs=0.1)
  assert roles["convolution, weight gradient"]["of_matmul"] == pytest.approx(0.76, abs=0.005)
  assert ops["psum.7"].role == "all-reduce"
