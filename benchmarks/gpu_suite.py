"""The GPU suite (issues 41, 47): one device call that measures everything.

  bash benchmarks/gpu_suite.sh prepare   # here, on the CPU machine: wheels and data
  bash benchmarks/gpu_suite.sh plan      # here: the steps, their deadlines and their sum
  bash benchmarks/gpu_suite.sh run       # there: the device tool's command, timeout_s 600,
                                         # carry [".whl", ".gpu-data"]

``run`` (``gpu_suite.sh`` installs the wheels, then runs ``main``) records the
machine first, then runs the steps of :func:`steps` in order, the most
telling first, each under its own deadline, and ends with a summary. A step
that finishes early leaves its time to the steps after it (each step gets its
deadline plus the time saved so far, never the time a later step is
planned), and the whole run ends within ``BUDGET_S`` seconds of the device
call's start, inside the tool's 600 s. A step past its deadline gets SIGINT
(the benchmarks keep the records they have: ``throughput.py`` appends each
case as it ends, ``models.py`` rewrites its file after each model), then
SIGKILL ``KILL_AFTER_S`` seconds later, and the suite goes on. A spare step
(``pfl``: ``benchmarks/peers.py`` against pfl-research) runs last, on the
time the others saved, outside the sum of deadlines; it is skipped when less
than its deadline is left.

What comes back in ``$OUT`` (the tool returns at most 8 files):

* ``suite.jsonl``: one line when each step starts and one when it ends
  (``status`` ok, failed, cut by its deadline, or skipped), flushed as it
  goes; the ``env`` step's line holds nvidia-smi's card, the Python, JAX,
  flax, PyTorch and NumPy versions, the devices, and the source's commit;
* ``log.txt``: every step's command and output under a header, in order;
* ``throughput.jsonl``, ``models.jsonl`` and ``peers.jsonl``: the benchmarks'
  records;
* ``trace.json.gz`` and ``trace-summary.json``: the profiler trace of one
  FL-TOP-DP round of 1,000 clients and ``trace_summary.py``'s reading of it;
* ``pytest-cpu.txt``: the fast-path tests on the CPU, run beside the GPU
  steps (pinned to the other half of the cores where there are 8 or more).

The summary at the end (printed, and appended to ``log.txt``) gives each
record's clients/s with the ratios to ``torch.func`` and to the per-client
loop, the models' rates, pfl's rates and our ratios to them, the trace's
products share and each step's status.
docs/performance.md ("On a GPU") tells how to read it.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import math
import os
import pathlib
import shlex
import shutil
import signal
import subprocess
import sys
import time
import typing

ROOT = pathlib.Path(__file__).resolve().parents[1]
PROG = "benchmarks/gpu_suite.py"

BUDGET_S = 570  # the run, environment to summary: the device tool stops a call at 600 s
STEPS_BUDGET_S = 540  # the sequential steps' deadlines add up to at most this
KILL_AFTER_S = 10  # SIGINT at the deadline, SIGKILL this much later
MIN_STEP_S = 10  # a step given less than this (or than its deadline) is skipped
PROFILE_DIR = "/tmp/gpu-suite-profile"
# The fast-path tests (pytest on the device's JAX, on the CPU and on the GPU): the
# files tests/fast_path_tests.txt lists (kept complete by tests/test_jax_internals.py).
FAST_PATH_TESTS = [line.strip() for line in (ROOT / "tests/fast_path_tests.txt").read_text().splitlines()
                   if line.strip() and not line.startswith("#")]
# benchmarks/models.py's models: the paper CNN (for x_paper_cnn) and every zoo model.
ZOO_MODELS = "paper-cnn,mlp,small-cnn,svhn-cnn,lstm,all-cnn-c,imdb-cnn-lstm,emnist-cnn"
_FALLBACK_BATCHINGS = ("map", "vmap", "product")
# pfl's environment on the device (benchmarks/peers.py --pfl-torch shared): pfl and
# the pins it needs beyond the image's packages, from the wheels `prepare` put in
# .whl/pfl (the device reaches no package index); the card's torch is the image's.
PFL_ENV = "/tmp/pfl-env"
PFL_PIP_ARGS = "--no-index --find-links .whl --find-links .whl/pfl"


class Step(typing.NamedTuple):
  """One command of the suite under a deadline (seconds)."""
  name: str
  what: str
  deadline: float
  argv: list
  env: dict = {}  # set for its process (never changed in place)
  background: bool = False  # runs beside the sequential steps (CPU only)
  output: typing.Optional[str] = None  # its own output file under $OUT (default: log.txt)
  # Runs last, on the time the steps before it saved (its deadline: what it needs
  # at least), outside the sum of deadlines; skipped when less is left.
  spare: bool = False


def batching_modes(path: pathlib.Path = ROOT / "fedjax_dp/models/cohort_ops.py") -> list[str]:
  """Every cohort batching ``cohort_ops.BATCHINGS`` lists but ``auto``, read from
  the source (the suite imports no JAX); the three of issue 41 if unreadable."""
  try:
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
      if (isinstance(node, ast.Assign) and any(
          isinstance(t, ast.Name) and t.id == "BATCHINGS" for t in node.targets)):
        modes = ast.literal_eval(node.value)
        if modes and all(isinstance(m, str) for m in modes):
          return [m for m in modes if m != "auto"]
  except (OSError, SyntaxError, ValueError):
    pass
  return list(_FALLBACK_BATCHINGS)


def _pytest(workers: int) -> list[str]:
  """pytest of the fast-path tests (with ``workers`` pytest-xdist workers if it is there)."""
  xdist = ["-n", str(workers)] if workers > 1 and importlib.util.find_spec("xdist") else []
  return [sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider",
          "--durations=5", *xdist, *FAST_PATH_TESTS]


_ENV_SNIPPET = r"""
import json, os, platform, subprocess, sys
out = {"python": sys.version.split()[0], "cpus": os.cpu_count()}
try:
  out["nvidia_smi"] = subprocess.run(
      ["nvidia-smi", "--query-gpu=name,memory.total,driver_version,clocks.max.sm",
       "--format=csv,noheader"], capture_output=True, text=True, timeout=20).stdout.strip()
