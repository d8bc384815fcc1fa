"""The sweep behind ``experiments/sweep.py``: arguments, runs, report.

Defaults are the UAI 2021 Fashion-MNIST setting (Table 5). Schemes whose
papers used another setting (FL-SIGN: thesis Table 8.1; FL-SIGN-DP: Table
8.2; signSGD: all clients, one batch) get it as a preset
(``presets.SCHEME_SETTINGS``): for each of --rounds, --num-clients,
--samples-per-client, --clients-per-round, --local-steps, --batch-size and
--lr the value is the flag if given, else the scheme's preset, else the UAI
default. Every input is checked before any work starts; a bad one ends the
program with a one-line message and exit code 2, and nothing is written.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

import jax.numpy as jnp
from tqdm import tqdm

from fedjax_dp import host_devices, presets, report, sharding, simulation
from fedjax_dp.compression import dct_cs, fista
from fedjax_dp.data import DataError, load_federated, load_federated_with_public, public_batch
from fedjax_dp.models import get_model
from fedjax_dp.privacy import accounting
from fedjax_dp.sampling import SAMPLERS
from fedjax_dp.compression import lattice as lattice_lib
from fedjax_dp.privacy import analytic_gaussian
from fedjax_dp.schemes.cdp_lq import LatticeScheme
from fedjax_dp.schemes import SCHEMES, CSScheme, FedSMPScheme, SignScheme, get_scheme
from fedjax_dp.schemes.masked import MASKED_SCHEMES

# The main job: UAI 2021 Table 1's fourteen schemes plus FL-CS and FL-CS-DP
# (thesis Tables 4.2 / 5.3). The other schemes have their own settings and
# run with --schemes (their presets apply).
DEFAULT_SCHEMES = tuple(MASKED_SCHEMES) + ("FL-CS", "FL-CS-DP")

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
    float(value)
  except ValueError:
    raise argparse.ArgumentTypeError(
        f"--clip takes a number, 'calibrate' or 'paper', got {value!r}") from None
  return _positive("--clip")(value)


def _momentum(value: str) -> float:
  try:
    beta = float(value)
  except ValueError:
    raise argparse.ArgumentTypeError(f"--momentum takes a number, got {value!r}") from None
  if not 0.0 <= beta < 1.0:
    raise argparse.ArgumentTypeError(f"--momentum must be in [0, 1), got {value}")
  return beta


def _cohort(value: str):
  if value == "all":
    return value
  try:
    return int(value)
  except ValueError:
    raise argparse.ArgumentTypeError(
        f"--clients-per-round takes an int or 'all', got {value!r}") from None


def _positive(flag: str, kind=float):
  """argparse type: a number > 0 (an int for ``kind=int``), one-line error otherwise."""
  def parse(value: str):
    try:
      number = kind(value)
    except ValueError:
      raise argparse.ArgumentTypeError(
          f"{flag} takes {'an int' if kind is int else 'a number'}, got {value!r}") from None
    if not number > 0:
      raise argparse.ArgumentTypeError(f"{flag} must be > 0, got {value}")
    return number
  return parse


# Flags whose default is the scheme's preset, then the UAI default.
PRESET_FLAGS = ("rounds", "num_clients", "samples_per_client", "clients_per_round",
                "local_steps", "batch_size", "lr")
_PRESET_HELP = " (default: the scheme's preset, else {})"


def _presets_epilog() -> str:
  lines = ["scheme presets (used where the flag is not given; all other schemes use "
           "the UAI 2021 setting):"]
  names = {"num_clients": "N", "clients_per_round": "|K|", "samples_per_client": "|D_k|",
           "batch_size": "|B|", "local_steps": "T_gd", "rounds": "T_cl", "lr": "eta"}
  for scheme, setting in presets.SCHEME_SETTINGS.items():
    values = ", ".join(f"{names[k]}={v}" for k, v in setting.items())
    gamma = getattr(SCHEMES.get(scheme), "gamma", None)
    values += "" if gamma is None else f", gamma={gamma}"
    lines.append(f"  {scheme}: {values} ({presets.SETTING_SOURCES[scheme]})")
  return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
  """The sweep's command-line options."""
  p = _Parser(prog="sweep.py", description=(
      "Run DP / compressed federated learning schemes and report best accuracy, "
      "its round, bandwidth and epsilon like UAI 2021 Table 1."), epilog=_presets_epilog(),
      formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--ratio", type=float, nargs="+", default=[0.005],
                 help="compression ratio(s) r in (0, 1] (default 0.005)")
  p.add_argument("--schemes", nargs="+", default=list(DEFAULT_SCHEMES),
                 help="schemes, case-insensitive (default: UAI Table 1's fourteen and "
                      "FL-CS, FL-CS-DP); known: " + ", ".join(SCHEMES))
  p.add_argument("--rounds", type=int, default=None,
                 help="T_cl" + _PRESET_HELP.format(P["rounds"]))
  p.add_argument("--num-clients", type=int, default=None,
                 help="N" + _PRESET_HELP.format(P["num_clients"]))
  p.add_argument("--samples-per-client", type=int, default=None,
                 help="|D_k|" + _PRESET_HELP.format(P["samples_per_client"]))
  p.add_argument("--clients-per-round", type=_cohort, default=None,
                 help="expected |K| = C*N, or 'all' (C = 1)"
                      + _PRESET_HELP.format(f"{P['clients_per_round']}, C = 1/60"))
  p.add_argument("--local-steps", type=int, default=None,
                 help="T_gd" + _PRESET_HELP.format(P["local_steps"]))
  p.add_argument("--batch-size", type=int, default=None,
                 help="|B|" + _PRESET_HELP.format(P["batch_size"]))
  p.add_argument("--lr", type=float, default=None,
                 help="client SGD rate" + _PRESET_HELP.format(P["lr"]))
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
  cs = p.add_argument_group("FL-CS / FL-FREQ (defaults: thesis Table 8.4)")
  cs_paper = SCHEMES["FL-CS"]
  cs.add_argument("--chunks", type=int, default=cs_paper.chunks,
                  help="P, DCT chunks (default 200)")
  cs.add_argument("--cs-lambda", type=float, default=cs_paper.lam,
                  help="lambda of the BPDN decoder, thesis Eq. 2.4 (default 1e-5)")
  cs.add_argument("--server-momentum", type=float, default=cs_paper.momentum,
                  help="FL-CS server momentum rho (default 0.9)")
  cs.add_argument("--server-lr", type=float, default=cs_paper.server_lr,
                  help="FL-CS global learning rate eta_G (default 0.35)")
  cs.add_argument("--decoder", choices=fista.SOLVERS, default=cs_paper.decoder,
                  help="BPDN solver (default fista)")
  cs.add_argument("--decoder-restart", action="store_true",
                  help="FISTA with gradient restart")
  cs.add_argument("--decoder-iters", type=int, default=cs_paper.max_iters,
                  help="decoder steps per round at most (default 100)")
  cs.add_argument("--decoder-tol", type=float, default=cs_paper.tol,
                  help="decoder stops when its iterate changes by <= this, relative "
                       "(default 1e-3)")
  cs.add_argument("--dct-method", choices=dct_cs.METHODS, default=cs_paper.dct_method,
                  help="DCT implementation, same operator (default auto)")
  sign = p.add_argument_group(
      "FL-SIGN / FL-SIGN-DP / signSGD (presets: thesis Tables 8.1, 8.2; Sec. 4.1.1)")
  sign.add_argument("--gamma", type=float, default=None,
                    help="server step gamma (default: 0.001 for FL-SIGN and signSGD, "
                         "0.005 for FL-SIGN-DP)")
  smp = p.add_argument_group("Fed-SMP-randk / -topk, FedAvg-randk / -topk (Fed-SMP paper "
                             "Sec. 4, 6.1-6.2)")
  smp.add_argument("--momentum", type=_momentum, default=None,
                   help="local momentum beta in [0, 1), reset every round (default 0.5)")
  smp.add_argument("--lr-decay", type=float, default=None,
                   help="learning rate factor per round, in (0, 1] (default 0.99)")
  smp.add_argument("--server-steps", type=int, default=None,
                   help="top_k: server SGD steps per round on its public set (default: "
                        "T_gd * ceil(public / |B|), the clients' local period)")
  smp.add_argument("--public-holdout", type=int, default=None,
                   help="top_k: Fashion-MNIST training examples held out of the clients' "
                        "data as the server's public set (default 1000)")
  lq = p.add_argument_group(
      "CDP-LQ: dithered lattice quantization, sample-level DP (poster, seed 001, Alg. 1-2)")
  lq_default = SCHEMES["CDP-LQ"]
  lq.add_argument("--lattice", choices=lattice_lib.KINDS, default=lq_default.lattice,
                  help="lattice of the quantizer: scalar (Delta Z) or hexagonal (A2) "
                       "(default scalar)")
  lq.add_argument("--lattice-step", type=_positive("--lattice-step"),
                  default=lq_default.step,
                  help="Delta, the lattice step in units of the clip norm S (default "
                       f"{lq_default.step:g}: noise sigma = 1 spans N = sigma/Delta = 4 steps)")
  lq.add_argument("--lattice-dim", type=_positive("--lattice-dim", int), default=None,
                  help="L, the lattice vector size (default 5, the poster's, for scalar; "
                       "2 for hexagonal, which needs an even L)")
  lq.add_argument("--lq-step-epsilon", type=_positive("--lq-step-epsilon"), default=None,
                  help="calibrate CDP-LQ's sigma with the analytical Gaussian mechanism so "
                       "that one local step is (eps, --delta)-DP (overrides "
                       "--noise-multiplier for CDP-LQ)")
  lq.add_argument("--lq-measured-clients", type=int, default=lq_default.measured_clients,
                  help="clients whose bzip2-coded stream is measured in the first round "
                       "of every evaluation interval (default 1; 0: none)")
  lq.add_argument("--lq-microbatch", type=_positive("--lq-microbatch", int),
                  default=lq_default.microbatch,
                  help="per-example gradients computed at once per client (memory; "
                       f"default {lq_default.microbatch})")
  sec = p.add_argument_group("secure aggregation and client failures (UAI Sec. 3.2.2; "
                             "thesis 5.2.4-5.2.5)")
  sec.add_argument("--secure-aggregation", action="store_true",
                   help="sum every DP scheme's (and FL-SIGN's, signSGD's) messages under "
                        "simulated secure aggregation: fixed-point encoding, pairwise "
                        "masks mod 2^b; overflows are counted and reported")
  sec.add_argument("--secure-bits", type=int, default=None,
                   help="b, bits per value (default: thesis 5.2.4, "
                        "ceil(log2((12 S sigma + max|x|) |K| 2^f)); 22 for FL-SIGN-DP)")
  sec.add_argument("--secure-frac-bits", type=int, default=16,
                   help="f, fractional bits of the fixed-point encoding of real "
                        "updates (default 16)")
  sec.add_argument("--secure-neighbours", type=int, default=1,
                   help="d: each client shares masks with its d ring neighbours on "
                        "each side (default 1; results do not depend on it)")
  sec.add_argument("--max-dropouts", type=int, default=0,
                   help="l: DP noise shares sized for |K| - l clients, so the noise "
                        "stays >= S*sigma if up to l clients fail (default 0)")
  sec.add_argument("--dropout-rate", type=float, default=0.0,
                   help="each sampled client fails before sending with this "
                        "probability (default 0)")
  sec.add_argument("--client-chunk", type=int, default=None,
                   help="train and sum the cohort this many clients at a time "
                        f"(default: all, or {simulation.AUTO_CHUNK} above "
                        f"{simulation.AUTO_CHUNK_ABOVE} slots)")
  dev = p.add_argument_group("devices (README, Performance)")
  dev.add_argument("--devices", type=_positive("--devices", int), default=None,
                   help="shard each cohort's clients over this many devices "
                        "(default: every device JAX sees)")
  dev.add_argument(host_devices.OPTION, type=_positive(host_devices.OPTION, int),
                   default=None,
                   help="XLA CPU devices to create, read by sweep.py before JAX "
                        "starts (default: one per core, at most "
                        f"{host_devices.DEFAULT_MAX}; an explicit XLA_FLAGS="
                        f"{host_devices.FLAG} wins; no effect on GPU)")
  p.add_argument("--out", default="results", help="output folder (default ./results)")
  p.add_argument("--quiet", action="store_true", help="no progress bar")
  return p


