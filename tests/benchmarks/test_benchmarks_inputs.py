"""Bad input to the benchmarks and to tests/golden_diff.py: exit code 2 and
an error line naming the flag, before any work starts (no traceback, nothing
written). Each script's ``main`` runs in this process, reading its flags
from ``sys.argv`` as the command line does, its work stood in for by a
failure (a bad flag that got through would reach it)."""

import importlib.util
import json
import pathlib
import shutil
import sys

import pytest

import benchmark_modules

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIG = "99999999999"  # above int32: JAX's default int overflows in jitted code
AT_MOST = "must be at most 2147483647, got"
# The first thing each script does after its checks (module attribute, or
# (attribute, name) for a function of a module it imports).
WORK = {"local_training": ("cnn", "paper_cnn"), "masked_gradients": "measure",
        "cs_decoder": ("dct_cs", "make_operator"), "models": "matmul_gflops",
        "discrete_gaussian": "measure", "audit_coverage": "measure", "monte_carlo": "measure",
        "lowered_traffic": "lower", "trace_summary": "find_trace",
        "throughput": "load_paper_data", "peers": "load_paper_data",
        "processes": "load_federated", "pfl_worker": "run", "gpu_suite": "run",
        "golden_diff": ("golden_cases", "setting")}
OUT = ["--out", "{tmp}/out.jsonl"]
PFL = ["--data", "{tmp}/data", "--out", "{tmp}/ranks"]


