"""Local training of a cohort for several models side by side: clients/s and GFLOP/s.

Each model trains a cohort of ``--clients`` clients (``--samples`` synthetic
examples each: uniform [0, 1) images of the model's input shape, or random
tokens in [0, vocab) for the LSTM; random labels) for ``--steps`` local SGD
steps of batch ``--batch-size`` at learning rate ``--lr`` (default: the
paper setting, 10 examples a client, 5 steps of batch 10, eta 0.05), run as
the simulator's round runs it: ``jax.jit`` of ``sharding.shard_clients`` of
a ``vmap`` of ``model.local_update`` over the cohort, sharded over one XLA
CPU device per core (``host_devices.configure``). The models, in this order:

* ``paper-cnn``: the registered paper CNN, ``models.paper_cnn()`` (its flat
  layout and Keras init; since issue 38 it trains through the same
  ``models.fast_train`` as every model: the hand-written kernels it had
  before are retired, measured against it in
  ``benchmarks/records/local-training-hand-vs-generic-2026-11-26.jsonl``);
* ``paper-cnn-flax``: the same CNN as a flax module, ``from_flax(PaperCNN())``;
* ``mlp``, ``small-cnn``, ``svhn-cnn``, ``lstm``: ``models.zoo``'s modules
  (an MLP 784-1024-512-10, a 31k-weight CNN, Fed-SMP's SVHN CNN and
  Shakespeare LSTM) through ``from_flax``;
* ``all-cnn-c``, ``imdb-cnn-lstm``, ``emnist-cnn`` (issue 39): the thesis'
  CIFAR-10 All-CNN-C (without dropout: the fast path) and IMDB CNN-LSTM
  (binary: one logit, ``sigmoid_ce``; tokens in [0, 5000), labels 0 or 1),
  and the EMNIST CNN (62 classes), ``models.zoo``'s modules through
  ``from_flax`` as the registered ``models.all_cnn_c()`` etc. build them.

The flax models run with ``fast=True``; ``--plain`` adds each with
``fast=False`` (the plain ``vmap`` of the module's ops), labelled
``<model>-plain`` (slow on CPU: docs/performance.md, "Every model fast",
its plain column). Per model, after one call that
compiles (its extra time is reported as the compile time), the best of
``--repeats`` timed calls gives seconds per cohort and clients/s; the
training FLOPs,
3 x forward FLOPs x steps x batch per client (forward + backward), over
that time give GFLOP/s, also as a fraction of the float32 matmul rate
measured in the same process (``common.matmul_gflops``). Forward FLOPs per
example are XLA's cost analysis of the model's plain forward pass on one
batch, except for the models with an LSTM: XLA counts the body of the scan
over the positions once, so their FLOPs are computed analytically (products
and gate arithmetic; XLA's count of the scan unrolled is 0.3% higher for
the Shakespeare LSTM, 0.13% for the IMDB model, whose convolution and
pooling are counted as products, bias, ReLU and comparisons).
``x_paper_cnn`` is each model's seconds per cohort over paper-cnn's.

A model that fails (an exception in its build, compile or run) prints its
traceback and a record ``{"model", "architecture", "fast", "error"}``, and
the others still run; the exit code is then 1. Interrupted (Ctrl-C, or the
GPU suite's deadline: SIGINT), it stops after the records it has, writes
them and exits with 130. ``--out`` is rewritten after every model, so a run
killed outright leaves the records of the models it finished.

  python benchmarks/models.py --clients 100 --repeats 3
  python benchmarks/models.py --models paper-cnn,paper-cnn-flax --plain --json
  python benchmarks/models.py --out benchmarks/records/models.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

from fedjax_dp import host_devices, options  # imports no JAX
from fedjax_dp.cli import types as flag_types  # imports no JAX

# One XLA CPU device per core (before JAX starts); see fedjax_dp.host_devices.
host_devices.configure()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

# benchmarks/common.py
from common import OneLineParser, best_seconds, check_out, lowered_flops, machine  # noqa: E402
from common import matmul_gflops  # noqa: E402
from fedjax_dp import sharding  # noqa: E402
from fedjax_dp.atomic import atomic_file  # noqa: E402
from fedjax_dp.models import PaperCNN, from_flax, paper_cnn, zoo  # noqa: E402

PAPER_CNN = "paper-cnn"
MODELS = (PAPER_CNN, "paper-cnn-flax", "mlp", "small-cnn", "svhn-cnn", "lstm", "all-cnn-c",
          "imdb-cnn-lstm", "emnist-cnn")
# Binary models (one logit, sigmoid cross-entropy); the others are softmax_ce.
SIGMOID = ("imdb-cnn-lstm",)
_IMAGE_28 = np.zeros((1, 28, 28, 1), np.float32)
LSTM_NOTE = ("analytic: XLA's cost analysis counts the body of the LSTM's scan once, "
             "not once per position")


def build(name: str, fast: bool):
  """(FlatModel, flax module or None, sample input batch) of a benchmark model."""
  if name == PAPER_CNN:
    return paper_cnn(), None, _IMAGE_28
  if name == "paper-cnn-flax":
    module, sample = PaperCNN(), _IMAGE_28
  else:
    constructor, sample = zoo.ZOO[name]
    module = constructor()
  loss = "sigmoid_ce" if name in SIGMOID else "softmax_ce"
  return from_flax(module, sample, loss=loss, fast=fast), module, sample


def lstm_layer_flops(positions: int, width: int, units: int) -> int:
  """Forward FLOPs of one LSTM layer over ``positions`` inputs of ``width``.

  Per position: the gates' products ``2 (width + units) 4 units`` and 17
  units of elementwise work (the input and hidden products' sum and bias, 3
  sigmoids and 2 tanh, the cell update ``f c + i g`` and ``o tanh(c)``).
  """
  return positions * (2 * (width + units) * 4 * units + 17 * units)


def lstm_forward_flops(module: zoo.CharLSTM, window: int) -> float:
  """Forward FLOPs of one example of :class:`~fedjax_dp.models.zoo.CharLSTM`.

  Each layer's :func:`lstm_layer_flops` over the window, then the output
  layer on the last position. The embedding is a lookup (no FLOPs).
  """
  u, total, width = module.units, 0, module.embed
  for _ in range(module.layers):
    total += lstm_layer_flops(window, width, u)
    width = u
  return float(total + 2 * u * module.vocab + module.vocab)


def imdb_forward_flops(module: zoo.ImdbCNNLSTM) -> float:
  """Forward FLOPs of one review of :class:`~fedjax_dp.models.zoo.ImdbCNNLSTM`.

  The embedding is a lookup (no FLOPs); the 'valid' 1-D convolution's
  products ``2 width embed filters`` at each of its ``length - width + 1``
  positions, plus its bias and ReLU; the max pooling's ``pool - 1``
  comparisons per output; the LSTM (:func:`lstm_layer_flops`) over the
  pooled positions; the output layer (70 products and a bias).
  """
  conv = module.length - module.width + 1
  pooled = conv // module.pool
  total = (2 * module.width * module.embed * module.filters * conv + 2 * module.filters * conv
           + (module.pool - 1) * module.filters * pooled
           + lstm_layer_flops(pooled, module.filters, module.units) + 2 * module.units + 1)
  return float(total)


def forward_flops(model, module, w, xb) -> tuple[float | None, float | None, str]:
  """(forward FLOPs per example, XLA's count per example, how it was counted).

  XLA's cost analysis of the plain forward pass (``eval_logits``) on the
  batch ``xb``; for the LSTM the analytic count (XLA counts a loop body once).
  """
  batch = xb.shape[0]
  xla = lowered_flops(jax.jit(model.eval_logits), w, xb)
  xla = None if xla is None else xla / batch
  if isinstance(module, zoo.CharLSTM):
    return lstm_forward_flops(module, xb.shape[1]), xla, LSTM_NOTE
  if isinstance(module, zoo.ImdbCNNLSTM):
    return imdb_forward_flops(module), xla, LSTM_NOTE
  has_loop = "while" in jax.jit(model.eval_logits).lower(w, xb).as_text()
  return xla, xla, ("xla (the forward pass has a loop: its body may be counted once)"
                    if has_loop else "xla")


def synthetic_cohort(sample, classes: int, clients: int, samples: int, seed: int,
                     vocab: int | None = None):
  """Random inputs shaped like ``sample`` (tokens in [0, vocab) for int inputs,
  ``vocab`` defaulting to ``classes``) and random labels in [0, classes),
  ``samples`` a client."""
  rng = np.random.default_rng(seed)
  shape = (clients, samples) + tuple(sample.shape[1:])
  if np.issubdtype(sample.dtype, np.integer):
    x = rng.integers(0, classes if vocab is None else vocab, shape).astype(sample.dtype)
  else:
    x = rng.random(shape, np.float32)
  return jnp.asarray(x), jnp.asarray(rng.integers(0, classes, (clients, samples)), jnp.int32)


def cohort_fn(model, mesh, *, steps: int, batch: int, lr: float):
  """The round's local training: every client's ``local_update``, vmapped and sharded."""
  def fn(shared, data, idx, keys):
    xx, yy = data
    return jax.vmap(lambda i, k: model.local_update(shared, xx[i], yy[i], k, steps=steps,
                                                    batch_size=batch, lr=lr))(idx, keys)

  return jax.jit(sharding.shard_clients(fn, mesh))


def measure(name: str, fast: bool, mesh, args, matmul: float) -> dict:
  """Times one model's cohort; the record of the module docstring (without x_paper_cnn)."""
  model, module, sample = build(name, fast)
  w = jax.jit(model.init)(jax.random.PRNGKey(args.seed))  # eager flax init: many compiles
  logits = int(jax.eval_shape(model.eval_logits, w, jnp.asarray(sample)).shape[1])
  classes = 2 if model.loss_name == "sigmoid_ce" else logits  # one logit: labels 0, 1
  x, y = synthetic_cohort(sample, classes, args.clients, args.samples, args.seed,
                          getattr(module, "vocab", None))
  take = min(args.batch_size, args.samples)  # client.sample_batch's batch
  fwd, xla_fwd, source = forward_flops(model, module, w, x[0, :take])

  run = cohort_fn(model, mesh, steps=args.steps, batch=args.batch_size, lr=args.lr)
  w, data = sharding.replicate((w, (x, y)), mesh)
  idx = jnp.arange(args.clients)
  # The next seed, wrapped at 2**63 (PRNGKey's limit).
  train_key = jax.random.PRNGKey((args.seed + 1) % options.SEED_LIMIT)
  keys = jax.random.split(train_key, args.clients)
  out = []
  first = best_seconds(lambda: out.append(jax.block_until_ready(run(w, data, idx, keys))), 1)
  max_update = float(jnp.max(jnp.abs(out.pop())))
  seconds = best_seconds(lambda: jax.block_until_ready(run(w, data, idx, keys)), args.repeats)
  train_flops = None if fwd is None else 3 * fwd * args.steps * take * args.clients
  gflops = None if train_flops is None else train_flops / seconds / 1e9
  return {
      "model": name if fast or module is None else name + "-plain",
      "architecture": name, "fast": fast, "num_params": model.num_params,
      "input_shape": list(sample.shape[1:]), "input_dtype": str(sample.dtype),
      "classes": classes, "loss": model.loss_name, "clients": args.clients,
      "samples": args.samples,
      "batch_size": args.batch_size, "steps": args.steps, "lr": args.lr,
      "clients_per_sec": args.clients / seconds,
      "seconds_per_cohort": seconds,
      "compile_seconds": max(first - seconds, 0.0),
      "first_call_seconds": first,
      "forward_flops_per_example": fwd,
      "xla_forward_flops_per_example": xla_fwd,
      "flops_source": source,
      "train_flops_per_cohort": train_flops,
      "train_gflops_per_sec": gflops,
      "matmul_gflops_per_sec": matmul,
      "fraction_of_matmul": None if gflops is None else gflops / matmul,
      "max_abs_update": max_update,
      "devices": sharding.mesh_size(mesh),
      "machine": machine(),
  }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
  p = OneLineParser(prog="benchmarks/models.py", description=__doc__.splitlines()[0])
  p.add_argument("--models", default=",".join(MODELS),
                 help=f"comma-separated models among {', '.join(MODELS)} (default: all; "
                      "they run in that order)")
  p.add_argument("--plain", action="store_true",
                 help="also run each flax model with fast=False ('<model>-plain')")
  p.add_argument("--clients", type=flag_types.positive("--clients", int), default=100,
                 help="clients in the cohort")
  p.add_argument("--samples", type=flag_types.positive("--samples", int), default=10,
                 help="examples per client")
  p.add_argument("--batch-size", type=flag_types.positive("--batch-size", int), default=10,
                 help="|B|")
  p.add_argument("--steps", type=flag_types.positive("--steps", int), default=5,
                 help="local SGD steps T_gd")
  p.add_argument("--lr", type=flag_types.positive("--lr"), default=0.05, help="eta")
  p.add_argument("--repeats", type=flag_types.positive("--repeats", int), default=3,
                 help="timed repeats (best is kept)")
  p.add_argument("--seed", type=flag_types.flagged("--seed", options.seed), default=0)
  p.add_argument("--devices", type=int, default=None,
                 help="shard the cohort over this many devices (default: all)")
  p.add_argument(host_devices.OPTION,
                 type=flag_types.flagged(host_devices.OPTION, host_devices.parse_count),
                 default=None,
                 help="XLA CPU devices to create (default: one per core, at most "
                      f"{host_devices.DEFAULT_MAX}; XLA_FLAGS={host_devices.FLAG} wins)")
  p.add_argument("--json", action="store_true", help="one JSON line per model")
  p.add_argument("--out", default=None,
                 help="also write the JSON lines to this file (rewritten after each "
                      "model); an existing file is refused without --overwrite")
  p.add_argument("--overwrite", action="store_true", help="replace an existing --out")
  args = p.parse_args(argv)
  names = [n.strip() for n in args.models.split(",") if n.strip()]
  unknown = [n for n in names if n not in MODELS]
  if unknown or not names:
    p.error(f"unknown model {unknown[0]!r} in --models; choose among {', '.join(MODELS)}"
            if unknown else "--models names no model")
  args.models = [n for n in MODELS if n in names]  # the paper CNN first, for x_paper_cnn
  check_out(p, args.out)
  if args.out is not None and os.path.exists(args.out) and not args.overwrite:
    p.error(f"--out {args.out} exists (another run's records): choose another --out, or "
            "add --overwrite to replace it")
  return args


def _row(rec: dict) -> str:
  def num(value, fmt):
    return "-" if value is None else format(value, fmt)
  return (f"{rec['model']:20s} {rec['num_params']:>10,d} {rec['compile_seconds']:9.1f} "
          f"{rec['seconds_per_cohort']:9.3f} {rec['clients_per_sec']:10.1f} "
          f"{num(rec['train_gflops_per_sec'], '8.1f'):>8s} "
          f"{num(rec['fraction_of_matmul'], '8.1%'):>8s} {num(rec['x_paper_cnn'], '7.2f'):>7s}")


def main(argv: list[str] | None = None) -> int:
  args = parse_args(argv)
  try:
    mesh = sharding.client_mesh(args.devices)
  except ValueError as e:
    print(f"benchmarks/models.py: error: {e}", file=sys.stderr)
    return 2
  load_before = os.getloadavg()
  # A VM's matmul rate moves between runs (docs/performance.md, "Figures
  # behind the code's choices"): measured before every model, the highest kept.
  matmuls = [matmul_gflops(mesh)]
  if not args.json:
    print(f"{args.clients} clients x {args.steps} steps of batch {args.batch_size} "
          f"({args.samples} examples each), lr {args.lr:g}, {sharding.mesh_size(mesh)} "
          f"device(s); float32 matmul {matmuls[0]:.1f} GFLOP/s; best of {args.repeats}\n"
          f"on {machine()}")
    print(f"{'model':20s} {'weights':>10s} {'compile s':>9s} {'s/cohort':>9s} "
          f"{'clients/s':>10s} {'GFLOP/s':>8s} {'%matmul':>8s} {'x_paper_cnn':>7s}", flush=True)
  records, paper_cnn_seconds, failed, interrupted = [], None, 0, False
  cases = [(name, fast) for name in args.models
           for fast in ((True, False) if args.plain and name != PAPER_CNN else (True,))]
  for name, fast in cases:
    try:
      if records:
        matmuls.append(matmul_gflops(mesh))
      rec = measure(name, fast, mesh, args, max(matmuls))
    except KeyboardInterrupt:  # Ctrl-C or the GPU suite's deadline: keep what was measured
      interrupted = True
      print(f"benchmarks/models.py: interrupted in {name}; writing the "
            f"{len(records)} record(s) measured", file=sys.stderr, flush=True)
      break
    except Exception as e:  # pylint: disable=broad-except  (one model's bug: run the others)
      traceback.print_exc()
      failed += 1
      first_line = str(e).splitlines()[0] if str(e) else ""
      rec = {"model": name if fast or name == PAPER_CNN else name + "-plain",
             "architecture": name, "fast": fast, "error": f"{type(e).__name__}: {first_line}"}
    if "error" not in rec:
      if name == PAPER_CNN:
        paper_cnn_seconds = rec["seconds_per_cohort"]
      rec["x_paper_cnn"] = (None if paper_cnn_seconds is None
                            else rec["seconds_per_cohort"] / paper_cnn_seconds)
    rec["load_average"] = [round(load_before[0], 2), round(os.getloadavg()[0], 2)]
    rec.update(command=" ".join(["python", "benchmarks/models.py"] + list(
        sys.argv[1:] if argv is None else argv)), seed=args.seed, jax_version=jax.__version__,
               date_utc=time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()))
    records.append(rec)
    if not args.json:
      print(_row(rec) if "error" not in rec else f"{rec['model']:20s} failed: {rec['error']}",
            flush=True)
    _settle(records, matmuls)
    if args.out is not None:  # what a killed run leaves
      _write(args.out, records)
    jax.clear_caches()  # each model compiled afresh, its programs' memory freed
  best = _settle(records, matmuls)
  if args.json:
    for rec in records:
      print(json.dumps(rec), flush=True)
  else:
    notes = sorted({f"{r['architecture']}: FLOPs {r['flops_source']}" for r in records
                    if r.get("flops_source", "xla") != "xla"})
    print(f"float32 matmul: best of {len(matmuls)} measurements, {best:.1f} GFLOP/s "
          f"(range {min(matmuls):.1f}-{best:.1f}); %matmul above is against the best so far\n"
          "GFLOP/s: 3 x forward FLOPs x steps x batch per client, over s/cohort; "
          "x_paper_cnn: s/cohort over paper-cnn's" + "".join(f"\n  {n}" for n in notes))
  if args.out is not None:
    _write(args.out, records)
  return 130 if interrupted else 1 if failed else 0


def _settle(records: list[dict], matmuls: list[float]) -> float:
  """Every share against the run's best matmul rate so far; returns that rate."""
  best = max(matmuls)
  for rec in records:
    if "error" in rec:
      continue
    rec["matmul_gflops_per_sec"] = best
    rec["matmul_gflops_measured"] = [round(m, 1) for m in matmuls]
    if rec["train_gflops_per_sec"] is not None:
      rec["fraction_of_matmul"] = rec["train_gflops_per_sec"] / best
  return best


def _write(path: str, records: list[dict]) -> None:
  with atomic_file(path, "w") as f:
    f.write("".join(json.dumps(r) + "\n" for r in records))


if __name__ == "__main__":
  sys.exit(main())
