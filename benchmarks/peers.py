"""Our round against Apple's pfl-research (pfl 0.6.0, PyTorch) on the same work.

The paper's Fashion-MNIST setting, as ``throughput.py`` times it: the CNN of
1,663,370 weights, 6,000 clients of 10 real images, a fixed cohort of
``--clients-per-round`` clients (10, 100 and 1,000 by default), 5 local SGD
steps of batch 10 at eta = 0.215, and for DP each update clipped to S = 0.6
with Gaussian noise of std sigma S on the sum (sigma = 1.54); no evaluation
in the timed rounds. In one call, cohort by cohort, one after the other:

* ours, with ``throughput.measure`` (the same function as its tables: the
  round set up as ``simulation.run`` sets it up, a warm-up call that
  compiles, then the best of ``--repeats`` rounds; no evaluation, no stage
  split, no PyTorch): FL-STD-DP, FL-STD and FL-TOP-DP at r = ``--ratio``;
* pfl's ``FederatedAveraging`` with its central Gaussian DP
  (``CentrallyAppliedPrivacyMechanism(GaussianMechanism(S, sigma))``) and
  without DP, each in pfl's fastest documented setting, its multi-process
  simulation (``torchrun --standalone --nproc_per_node N``: N processes, one
  torch thread each, gloo between them on a CPU; N = the cores on a CPU, 4
  on a GPU, ``--pfl-processes``), and in its default setting (one process,
  torch's default threads): ``benchmarks/pfl_worker.py``, one warm-up round
  (pfl evaluates every client in round 0) then the best of ``--repeats``
  rounds. The clients' images are the very arrays our side trains on
  (written as .npy files), the initial weights ours (in PyTorch's layout).

Each case is one record (``--json``: a JSON line each on stdout; ``--out
FILE``: appended to FILE as each case ends) and one row of a table: seconds
a round, rounds/s (at 10 clients: the latency), clients/s, peak memory (the
max RSS of every process of the case, summed: pfl's ranks and torchrun's
agent; ours, this process's, its peak reset before the case), the machine
(``common.machine()``) and the load average before and after. Each pfl
record carries ``ratio_ours_over_pfl``: our clients/s over pfl's at the same
cohort, for FL-STD-DP (against pfl with DP) or FL-STD (without), and
FL-TOP-DP (against pfl with DP: the same clients, steps, batch, lr, S and
sigma, but another algorithm, which trains and privatizes the r n kept
weights only; FL-STD(-DP)'s ratios are the like-for-like ones). ``--passes N`` runs the cases N times in turn at each cohort (each
record says its ``pass``); a pfl record's ratios are against our rounds of
the same pass, and the table ends with each ratio in every pass and their
median: on a shared machine either side's round moves by up to 20% between
calls (docs/performance.md, "Against pfl-research").

The same work on both sides, checked and recorded, or the run stops (exit
1): the weights counted (1,663,370 in both: ``num_params`` of our plan, the
parameters of pfl's torch module), the local steps (ours: the plan's 5 a
client; pfl: its local optimizer's steps counted in every timed round, which
must be cohort x 5), the clients trained per round, no evaluation (pfl's
model's ``metrics`` calls counted: 0 in the timed rounds), batch, learning
rate, S and sigma, and the same function (pfl's logits of a client's images
under the initial weights within 1% of the JAX model's).

pfl's environment: pfl 0.6.0 pins ``dp-accounting<0.6``, this project needs
0.6 or later, so pfl runs in a virtual environment of its own, built when
missing at ``--pfl-env`` (default ``$FEDJAX_DP_CACHE`` or
``~/.cache/fedjax_dp``, ``pfl-env-own`` or ``pfl-env-shared``), reused while
it holds what is asked, by one of two ``--pfl-torch`` modes:

* ``own`` (the default): ``pip install 'pfl[pytorch]==0.6.0' torch==V``, V
  the exact torch build of this environment (``2.13.0+cpu`` here, the
  ``bench`` extra's pin resolved by pip's ``find-links`` to the CPU wheel: the
  exact local version keeps pip from taking the multi-GB CUDA wheel on a CPU
  machine); without torch here, the ``bench`` extra's pin (``+cpu`` from
  PyTorch's CPU index where no NVIDIA device is seen). What a pfl user
  installs; about 1 GB and a minute.
* ``shared``: the environment's own site-packages holds pfl 0.6.0 and only
  what its pins need beyond this interpreter's packages (dp-accounting
  0.5.1, absl-py 1.4, ...); this interpreter's site-packages (and
  ``PYTHONPATH``) come after it on ``sys.path``, through a ``.pth`` file, so
  pfl runs on this very torch build. pip resolves pfl's pins against both
  (installing into the new environment only; the shared packages are not
  touched), and every run checks that pfl and dp-accounting (< 0.6) load
  from the environment's own folder. A few MB and a few seconds: the tests
  (CI) and the GPU suite (whose card's torch is the image's CUDA build, with
  no network there: ``--pfl-pip-args "--no-index --find-links ..."``) use it.

A pip or venv failure is one line naming the command, exit 2.

  python benchmarks/peers.py                       # 10, 100, 1,000 clients, every case
  python benchmarks/peers.py --clients-per-round 100 --repeats 3 --out peers.jsonl
  python benchmarks/peers.py --cases FL-STD-DP,pfl-dp-multiproc --pfl-torch shared
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import pathlib
import resource
import shlex
import shutil
import signal
import site
import statistics
import subprocess
import sys
import tempfile
import time

from fedjax_dp import host_devices  # imports no JAX
from fedjax_dp.cli import types as flag_types  # imports no JAX

# One XLA CPU device per core (before JAX starts); see fedjax_dp.host_devices.
host_devices.configure()
# On a GPU pfl's processes share the card: JAX takes what it needs, not 75% upfront.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # noqa: E402
import numpy as np  # noqa: E402

import throughput  # noqa: E402  (benchmarks/throughput.py)
from common import (OneLineParser, check_out, load_paper_data, machine,  # noqa: E402
                    timeout_seconds)
from fedjax_dp.data import DataError, public_batch  # noqa: E402
from fedjax_dp.data.idx import cache_dir  # noqa: E402
from fedjax_dp.models import paper_cnn  # noqa: E402

PROG = "benchmarks/peers.py"
HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
WORKER = HERE / "pfl_worker.py"
PFL_VERSION = "0.6.0"
PFL_REQUIREMENT = f"pfl[pytorch]=={PFL_VERSION}"
MARKER = "fedjax_dp-pfl-env.json"
PAPER_CNN_PARAMS = 1_663_370

OURS = ("FL-STD-DP", "FL-STD", "FL-TOP-DP")
# pfl's cases: (central DP, multi-process simulation).
PFL = {"pfl-dp-multiproc": (True, True), "pfl-dp-default": (True, False),
       "pfl-multiproc": (False, True), "pfl-default": (False, False)}
CASES = OURS + tuple(PFL)
# Our schemes each pfl case is compared with (the first: the same work).
PAIRS = {True: ("FL-STD-DP", "FL-TOP-DP"), False: ("FL-STD",)}
LOGIT_TOLERANCE = 0.01  # of the largest logit: TF32 on a GPU; a wrong model is off by ~1


class PflEnvError(Exception):
  """pfl's environment cannot be built or does not hold what it should."""