CASES = [
    ("local_training", ["--seed", "-1"], "--seed must be in [0, 2**63), got -1"),
    ("local_training", ["--steps", BIG], f"--steps {AT_MOST} {BIG}"),
    ("local_training", ["--lr", "nan"], "--lr must be a finite number, got nan"),
    ("masked_gradients", ["--seed", str(2**63)], "--seed must be in [0, 2**63)"),
    ("masked_gradients", ["--clients", BIG], f"--clients {AT_MOST} {BIG}"),
    ("cs_decoder", ["--iters", BIG], f"--iters {AT_MOST} {BIG}"),
    ("cs_decoder", ["--repeats", BIG], f"--repeats {AT_MOST} {BIG}"),
    ("cs_decoder", ["--lam", "1e39"], "--lam must be finite and >= 0, got 1e+39"),  # inf in f32
    ("models", ["--lr", "inf", *OUT], "--lr must be a finite number, got inf"),
    # Was an error record in --out.
    ("models", ["--seed", "-1", *OUT], "--seed must be in [0, 2**63), got -1"),
    ("models", ["--steps", BIG, *OUT], f"--steps {AT_MOST} {BIG}"),
    ("discrete_gaussian", ["--size", BIG], f"--size {AT_MOST} {BIG}"),
    ("audit_coverage", ["--candidates", BIG, *OUT], f"--candidates {AT_MOST} {BIG}"),
    ("audit_coverage", ["--draws", BIG, *OUT], f"--draws {AT_MOST} {BIG}"),
    ("monte_carlo", ["--rounds", BIG], f"--rounds {AT_MOST} {BIG}"),
    ("monte_carlo", ["--samples", BIG], f"--samples {AT_MOST} {BIG}"),
    ("monte_carlo", ["--blt-bins", BIG], f"--blt-bins {AT_MOST} {BIG}"),
    ("monte_carlo", ["--blt-separations", BIG], "argument --blt-separations: bands must be at"),
    ("monte_carlo", ["--tolerance", "inf"], "--tolerance must be a finite number, got inf"),
    ("lowered_traffic", ["--clients", BIG, *OUT], f"--clients {AT_MOST} {BIG}"),
    ("trace_summary", ["{tmp}/t.trace.json.gz", "--matmul-gflops", "inf", *OUT],
     "--matmul-gflops must be a finite number, got inf"),
    ("throughput", ["--no-torch", "--clients-per-round", f"10,{BIG}", *OUT],
     f"argument --clients-per-round: {AT_MOST} '10,{BIG}'"),
    ("throughput", ["--no-torch", "--repeats", BIG], f"argument --repeats: {AT_MOST} '{BIG}'"),
    ("throughput", ["--no-torch", "--torch-func", f"128,{BIG}"], "argument --torch-func: must"),
    ("throughput", ["--no-torch", "--torch-loop-clients", BIG], "--torch-loop-clients: must"),
    ("throughput", ["--no-torch", "--client-chunk", BIG], f"--client-chunk {AT_MOST} {BIG}"),
    ("throughput", ["--no-torch", "--split-max-clients", "-1"],
     "--split-max-clients must be >= 0, got -1"),
    ("throughput", ["--no-torch", "--ratio", "nan"], "--ratio must be in (0, 1], got nan"),
    ("peers", ["--cases", "FL-STD", "--pfl-timeout", "2147484", *OUT],
     "--pfl-timeout must be at most 2147483 (seconds), got 2147484"),
    ("peers", ["--cases", "FL-STD", "--clients-per-round", BIG], "--clients-per-round: must be"),
    # Was shlex's ValueError traceback.
    ("peers", ["--cases", "pfl-default", "--pfl-pip-args", '"--no-index'],
     "argument --pfl-pip-args: No closing quotation"),
    ("processes", ["--timeout", "2147484"],
     "--timeout must be at most 2147483 (seconds), got 2147484"),
    ("processes", ["--repeats", BIG], f"--repeats {AT_MOST} {BIG}"),
    ("processes", ["--devices", "2048"], "--devices must be at most 1024, got 2048"),
    ("processes", ["--ratio", "nan"], "--ratio must be in (0, 1], got nan"),
    ("pfl_worker", ["--seed", "-1", *PFL], "argument --seed: must be in [0, 4294967295], got -1"),
    ("pfl_worker", ["--steps", BIG, *PFL], "argument --steps: must be in [1, 2147483647]"),
    ("pfl_worker", ["--lr", "nan", *PFL], "argument --lr: must be a finite number > 0, got nan"),
    ("pfl_worker", [], "--data and --out are required (unless --probe)"),
    ("pfl_worker", ["--data", "{tmp}/folder", "--out", "{tmp}/ranks"],
     "--data {tmp}/folder holds no x.npy"),
    ("pfl_worker", ["--data", "{tmp}/data", "--out", "{tmp}/file.txt"],
     "--out {tmp}/file.txt is a file; give a folder"),
    # Each was a traceback (int(), a zero slice step), or ran nothing and exited 0.
    ("golden_diff", ["--shard", "x"], "argument --shard: takes I/N (e.g. 0/2), got 'x'"),
    ("golden_diff", ["--shard", "0/0"], "argument --shard: must be I/N with 0 <= I < N"),
    ("golden_diff", ["--cases", "FL-NOPE"], "argument --cases: unknown case 'FL-NOPE'"),
    ("golden_diff", ["--load", "{tmp}/nowhere"], "argument --load: no such folder"),
    ("golden_diff", ["--load", "{tmp}/folder"], "--load {tmp}/folder holds none of the cases'"),
    ("golden_diff", ["--load", "{tmp}/bad", "--cases", "FL-STD"],
     "{tmp}/bad/FL-STD.json: not a golden case's output (JSONDecodeError"),
    ("golden_diff", ["--load", "{tmp}/empty", "--cases", "FL-STD"],
     "{tmp}/empty/FL-STD.json: not a golden case's output (KeyError: 'weights')"),
    ("golden_diff", ["--load", "{tmp}/saved", "--against", "{tmp}/folder", "--cases", "FL-STD"],
     "--against {tmp}/folder holds no FL-STD.json (case FL-STD)"),
    ("golden_diff", ["--load", "{tmp}/saved", "--out", "{tmp}/runs", "--cases", "FL-STD"],
     "--out saves a run's outputs; --load runs nothing"),
    ("golden_diff", ["--out", "{tmp}/file.txt", "--cases", "FL-STD"],
     "argument --out: {tmp}/file.txt is a file; give a folder"),
]


