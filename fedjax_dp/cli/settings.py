"""From the parsed flags to the library's settings.

The flags of :func:`fedjax_dp.cli.parser.build_parser` become a run's
:class:`~fedjax_dp.simulation.RunConfig` (:func:`run_config`, generically
from the declared options: the run's settings, the aggregator's and each
round feature's), its clip norm (:func:`clip_for`) and the data set's
defaults (:func:`apply_dataset_defaults`). Checks of how flags
combine raise ``ValueError`` naming the flags (one line); the settings'
own checks are the library's (``ConfigError``, :mod:`fedjax_dp.cli.errors`).
"""

from __future__ import annotations

import argparse

from fedjax_dp import aggregators, datasets, distributed, features, simulation
from fedjax_dp.cli import schemes
from fedjax_dp.models import DROPOUT_MODELS
from fedjax_dp.paper import results as paper_results
from fedjax_dp.schemes import Scheme


def clip_for(args: argparse.Namespace, scheme: Scheme,
             ratio: float) -> tuple[float | None, str]:
  """(clip norm or None to calibrate, where it came from): --clip, --clip-ratio."""
  if scheme.traits.fixed_sensitivity:
    return None, scheme.traits.sensitivity_reason
  if isinstance(args.clip, float):
    return args.clip, "user"
  if args.clip == "paper":
    s = paper_results.paper_clip_norm(scheme.name, ratio, args.dataset)
    if s is not None:
      return s, f"paper ({paper_results.paper_clip_source(scheme.name, ratio, args.dataset)})"
  if args.clip_ratio is not None:
    return None, f"calibrated at r = {args.clip_ratio:g} for every ratio (Fed-SMP Sec. 6.2)"
  return None, "calibrated (UAI Sec. 4)"


def run_config(args: argparse.Namespace, scheme: Scheme, ratio: float, setting: dict,
               clip: float | None) -> simulation.RunConfig:
  """The RunConfig of one run of the sweep, from the declared options' flags.

  Every setting the run config's fields declare (``simulation.config.option_groups``)
  takes its flag's value, or the run's preset-able ``setting``; the
  aggregator and the round features build their configs from their own
  options (``aggregators.from_options``, ``features.from_options``).

  Args:
    args: The parsed flags, the data set's defaults applied.
    scheme: The configured scheme (its family may derive sigma).
    ratio: r.
    setting: The run's preset-able settings (``experiment.settings``).
    clip: S, or None to calibrate it (:func:`clip_for`).

  Raises:
    ConfigError: An option given while its feature is off, a bad backdoor
      class (naming the field; the sweep reports its flag).
  """
  values = vars(args)
  flat = {}
  for _, group in simulation.config.option_groups():
    for option in group:
      # The preset-able settings as ``experiment.settings`` resolved them (flag,
      # else preset, else the data set's); every other one is its flag's.
      resolved = option.preset == "scheme" or option.setting == "local_optimizer"
      flat[option.setting] = setting[option.setting] if resolved else values[option.name]
  flat.update(clip_norm=clip, clip_ratio=args.clip_ratio if clip is None else None,
              noise_multiplier=schemes.noise_multiplier(scheme, args),
              selection_metric=datasets.get_dataset(args.dataset).selection_metric)
  return simulation.RunConfig.of(ratio=ratio, aggregator=aggregators.from_options(values),
                                 features=features.from_options(values), **flat)


# Flags whose default is the data set's setting (``Dataset.defaults``, read from the
# setting its module declares).
_DATASET_FLAGS = ("noise_multiplier", "delta", "init_steps", "public_size")


def apply_dataset_defaults(args: argparse.Namespace) -> argparse.Namespace:
  """Fills the flags left at None with the data set's setting; checks the data flags.

  Raises:
    ValueError: A data flag that does not apply, one line naming it.
  """
  dataset = datasets.get_dataset(args.dataset)
  values, defaults = vars(args), dataset.defaults()
  for name in _DATASET_FLAGS:
    if values[name] is None:
      values[name] = defaults[name]
  if args.dirichlet_alpha is not None and args.partition != "dirichlet":
    raise ValueError("--dirichlet-alpha needs --partition dirichlet")
  if args.shards_per_client is not None and args.partition != "shards":
    raise ValueError("--shards-per-client needs --partition shards")
  if args.partition == "dirichlet" and args.dirichlet_alpha is None:
    raise ValueError("--partition dirichlet needs --dirichlet-alpha")
  if args.partition == "shards" and args.shards_per_client is None:
    raise ValueError("--partition shards needs --shards-per-client")
  if not dataset.partitioned and args.partition != "iid":
    raise ValueError(f"--dataset {dataset.name} is split {dataset.split}; --partition "
                     "applies to the data sets split by partition")
  if args.dropout and dataset.model not in DROPOUT_MODELS:
    raise ValueError(f"--dropout applies to the medical MLP (medical-synth) and All-CNN-C "
                     f"(cifar10); --dataset {dataset.name} uses the model "
                     f"{dataset.model!r}")
  return args



def processes(args: argparse.Namespace) -> distributed.Processes:
  """The flags of :func:`fedjax_dp.cli.parser.add_process_flags` as
  :class:`~fedjax_dp.distributed.Processes`."""
  return distributed.Processes(args.coordinator, args.num_processes, args.process_id,
                               args.process_timeout)