class WorkMismatch(Exception):
  """The two sides would not do the same work."""


# ---------------------------------------------------------------- pfl's environment


def bench_torch_pin(pyproject: pathlib.Path = ROOT / "pyproject.toml") -> str:
  """The ``bench`` extra's torch version (``torch==2.13.0`` there)."""
  import tomllib  # pylint: disable=import-outside-toplevel
  extras = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"][
      "optional-dependencies"]
  pins = [r.split("==", 1)[1] for r in extras["bench"] if r.startswith("torch==")]
  return pins[0]


def installed_torch() -> str | None:
  """This interpreter's torch version (e.g. ``2.13.0+cpu``), without importing it."""
  from importlib import metadata  # pylint: disable=import-outside-toplevel
  try:
    return metadata.version("torch")
  except metadata.PackageNotFoundError:
    return None


def _nvidia_visible() -> bool:
  return os.path.exists("/dev/nvidiactl") or shutil.which("nvidia-smi") is not None


def torch_requirement(mode: str, have: str | None, pin: str) -> tuple[str, list[str]]:
  """(torch's requirement, extra pip arguments) for ``mode``: this environment's
  exact torch build where it has one, else the ``bench`` pin (``own`` only)."""
  if have is not None:
    return f"torch=={have}", []
  if mode == "shared":
    raise PflEnvError("--pfl-torch shared runs pfl on this environment's torch, and there "
                      "is none: pip install 'fedjax_dp[bench]' or use --pfl-torch own")
  if _nvidia_visible() or "+" in pin:
    return f"torch=={pin}", []
  return f"torch=={pin}+cpu", ["--extra-index-url", "https://download.pytorch.org/whl/cpu"]


