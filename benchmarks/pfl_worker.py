"""One pfl-research run of the paper setting, for ``benchmarks/peers.py``.

Runs in pfl's own environment (``peers.py --pfl-env``: pfl 0.6.0 pins
``dp-accounting<0.6``, which this project's environment cannot hold), so it
imports nothing of ``fedjax_dp``: the standard library, NumPy, PyTorch and
pfl only. ``peers.py`` writes the data (the same arrays its JAX side trains
on) and the initial weights as files, starts this script (one process, or
``torchrun`` with one process per core: pfl's multi-process simulation) and
reads what each process writes.

What runs: pfl's ``FederatedAveraging`` over a ``FederatedDataset`` of the
clients (``minimize_reuse`` sampling, pfl's usual one), the paper CNN as a
``PyTorchModel`` (local optimizer SGD at ``--lr``, the central one SGD at
learning rate 1: the model moves by the mean update), ``--steps`` local steps
of the whole 10-image client (``local_num_epochs`` = steps, one batch an
epoch), and with ``--dp`` pfl's central Gaussian DP
(``CentrallyAppliedPrivacyMechanism(GaussianMechanism(clip, sigma))``: each
update clipped to ``clip``, noise of std ``sigma * clip`` on the sum).
``--warmup`` rounds first (pfl evaluates every client before and after
training in round 0, whatever the evaluation frequency), then ``--rounds``
timed rounds without evaluation (the frequency is set past the last round).

Counted while it runs, per round and per process: the local optimizer's
steps (a counting ``torch.optim.SGD``), the clients trained, the
evaluations (calls of the model's ``metrics``). Each process writes
``<out>/rank<r>.json``: those counts, its round times (``perf_counter`` at
pfl's end-of-round callback, after the central update; CUDA synchronised
first), its peak RSS, the weights counted, the threads, the device and the
versions and files of pfl, torch and dp-accounting; rank 0 adds the logits
of client 0's images under the initial weights (``peers.py`` compares them
with the JAX model's).

  python benchmarks/pfl_worker.py --probe   # versions and files, one JSON line
"""

from __future__ import annotations

# torch and pfl are imported where used: --probe reports them even if one fails.
# pylint: disable=import-outside-toplevel

import argparse
import json
import math
import os
import pathlib
import resource
import sys
import time

import torch_cnn  # benchmarks/torch_cnn.py, this script's folder

# Runs before anything heavy: --probe needs only the versions.
_PROBE = ("pfl", "torch", "dp_accounting", "numpy")
# The flags' ranges (the project's own parsers are not importable here): counts
# as int32, seeds as np.random.seed takes them.
INT_MAX = 2 ** 31 - 1
SEEDS = 2 ** 32
DATA_FILES = ("x.npy", "y.npy", "weights.npz")  # what peers.py writes into --data


def probe() -> dict:
  """The versions and files of the packages this environment resolves."""
  from importlib import metadata
  out = {"python": sys.version.split()[0], "prefix": sys.prefix}
  for name in _PROBE:
    dist = name.replace("_", "-")
    try:
      module = __import__(name)
      out[name] = metadata.version(dist)
      out[name + "_file"] = module.__file__
    except Exception as e:  # pylint: disable=broad-except
      out[name] = None
      out[name + "_error"] = f"{type(e).__name__}: {e}"
  if out.get("torch"):
    import torch
    out["torch_cuda"] = torch.cuda.is_available()
  return out


def _cnn_class():
  """The paper CNN in PyTorch (``torch_cnn.py``, ``throughput.py``'s too), with
  pfl's ``loss`` and ``metrics`` methods and the counters."""
  import torch
  import torch.nn.functional as F
  from pfl.metrics import Weighted

  class CNN(torch_cnn.paper_cnn_class()):
    """The model pfl trains; ``evaluations`` counts its ``metrics`` calls."""

    evaluations = 0

    def loss(self, x, y):
      self.train()
      return F.cross_entropy(self(x), y)

    @torch.no_grad()
    def metrics(self, x, y, eval=False):  # pylint: disable=redefined-builtin
      type(self).evaluations += 1
      self.eval() if eval else self.train()  # pylint: disable=expression-not-assigned
      logits = self(x)
      n = len(y)
      return {"loss": Weighted(F.cross_entropy(logits, y, reduction="sum").item(), n),
              "accuracy": Weighted((logits.argmax(1) == y).sum().item(), n)}

  return CNN


