"""Stopping and resuming say what happened (issue 62): Ctrl-C and SIGTERM
keep the checkpoint and name it in one line (exit codes 130 and 143), the
same command again says where it resumes, and another command's or
version's checkpoint is refused in one line (exit code 2)."""

import contextlib
import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from fedjax_dp import checkpoint, interrupts
from fedjax_dp.cli import sweep
from xla_env import xla_flags

ROOT = pathlib.Path(__file__).resolve().parents[2]
SWEEP = ROOT / "experiments" / "sweep.py"
# The medical MLP on 60 synthetic clients, evaluated after every round: a
# run of 2000 rounds lasts long enough to be stopped at any moment.
LONG = ["--dataset", "medical-synth", "--schemes", "FL-STD", "--rounds", "2000",
        "--eval-every", "1", "--num-clients", "60", "--samples-per-client", "10",
        "--clients-per-round", "3", "--local-steps", "1", "--test-size", "100", "--quiet"]
TIMEOUT = 300  # seconds to a checkpoint or an exit (about 30 s on a busy 2-core machine)
_STOPPED = re.compile(r"sweep\.py: interrupted in FL-STD r=1 after round (\d+) of 2000; "
                      r"checkpoint (\S+) \(round (\d+)\) kept: run the same command to resume")


@contextlib.contextmanager
def _default_sigint():
  """Ctrl-C's default disposition while a child starts (it inherits it: a
  suite started in the background ignores SIGINT, and so would the child)."""
  before = signal.signal(signal.SIGINT, signal.SIG_DFL)
  try:
    yield
  finally:
    signal.signal(signal.SIGINT, before)