def shared_paths() -> list[str]:
  """This interpreter's package folders, in its order: ``PYTHONPATH``'s, then
  its site-packages (what ``--pfl-torch shared`` puts behind pfl's own)."""
  paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
  paths += site.getsitepackages()
  if site.ENABLE_USER_SITE:
    paths.append(site.getusersitepackages())
  seen, out = set(), []
  for p in paths:
    p = os.path.abspath(p)
    if p not in seen and os.path.isdir(p):
      seen.add(p)
      out.append(p)
  return out


def _env_python(path: pathlib.Path) -> pathlib.Path:
  return path / "bin" / "python"


def _site_packages(path: pathlib.Path) -> pathlib.Path:
  return path / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"


def _run_step(argv: list[str], timeout: float = 1800) -> str:
  """Runs one build command; a failure raises :class:`PflEnvError` naming it."""
  try:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
  except (OSError, subprocess.TimeoutExpired) as e:
    raise PflEnvError(f"`{shlex.join(argv)}` failed: {e}") from e
  if proc.returncode != 0:
    lines = [l.strip() for l in (proc.stderr + proc.stdout).splitlines() if l.strip()]
    errors = [l for l in lines if "error" in l.lower()] or lines or ["no output"]
    raise PflEnvError(f"`{shlex.join(argv)}` failed (exit {proc.returncode}): {errors[-1]}")
  return proc.stdout


def probe_env(path: pathlib.Path) -> dict:
  """``pfl_worker.py --probe`` in the environment: versions and files."""
  out = _run_step([str(_env_python(path)), str(WORKER), "--probe"], timeout=300)
  return json.loads(out.strip().splitlines()[-1])


def check_probe(info: dict, path: pathlib.Path, torch: str) -> None:
  """pfl 0.6.0 and dp-accounting < 0.6 from the environment's own folder, and the torch asked."""
  own = str(path.resolve())
  problems = []
  if info.get("pfl") != PFL_VERSION or not str(info.get("pfl_file", "")).startswith(own):
    problems.append(f"pfl {info.get('pfl')} from {info.get('pfl_file')} "
                    f"(wanted {PFL_VERSION} under {own})")
  dp = info.get("dp_accounting") or "none"
  if _version(dp) >= (0, 6) or not str(info.get("dp_accounting_file", "")).startswith(own):
    problems.append(f"dp-accounting {dp} from {info.get('dp_accounting_file')} "
                    f"(pfl pins < 0.6, under {own})")
  if info.get("torch") != torch.split("==", 1)[1]:
    problems.append(f"torch {info.get('torch')} (wanted {torch})")
  if problems:
    raise PflEnvError(f"the pfl environment {path} does not hold what pfl needs: "
                      + "; ".join(problems))


def _version(text: str) -> tuple[int, ...]:
  parts = []
  for p in text.split("+")[0].split("."):
    if not p.isdigit():
      break
    parts.append(int(p))
  return tuple(parts) or (99,)


def ensure_pfl_env(path: pathlib.Path, mode: str, pip_args: list[str] = ()) -> dict:
  """pfl's environment at ``path`` (``mode``: own or shared), built if missing.

  Returns:
    Its description: mode, requirements, shared folders, the probe.

  Raises:
    PflEnvError: A command failed (named), or the folder holds something else.
  """
  torch, extra = torch_requirement(mode, installed_torch(), bench_torch_pin())
  wanted = {"mode": mode, "pfl": PFL_REQUIREMENT, "torch": torch,
            "shared": shared_paths() if mode == "shared" else [],
            "python": f"{sys.version_info[0]}.{sys.version_info[1]}"}
  marker = path / MARKER
  if marker.is_file():
    built = json.loads(marker.read_text(encoding="utf-8"))
    if {k: built.get(k) for k in wanted} == wanted:
      try:
        info = probe_env(path)
        check_probe(info, path, torch)
        return dict(wanted, probe=info, built=False)
      except PflEnvError:
        pass
    shutil.rmtree(path)  # ours (its marker), and not what is asked now: built again
  elif path.exists() and any(path.iterdir()):
    raise PflEnvError(f"--pfl-env {path} exists and was not built by {PROG} (no {MARKER}); "
                      "name another folder")
  path.parent.mkdir(parents=True, exist_ok=True)
  venv = [sys.executable, "-m", "venv", *(["--without-pip"] if mode == "shared" else []),
          str(path)]
  _run_step(venv)
  if mode == "shared":  # after the environment's own site-packages on sys.path
    _site_packages(path).joinpath("_fedjax_dp_shared.pth").write_text(
        "\n".join(wanted["shared"]) + "\n", encoding="utf-8")
  _run_step([str(_env_python(path)), "-m", "pip", "install", "--disable-pip-version-check",
             PFL_REQUIREMENT, torch, *extra, *pip_args])
  info = probe_env(path)
  check_probe(info, path, torch)
  marker.write_text(json.dumps(dict(wanted, probe=info)) + "\n", encoding="utf-8")
  return dict(wanted, probe=info, built=True)