def _counting_sgd():
  """``torch.optim.SGD`` that counts its steps (the local optimizer)."""
  import torch

  class CountingSGD(torch.optim.SGD):
    steps = 0

    def step(self, closure=None):
      type(self).steps += 1
      return super().step(closure)

  return CountingSGD


def _counting_fedavg():
  """pfl's ``FederatedAveraging``, counting the clients it trains."""
  from pfl.algorithm import FederatedAveraging

  class CountingFedAvg(FederatedAveraging):
    users = 0

    def train_one_user(self, initial_model_state, model, user_dataset, central_context):
      type(self).users += 1
      return super().train_one_user(initial_model_state, model, user_dataset, central_context)

  return CountingFedAvg


def _federated_data(data_dir: pathlib.Path, device, batch: int):
  """The clients as pfl's ``FederatedDataset``: float32 NCHW images in [0, 1]
  and int64 labels, on ``device`` once (not per step), and client 0's images."""
  import numpy as np
  import torch
  from pfl.data import FederatedDataset
  from pfl.data.sampling import get_user_sampler
  x = np.load(data_dir / "x.npy")  # (clients, examples, 28, 28, 1) uint8
  y = np.load(data_dir / "y.npy")
  if x.shape[1] != batch:
    raise SystemExit(f"pfl_worker.py: error: clients hold {x.shape[1]} images; the run "
                     f"trains whole clients, one batch of {batch} a step")
  xs = torch.from_numpy(np.ascontiguousarray(
      (x.astype(np.float32) / 255.0).transpose(0, 1, 4, 2, 3))).to(device)
  ys = torch.from_numpy(y.astype(np.int64)).to(device)
  users = [(xs[i], ys[i]) for i in range(xs.shape[0])]
  sampler = get_user_sampler("minimize_reuse", list(range(len(users))))
  return FederatedDataset.from_slices(users, sampler), xs[0]


class _Rounds:
  """pfl's end-of-round callback: the time and the counters after each round."""

  def __init__(self, counters, sync):
    self.counters, self.sync = counters, sync
    self.marks = []

  def callback(self):
    from pfl.callback.base import TrainingProcessCallback
    from pfl.metrics import Metrics
    outer = self

    class Mark(TrainingProcessCallback):
      def on_train_begin(self, *, model):
        outer.mark()
        return Metrics()

      def after_central_iteration(self, aggregate_metrics, model, *, central_iteration):
        outer.mark()
        return False, Metrics()

    return Mark()

  def mark(self):
    self.sync()
    self.marks.append((time.perf_counter(), *[c() for c in self.counters]))

  def per_round(self) -> list[tuple]:
    """(seconds, steps, users, evaluations) of each round."""
    return [tuple(b - a for a, b in zip(self.marks[i], self.marks[i + 1]))
            for i in range(len(self.marks) - 1)]


def _net(cnn, data: pathlib.Path, device):
  """The CNN with the initial weights ``peers.py`` wrote (by parameter name)."""
  import numpy as np
  import torch
  net = cnn()
  weights = np.load(data / "weights.npz")
  with torch.no_grad():
    for name, param in net.named_parameters():
      param.copy_(torch.from_numpy(weights[name]))
  return net.to(device)


