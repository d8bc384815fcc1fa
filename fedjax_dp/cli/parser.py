"""The sweep's command line: every flag, its default and its help.

:func:`build_parser` is ``experiments/sweep.py``'s parser. Defaults are the
UAI 2021 Fashion-MNIST setting (Table 5); the data set's setting, then a
scheme's preset, fill the flags left at None (``fedjax_dp.cli.resolve``).
Every flag of a run comes from an option the library declares as data
(:func:`declared_options`: the run config's fields, the aggregator's, each
round feature's; the scheme families' through :mod:`fedjax_dp.cli.schemes`),
its help stating the declared default. A bad argument raises :class:`UsageError`
with one line (the command line's exit code 2).
"""

from __future__ import annotations

import argparse
import os

from fedjax_dp import (aggregators, datasets, distributed, features, host_devices, options,
                       simulation)
from fedjax_dp.cli import schemes, types
from fedjax_dp.paper import presets as paper_presets
from fedjax_dp.schemes import FAMILIES, SCHEMES
from fedjax_dp.schemes.coordinate_subset import MASKED_SCHEMES

PROG = "sweep.py"

# The main job: UAI 2021 Table 1's fourteen schemes plus FL-CS and FL-CS-DP
# (thesis Tables 4.2 / 5.3). The other schemes have their own settings and
# run with --schemes (their presets apply).
DEFAULT_SCHEMES = tuple(MASKED_SCHEMES) + ("FL-CS", "FL-CS-DP")


class UsageError(Exception):
  """A bad command-line argument."""


class _Parser(argparse.ArgumentParser):
  def error(self, message):  # one line, exit code 2 (argparse prints usage too)
    raise UsageError(types.once(message))


# Flags whose default is the scheme's preset, then the data set's setting: the
# options declared with ``preset="scheme"`` (the federation's size, then the
# run's training settings), read from their declarations.
PRESET_FLAGS = tuple(o.name for o in (*datasets.FEDERATION_OPTIONS,
                                      *(o for _, group in simulation.config.option_groups()
                                        for o in group))
                     if o.preset == "scheme")


# How the epilog names the preset-able settings.
_SYMBOLS = {"num_clients": "N", "clients_per_round": "|K|", "samples_per_client": "|D_k|",
            "batch_size": "|B|", "local_steps": "T_gd", "rounds": "T_cl", "lr": "eta",
            "noise_multiplier": "sigma", "init_steps": "T_init"}


def _values(setting) -> str:
  return ", ".join(f"{_SYMBOLS[k]}={v}" for k, v in setting.items() if k in _SYMBOLS)


def family_presets(family) -> dict[str, tuple[dict, str]]:
  """A family's presets on the image data with their sources: its papers'
  (``fedjax_dp.paper.presets``), then its own (``Family.presets``)."""
  found = {scheme: (setting, paper_presets.IMAGE_SOURCES[scheme])
           for scheme, setting in paper_presets.IMAGE_PRESETS.items()
           if scheme in family.schemes}
  return {**found, **{scheme: (setting, family.preset_sources[scheme])
                      for scheme, setting in family.presets.items()}}


def _presets_epilog() -> str:
  """The scheme families' presets and each data set's setting: the papers'
  (``fedjax_dp.paper.presets``) and the declarations (``Family.presets``,
  ``Dataset.settings``)."""
  lines = ["scheme presets (used where the flag is not given; all other schemes use "
           "the data set's setting):"]
  for family in FAMILIES:
    for scheme, (setting, source) in family_presets(family).items():
      lines.append(f"  {scheme}: {_values(setting)} ({source})")
  lines.append("data set settings (every scheme, unless a preset of the data set's says "
               "otherwise):")
  for name, dataset in datasets.DATASETS.items():
    settings = dataset.settings
    papers = paper_presets.presets_on(dataset)[0] if settings.scheme_presets is not None else {}
    own = "".join(f"; {scheme}: {_values(setting)}"
                  for scheme, setting in {**papers, **(settings.scheme_presets or {})}.items())
    lines.append(f"  --dataset {name}: {_values(settings.setting)} ({settings.source}){own}")
  return "\n".join(lines)