# ---------------------------------------------------------------- the work


def torch_layout(model, w0) -> dict[str, np.ndarray]:
  """The JAX CNN's weights in the PyTorch module's parameters (names, shapes), as
  ``throughput._torch_cnn`` copies them."""
  p = {k: np.asarray(v, np.float32) for k, v in model.unflatten(w0).items()}
  arrays = {
      "conv1.weight": p["conv1_w"].reshape(5, 5, 1, 32).transpose(3, 2, 0, 1),
      "conv1.bias": p["conv1_b"],
      "conv2.weight": p["conv2_w"].reshape(5, 5, 32, 64).transpose(3, 2, 0, 1),
      "conv2.bias": p["conv2_b"], "dense1.weight": p["dense1_w"].T,
      "dense1.bias": p["dense1_b"], "dense2.weight": p["dense2_w"].T,
      "dense2.bias": p["dense2_b"]}
  return {k: np.ascontiguousarray(v) for k, v in arrays.items()}


def export_inputs(folder: pathlib.Path, data, model, w0) -> np.ndarray:
  """The clients (the very arrays our side trains on) and the initial weights as
  files for pfl's worker; returns the JAX model's logits of client 0's images."""
  x = np.asarray(data.x)
  np.save(folder / "x.npy", x)
  np.save(folder / "y.npy", np.asarray(data.y))
  np.savez(folder / "weights.npz", **torch_layout(model, w0))
  return np.asarray(model.logits(w0, jax.numpy.asarray(x[0], jax.numpy.float32) / 255.0))


def work_of(plan, clients: int) -> dict:
  """What a round of ``plan`` does (the fields both sides must share)."""
  local = plan.local
  return {"num_params": int(plan.num_params), "clients_per_round": clients,
          "local_steps_per_client": local.steps, "batch_size": local.batch_size,
          "lr": local.lr, "optimizer": local.optimizer, "clip_norm": plan.clip_norm,
          "noise_multiplier": plan.noise_multiplier if plan.clip_norm else 0.0,
          "evaluation": False}


def check_pfl_counts(rec: dict, work: dict) -> None:
  """pfl's counted work in every timed round against ``work`` (one line if not)."""
  c, steps = work["clients_per_round"], work["local_steps_per_client"]
  problems = []
  if rec["num_params"] != work["num_params"]:
    problems.append(f"{rec['num_params']} weights (ours {work['num_params']})")
  if any(s != c * steps for s in rec["local_steps_per_round"]):
    problems.append(f"local steps per round {rec['local_steps_per_round']} (ours {c * steps})")
  if any(u != c for u in rec["clients_trained_per_round"]):
    problems.append(f"clients per round {rec['clients_trained_per_round']} (ours {c})")
  if any(rec["evaluations_per_round"]):
    problems.append(f"evaluations in timed rounds {rec['evaluations_per_round']}")
  if rec["max_logit_diff"] > LOGIT_TOLERANCE * max(1.0, rec["max_abs_logit"]):
    problems.append(f"logits {rec['max_logit_diff']:.3g} from the JAX model's")
  if rec["config"]["central_lr"] != 1.0:
    problems.append(f"central learning rate {rec['config']['central_lr']} (ours: the mean)")
  problems += [f"{k} {rec['work'][k]} (ours {work[k]})" for k in work
               if rec["work"].get(k) != work[k]]
  if problems:
    raise WorkMismatch(f"{rec['case']} at {c} clients does not do our work: "
                       + "; ".join(problems))


def check_same_work(ours: dict, pfl: dict) -> None:
  """Both records' ``work`` agree (S and sigma where both have DP); raises if not."""
  keys = ["num_params", "clients_per_round", "local_steps_per_client", "batch_size", "lr",
          "optimizer", "evaluation"]
  if ours["work"]["clip_norm"] and pfl["work"]["clip_norm"]:
    keys += ["clip_norm", "noise_multiplier"]
  elif bool(ours["work"]["clip_norm"]) != bool(pfl["work"]["clip_norm"]):
    keys.append("clip_norm")
  diff = [f"{k} {ours['work'][k]} vs {pfl['work'][k]}" for k in keys
          if ours["work"][k] != pfl["work"][k]]
  if diff:
    raise WorkMismatch(f"{ours['case']} and {pfl['case']} would not do the same work: "
                       + "; ".join(diff))


# ---------------------------------------------------------------- the two sides