def _settings(args, scheme) -> dict:
  """The preset-able settings of one scheme: flag, else preset, else UAI default."""
  setting = presets.scheme_setting(scheme.name)
  for flag in PRESET_FLAGS:
    value = getattr(args, flag)
    if value is not None:
      setting[flag] = value
  if setting["clients_per_round"] == "all":
    setting["clients_per_round"] = setting["num_clients"]
  return setting


def _run_plan(args) -> list[tuple]:
  """(scheme, ratio) pairs in Table 1 order; FL-STD(-DP) once, at r = 100%."""
  schemes = [_configure(get_scheme(s), args) for s in args.schemes]
  plan = [(s, r) for r in args.ratio for s in schemes if s.uses_ratio]
  plan += [(s, 1.0) for s in schemes if not s.uses_ratio]
  seen, unique = set(), []
  for s, r in plan:
    if (s.name, r) not in seen:
      seen.add((s.name, r))
      unique.append((s, r))
  return unique


def _configure(scheme, args):
  """Applies the FL-CS / FL-FREQ options, or --gamma to a sign scheme."""
  if isinstance(scheme, LatticeScheme):  # CDP-LQ options
    return dataclasses.replace(scheme, lattice=args.lattice, step=args.lattice_step,
                               dim=args.lattice_dim, microbatch=args.lq_microbatch,
                               measured_clients=args.lq_measured_clients)
  if isinstance(scheme, SignScheme):
    return scheme if args.gamma is None else dataclasses.replace(scheme, gamma=args.gamma)
  if isinstance(scheme, FedSMPScheme):
    options = {"momentum": args.momentum, "lr_decay": args.lr_decay,
               "server_steps": args.server_steps}
    if scheme.sparsifier == "topk":
      options["public_holdout"] = args.public_holdout
    return dataclasses.replace(scheme, **{k: v for k, v in options.items() if v is not None})
  if not isinstance(scheme, CSScheme):
    return scheme
  return dataclasses.replace(
      scheme, chunks=args.chunks, lam=args.cs_lambda, momentum=args.server_momentum,
      server_lr=args.server_lr, decoder=args.decoder, restart=args.decoder_restart,
      max_iters=args.decoder_iters, tol=args.decoder_tol, dct_method=args.dct_method)


