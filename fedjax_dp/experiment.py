"""The sweep behind ``experiments/sweep.py``: arguments, runs, report.

Defaults are the UAI 2021 Fashion-MNIST setting (Table 5). Every input is
checked before any work starts; a bad one ends the program with a one-line
message and exit code 2, and nothing is written.
"""

from __future__ import annotations

import argparse
import sys

import jax.numpy as jnp
from tqdm import tqdm

from fedjax_dp import presets, report, simulation
from fedjax_dp.data import DataError, load_federated, public_batch
from fedjax_dp.models import get_model
from fedjax_dp.privacy import accounting
from fedjax_dp.sampling import SAMPLERS
from fedjax_dp.schemes import SCHEMES, get_scheme

P = presets.FASHION_MNIST


class UsageError(Exception):
  """A bad command-line argument."""


class _Parser(argparse.ArgumentParser):
  def error(self, message):  # one line, exit code 2 (argparse prints usage too)
    raise UsageError(message)


def _clip(value: str):
  if value in ("calibrate", "paper"):
    return value
  try:
    clip = float(value)
  except ValueError:
    raise argparse.ArgumentTypeError(
        f"--clip takes a number, 'calibrate' or 'paper', got {value!r}") from None
  if not clip > 0:
    raise argparse.ArgumentTypeError(f"--clip must be > 0, got {value}")
  return clip


def build_parser() -> argparse.ArgumentParser:
  """The sweep's command-line options."""
  p = _Parser(prog="sweep.py", description=(
      "Run DP / compressed federated learning schemes and report best accuracy, "
      "its round, bandwidth and epsilon like UAI 2021 Table 1."))
  p.add_argument("--ratio", type=float, nargs="+", default=[0.005],
                 help="compression ratio(s) r in (0, 1] (default 0.005)")
  p.add_argument("--schemes", nargs="+", default=list(SCHEMES),
                 help="schemes, case-insensitive (default: all): " + ", ".join(SCHEMES))
  p.add_argument("--rounds", type=int, default=P["rounds"], help="T_cl (default 200)")
  p.add_argument("--num-clients", type=int, default=P["num_clients"], help="N (default 6000)")
  p.add_argument("--samples-per-client", type=int, default=P["samples_per_client"],
                 help="|D_k| (default 10)")
  p.add_argument("--clients-per-round", type=int, default=P["clients_per_round"],
                 help="expected |K| = C*N (default 100, C = 1/60)")
  p.add_argument("--local-steps", type=int, default=P["local_steps"], help="T_gd (default 5)")
  p.add_argument("--batch-size", type=int, default=P["batch_size"], help="|B| (default 10)")
  p.add_argument("--lr", type=float, default=P["lr"], help="client SGD rate (default 0.215)")
  p.add_argument("--noise-multiplier", type=float, default=P["noise_multiplier"],
                 help="sigma of DP schemes (default 1.54)")
  p.add_argument("--clip", type=_clip, default="calibrate",
                 help="clip norm S: a number, 'calibrate' (public-data round, UAI Sec. 4; "
                      "default) or 'paper' (UAI Table 6, calibrating where it has none)")
  p.add_argument("--delta", type=float, default=P["delta"], help="delta (default 1e-5)")
  p.add_argument("--accountant", choices=accounting.ACCOUNTANTS, default="moments",
                 help="moments (papers' method, default), rdp or pld (dp-accounting)")
  p.add_argument("--sampling", choices=SAMPLERS, default="poisson",
                 help="poisson (default; epsilon valid) or fixed (papers' literal "
                      "fixed-size cohorts; needs --accountant rdp)")
  p.add_argument("--max-cohort", type=int, default=None,
                 help="cap the Poisson cohort at B clients (truncated Poisson sampling: a "
                      "random B of the sampled clients; accounted with --accountant pld)")
  p.add_argument("--init-steps", type=int, default=P["init_steps"],
                 help="T_init public-data steps for Top-K (default 5)")
  p.add_argument("--public-size", type=int, default=P["public_batch"],
                 help="public MNIST batch size (default 10)")
  p.add_argument("--seed", type=int, default=0, help="seed of every random draw (default 0)")
  p.add_argument("--eval-every", type=int, default=1,
                 help="evaluate test accuracy every k rounds (default 1)")
  p.add_argument("--out", default="results", help="output folder (default ./results)")
  p.add_argument("--quiet", action="store_true", help="no progress bar")
  return p