def _start(argv: list[str], out: pathlib.Path, env: dict | None = None) -> subprocess.Popen:
  with _default_sigint():
    return subprocess.Popen([sys.executable, str(SWEEP), *argv, "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, JAX_PLATFORMS="cpu", **(env or {})))


def _wait_for(path: pathlib.Path, proc: subprocess.Popen) -> None:
  deadline = time.monotonic() + TIMEOUT
  while not path.is_file():
    if proc.poll() is not None or time.monotonic() > deadline:
      proc.kill()
      pytest.fail(f"no checkpoint {path}: {proc.communicate()[1][-3000:]}")
    time.sleep(0.05)


def _finish(proc: subprocess.Popen) -> tuple[int, str]:
  try:
    _, err = proc.communicate(timeout=TIMEOUT)
  except subprocess.TimeoutExpired:
    proc.kill()
    pytest.fail(f"no exit within {TIMEOUT} s: {proc.communicate()[1][-3000:]}")
  return proc.returncode, err


def _stopped_line(err: str, path: pathlib.Path) -> tuple[int, int]:
  """(last round trained, checkpoint's round) of the one interrupted line,
  checked against the file."""
  lines = err.strip().splitlines()
  assert len(lines) == 1 and "Traceback" not in err, err
  found = _STOPPED.fullmatch(lines[0])
  assert found, lines[0]
  assert found[2] == str(path)
  saved = checkpoint.peek(path)["round"]
  assert int(found[3]) == saved  # the round the file holds, which a resume continues
  assert int(found[1]) >= saved >= 1
  return int(found[1]), saved


def test_sigint_and_sigterm_keep_the_checkpoint_in_one_line_and_a_rerun_resumes(tmp_path):
  out = tmp_path / "out"
  path = out / ".checkpoints" / "FL-STD-r1.npz"
  proc = _start(LONG, out)
  _wait_for(path, proc)
  proc.send_signal(signal.SIGINT)  # Ctrl-C
  code, err = _finish(proc)
  assert code == 130, err[-3000:]
  _, saved = _stopped_line(err, path)
  assert not (out / "results.json").exists()
  # The same command again says where it resumes, then SIGTERM stops it alike.
  proc = _start(LONG, out)
  first = proc.stderr.readline().rstrip("\n")
  assert first == (f"sweep.py: resuming FL-STD r=1 at round {saved + 1} of 2000 from its "
                   f"checkpoint {path} (round {saved})")
  proc.send_signal(signal.SIGTERM)
  code, err = _finish(proc)
  assert code == 143, err[-3000:]
  _, again = _stopped_line(err, path)
  assert again >= saved


def _interrupted_at_second_evaluation(argv, out, monkeypatch, capsys) -> str:
  """``sweep.main(argv)`` stopped by Ctrl-C right after its second
  evaluation (its checkpoint saved); returns its stderr."""
  real_run = sweep.simulation.run

  def run_interrupted(*args, **kwargs):
    evaluations = []

    def progress(rounds):
      evaluations.append(rounds)
      if len(evaluations) == 2:
        raise KeyboardInterrupt
    return real_run(*args, **dict(kwargs, progress=progress))

  monkeypatch.setattr(sweep.simulation, "run", run_interrupted)
  assert sweep.main([*argv, "--out", str(out)]) == 130
  monkeypatch.setattr(sweep.simulation, "run", real_run)
  return capsys.readouterr().err


SHORT = ["--dataset", "medical-synth", "--schemes", "FL-STD", "--rounds", "3",
         "--num-clients", "60", "--samples-per-client", "10", "--clients-per-round", "3",
         "--local-steps", "1", "--test-size", "100", "--quiet"]


def test_a_checkpoint_of_another_command_or_version_is_refused_in_one_line(
    tmp_path, capsys, monkeypatch):
  """A checkpoint of --rounds 3 stops a --rounds 4 sweep in the same --out
  (exit 2, one line naming the file, nothing written, the file untouched);
  so does one of another format version. The --rounds 3 command continues it."""
  out = tmp_path / "out"
  path = out / ".checkpoints" / "FL-STD-r1.npz"
  err = _interrupted_at_second_evaluation(SHORT, out, monkeypatch, capsys)
  assert err.strip().splitlines() == [
      f"sweep.py: interrupted in FL-STD r=1 after round 2 of 3; checkpoint {path} "
      "(round 2) kept: run the same command to resume"]
  saved = path.read_bytes()

  def refused(args, holds):  # exit 2, one line, the file and --out untouched
    before = path.read_bytes()
    assert sweep.main([*args, "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"sweep.py: error: {path} holds a checkpoint of {holds}, not of FL-STD r=1 as this "
        "command runs it: delete it to start that run afresh, choose another --out, or add "
        "--overwrite"]
    assert path.read_bytes() == before
    assert sorted(p.name for p in out.iterdir()) == [".checkpoints"]  # nothing written

  refused([a if a != "3" else "4" for a in SHORT],  # --rounds 4
          "another run (other settings, data or model)")
  # Another test set or public set (they were continued in silence, the
  # record's rounds evaluated on two test sets).
  for other in (["--test-size", "120"], ["--public-size", "12"]):
    refused([*SHORT, *other], "another run (other settings, data or model)")
  # A sweep that does not run FL-STD r=1 would strand its checkpoint: refused
  # before any work (its results.json would then refuse the first command).
  assert sweep.main([*[a if a != "FL-STD" else "FL-STD-DP" for a in SHORT], "--out",
                     str(out)]) == 2
  assert capsys.readouterr().err.strip().splitlines() == [
      f"sweep.py: error: --out {out} holds the checkpoint of an interrupted run this sweep "
      "does not run (.checkpoints/FL-STD-r1.npz): run its command again to finish it, "
      "choose another --out, or add --overwrite"]
  assert path.read_bytes() == saved and sorted(p.name for p in out.iterdir()) == [".checkpoints"]
  # A checkpoint of format version 1.
  with np.load(path) as f:
    arrays = {name: f[name] for name in f.files if name != "meta"}
  meta = dict(checkpoint.peek(path), version=1)
  with open(path, "wb") as f:
    np.savez(f, meta=np.array(json.dumps(meta)), **arrays)
  older = path.read_bytes()
  refused(SHORT, "another version of fedjax_dp (format 1; this version reads format 2)")
  # Its own command continues it, saying so on a line of its own above the
  # progress bar (splitlines splits at the bar's carriage returns too).
  path.write_bytes(saved)
  assert sweep.main([*[a for a in SHORT if a != "--quiet"], "--out", str(out)]) == 0
  err = capsys.readouterr().err
  assert (f"sweep.py: resuming FL-STD r=1 at round 3 of 3 from its checkpoint {path} "
          "(round 2)") in err.splitlines()
  assert not path.exists()
  # With --overwrite another version's is deleted, saying so; the run starts afresh.
  elsewhere = tmp_path / "elsewhere" / ".checkpoints" / "FL-STD-r1.npz"
  elsewhere.parent.mkdir(parents=True)
  elsewhere.write_bytes(older)
  assert sweep.main([*SHORT, "--out", str(elsewhere.parents[1]), "--overwrite"]) == 0
  err = capsys.readouterr().err.splitlines()
  assert err[0] == (f"sweep.py: deleted {elsewhere}, a checkpoint of another version of "
                    "fedjax_dp (format 1; this version reads format 2) (--overwrite)")
  assert not [line for line in err if "resuming" in line] and not elsewhere.exists()


def test_a_checkpoint_whose_state_differs_is_refused_in_one_line_or_overwritten(
    tmp_path, capsys, monkeypatch):
  """A checkpoint of this run's key whose state has other leaves (known only
  once the run is set up) is refused in one line, exit 2 (it was a
  traceback, even with --overwrite); with --overwrite it is deleted and the
  run starts afresh."""
  out = tmp_path / "out"
  path = out / ".checkpoints" / "FL-STD-r1.npz"
  _interrupted_at_second_evaluation(SHORT, out, monkeypatch, capsys)
  with np.load(path) as f:  # one leaf of another shape
    arrays = {name: f[name] for name in f.files if name != "meta"}
    meta = f["meta"]
  arrays["leaf0"] = np.zeros((*arrays["leaf0"].shape, 2), arrays["leaf0"].dtype)
  with open(path, "wb") as f:
    np.savez(f, meta=meta, **arrays)
  assert sweep.main([*SHORT, "--out", str(out)]) == 2
  lines = capsys.readouterr().err.strip().splitlines()
  assert lines[-1] == (
      f"sweep.py: error: {path} holds a checkpoint of another run or version of fedjax_dp "
      "(its state's structure differs), not of FL-STD r=1 as this command runs it: delete "
      "it to start that run afresh, choose another --out, or add --overwrite"), lines
  assert path.exists() and not (out / "results.json").exists()
  assert sweep.main([*SHORT, "--out", str(out), "--overwrite"]) == 0
  err = capsys.readouterr().err.splitlines()
  assert (f"sweep.py: deleted {path}, a checkpoint of another run or version of fedjax_dp "
          "(its state's structure differs) (--overwrite)") in err
  assert not path.exists() and (out / "results.json").exists()


def test_an_interruption_before_the_first_checkpoint_says_nothing_is_kept(tmp_path):
  run = sweep.resolve(sweep.build_parser().parse_args(SHORT)).runs[0]
  error = sweep.Interrupted(run, tmp_path / ".checkpoints" / "FL-STD-r1.npz", 1, 143)
  assert interrupts.exit_code(error) == 143
  assert sweep.interrupted_line("sweep.py", "res", error, 0) == (
      "sweep.py: interrupted in FL-STD r=1 after round 1 of 3, before its first checkpoint "
      "(one is saved at each evaluation); nothing written")
  assert sweep.interrupted_line("sweep.py", "res", error, 2) == (
      "sweep.py: interrupted in FL-STD r=1 after round 1 of 3, before its first checkpoint "
      "(one is saved at each evaluation); the 2 finished runs are in res: run the same "
      "command to resume")
  error = sweep.Interrupted(run, tmp_path / ".checkpoints" / "FL-STD-r1.npz", 0, 130)
  assert sweep.interrupted_line("sweep.py", "res", error, 1) == (
      "sweep.py: interrupted in FL-STD r=1 before its first round ended; the 1 finished runs "
      "are in res: run the same command to resume")
  assert sweep.interrupted_line("x.py", "res", KeyboardInterrupt(), 0) == (
      "x.py: interrupted; nothing written")
  assert interrupts.exit_code(KeyboardInterrupt()) == 130


def test_sigterm_raises_terminated_within_the_block_only():
  before = signal.getsignal(signal.SIGTERM)
  with pytest.raises(interrupts.Terminated):
    with interrupts.sigterm_as_interrupt():
      os.kill(os.getpid(), signal.SIGTERM)
      time.sleep(5)  # the handler raises at once
  assert signal.getsignal(signal.SIGTERM) == before
  signal.signal(signal.SIGTERM, signal.SIG_IGN)  # as for a job that ignores it
  try:
    with interrupts.sigterm_as_interrupt():
      assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
  finally:
    signal.signal(signal.SIGTERM, before)


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def test_sigterm_to_process_0_of_two_stops_both_and_keeps_the_checkpoint(tmp_path):
  """Two processes of one run (gloo): SIGTERM to process 0 prints its one
  line and stops process 1 too (``distributed.abort``), both with 143."""
  port = _free_port()
  out = tmp_path / "out"
  path = out / ".checkpoints" / "FL-STD-r1.npz"
  env = {"XLA_FLAGS": xla_flags()}
  procs = [_start([*LONG, "--cpu-devices", "1", "--coordinator", f"127.0.0.1:{port}",
                   "--num-processes", "2", "--process-id", str(i), "--process-timeout", "60"],
                  out, env) for i in range(2)]
  _wait_for(path, procs[0])
  procs[0].send_signal(signal.SIGTERM)
  (code0, err0), (code1, err1) = map(_finish, procs)
  assert (code0, code1) == (143, 143), (err0[-3000:], err1[-3000:])
  _stopped_line("\n".join(l for l in err0.splitlines() if not l.startswith("[Gloo]")), path)
  lines1 = [l for l in err1.strip().splitlines() if not l.startswith("[Gloo]")]
  assert lines1 == ["sweep.py: error: stopped: process 0: interrupted"], err1[-3000:]