def _configured(params, train, sgd, model, mechanism, post) -> dict:
  """What pfl was configured with, read back from its objects."""
  return {
      "cohort": params.train_cohort_size, "lr": train.local_learning_rate,
      "batch_size": train.local_batch_size, "local_num_epochs": train.local_num_epochs,
      "local_optimizer": f"{sgd.__mro__[1].__module__}.{sgd.__mro__[1].__name__}",
      # pylint: disable-next=protected-access
      "central_lr": model._central_optimizer.param_groups[0]["lr"],
      "evaluation_frequency": params.evaluation_frequency,
      "clip_norm": None if mechanism is None else mechanism.clipping_bound,
      "noise_multiplier": 0.0 if mechanism is None else mechanism.relative_noise_stddev,
      "privacy": [type(p).__name__ for p in post] + (
          [type(mechanism).__name__] if mechanism else [])}


def run(args: argparse.Namespace) -> dict:
  """Builds the run, trains ``warmup + rounds`` rounds; this process's record."""
  t0 = time.perf_counter()
  import numpy as np
  import torch
  if args.threads:
    torch.set_num_threads(args.threads)
  np.random.seed(args.seed)  # every process draws the same cohorts and noise seeds
  torch.manual_seed(args.seed)
  on_gpu = os.environ.get("PFL_PYTORCH_DEVICE", "cpu").startswith("cuda")
  torch.backends.cuda.matmul.allow_tf32 = on_gpu and args.tf32
  torch.backends.cudnn.allow_tf32 = on_gpu and args.tf32
  # pfl's imports start its distributed context (torchrun's process group).
  from pfl.aggregate.simulate import SimulatedBackend
  from pfl.algorithm import NNAlgorithmParams
  from pfl.hyperparam import NNEvalHyperParams, NNTrainHyperParams
  from pfl.internal.ops import pytorch_ops
  from pfl.model.pytorch import PyTorchModel
  from pfl.privacy import CentrallyAppliedPrivacyMechanism, GaussianMechanism

  device, dist = pytorch_ops.get_default_device(), pytorch_ops.distributed
  cnn, sgd, fedavg = _cnn_class(), _counting_sgd(), _counting_fedavg()
  net = _net(cnn, pathlib.Path(args.data), device)
  fed, first = _federated_data(pathlib.Path(args.data), device, args.batch)
  with torch.no_grad():
    logits = net(first).cpu().numpy().tolist() if dist.global_rank == 0 else None
  model = PyTorchModel(net, local_optimizer_create=sgd,
                       central_optimizer=torch.optim.SGD(net.parameters(), lr=1.0))
  total = args.warmup + args.rounds
  params = NNAlgorithmParams(central_num_iterations=total, evaluation_frequency=total + 1,
                             train_cohort_size=args.cohort, val_cohort_size=0)
  train = NNTrainHyperParams(local_learning_rate=args.lr, local_num_epochs=args.steps,
                             local_batch_size=args.batch)
  mechanism = GaussianMechanism(args.clip, args.sigma) if args.dp else None
  post = [CentrallyAppliedPrivacyMechanism(mechanism)] if args.dp else []
  backend = SimulatedBackend(training_data=fed, val_data=fed, postprocessors=post)
  sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
  rounds = _Rounds([lambda: sgd.steps, lambda: fedavg.users, lambda: cnn.evaluations], sync)
  setup_s = time.perf_counter() - t0
  fedavg().run(algorithm_params=params, backend=backend, model=model,
               model_train_params=train, model_eval_params=NNEvalHyperParams(None),
               callbacks=[rounds.callback()])
  per_round = rounds.per_round()
  return {
      "rank": dist.global_rank, "world_size": dist.world_size,
      "device": str(device), "threads": torch.get_num_threads(),
      "tf32": bool(torch.backends.cudnn.allow_tf32 and on_gpu),
      "num_params": sum(p.numel() for p in net.parameters()),
      "warmup_rounds": args.warmup, "setup_seconds": setup_s,
      "round_seconds": [r[0] for r in per_round],
      "local_steps": [r[1] for r in per_round], "users": [r[2] for r in per_round],
      "evaluations": [r[3] for r in per_round], "peak_rss_mb": peak_mb("self"),
      "launcher_peak_rss_mb": peak_mb(os.getppid()) if dist.world_size > 1 else None,
      "logits": logits, "versions": probe(),
      "config": _configured(params, train, sgd, model, mechanism, post)}