except (OSError, subprocess.SubprocessError) as e:
  out["nvidia_smi"] = f"unavailable: {e}"
try:
  out["cpu"] = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                    if l.startswith("model name"))
except (OSError, StopIteration):
  out["cpu"] = platform.processor()
for name in ("jax", "jaxlib", "flax", "optax", "numpy", "torch"):
  try:
    out[name] = __import__(name).__version__
  except Exception as e:
    out[name] = f"unavailable: {type(e).__name__}: {e}"
try:
  import jax
  out["jax_backend"] = jax.default_backend()
  out["jax_devices"] = [str(d) for d in jax.devices()]
except Exception as e:
  out["jax_devices"] = f"unavailable: {type(e).__name__}: {e}"
try:
  import torch
  out["torch_cuda"] = torch.cuda.get_device_name() if torch.cuda.is_available() else None
except Exception as e:
  out["torch_cuda"] = f"unavailable: {type(e).__name__}: {e}"
print(json.dumps(out))
"""


def steps(out: str) -> list[Step]:
  """The suite, in order: the most telling first (issue 47, part 4)."""
  py = sys.executable
  bench = [py, "benchmarks/throughput.py", "--json", "--repeats", "2",
           "--out", f"{out}/throughput.jsonl"]
  light = ["--split-max-clients", "0", "--no-eval", "--no-torch"]  # the round alone
  modes = batching_modes()
  cores = len(_cores())
  return [
      Step("env", "the card, the versions of Python, JAX, flax, PyTorch, the source", 15,
           [py, "-c", _ENV_SNIPPET], env={"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}),
      Step("pytest-cpu", "the fast-path tests on the device's JAX, on the CPU "
           "(JAX_PLATFORMS=cpu), beside the GPU steps", 480,
           _pytest(max(1, cores // 4)), env={"JAX_PLATFORMS": "cpu"},
           background=True, output="pytest-cpu.txt"),
      Step("anchor", "(a) FL-STD-DP and FL-TOP-DP at 1,000 clients, default batching, beside "
           "PyTorch in the same process (torch.func 128 at a time and all at once, the "
           "per-client loop on 50 clients); a profiler trace of one more FL-TOP-DP round", 105,
           bench + ["--scheme", "FL-STD-DP,FL-TOP-DP", "--clients-per-round", "1000",
                    "--torch-func", "128,all", "--torch-loop-clients", "50",
                    "--profile", PROFILE_DIR],
           # JAX takes half the card (its round of 1,000 peaked at 20 GB on the H200);
           # torch.func of 1,000 clients at once needs the rest.
           env={"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.5"}),
      Step("trace", "(b) the trace's GPU busy time, products' share and top fusions", 10,
           [py, "benchmarks/trace_summary.py", f"{out}/trace.json.gz",
            "--out", f"{out}/trace-summary.json"]),
      Step("sign", "(c) FL-STD and FL-SIGN-DP at 1,000 clients (FL-SIGN-DP's privacy step "
           "timed on its own)", 75,
           bench + ["--scheme", "FL-STD,FL-SIGN-DP", "--clients-per-round", "1000",
                    "--no-torch"]),
      Step("batching", f"(d) FL-STD-DP at 1,000 clients with each cohort batching "
           f"({', '.join(modes)})", 20 + 13 * len(modes),
           bench + ["--scheme", "FL-STD-DP", "--clients-per-round", "1000",
                    "--batching", ",".join(modes)] + light),
      Step("models", "(e) benchmarks/models.py: the paper CNN and every zoo model, "
           "100 clients", 80,
           [py, "benchmarks/models.py", "--models", ZOO_MODELS, "--clients", "100",
            "--repeats", "2", "--json", "--out", f"{out}/models.jsonl", "--overwrite"]),
      Step("pytest-gpu", "(f) the fast-path tests on the device's JAX, on the GPU", 60,
           # The workers share the card, each taking what it needs.
           _pytest(max(1, cores // 4)), env={"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}),
      Step("cs", "(g) FL-CS-DP at 1,000 clients", 35,
           bench + ["--scheme", "FL-CS-DP", "--clients-per-round", "1000"] + light),
      Step("flax", "(g) the paper CNN as a flax module (models.from_flax), FL-STD-DP at "
           "1,000 clients", 30,
           bench + ["--model", "paper-cnn-flax", "--scheme", "FL-STD-DP",
                    "--clients-per-round", "1000"] + light),
      Step("chunk", "(g) FL-STD-DP at 1,000 clients in one chunk (the default: 128 at a "
           "time)", 25,
           bench + ["--scheme", "FL-STD-DP", "--clients-per-round", "1000",
                    "--client-chunk", "1000"] + light),
      Step("10k", "(g) FL-TOP-DP at 10,000 clients (the data's 6,000 repeated)", 20,
           bench + ["--scheme", "FL-TOP-DP", "--clients-per-round", "10000"] + light),
      Step("pfl", "(h) benchmarks/peers.py: FL-STD-DP against pfl-research 0.6.0 with its "
           "central DP on the same card, its multi-process simulation and its default, "
           "100 clients; on the time the steps before saved", 75,
           [py, "benchmarks/peers.py", "--clients-per-round", "100", "--repeats", "2",
            "--cases", "FL-STD-DP,pfl-dp-multiproc,pfl-dp-default", "--pfl-torch", "shared",
            "--pfl-env", PFL_ENV, "--pfl-pip-args", PFL_PIP_ARGS, "--json",
            "--out", f"{out}/peers.jsonl"], spare=True),
  ]


def _cores() -> list[int]:
  try:
    return sorted(os.sched_getaffinity(0))
  except AttributeError:  # not Linux
    return list(range(os.cpu_count() or 1))


def plan(out: str, as_json: bool = False) -> int:
  """Prints the steps, their deadlines and their sum; 1 if over ``STEPS_BUDGET_S``."""
  all_steps = steps(out)
  sequential = sum(s.deadline for s in all_steps if not s.background and not s.spare)
  if as_json:
    print(json.dumps({"budget_s": BUDGET_S, "steps_budget_s": STEPS_BUDGET_S,
                      "sequential_s": sequential, "kill_after_s": KILL_AFTER_S,
                      "steps": [s._asdict() for s in all_steps]}))
  else:
    for i, s in enumerate(all_steps):
      when = "background" if s.background else f"{s.deadline:4.0f} s" + (
          " spare" if s.spare else "")
      print(f"{i:2d}. {s.name:10s} {when:>10s}  {s.what}")
      env = " ".join(f"{k}={v}" for k, v in s.env.items())
      if s.name != "env":
        print(f"      {env + ' ' if env else ''}{shlex.join(s.argv)}")
    print(f"sequential steps: {sequential:.0f} s of {STEPS_BUDGET_S} s; the run ends within "
          f"{BUDGET_S} s of its start (the device call's limit: 600 s)")
  return 0 if sequential <= STEPS_BUDGET_S else 1


class Suite:
  """Runs steps under deadlines, recording to ``$OUT`` as it goes."""

  def __init__(self, out: str, budget: float = BUDGET_S, start: float | None = None,
               kill_after: float = KILL_AFTER_S):
    self.out = pathlib.Path(out)
    self.out.mkdir(parents=True, exist_ok=True)
    self.budget, self.kill_after = budget, kill_after
    self.start = time.time() if start is None else start
    # Open for the suite's life: every sequential step writes into it.
    self.log = open(self.out / "log.txt", "a",  # pylint: disable=consider-using-with
                    encoding="utf-8")
    self.background: list[tuple[Step, subprocess.Popen, float, object]] = []
    self.results: dict[str, dict] = {}

  def left(self) -> float:
    return self.budget - (time.time() - self.start)

  def record(self, rec: dict) -> None:
    rec = {"time_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
           "elapsed_s": round(time.time() - self.start, 1), **rec}
    with open(self.out / "suite.jsonl", "a", encoding="utf-8") as f:
      f.write(json.dumps(rec) + "\n")

  def say(self, text: str) -> None:
    """A line in the log and on the console."""
    self.log.write(text + "\n")
    self.log.flush()
    print(text, flush=True)

  def deadline(self, step: Step, later: float) -> float:
    """The step's deadline plus the time saved so far; never a later step's time."""
    return min(self.left() - self.kill_after, max(step.deadline, self.left() - later))

  def _popen(self, step: Step, stdout) -> subprocess.Popen:
    env = dict(os.environ, **step.env)
    # A session of its own: the deadline's signals reach its children (xdist
    # workers). SIGINT's default restored: a suite started in the background by
    # a non-interactive shell inherits it ignored, and a Python step would then
    # never see its KeyboardInterrupt and write what it measured. Restored in
    # this process for the moment of the start (a child inherits an ignored
    # signal, not a handler), not by a preexec_fn: that makes subprocess fork
    # this process, which JAX's threads make unsafe (JAX warns).
    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    if ignored:
      signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
      return subprocess.Popen(  # pylint: disable=consider-using-with
          step.argv, cwd=ROOT, env=env, stdout=stdout, stderr=subprocess.STDOUT,
          start_new_session=True)
    finally:
      if ignored:
        signal.signal(signal.SIGINT, signal.SIG_IGN)

  def _stop(self, proc: subprocess.Popen) -> None:
    """SIGINT to the step's process group, SIGKILL ``kill_after`` later."""
    for sig, wait in ((signal.SIGINT, self.kill_after), (signal.SIGKILL, 5)):
      try:
        os.killpg(proc.pid, sig)
      except ProcessLookupError:
        return
      try:
        proc.wait(timeout=wait)
        return
      except subprocess.TimeoutExpired:
        continue

  def run(self, step: Step, later: float = 0.0) -> dict:
    """Runs one sequential step; returns (and records) its end."""
    limit = self.deadline(step, later)
    head = {"step": step.name, "deadline_s": step.deadline, "given_s": round(limit, 1)}
    if limit < (step.deadline if step.spare else min(MIN_STEP_S, step.deadline)):
      end = dict(head, event="end", status="skipped", note=f"{self.left():.0f} s left of the run's "
                 f"{self.budget:.0f} s" + (f"; a spare step needs {step.deadline:.0f} s"
                                           if step.spare else ""))
      self.say(f"== {time.strftime('%H:%M:%S')} {step.name}: skipped (no time left)")
      self.record(end)
      self.results[step.name] = end
      return end
    self.record(dict(head, event="start", command=shlex.join(step.argv), env=step.env))
    env = " ".join(f"{k}={v}" for k, v in step.env.items())
    self.say(f"== {time.strftime('%H:%M:%S')} {step.name}: {step.what} "
             f"(deadline {step.deadline:.0f} s, given {limit:.0f} s)")
    self.log.write(f"$ {env + ' ' if env else ''}{shlex.join(step.argv)}\n")
    self.log.flush()
    t0 = time.time()
    proc = self._popen(step, self.log)
    try:
      rc = proc.wait(timeout=limit)
      status = "ok" if rc == 0 else "failed"
    except subprocess.TimeoutExpired:
      self._stop(proc)
      rc, status = proc.returncode, "cut"
    seconds = time.time() - t0
    end = dict(head, event="end", status=status, rc=rc, seconds=round(seconds, 1))
    note = f"cut by its deadline after {seconds:.0f} s" if status == "cut" else \
        f"{status} (exit {rc}) after {seconds:.0f} s"
    self.say(f"== {time.strftime('%H:%M:%S')} {step.name}: {note}")
    self.record(end)
    self.results[step.name] = end
    return end

  def start_background(self, step: Step) -> None:
    """Starts a step beside the sequential ones, its output in its own file."""
    limit = min(step.deadline, self.left() - self.kill_after)
    path = self.out / (step.output or f"{step.name}.txt")
    f = open(path, "a", encoding="utf-8")  # pylint: disable=consider-using-with
    env = " ".join(f"{k}={v}" for k, v in step.env.items())
    f.write(f"$ {env + ' ' if env else ''}{shlex.join(step.argv)}\n")
    f.flush()
    cores = _cores()
    if len(cores) >= 8:  # the upper half of the cores, the GPU steps keep the lower
      mine, theirs = cores[:len(cores) // 2], cores[len(cores) // 2:]
      os.sched_setaffinity(0, theirs)
      try:
        proc = self._popen(step, f)
      finally:
        os.sched_setaffinity(0, mine)
      note = f"cores {theirs[0]}-{theirs[-1]}; the steps after it on {mine[0]}-{mine[-1]}"
    else:
      proc, note = self._popen(step, f), "unpinned (fewer than 8 cores)"
    self.record({"step": step.name, "event": "start", "background": True,
                 "deadline_s": step.deadline, "given_s": round(limit, 1), "note": note,
                 "command": shlex.join(step.argv), "env": step.env})
    self.say(f"== {time.strftime('%H:%M:%S')} {step.name} (background, {note}): {step.what}, "
             f"deadline {limit:.0f} s, output in {step.output}")
    self.background.append((step, proc, time.time() + limit, f))

  def finish_background(self) -> None:
    """Waits for the background steps until their deadlines, cutting them there."""
    for step, proc, until, f in self.background:
      t_end = min(until, self.start + self.budget - self.kill_after)
      try:
        rc = proc.wait(timeout=max(t_end - time.time(), 0.1))
        status = "ok" if rc == 0 else "failed"
      except subprocess.TimeoutExpired:
        self._stop(proc)
        rc, status = proc.returncode, "cut"
        f.write(f"== cut by its deadline ({step.deadline:.0f} s)\n")
      f.close()
      end = {"step": step.name, "event": "end", "background": True, "status": status,
             "rc": rc, "deadline_s": step.deadline}
      self.say(f"== {time.strftime('%H:%M:%S')} {step.name}: {status} (exit {rc})")
      self.record(end)
      self.results[step.name] = end
    self.background = []


def source_identity(root: pathlib.Path = ROOT) -> dict:
  """A digest of the sources (fedjax_dp/, benchmarks/, tests/: *.py, *.sh, *.json):
  what ``prepare`` records beside the commit, and the device compares."""
  h = hashlib.sha256()
  for folder in ("fedjax_dp", "benchmarks", "tests"):
    for path in sorted((root / folder).rglob("*")):
      if path.suffix in (".py", ".sh", ".json") and path.is_file() and \
          "__pycache__" not in path.parts:
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
  return {"digest": h.hexdigest()[:16]}


def _git(*args: str) -> str | None:
  try:
    proc = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=30, check=False)
  except (OSError, subprocess.SubprocessError):
    return None
  return proc.stdout.strip() if proc.returncode == 0 else None