def _reset_peak() -> None:
  """Resets this process's peak RSS (Linux: /proc/self/clear_refs 5)."""
  try:
    with open("/proc/self/clear_refs", "w", encoding="utf-8") as f:
      f.write("5")
  except OSError:
    pass


def _peak_mb() -> float:
  """This process's peak RSS since :func:`_reset_peak` (VmHWM; else ``ru_maxrss``)."""
  try:
    with open("/proc/self/status", encoding="utf-8") as f:
      for line in f:
        if line.startswith("VmHWM:"):
          return int(line.split()[1]) / 1024.0
  except OSError:
    pass
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def run_ours(model, scheme: str, data, public, clients: int, ratio: float,
             repeats: int) -> dict:
  """Our scheme's round by ``throughput.measure`` (no evaluation, split or PyTorch)."""
  plans = []
  prepared = throughput.prepared_round

  def keep_plan(*args, **kwargs):  # the plan measure builds its round from
    state, plan = prepared(*args, **kwargs)
    plans.append(plan)
    return state, plan

  _reset_peak()
  throughput.prepared_round = keep_plan
  try:
    rec = throughput.measure(model, scheme, data, None, public, clients=clients, ratio=ratio,
                             repeats=repeats, torch=False, split=False, evaluate=False)
  finally:
    throughput.prepared_round = prepared
  jax.clear_caches()
  plan = plans[0]
  return {"case": scheme, "side": "fedjax_dp", "scheme": scheme, "ratio": ratio,
          "clients_per_round": clients, "seconds_per_round": rec["seconds"]["round"],
          "rounds_per_sec": rec["rounds_per_sec"], "clients_per_sec": rec["clients_per_sec"],
          "repeats": repeats, "compile_seconds": rec["seconds"]["compile"],
          "work": work_of(plan, clients),
          "local_steps_per_round": plan.local.steps * clients,
          "peak_rss_mb": _peak_mb(), "devices": rec["devices"],
          "recompiled": rec["recompiled"], "jax": jax.__version__,
          "machine": rec["machine"], "load_average": rec["load_average"]}


def _pfl_argv(env: dict, case: str, clients: int, repeats: int, work: dict,
              inputs: pathlib.Path, out: pathlib.Path, processes: int,
              device: str) -> list[str]:
  dp, multi = PFL[case]
  python = str(_env_python(pathlib.Path(env["path"])))
  launch = [python, "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
            f"--nproc_per_node={processes}"] if multi else [python]
  args = ["--data", str(inputs), "--out", str(out), "--cohort", str(clients),
          "--rounds", str(repeats), "--warmup", "1",
          "--steps", str(work["local_steps_per_client"]), "--batch", str(work["batch_size"]),
          "--lr", repr(work["lr"])]
  if dp:
    args += ["--dp", "--clip", repr(work["clip_norm"]), "--sigma",
             repr(work["noise_multiplier"])]
  if multi:
    args += ["--threads", "1"]
  if device == "cuda":
    args.append("--tf32")  # as throughput.py's PyTorch: JAX's default precision on a GPU
  return launch + [str(WORKER)] + args


