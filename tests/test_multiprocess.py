"""A sweep over two local processes (jax.distributed, gloo) equals one process
with two devices; bad process settings and a failing process end cleanly."""

import json
import os
import pathlib
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

import benchmark_modules
from fedjax_dp import checkpoint, distributed
from fedjax_dp.cli import sweep as experiment
from xla_env import xla_flags

ROOT = pathlib.Path(__file__).resolve().parents[1]
SWEEP = ROOT / "experiments" / "sweep.py"

# A tiny sweep: the medical MLP on 40 synthetic clients, two rounds.
TINY = ["--dataset", "medical-synth", "--num-clients", "40", "--samples-per-client", "10",
        "--clients-per-round", "8", "--rounds", "2", "--local-steps", "1", "--test-size",
        "100", "--ratio", "0.001", "--quiet"]
# A DP scheme with plain sums; a DP Top-K scheme under secure aggregation
# (FL-STD-DP's masks over every weight would double the time).
SETTINGS = {"plain": (["FL-STD-DP"], []),
            "secure": (["FL-TOP-DP"], ["--secure-aggregation"])}
# What may differ between the two launches: time, the process layout, the folder.
RUN_EXCLUDED = ("seconds", "processes")
CONFIG_EXCLUDED = ("cpu_devices", "coordinator", "num_processes", "process_id",
                   "process_timeout", "out")
TIMEOUT = 400  # seconds, per process; about 60 s on an idle 2-core machine
# Variables by which JAX detects a cluster job (--coordinator auto).
CLUSTER_ENV = ("SLURM_", "OMPI_", "KUBERNETES_", "JAX_COORDINATOR")


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _env() -> dict:
  """The environment of a subprocess: CPU, no device count of ours (the
  commands' --cpu-devices sets theirs), no cluster job (--coordinator auto)."""
  env = {k: v for k, v in os.environ.items() if not k.startswith(CLUSTER_ENV)}
  return dict(env, JAX_PLATFORMS="cpu", XLA_FLAGS=xla_flags())


