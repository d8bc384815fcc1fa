"""The sweep's command line: every flag, its default and its help.

:func:`build_parser` is ``experiments/sweep.py``'s parser. Defaults are the
UAI 2021 Fashion-MNIST setting (Table 5); the data set's setting, then a
scheme's preset, fill the flags left at None (``fedjax_dp.experiment``).
The scheme families' flags come from their declared options
(:mod:`fedjax_dp.cli.schemes`). A bad argument raises :class:`UsageError`
with one line (the command line's exit code 2).
"""

from __future__ import annotations

import argparse
import os

from fedjax_dp import (aggregators, attacks, client, datasets, distributed, host_devices,
                       presets, simulation)
from fedjax_dp.cli import schemes, types
from fedjax_dp.privacy import accounting
from fedjax_dp.sampling import SAMPLERS
from fedjax_dp.schemes import FAMILIES, SCHEMES
from fedjax_dp.schemes.masked import MASKED_SCHEMES

PROG = "sweep.py"

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
    # (fedjax_dp.cli.types) name it themselves.
    head, _, rest = message.partition(": ")
    if head.startswith("argument --") and rest.startswith(head.removeprefix("argument ") + " "):
      message = rest
    raise UsageError(message)


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
  sec.add_argument("--dropout-rate", type=types.finite("--dropout-rate"), default=0.0,
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
  agg.add_argument("--trim-fraction", type=types.finite("--trim-fraction"), default=0.1,
                   help="trimmed-mean: fraction of values dropped at each end, in "
                        "[0, 0.5) (default 0.1)")
  agg.add_argument("--norm-bound", type=types.finite("--norm-bound"), default=None,
                   help="norm-bound: every update scaled to L2 norm at most this")


def _add_attack_flags(att: argparse._ArgumentGroup) -> None:
  """Malicious clients (fedjax_dp.attacks, thesis Chapter 6)."""
  att.add_argument("--attack", choices=attacks.ATTACKS, default=None,
                   help="malicious clients' attack (default: none)")
  att.add_argument("--malicious-fraction", type=types.finite("--malicious-fraction"), default=None,
                   help="alpha in [0, 1): a pool of round(alpha N) malicious clients, "
                        "drawn from the seed")
  att.add_argument("--malicious-selection", choices=attacks.SELECTIONS, default="cohort",
                   help="cohort: the pool makes up alpha of every round's cohort (thesis "
                        "l.1795, the default); fixed: the pool is sampled like every client")
  att.add_argument("--boost", type=types.finite("--boost"), default=1.0,
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
  att.add_argument("--attack-sigma", type=types.finite("--attack-sigma"),
                   default=attacks.RANDOM_UPDATE_SIGMA,
                   help="random-update: sigma_adv of each attacker's N(0, sigma^2 I) "
                        "(default 200)")




def _add_adaptive_clip_flags(clip: argparse._ArgumentGroup) -> None:
  clip.add_argument("--adaptive-clip", action="store_true",
                    help="track a quantile of the update norms with the clip norm, starting "
                         "from S; the count's noise is paid out of sigma, epsilon unchanged "
                         "(client-level Gaussian DP schemes)")
  clip.add_argument("--clip-quantile", type=types.finite("--clip-quantile"), default=None,
                    help="gamma, the share of updates the clip norm should fit (default 0.5)")
  clip.add_argument("--clip-lr", type=types.finite("--clip-lr"), default=None,
                    help="eta_C, the clip norm's geometric step (default 0.2)")
  clip.add_argument("--clip-count-noise", type=types.finite("--clip-count-noise"),
                    default=None, help="sigma_b, the noise std on the count of updates that "
                                       "fitted (default: clients per round / 20)")


def _add_data_flags(data: argparse._ArgumentGroup) -> None:
  """The data set's flags, from the options the data layer declares
  (``datasets.OPTIONS``); ``--dataset``'s choices are the registry, read when
  the flags are parsed (a data set registered after import included)."""
  for option in datasets.OPTIONS:
    schemes.add_option(data, option)


def add_process_flags(group: argparse._ArgumentGroup) -> None:
  """--coordinator, --num-processes, --process-id, --process-timeout
  (``fedjax_dp.distributed``; :func:`fedjax_dp.cli.settings.processes` reads them).

  Their defaults come from ``distributed.ENV``'s variables (argparse parses a
  string default as it parses the flag, so a bad value is a one-line usage
  error).
  """
  env = distributed.ENV
  group.add_argument("--coordinator", default=os.environ.get(env["coordinator"]) or None,
                     help="HOST:PORT of process 0 (it listens there) to run as one of "
                          "--num-processes processes, or 'auto' under SLURM/MPI "
                          f"(default: ${env['coordinator']}, else one process)")
  group.add_argument("--num-processes", type=int,
                     default=os.environ.get(env["num_processes"]) or None,
                     help=f"processes of the run (default: ${env['num_processes']})")
  group.add_argument("--process-id", type=int,
                     default=os.environ.get(env["process_id"]) or None,
                     help="this process's index, 0 writes the results (default: "
                          f"${env['process_id']})")
  group.add_argument("--process-timeout", type=int,
                     default=os.environ.get(env["timeout"]) or distributed.DEFAULT_TIMEOUT,
                     help="seconds processes wait for each other at start, and for a "
                          "silent process before the others stop (default: "
                          f"${env['timeout']}, else {distributed.DEFAULT_TIMEOUT})")


def _add_device_flags(dev: argparse._ArgumentGroup) -> None:
  """Sharding the cohort over devices."""
  dev.add_argument("--devices", type=types.positive("--devices", int), default=None,
                   help="shard each cohort's clients over this many devices "
                        "(default: every device JAX sees)")
  dev.add_argument(host_devices.OPTION, type=types.positive(host_devices.OPTION, int),
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
  p.add_argument("--clients-per-round", type=types.cohort, default=None,
                 help="expected |K| = C*N, or 'all' (C = 1)"
                      + _PRESET_HELP.format(f"{P['clients_per_round']}, C = 1/60"))
  p.add_argument("--local-steps", type=int, default=None,
                 help="T_gd" + _PRESET_HELP.format(P["local_steps"]))
  p.add_argument("--batch-size", type=int, default=None,
                 help="|B|" + _PRESET_HELP.format(P["batch_size"]))
  p.add_argument("--lr", type=types.finite("--lr"), default=None,
                 help="client learning rate eta" + _PRESET_HELP.format(P["lr"]))
  p.add_argument("--local-optimizer", choices=client.OPTIMIZERS, default=None,
                 help="the clients' optimiser, its state fresh every round: sgd (the UAI "
                      "paper's) or adam (thesis Table 8.1: CIFAR-10, IMDB; Keras' epsilon "
                      "1e-7); default: the data set's (adam on cifar10 and imdb), else sgd")


def build_parser() -> argparse.ArgumentParser:
  """The sweep's command-line options."""
  p = _Parser(prog=PROG, description=(
      "Run DP / compressed federated learning schemes and report best accuracy, "
      "its round, bandwidth and epsilon like UAI 2021 Table 1."), epilog=_presets_epilog(),
      formatter_class=argparse.RawDescriptionHelpFormatter)
  _add_data_flags(p.add_argument_group("data (docs/datasets.md)"))
  p.add_argument("--ratio", type=types.finite("--ratio"), nargs="+", default=[0.005],
                 help="compression ratio(s) r in (0, 1] (default 0.005)")
  p.add_argument("--schemes", nargs="+", default=list(DEFAULT_SCHEMES),
                 help="schemes, case-insensitive (default: UAI Table 1's fourteen and "
                      "FL-CS, FL-CS-DP); known: " + ", ".join(SCHEMES))
  _add_setting_flags(p)
  p.add_argument("--noise-multiplier", type=types.finite("--noise-multiplier"), default=None,
                 help="sigma of DP schemes (default: the data set's, 1.54; "
                      "medical-synth 1.49)")
  p.add_argument("--clip", type=types.clip, default="calibrate",
                 help="clip norm S: a number, 'calibrate' (public-data round, UAI Sec. 4; "
                      "default) or 'paper' (UAI Table 6, calibrating where it has none)")
  p.add_argument("--clip-ratio", type=types.finite("--clip-ratio"), default=None,
                 help="calibrate S once as at this ratio and use it at every ratio of the "
                      "sweep (Fed-SMP Sec. 6.2: one S for all ratios); default: each "
                      "run's own ratio")
  p.add_argument("--delta", type=types.finite("--delta"), default=None, help="delta (default 1e-5)")
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
  p.add_argument("--seed", type=int, default=0, help="seed of every random draw (default 0)")
  p.add_argument("--eval-every", type=int, default=1,
                 help="evaluate test accuracy every k rounds (default 1)")
  schemes.add_family_flags(p, FAMILIES)
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
  audit.add_argument("--audit-confidence", type=types.finite("--audit-confidence"), default=0.95,
                     help="confidence of the audit's one-run lower bound (default 0.95)")
  _add_adaptive_clip_flags(p.add_argument_group(
      "adaptive clipping (Andrew et al. 2021; fedjax_dp.features.adaptive_clip, docs/api.md)"))
  _add_secure_flags(p.add_argument_group(
      "secure aggregation and client failures (UAI Sec. 3.2.2; thesis 5.2.4-5.2.5)"))
  _add_device_flags(p.add_argument_group("devices (docs/performance.md)"))
  add_process_flags(p.add_argument_group(
      "several processes, e.g. one per host (docs/cli.md#several-processes)"))
  p.add_argument("--out", default="results", help="output folder (default ./results)")
  p.add_argument("--plot", action="store_true",
                 help="also write accuracy.png and accuracy_vs_upstream.png to --out: the "
                      "metric against round and against upstream KB, one line per run")
  p.add_argument("--quiet", action="store_true", help="no progress bar")
  return p