def prepare_identity(path: pathlib.Path) -> dict:
  """Writes the commit, whether the tree differs from it, and the digest (``prepare``)."""
  status = _git("status", "--porcelain", "--untracked-files=no")
  ident = {"commit": _git("rev-parse", "HEAD"), "dirty": bool(status) if status is not None
           else None, **source_identity()}
  path.write_text(json.dumps(ident) + "\n", encoding="utf-8")
  return ident


def _environment(suite: Suite, step: Step) -> None:
  """The env step: its JSON, the source's identity, recorded first."""
  suite.say(f"== {time.strftime('%H:%M:%S')} env: {step.what}")
  try:
    proc = subprocess.run(step.argv, cwd=ROOT, env=dict(os.environ, **step.env),
                          capture_output=True, text=True, timeout=step.deadline, check=False)
    lines = proc.stdout.strip().splitlines()
    env = json.loads(lines[-1]) if lines else {"error": proc.stderr.strip()[-2000:]}
  except (subprocess.TimeoutExpired, json.JSONDecodeError) as e:
    env = {"error": f"{type(e).__name__}: {e}"}
  source = source_identity()
  prepared = ROOT / ".gpu-data" / "source.json"
  commit = _git("rev-parse", "HEAD")
  if commit:
    source["commit"] = commit
  elif prepared.is_file():
    mark = json.loads(prepared.read_text(encoding="utf-8"))
    source.update(commit=mark.get("commit"), dirty_at_prepare=mark.get("dirty"),
                  same_as_prepared=mark.get("digest") == source["digest"])
  env["source"] = source
  suite.record({"step": "env", "event": "end", "status": "ok" if "error" not in env else
                "failed", "env": env})
  for key, value in env.items():
    suite.say(f"   {key}: {value}")