def _start(args, out) -> subprocess.Popen:
  return subprocess.Popen([sys.executable, str(SWEEP), *args, "--out", str(out)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=_env())


def _start_pair(args: list, outs: list) -> list[subprocess.Popen]:
  """Two processes of one run (``args[i]`` and ``outs[i]`` for process i),
  one CPU device each."""
  port = _free_port()
  return [_start([*args[i], "--cpu-devices", "1", "--coordinator", f"127.0.0.1:{port}",
                  "--num-processes", "2", "--process-id", str(i), "--process-timeout", "60"],
                 outs[i]) for i in range(2)]


def _finish(proc: subprocess.Popen, timeout: float = TIMEOUT) -> tuple[int, str, str]:
  try:
    out, err = proc.communicate(timeout=timeout)
  except subprocess.TimeoutExpired:
    proc.kill()
    out, err = proc.communicate()
    pytest.fail(f"no exit within {timeout} s: {err[-2000:]}")
  return proc.returncode, out, err


def _comparable(path: pathlib.Path) -> dict:
  saved = json.loads((path / "results.json").read_text())
  return {"config": {k: v for k, v in saved["config"].items() if k not in CONFIG_EXCLUDED},
          "runs": [{k: v for k, v in run.items() if k not in RUN_EXCLUDED}
                   for run in saved["runs"]]}


@pytest.mark.parametrize("setting", SETTINGS)
def test_two_processes_write_the_records_of_one_process_with_two_devices(setting, tmp_path):
  schemes, extra = SETTINGS[setting]
  args = [*TINY, "--schemes", *schemes, *extra]
  one = _start([*args, "--cpu-devices", "2"], tmp_path / "one")  # beside the pair
  pair = _start_pair([args] * 2, [tmp_path / "two", tmp_path / "process1"])
  code, _, err = _finish(one)
  assert code == 0, err[-3000:]
  (code0, out0, err0), (code1, out1, err1) = map(_finish, pair)
  assert code0 == 0 and code1 == 0, (err0[-3000:], err1[-3000:])
  assert "wrote" in err0 and schemes[0] in out0  # process 0 writes and reports
  assert out1 == "" and "wrote" not in err1  # process 1 writes nothing
  assert not (tmp_path / "process1").exists()
  saved = json.loads((tmp_path / "two" / "results.json").read_text())
  assert {(r["processes"], r["devices"]) for r in saved["runs"]} == {(2, 2)}
  one_run, two_runs = _comparable(tmp_path / "one"), _comparable(tmp_path / "two")
  assert sorted(r["scheme"] for r in two_runs["runs"]) == sorted(schemes)
  assert {r["secure_aggregation"] for r in two_runs["runs"]} == {bool(extra)}
  assert all(len(r["history"]) == 2 for r in two_runs["runs"])
  # The same XLA program on the same two-device mesh; a sum over two
  # devices has one order, so the numbers are equal, not merely close.
  assert two_runs == one_run
  if setting == "secure":  # the same command again: process 0 tells both to skip
    again = _start_pair([args] * 2, [tmp_path / "two", tmp_path / "process1"])
    (code0, _, err0), (code1, _, err1) = map(_finish, again)
    assert (code0, code1) == (0, 0), (err0[-3000:], err1[-3000:])
    assert "resuming: 1 finished run kept" in err0 and "resuming" not in err1
    assert _comparable(tmp_path / "two") == one_run


# Through the script: JAX's own failure (no cluster job). A fresh interpreter
# costs about 4 s; the checks that stop before JAX joins run in process below.
def test_bad_process_settings_are_one_line_exit_2(tmp_path):
  needle = "--coordinator auto: no SLURM, Open MPI or Kubernetes job"
  started = time.monotonic()
  code, _, err = _finish(_start([*TINY, "--coordinator", "auto"], tmp_path / "out"),
                         timeout=120)
  assert code == 2, err
  lines = err.strip().splitlines()
  assert len(lines) == 1 and needle in lines[0], err
  assert time.monotonic() - started < 60
  assert not (tmp_path / "out").exists()


def test_an_unreachable_coordinator_is_one_line_exit_2_in_process(tmp_path, capsys,
                                                                  monkeypatch):
  """Process 1 finds no process 0 within --process-timeout: refused before JAX joins."""
  import jax  # pylint: disable=import-outside-toplevel
  monkeypatch.setattr(jax.distributed, "initialize",
                      lambda *a, **k: pytest.fail("reached jax.distributed.initialize"))
  port = _free_port()  # a port nothing listens on
  started = time.monotonic()
  code = experiment.main([*TINY, "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2",
                          "--process-id", "1", "--process-timeout", "2",
                          "--out", str(tmp_path / "out")])
  err = capsys.readouterr().err.strip().splitlines()
  assert code == 2 and len(err) == 1, err
  assert (f"--coordinator 127.0.0.1:{port} unreachable from process 1 within "
          "--process-timeout 2 s") in err[0], err
  assert time.monotonic() - started < 60
  assert not (tmp_path / "out").exists()


def test_a_busy_coordinator_port_is_one_line_exit_2_in_process(tmp_path, capsys, monkeypatch):
  """Process 0 cannot listen on a port in use: refused before JAX joins."""
  import jax  # pylint: disable=import-outside-toplevel
  monkeypatch.setattr(jax.distributed, "initialize",
                      lambda *a, **k: pytest.fail("reached jax.distributed.initialize"))
  with socket.socket() as busy:
    busy.bind(("", 0))
    busy.listen()
    port = busy.getsockname()[1]
    code = experiment.main([*TINY, "--coordinator", f"127.0.0.1:{port}", "--num-processes",
                            "2", "--process-id", "0", "--out", str(tmp_path / "out")])
  err = capsys.readouterr().err.strip().splitlines()
  assert code == 2 and len(err) == 1, err
  assert f"process 0 cannot listen on port {port}" in err[0], err
  assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("args,needle", [
    (["--coordinator", "h:1", "--num-processes", "2", "--process-id", "-1"],
     "--process-id must be in [0, 1]"),
    (["--coordinator", "127.0.0.1:1", "--num-processes", "2", "--process-id", "2"],
     "--process-id must be in [0, 1] for --num-processes 2, got 2"),
    (["--num-processes", "2", "--process-id", "0"],
     "--num-processes and --process-id need --coordinator"),
    (["--coordinator", "nohost", "--num-processes", "2", "--process-id", "0"],
     "--coordinator takes HOST:PORT or 'auto', got 'nohost'"),
    (["--coordinator", "h:1", "--process-id", "0"],
     "--coordinator h:1 needs --num-processes and --process-id"),
    (["--process-timeout", "0"], "--process-timeout must be >= 1, got 0"),
    (["--num-processes", "two"], "argument --num-processes: invalid int value: 'two'"),
])
def test_bad_process_flags_in_process(args, needle, tmp_path, capsys):
  """Checked before JAX is touched: main returns 2 with one line."""
  assert experiment.main([*args, "--out", str(tmp_path / "out")]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and needle in err[0], err
  assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("case", ["process 0 cannot write", "other settings"])
def test_a_failing_process_stops_the_other(case, tmp_path):
  (tmp_path / "file").write_text("")
  outs = [tmp_path / "out", tmp_path / "out"]
  if case == "process 0 cannot write":
    outs[0] = tmp_path / "file" / "out"  # under a file
    args = [[*TINY, "--schemes", "FL-STD"]] * 2
    needle = "--out"
  else:
    args = [[*TINY, "--schemes", "FL-STD"], [*TINY, "--schemes", "FL-STD", "--seed", "1"]]
    needle = "process(es) 1 hold other settings than process 0"
  pair = _start_pair(args, outs)
  started = time.monotonic()
  (code0, _, err0), (code1, _, err1) = (_finish(p, timeout=180) for p in pair)
  assert (code0, code1) == (2, 2), (err0, err1)
  assert time.monotonic() - started < 150
  for err in (err0, err1):
    lines = [l for l in err.strip().splitlines() if not l.startswith("[Gloo]")]
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in err, err
  if case == "process 0 cannot write":  # process 1's line says who failed
    assert "sweep.py: error: stopped: process 0: --out" in err1


@pytest.mark.parametrize("settings,needle", [
    (distributed.Processes(process_id=0), "--num-processes and --process-id need"),
    (distributed.Processes("auto", 2), "--coordinator auto detects"),
    (distributed.Processes("h:99999", 2, 0), "--coordinator takes HOST:PORT"),
    (distributed.Processes("h:1", 0, 0), "--num-processes must be >= 1, got 0"),
    (distributed.Processes("h:1", 3, 3), "--process-id must be in [0, 2]"),
])
def test_process_settings_are_validated(settings, needle):
  with pytest.raises(ValueError) as e:
    settings.validate()
  assert needle in str(e.value)
  distributed.Processes("[::1]:80", 2, 1).validate()
  assert distributed.address("[::1]:80") == ("::1", 80)
  assert not distributed.Processes().enabled


def test_one_process_needs_no_collective(tmp_path):
  assert distributed.broadcast_bytes(b"abc") == b"abc"
  distributed.check_same("data", b"anything")
  assert distributed.digest(np.zeros(2)) != distributed.digest(np.zeros(3))
  assert not distributed.joined()
  # A checkpoint read elsewhere (process 0 of a multi-process run) loads alike.
  state = {"w": np.arange(4.0, dtype=np.float32)}
  path = tmp_path / "c.npz"
  checkpoint.save(path, "key", checkpoint.Saved(3, state, [{"round": 3}], (1, 2), []))
  from_bytes = checkpoint.load(tmp_path / "elsewhere.npz", "key", state,
                               content=path.read_bytes())
  assert from_bytes.round == 3 and np.array_equal(from_bytes.state["w"], state["w"])


def test_benchmark_compares_one_process_with_two_processes(monkeypatch, capsys):
  # FL-STD: the quickest round to compile, and its sum is the whole model.
  # The script's own process only starts the layouts' processes (each a fresh
  # interpreter, as a user's): its main runs here, in _env()'s environment,
  # which they inherit (an interpreter fewer, about 4 s).
  for name, value in _env().items():
    monkeypatch.setenv(name, value)
  for name in [k for k in os.environ if k.startswith(CLUSTER_ENV)]:
    monkeypatch.delenv(name)
  monkeypatch.setattr(sys, "argv", [
      str(ROOT / "benchmarks" / "processes.py"), "--num-clients", "40",
      "--clients-per-round", "4", "--repeats", "1", "--scheme", "FL-STD", "--json"])
  code = benchmark_modules.load("processes").main()
  out, err = capsys.readouterr()
  assert code == 0, err[-3000:]
  *layouts, summary = [json.loads(line) for line in out.strip().splitlines()]
  assert [(r["layout"], r["processes"], r["devices"]) for r in layouts] == [
      ("1x2", 1, 2), ("2x1", 2, 2)]
  assert all(r["clients_per_sec"] > 0 and not r["recompiled"] for r in layouts)
  assert all(r["cpu_seconds_per_round"] > 0 for r in layouts)
  assert summary["ratio"] == pytest.approx(
      layouts[1]["clients_per_sec"] / layouts[0]["clients_per_sec"])
  assert summary["cpu_ratio"] == pytest.approx(
      layouts[1]["clients_per_cpu_second"] / layouts[0]["clients_per_cpu_second"])