def _pfl_environ(device: str, multi: bool) -> dict:
  """The worker's environment: pfl's packages first (no PYTHONPATH before them),
  the device named, one thread per process in the multi-process setting and
  torch's default threads in the default one."""
  env = {k: v for k, v in os.environ.items()
         if k not in ("PYTHONPATH", "PYTHONHOME", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
  env["PFL_PYTORCH_DEVICE"] = device
  if multi:
    env["OMP_NUM_THREADS"] = "1"
  return env


def _launch(argv: list[str], environ: dict, log: pathlib.Path, timeout: float) -> int:
  """Runs the worker (its own process group, ended with it on a timeout or ^C)."""
  with open(log, "w", encoding="utf-8") as f:
    # pylint: disable-next=consider-using-with
    proc = subprocess.Popen(argv, cwd=ROOT, env=environ, stdout=f, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
      return proc.wait(timeout=timeout)
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
      os.killpg(proc.pid, signal.SIGKILL)
      proc.wait()
      raise


def _log_tail(log: pathlib.Path) -> str:
  lines = [l.strip() for l in log.read_text(encoding="utf-8", errors="replace").splitlines()
           if l.strip()]
  errors = [l for l in lines if "Error" in l or "error:" in l]
  return (errors or lines or ["no output"])[-1][:500]


def run_pfl(env: dict, case: str, clients: int, repeats: int, work: dict,
            inputs: pathlib.Path, reference: np.ndarray, processes: int, device: str,
            timeout: float) -> dict:
  """One pfl case: its worker (one process, or torchrun's), the ranks' files read,
  its counted work checked against ``work`` (raises :class:`WorkMismatch`)."""
  dp, multi = PFL[case]
  out = pathlib.Path(tempfile.mkdtemp(prefix=f"{case}-", dir=inputs))
  argv = _pfl_argv(env, case, clients, repeats, work, inputs, out, processes, device)
  load_before = os.getloadavg()
  t0 = time.perf_counter()
  rc = _launch(argv, _pfl_environ(device, multi), out / "log.txt", timeout)
  wall = time.perf_counter() - t0
  load_after = os.getloadavg()
  ranks = sorted((json.loads(p.read_text(encoding="utf-8")) for p in out.glob("rank*.json")),
                 key=lambda r: r["rank"])
  base = {"case": case, "side": "pfl", "dp": dp, "clients_per_round": clients,
          "command": shlex.join(argv), "machine": machine(),
          "load_average": [round(load_before[0], 2), round(load_after[0], 2)]}
  if rc != 0 or not ranks or len(ranks) != ranks[0]["world_size"]:
    return dict(base, error=f"exit {rc}: {_log_tail(out / 'log.txt')}")
  rec = dict(base, **_from_ranks(ranks, clients, reference), wall_seconds=wall,
             launcher="torchrun (gloo on a CPU, nccl on a GPU)" if multi else "one process",
             pfl_env={k: env[k] for k in ("path", "mode", "torch")})
  expected = dict(work, clip_norm=work["clip_norm"] if dp else None,
                  noise_multiplier=work["noise_multiplier"] if dp else 0.0)
  check_pfl_counts(rec, expected)
  return rec


def _from_ranks(ranks: list[dict], clients: int, reference: np.ndarray) -> dict:
  """A pfl case's figures from its ranks' files: rank 0's round times (the
  ranks meet in each round's all-reduce), the counts summed over the ranks,
  the work as pfl was configured (read back from its objects) and counted."""
  r0, skip = ranks[0], ranks[0]["warmup_rounds"]
  summed = lambda key: [sum(r[key][i] for r in ranks) for i in range(skip, len(r0[key]))]
  timed, steps, users = r0["round_seconds"][skip:], summed("local_steps"), summed("users")
  cfg, best = r0["config"], min(r0["round_seconds"][skip:])
  per_client = {int(s / u) if s % u == 0 else s / u for s, u in zip(steps, users) if u}
  logits = np.asarray(r0["logits"])
  return {
      "processes": len(ranks), "threads_per_process": r0["threads"], "device": r0["device"],
      "tf32": r0["tf32"], "seconds_per_round": best, "rounds_per_sec": 1.0 / best,
      "clients_per_sec": clients / best, "round_seconds": timed, "repeats": len(timed),
      "warmup_rounds": skip, "setup_seconds": r0["setup_seconds"],
      "num_params": r0["num_params"], "local_steps_per_round": steps,
      "clients_trained_per_round": users, "evaluations_per_round": summed("evaluations"),
      "evaluations_in_warmup": sum(sum(r["evaluations"][:skip]) for r in ranks),
      "max_logit_diff": float(np.abs(logits - reference).max()),
      "max_abs_logit": float(np.abs(reference).max()),
      "peak_rss_mb": sum(r["peak_rss_mb"] for r in ranks) + (r0["launcher_peak_rss_mb"] or 0.0),
      "rank_peak_rss_mb": [r["peak_rss_mb"] for r in ranks],
      "launcher_peak_rss_mb": r0["launcher_peak_rss_mb"], "config": cfg,
      "work": {"num_params": r0["num_params"], "clients_per_round": cfg["cohort"],
               "local_steps_per_client": per_client.pop() if len(per_client) == 1 else None,
               "batch_size": cfg["batch_size"], "lr": cfg["lr"],
               "optimizer": "sgd" if cfg["local_optimizer"] == "torch.optim.sgd.SGD"
               else cfg["local_optimizer"], "clip_norm": cfg["clip_norm"],
               "noise_multiplier": cfg["noise_multiplier"],
               "evaluation": any(summed("evaluations"))},
      "pfl": r0["versions"]}


# ---------------------------------------------------------------- the run


def _ratios(rec: dict, done: dict) -> dict:
  """Our clients/s over this pfl case's, for each of our schemes measured at its cohort."""
  out = {}
  for scheme in PAIRS[rec["dp"]]:
    ours = done.get((scheme, rec["clients_per_round"]))
    if ours is None:
      continue
    check_same_work(ours, rec)  # FL-TOP-DP: the same settings; its own algorithm (top-r)
    out[scheme] = ours["clients_per_sec"] / rec["clients_per_sec"]
  return out


def _row(rec: dict) -> str:
  if "error" in rec:
    return f"{rec['clients_per_round']:7d}  {rec['case']:18s} failed: {rec['error']}"
  ratios = ", ".join(f"{k} {v:.2f}x" for k, v in rec.get("ratio_ours_over_pfl", {}).items())
  load = rec["load_average"]
  return (f"{rec['clients_per_round']:7d}  {rec['case']:18s} {rec['seconds_per_round']:9.3f} "
          f"{rec['rounds_per_sec']:9.3f} {rec['clients_per_sec']:10.1f} "
          f"{rec['peak_rss_mb']:8.0f}  {load[0]:5.2f}-{load[1]:5.2f}  {ratios}")


HEADER = (f"{'clients':>7s}  {'case':18s} {'s/round':>9s} {'rounds/s':>9s} {'clients/s':>10s} "
          f"{'peak MB':>8s}  {'load':11s}  ours/pfl (clients/s)")


def _cases(value: str) -> list[str]:
  names = [n.strip() for n in value.split(",") if n.strip()]
  bad = [n for n in names if n not in CASES]
  if bad or not names:
    raise argparse.ArgumentTypeError(
        f"unknown case {', '.join(bad) or repr(value)} (choose from {', '.join(CASES)})")
  return [c for c in CASES if c in names]  # ours first, then pfl's, at each cohort


def _words(value: str) -> list[str]:
  """--pfl-pip-args: the words of a shell command line (quotes closed)."""
  try:
    return shlex.split(value)
  except ValueError as e:  # "No closing quotation"
    raise argparse.ArgumentTypeError(f"{e}: {value!r}") from None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
  p = OneLineParser(prog=PROG, description=__doc__.splitlines()[0])
  p.add_argument("--clients-per-round", type=throughput._cohorts, default=[10, 100, 1000],
                 help="cohorts, comma-separated (default 10,100,1000)")
  p.add_argument("--cases", type=_cases, default=list(CASES),
                 help=f"comma-separated, of: {', '.join(CASES)} (default: all)")
  p.add_argument("--repeats", type=flag_types.positive("--repeats", int), default=3,
                 help="timed rounds after the warm-up; the best is kept (default 3)")
  p.add_argument("--passes", type=flag_types.positive("--passes", int), default=1,
                 help="run the cases this many times in turn at each cohort (default 1): "
                      "each pfl case's ratios are against our rounds of its own pass, and "
                      "the table ends with every pass's ratio (a shared machine's pace "
                      "drifts between calls)")
  p.add_argument("--ratio", type=float, default=0.005, help="FL-TOP-DP's r (default 0.005)")
  p.add_argument("--pfl-torch", choices=("own", "shared"), default="own",
                 help="pfl's environment gets its own torch (this environment's exact "
                      "build), or shares this interpreter's packages behind its own")
  p.add_argument("--pfl-env", type=pathlib.Path, default=None,
                 help="pfl's virtual environment, built when missing (default: "
                      "$FEDJAX_DP_CACHE or ~/.cache/fedjax_dp, pfl-env-<own|shared>)")
  p.add_argument("--pfl-pip-args", type=_words, default="",
                 help="more arguments for pip when building it (e.g. \"--no-index "
                      "--find-links DIR\")")
  p.add_argument("--pfl-processes", type=flag_types.positive("--pfl-processes", int), default=None,
                 help="processes of pfl's multi-process setting (default: the cores; "
                      "4 on a GPU)")
  p.add_argument("--pfl-timeout", type=flag_types.flagged("--pfl-timeout", timeout_seconds),
                 default=7200,
                 help="seconds one pfl case may take (default 7200)")
  p.add_argument(host_devices.OPTION,
                 type=flag_types.flagged(host_devices.OPTION, host_devices.parse_count),
                 default=None,
                 help="XLA CPU devices to create (default: one per core)")
  p.add_argument("--json", action="store_true", help="one JSON line per case")
  p.add_argument("--out", default=None, help="also append the JSON lines to this file")
  args = p.parse_args(argv)
  if not 0 < args.ratio <= 1:  # FL-TOP-DP's config would refuse it after the data loaded
    p.error(f"--ratio must be in (0, 1], got {args.ratio}")
  check_out(p, args.out)
  if args.pfl_env is None:
    args.pfl_env = cache_dir() / f"pfl-env-{args.pfl_torch}"
  args.pfl_env = args.pfl_env.expanduser().resolve()
  return args


def _emit(rec: dict, args: argparse.Namespace) -> None:
  print(json.dumps(rec) if args.json else _row(rec), flush=True)
  if args.out:
    with open(args.out, "a", encoding="utf-8") as f:
      f.write(json.dumps(rec) + "\n")


def _fail(message: str, code: int) -> int:
  print(f"{PROG}: error: {message}", file=sys.stderr)
  return code


def main(argv: list[str] | None = None) -> int:
  args = parse_args(argv)
  env = None
  if any(c in PFL for c in args.cases):
    try:
      env = dict(ensure_pfl_env(args.pfl_env, args.pfl_torch, args.pfl_pip_args),
                 path=str(args.pfl_env))
    except PflEnvError as e:
      return _fail(str(e), 2)
  try:
    data, _, _ = load_paper_data(max(args.clients_per_round))  # above 6,000: repeated
  except DataError as e:
    return _fail(str(e), 2)
  return _measure(args, env, data)


def _measure(args: argparse.Namespace, env: dict | None, data) -> int:
  """Every case at every cohort, ours first, ``--passes`` times in turn;
  records and rows as they end."""
  model, public = paper_cnn(), public_batch(10, seed=0)
  # The work pfl is given: the plan of our FL-STD-DP round, and its initial weights.
  state, plan = throughput.prepared_round(model, "FL-STD-DP", data, public, 2, args.ratio,
                                          None, rounds=2)
  device = "cuda" if env and jax.default_backend() == "gpu" and env["probe"].get(
      "torch_cuda") else "cpu"
  processes = args.pfl_processes or (4 if device == "cuda" else host_devices.usable_cores())
  if not args.json:
    print(f"{PROG} on {machine()}; pfl {PFL_VERSION} in {args.pfl_env} "
          f"({args.pfl_torch} torch)" if env else f"{PROG} on {machine()}")
    print(HEADER, flush=True)
  done, failed, ratios = {}, 0, {}
  with tempfile.TemporaryDirectory(prefix="peers-") as tmp:
    inputs = pathlib.Path(tmp)
    reference = export_inputs(inputs, data, model, state.weights) if env else None
    for clients, pass_, case in itertools.product(
        args.clients_per_round, range(1, args.passes + 1), args.cases):
      work = work_of(plan, clients)
      try:
        if case in PFL:
          rec = run_pfl(env, case, clients, args.repeats, work, inputs, reference,
                        processes, device, args.pfl_timeout)
          if "error" not in rec:
            rec["ratio_ours_over_pfl"] = _ratios(rec, done)
        else:
          rec = run_ours(model, case, data, public, clients, args.ratio, args.repeats)
          _check_ours(rec, work)
      except WorkMismatch as e:
        return _fail(f"refused: {e}", 1)
      except subprocess.TimeoutExpired:
        rec = {"case": case, "side": "pfl", "clients_per_round": clients,
               "error": f"past --pfl-timeout {args.pfl_timeout} s"}
      rec["pass"] = pass_
      failed += "error" in rec
      done[(case, clients)] = rec  # a pfl case's ratios: our rounds of this pass
      for scheme, value in rec.get("ratio_ours_over_pfl", {}).items():
        ratios.setdefault((clients, scheme, case), []).append(value)
      _emit(rec, args)
  if args.passes > 1 and not args.json:
    print(_passes_summary(ratios), flush=True)
  return 1 if failed else 0


def _passes_summary(ratios: dict) -> str:
  """Each ratio of ours over pfl in every pass, and their median."""
  lines = ["ours/pfl (clients/s) in each pass:"]
  for (clients, scheme, case), values in ratios.items():
    each = ", ".join(f"{v:.2f}x" for v in values)
    lines.append(f"{clients:7d}  {scheme} / {case}: {each} (median "
                 f"{statistics.median(values):.2f}x)")
  return "\n".join(lines)


def _check_ours(rec: dict, work: dict) -> None:
  """Our scheme's plan against the work pfl is given (DP fields where it has DP)."""
  expected = dict(work, clip_norm=work["clip_norm"] if rec["work"]["clip_norm"] else None,
                  noise_multiplier=work["noise_multiplier"] if rec["work"]["clip_norm"]
                  else 0.0)
  check_same_work(rec, {"case": "the work given to pfl", "work": expected})
  if rec["work"]["num_params"] != PAPER_CNN_PARAMS:
    raise WorkMismatch(f"{rec['case']}: {rec['work']['num_params']} weights, not the paper "
                       f"CNN's {PAPER_CNN_PARAMS:,}")


def _interrupt(signum, frame):  # pylint: disable=unused-argument
  raise KeyboardInterrupt  # a pfl case running ends its process group first (_launch)


if __name__ == "__main__":
  signal.signal(signal.SIGTERM, _interrupt)
  sys.exit(main())