def _run_plan(args) -> list[tuple]:
  """(scheme, ratio) pairs in Table 1 order; FL-STD(-DP) once, at r = 100%."""
  schemes = [get_scheme(s) for s in args.schemes]
  plan = [(s, r) for r in args.ratio for s in schemes if s.uses_ratio]
  plan += [(s, 1.0) for s in schemes if not s.uses_ratio]
  seen, unique = set(), []
  for s, r in plan:
    if (s.name, r) not in seen:
      seen.add((s.name, r))
      unique.append((s, r))
  return unique


def _config(args, ratio: float, clip) -> simulation.RunConfig:
  return simulation.RunConfig(
      ratio=ratio, rounds=args.rounds, clients_per_round=args.clients_per_round,
      local_steps=args.local_steps, batch_size=args.batch_size, lr=args.lr,
      noise_multiplier=args.noise_multiplier, clip_norm=clip, delta=args.delta,
      accountant=args.accountant, sampler=args.sampling, init_steps=args.init_steps,
      seed=args.seed, eval_every=args.eval_every, max_cohort=args.max_cohort)


def _clip_for(args, scheme, ratio):
  """(clip norm or None to calibrate, where it came from)."""
  if isinstance(args.clip, float):
    return args.clip, "user"
  if args.clip == "paper":
    s = presets.paper_clip_norm(scheme.name, ratio)
    if s is not None:
      return s, "paper (UAI Table 6)"
  return None, "calibrated (UAI Sec. 4)"


def main(argv: list[str] | None = None) -> int:
  """Runs the sweep; returns the exit code."""
  try:
    args = build_parser().parse_args(argv)
    plan = _run_plan(args)
    for scheme, ratio in plan:  # validate every run before any work
      _config(args, ratio, None).validate(args.num_clients)
    if args.public_size < 1:
      raise ValueError(f"--public-size must be >= 1, got {args.public_size}")
    fed, test_x, test_y = load_federated("fashion-mnist", args.num_clients,
                                         args.samples_per_client, args.seed)
    public = public_batch(args.public_size, seed=args.seed)
  except (UsageError, ValueError, DataError) as e:
    print(f"sweep.py: error: {e}", file=sys.stderr)
    return 2

  model = get_model("cnn")
  data = simulation.ClientData(jnp.asarray(fed.x), jnp.asarray(fed.y))
  runs = []
  bar = tqdm(total=args.rounds * len(plan), unit="round", disable=args.quiet,
             file=sys.stderr, dynamic_ncols=True)
  try:
    for scheme, ratio in plan:
      bar.set_description(f"{scheme.name} r={ratio:g}")
      clip, source = _clip_for(args, scheme, ratio)
      record = simulation.run(model, scheme, data, (test_x, test_y), public,
                              _config(args, ratio, clip), progress=bar.update)
      record["clip_source"] = source if scheme.dp else None
      runs.append(record)
  except KeyboardInterrupt:
    bar.close()
    print("sweep.py: interrupted; nothing written", file=sys.stderr)
    return 130
  bar.close()
  config = {k: v for k, v in vars(args).items()}
  config["dataset"] = "fashion-mnist"
  report.write_results(args.out, runs, config)
  print(report.markdown_table(runs), end="")
  print(f"\nwrote {args.out}/results.json, results.csv, results.md", file=sys.stderr)
  return 0