def _add_data_flags(data: argparse._ArgumentGroup) -> None:
  """The data set's flags, from the options the data layer declares
  (``datasets.OPTIONS``); ``--dataset``'s choices are the registry, read when
  the flags are parsed (a data set registered after import included)."""
  for option in datasets.OPTIONS:
    schemes.add_option(data, option)


def add_process_flags(group: argparse._ArgumentGroup) -> None:
  """--coordinator, --num-processes, --process-id, --process-timeout
  (``fedjax_dp.distributed``; :func:`fedjax_dp.cli.resolve.processes` reads them).

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
  """The XLA CPU devices to create (read before JAX starts)."""
  dev.add_argument(host_devices.OPTION, type=types.flagged(host_devices.OPTION,
                                                                host_devices.parse_count),
                   default=None,
                   help="XLA CPU devices to create, read by sweep.py before JAX "
                        "starts (default: one per core, at most "
                        f"{host_devices.DEFAULT_MAX}; an explicit XLA_FLAGS="
                        f"{host_devices.FLAG} wins; no effect on GPU)")


# The sweep's own options (not a run's settings).
SWEEP_OPTIONS = (
    options.Option("ratio", options.number, [0.005],
                   "compression ratio(s) r in (0, 1]", many=True),
    options.Option("schemes", str, list(DEFAULT_SCHEMES),
                   "schemes, case-insensitive (default: UAI Table 1's fourteen and FL-CS, "
                   "FL-CS-DP); known: " + ", ".join(SCHEMES), many=True),
)
# The federation's size: the scheme's preset, else the data set's.
FEDERATION_OPTIONS = datasets.FEDERATION_OPTIONS
OUTPUT_OPTIONS = (
    options.Option("out", str, "results",
                   "output folder; one sweep's records: the same command run again "
                   "keeps its finished runs, another sweep is refused there"),
    options.Option("overwrite", bool, False,
                   "replace the records of another sweep in --out (without it, a "
                   "sweep with other settings stops before any work)"),
    options.Option("plot", bool, False,
                   "also write accuracy.png and accuracy_vs_upstream.png to --out: the "
                   "metric against round and against upstream KB, one line per run"),
    options.Option("quiet", bool, False, "no progress bar"),
)


def declared_options() -> tuple[options.Option, ...]:
  """Every option of a run the sweep offers, as the library declares them: the
  run's settings (``simulation.config.option_groups``), the aggregator's, the
  round features' (``fedjax_dp.features.REGISTRY``) and the sweep's own
  (the scheme families' are ``fedjax_dp.schemes.FAMILIES``'; the data's
  ``datasets``')."""
  run = [o for _, group in simulation.config.option_groups() for o in group]
  feats = [o for f in features.REGISTRY.values() for o in f.options]
  return (*SWEEP_OPTIONS, *FEDERATION_OPTIONS, *run,
          *options.declared(aggregators.AggregatorConfig), *feats, *OUTPUT_OPTIONS)


def _add_options(group: argparse._ArgumentGroup, declared: tuple[options.Option, ...]) -> None:
  for option in declared:
    schemes.add_option(group, option)


def build_parser() -> argparse.ArgumentParser:
  """The sweep's command-line options."""
  p = _Parser(prog=PROG, description=(
      "Run DP / compressed federated learning schemes and report best accuracy, "
      "its round, bandwidth and epsilon like UAI 2021 Table 1."), epilog=_presets_epilog(),
      formatter_class=argparse.RawDescriptionHelpFormatter)
  _add_data_flags(p.add_argument_group("data (docs/datasets.md)"))
  for option in (*SWEEP_OPTIONS, *FEDERATION_OPTIONS):
    schemes.add_option(p, option)
  for title, group in simulation.config.option_groups():
    _add_options(p.add_argument_group(title), group)
  schemes.add_family_flags(p, FAMILIES)
  _add_options(p.add_argument_group(aggregators.TITLE),
               options.declared(aggregators.AggregatorConfig))
  for feature in features.REGISTRY.values():
    _add_options(p.add_argument_group(feature.title), feature.options)
  _add_device_flags(p.add_argument_group("devices (docs/performance.md)"))
  add_process_flags(p.add_argument_group(
      "several processes, e.g. one per host (docs/cli.md#several-processes)"))
  for option in OUTPUT_OPTIONS:
    schemes.add_option(p, option)
  return p