def _config(args, scheme, ratio: float, clip) -> simulation.RunConfig:
  setting = _settings(args, scheme)
  return simulation.RunConfig(
      ratio=ratio, rounds=setting["rounds"],
      clients_per_round=setting["clients_per_round"],
      local_steps=setting["local_steps"], batch_size=setting["batch_size"],
      lr=setting["lr"], noise_multiplier=_noise_multiplier(args, scheme), clip_norm=clip,
      delta=args.delta, accountant=args.accountant, sampler=args.sampling,
      init_steps=args.init_steps, seed=args.seed, eval_every=args.eval_every,
      max_cohort=args.max_cohort, secure_aggregation=args.secure_aggregation,
      secure_bits=args.secure_bits, secure_frac_bits=args.secure_frac_bits,
      secure_neighbours=args.secure_neighbours, max_dropouts=args.max_dropouts,
      dropout_rate=args.dropout_rate, client_chunk=args.client_chunk, devices=args.devices)


def _noise_multiplier(args, scheme) -> float:
  """sigma: --noise-multiplier, or for CDP-LQ the analytical Gaussian calibration
  of --lq-step-epsilon (Balle and Wang 2018, Alg. 1; sensitivity S)."""
  if isinstance(scheme, LatticeScheme) and args.lq_step_epsilon is not None:
    return analytic_gaussian.sigma_for_epsilon(args.lq_step_epsilon, args.delta)
  return args.noise_multiplier