def _copy_trace(suite: Suite) -> str | None:
  """The newest trace under PROFILE_DIR, copied to $OUT/trace.json.gz."""
  traces = sorted(pathlib.Path(PROFILE_DIR).rglob("*.trace.json.gz"),
                  key=lambda p: p.stat().st_mtime) if os.path.isdir(PROFILE_DIR) else []
  if not traces:
    return None
  shutil.copyfile(traces[-1], suite.out / "trace.json.gz")
  return str(traces[-1])


def _jsonl(path: pathlib.Path) -> list[dict]:
  if not path.is_file():
    return []
  rows = []
  for line in path.read_text(encoding="utf-8").splitlines():
    try:
      rows.append(json.loads(line))
    except json.JSONDecodeError:
      continue  # a line cut by a kill
  return rows


def summary(out: pathlib.Path, results: dict[str, dict]) -> str:
  """The run in a table: every record's rates and ratios, the trace, the steps."""
  num = lambda v, fmt: "-" if v is None else format(v, fmt)
  lines = ["", "== summary", f"{'scheme':11s} {'model':15s} {'batching':8s} {'chunk':>5s} "
           f"{'clients':>7s} {'clients/s':>9s} {'train/s':>8s} {'compile':>7s} "
           f"{'x func':>7s} {'x loop':>7s}"]
  for r in _jsonl(out / "throughput.jsonl"):
    lines.append(
        f"{r['scheme']:11s} {r['model']:15s} {r['cohort_batching']:8s} "
        f"{num(r.get('client_chunk'), 'd'):>5s} {r['clients_per_round']:7d} "
        f"{r['clients_per_sec']:9.0f} {num(r.get('train_clients_per_sec'), '8.0f'):>8s} "
        f"{r['seconds']['compile']:7.1f} {num(r.get('ratio_to_torch_func'), '7.2f'):>7s} "
        f"{num(r.get('ratio_to_torch'), '7.2f'):>7s}")
    t = r.get("torch")
    if t:
      funcs = ", ".join(
          f"chunk {f['chunk']}: " + (f["error"] if f.get("error") else
                                     f"{f['clients_per_sec']:.0f}/s")
          for f in r.get("torch_func") or [])
      lines.append(f"  PyTorch {t['version']} on {t['device_name']} (TF32 "
                   f"{'on' if t['tf32'] else 'off'}): torch.func vmap {funcs}; per-client "
                   f"loop {num(r.get('torch_loop_clients_per_sec'), '.0f')}/s")
  for m in _jsonl(out / "models.jsonl"):
    lines.append(f"models.py {m['model']:15s} " + (
        f"failed: {m['error']}" if "error" in m else
        f"{m['clients_per_sec']:9.0f} clients/s, compile {m['compile_seconds']:.1f} s, "
        f"{num(m.get('fraction_of_matmul'), '.1%')} of matmul"))
  for r in _jsonl(out / "peers.jsonl"):
    ratios = "".join(f", {k}/pfl {v:.2f}x" for k, v in (r.get("ratio_ours_over_pfl") or {}).items())
    lines.append(f"peers.py {r['case']:16s} {r['clients_per_round']:5d} clients " + (
        f"failed: {r['error']}" if "error" in r else
        f"{r['clients_per_sec']:9.0f} clients/s, {r['seconds_per_round']:.3f} s a round{ratios}"))
  trace = out / "trace-summary.json"
  for s in _jsonl(trace):
    if s.get("busy_ms") is not None:
      lines.append(f"trace: GPU busy {s['busy_ms']:.1f} of {s['span_ms']:.1f} ms, products "
                   f"{s['product_ms']:.1f} ms = {100 * s['product_fraction']:.1f}% of busy; "
                   "top: " + ", ".join(f"{t['name'][:40]} {t['ms']:.1f}" for t in s["top"][:4]))
  for name, r in results.items():
    lines.append(f"step {name:10s} {r['status']:8s} " + (
        f"{r['seconds']:.0f} s of {r.get('given_s', r['deadline_s']):.0f}"
        if "seconds" in r else r.get("note", f"exit {r.get('rc')}")))
  return "\n".join(lines)