def _load(name: str):
  if name != "golden_diff":
    return benchmark_modules.load(name)
  spec = importlib.util.spec_from_file_location("golden_diff", ROOT / "tests" / "golden_diff.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _inputs(tmp: pathlib.Path) -> None:
  """The files the cases name: a folder, a file, pfl_worker's data, saved outputs."""
  (tmp / "folder").mkdir()
  (tmp / "file.txt").write_text("a file\n")
  (tmp / "data").mkdir()
  for name in ("x.npy", "y.npy", "weights.npz"):
    (tmp / "data" / name).write_bytes(b"")
  for folder, text in (("bad", "not JSON"), ("empty", "{}")):
    (tmp / folder).mkdir()
    (tmp / folder / "FL-STD.json").write_text(text)
  (tmp / "saved").mkdir()
  shutil.copy(ROOT / "tests" / "golden" / "FL-STD.json", tmp / "saved")


def _tree(tmp: pathlib.Path) -> list:
  return sorted((str(p.relative_to(tmp)), p.stat().st_size) for p in tmp.rglob("*"))


@pytest.mark.parametrize("name, argv, says", CASES)
def test_bad_input_is_one_line_exit_2_before_any_work(name, argv, says, tmp_path, capsys,
                                                      monkeypatch):
  _inputs(tmp_path)
  module = _load(name)
  work = WORK[name]
  owner, attr = (getattr(module, work[0]), work[1]) if isinstance(work, tuple) else (module, work)
  monkeypatch.setattr(owner, attr, lambda *a, **k: pytest.fail(f"{name}: the work started"))
  monkeypatch.setattr(sys, "argv", [f"{name}.py"] + [a.format(tmp=tmp_path) for a in argv])
  before = _tree(tmp_path)
  with pytest.raises(SystemExit) as exit_:
    module.main()
  err = capsys.readouterr().err
  lines = err.strip().splitlines()
  assert exit_.value.code == 2 and "Traceback" not in err, err
  assert says.format(tmp=tmp_path) in lines[-1] and "error: " in lines[-1], lines
  assert len(lines) == 1, lines
  assert _tree(tmp_path) == before  # nothing written


@pytest.mark.parametrize("start", ["yesterday", "nan"])
def test_gpu_suite_refuses_a_start_time_that_is_no_time(start, capsys, monkeypatch):
  """GPU_SUITE_T0 (gpu_suite.sh's `date +%s.%N`) set to no time: was float()'s
  ValueError traceback, or a nan deadline."""
  module = benchmark_modules.load("gpu_suite")
  monkeypatch.setattr(module, "run", lambda *a: pytest.fail("the suite ran"))
  monkeypatch.setenv("GPU_SUITE_T0", start)
  assert module.main(["run"]) == 2
  assert capsys.readouterr().err == (
      f"benchmarks/gpu_suite.py: error: GPU_SUITE_T0 must be a time in seconds since the "
      f"epoch, got {start!r}\n")


def test_golden_diff_compares_saved_outputs_without_running(tmp_path, capsys, monkeypatch):
  """``python tests/golden_diff.py --load DIR`` (docs/api.md): the outputs
  saved there against the records; a changed norm shows under its kind."""
  saved = json.loads((ROOT / "tests" / "golden" / "FL-STD.json").read_text())
  saved["weights"]["l2"] *= 1.5
  (tmp_path / "FL-STD.json").write_text(json.dumps(saved))
  module = _load("golden_diff")
  monkeypatch.setattr(module.golden_cases, "run_case", lambda *a: pytest.fail("ran a case"))
  assert module.main(["--load", str(tmp_path)]) is None
  out = [line.split() for line in capsys.readouterr().out.splitlines()]
  assert out[0] == ["FL-STD", "weights.l2=0.5"] and out[1] == ["worst:"]
  assert ["weights.l2", "0.5", "(FL-STD)"] in out