def _clip_for(args, scheme, ratio):
  """(clip norm or None to calibrate, where it came from)."""
  if hasattr(scheme, "fixed_clip_norm"):
    return None, "sqrt(n): a sign vector's L2 norm (thesis Table 8.2)"
  if isinstance(args.clip, float):
    return args.clip, "user"
  if args.clip == "paper":
    s = presets.paper_clip_norm(scheme.name, ratio)
    if s is not None:
      return s, f"paper ({presets.paper_clip_source(scheme.name, ratio)})"
  return None, "calibrated (UAI Sec. 4)"


def main(argv: list[str] | None = None) -> int:
  """Runs the sweep; returns the exit code."""
  try:
    args = build_parser().parse_args(argv)
    plan = _run_plan(args)
    num_params = get_model("cnn").num_params
    for scheme, ratio in plan:  # validate every run before any work
      setting = _settings(args, scheme)
      for flag in ("num_clients", "samples_per_client"):
        if setting[flag] < 1:
          raise ValueError(f"--{flag.replace('_', '-')} must be >= 1, got {setting[flag]}")
      _config(args, scheme, ratio, None).validate_scheme(scheme, setting["num_clients"])
      if hasattr(scheme, "validate"):  # scheme options, e.g. FL-CS chunks
        scheme.validate(num_params, ratio)
    if args.public_size < 1:
      raise ValueError(f"--public-size must be >= 1, got {args.public_size}")
    sharding.client_mesh(args.devices)  # no more devices than JAX sees
    federations = {}  # (N, |D_k|, hold-out) -> (data, test_x, test_y, public or None)
    for scheme, _ in plan:
      setting = _settings(args, scheme)
      shape = (setting["num_clients"], setting["samples_per_client"],
               getattr(scheme, "public_holdout", 0))
      if shape not in federations:
        if shape[2]:  # Fed-SMP Sec. 6.1: a public set held out of the clients' data
          fed, test_x, test_y, held_out = load_federated_with_public(
              "fashion-mnist", *shape, args.seed)
        else:
          (fed, test_x, test_y), held_out = load_federated(
              "fashion-mnist", *shape[:2], args.seed), None
        federations[shape] = (simulation.ClientData(jnp.asarray(fed.x), jnp.asarray(fed.y)),
                              test_x, test_y, held_out)
    public = public_batch(args.public_size, seed=args.seed)
  except (UsageError, ValueError, DataError) as e:
    print(f"sweep.py: error: {e}", file=sys.stderr)
    return 2

  model = get_model("cnn")
  runs = []
  bar = tqdm(total=sum(_settings(args, s)["rounds"] for s, _ in plan), unit="round",
             disable=args.quiet, file=sys.stderr, dynamic_ncols=True)
  try:
    for scheme, ratio in plan:
      bar.set_description(f"{scheme.name} r={ratio:g}")
      clip, source = _clip_for(args, scheme, ratio)
      setting = _settings(args, scheme)
      data, test_x, test_y, held_out = federations[(
          setting["num_clients"], setting["samples_per_client"],
          getattr(scheme, "public_holdout", 0))]
      record = simulation.run(model, scheme, data, (test_x, test_y),
                              public if held_out is None else held_out,
                              _config(args, scheme, ratio, clip), progress=bar.update)
      record["clip_source"] = source if scheme.dp else None
      record["paper_source"] = presets.paper_source(scheme.name, ratio)
      record["paper_upstream_bits"] = presets.PAPER_UPSTREAM_BITS.get(scheme.name)
      record["setting_source"] = presets.SETTING_SOURCES.get(scheme.name, "UAI Table 5")
      record.update({k: setting[k] for k in ("samples_per_client", "local_steps",
                                              "batch_size", "lr")})
      if isinstance(scheme, SignScheme):
        record["gamma"] = scheme.gamma
      if isinstance(scheme, LatticeScheme):
        record["lq_step_epsilon"] = args.lq_step_epsilon
        record["paper_compression_factor"] = presets.POSTER_CDP_LQ["compression_factor"]
      if isinstance(scheme, FedSMPScheme):
        record.update(momentum=scheme.momentum, lr_decay=scheme.lr_decay,
                      public_holdout=scheme.public_holdout)
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