def run(out: str, start: float | None = None) -> int:
  """The suite: environment, background tests, the steps in order, the summary."""
  suite = Suite(out, start=start)
  all_steps = steps(out)
  _environment(suite, all_steps[0])
  for step in all_steps[1:]:
    if step.background:
      suite.start_background(step)
  sequential = [s for s in all_steps[1:] if not s.background]
  shutil.rmtree(PROFILE_DIR, ignore_errors=True)  # the trace is this run's
  for i, step in enumerate(sequential):
    later = sum(s.deadline for s in sequential[i + 1:] if not s.spare)
    if step.name == "trace":
      source = _copy_trace(suite)
      if source is None:
        end = {"step": "trace", "event": "end", "status": "skipped", "deadline_s": step.deadline,
               "note": "no trace: the anchor step left none"}
        suite.record(end)
        suite.results["trace"] = end
        suite.say("== trace: skipped (the anchor step left no trace)")
        continue
      suite.say(f"   trace {source} -> {suite.out / 'trace.json.gz'}")
    suite.run(step, later)
  suite.finish_background()
  text = summary(suite.out, suite.results)
  suite.say(text)
  return 0


def _is_number(text: str) -> bool:
  """``text`` is a finite number."""
  try:
    return math.isfinite(float(text))
  except ValueError:
    return False


def main(argv: list[str] | None = None) -> int:
  argv = sys.argv[1:] if argv is None else argv
  out = os.environ.get("OUT") or "/tmp/gpu-suite"
  if argv == ["plan"] or argv == ["plan", "--json"]:
    return plan(out, as_json=len(argv) == 2)
  if argv == ["run"]:
    start = os.environ.get("GPU_SUITE_T0")
    t0 = float(start) if start and _is_number(start) else None
    if start and t0 is None:  # gpu_suite.sh's `date +%s.%N`: the device call's start
      print(f"{PROG}: error: GPU_SUITE_T0 must be a time in seconds since the epoch, "
            f"got {start!r}", file=sys.stderr)
      return 2
    return run(out, t0)
  if argv == ["prepare-identity"]:
    print(json.dumps(prepare_identity(ROOT / ".gpu-data" / "source.json")))
    return 0
  print(f"{PROG}: usage: {PROG} plan [--json] | run | prepare-identity", file=sys.stderr)
  return 2


if __name__ == "__main__":
  sys.exit(main())