def peak_mb(pid="self") -> float | None:
  """A process's peak RSS (VmHWM: its image's since exec; ``ru_maxrss`` would
  carry the peak of the process it was forked from), from /proc; for the
  launcher, torchrun's agent (the ranks' parent)."""
  try:
    with open(f"/proc/{pid}/status", encoding="utf-8") as f:
      for line in f:
        if line.startswith("VmHWM:"):
          return int(line.split()[1]) / 1024.0
  except OSError:
    pass
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0 if pid == "self" else None


def _int(low: int, high: int):
  """An argparse type: an int in [low, high] (the parser names the flag)."""
  def parse(text: str) -> int:
    try:
      value = int(text)
    except ValueError:
      raise argparse.ArgumentTypeError(f"takes an int, got {text!r}") from None
    if not low <= value <= high:
      raise argparse.ArgumentTypeError(f"must be in [{low}, {high}], got {text}")
    return value
  return parse


def _positive(text: str) -> float:
  """An argparse type: a finite number > 0."""
  try:
    value = float(text)
  except ValueError:
    raise argparse.ArgumentTypeError(f"takes a number, got {text!r}") from None
  if not 0 < value < math.inf:
    raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
  return value


class _Parser(argparse.ArgumentParser):
  """One line on stderr, exit code 2, without argparse's usage block (the
  project's ``OneLineParser``, which this script cannot import)."""

  def error(self, message):
    self.exit(2, f"{self.prog}: error: {message}\n")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
  p = _Parser(prog="benchmarks/pfl_worker.py",
                              description=__doc__.splitlines()[0])
  p.add_argument("--probe", action="store_true", help="print versions and files, and exit")
  p.add_argument("--data", help="folder of x.npy, y.npy and weights.npz")
  p.add_argument("--out", help="folder for rank<r>.json")
  p.add_argument("--cohort", type=_int(1, INT_MAX), default=10)
  p.add_argument("--rounds", type=_int(1, INT_MAX), default=3, help="timed rounds")
  p.add_argument("--warmup", type=_int(0, INT_MAX), default=1)
  p.add_argument("--steps", type=_int(1, INT_MAX), default=5)
  p.add_argument("--batch", type=_int(1, INT_MAX), default=10)
  p.add_argument("--lr", type=_positive, default=0.215)
  p.add_argument("--dp", action="store_true", help="pfl's central Gaussian DP")
  p.add_argument("--clip", type=_positive, default=0.6)
  p.add_argument("--sigma", type=_positive, default=1.54)
  p.add_argument("--threads", type=_int(0, INT_MAX), default=0,
                 help="torch threads (0: torch's default)")
  p.add_argument("--tf32", action="store_true", help="TF32 products on a GPU")
  p.add_argument("--seed", type=_int(0, SEEDS - 1), default=0)
  args = p.parse_args(argv)
  if not args.probe:
    _check_folders(p, args)
  return args


def _check_folders(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
  """Refuses, in one line, a run without its input files or with an --out that is a file."""
  if args.data is None or args.out is None:
    p.error("--data and --out are required (unless --probe)")
  missing = [n for n in DATA_FILES if not os.path.isfile(os.path.join(args.data, n))]
  if missing:
    p.error(f"--data {args.data} holds no {missing[0]}")
  if os.path.exists(args.out) and not os.path.isdir(args.out):
    p.error(f"--out {args.out} is a file; give a folder")


def main(argv: list[str] | None = None) -> int:
  args = parse_args(argv)
  if args.probe:
    print(json.dumps(probe()), flush=True)
    return 0
  rec = run(args)
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  (out / f"rank{rec['rank']}.json").write_text(json.dumps(rec) + "\n", encoding="utf-8")
  return 0


if __name__ == "__main__":
  sys.exit(main())
