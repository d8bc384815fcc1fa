"""From the parsed flags to the library's settings.

The flags of :func:`fedjax_dp.cli.parser.build_parser` become a run's
:class:`~fedjax_dp.simulation.RunConfig` (:func:`run_config`, with its
attack, aggregator, audit and adaptive clipping), its clip norm (:func:`clip_for`) and the
data set's defaults (:func:`apply_dataset_defaults`). Checks of how flags
combine raise ``ValueError`` naming the flags (one line); the settings'
own checks are the library's (``ConfigError``, :mod:`fedjax_dp.cli.errors`).
"""

from __future__ import annotations

import argparse

from fedjax_dp import (aggregators, attacks, canaries, datasets, distributed, presets,
                       simulation)
from fedjax_dp.cli import schemes
from fedjax_dp.features.adaptive_clip import AdaptiveClipConfig
from fedjax_dp.models import DROPOUT_MODELS
from fedjax_dp.schemes import Scheme


def clip_for(args: argparse.Namespace, scheme: Scheme,
             ratio: float) -> tuple[float | None, str]:
  """(clip norm or None to calibrate, where it came from): --clip, --clip-ratio."""
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


def aggregator(args: argparse.Namespace) -> aggregators.AggregatorConfig | None:
  """The --aggregator rule; None for the plain mean (the round's streamed sum)."""
  if args.aggregator == "mean":
    return None
  return aggregators.AggregatorConfig(args.aggregator, args.trim_fraction, args.norm_bound)


def audit(args: argparse.Namespace) -> canaries.AuditConfig | None:
  """The --audit-canaries setting; None without one (0).

  Raises:
    ValueError: A negative count.
  """
  if args.audit_canaries < 0:
    raise ValueError(f"--audit-canaries must be >= 0, got {args.audit_canaries}")
  if args.audit_canaries == 0:
    return None
  return canaries.AuditConfig(args.audit_canaries, args.audit_confidence)


def attack(args: argparse.Namespace) -> attacks.AttackConfig | None:
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


def adaptive_clip(args: argparse.Namespace) -> AdaptiveClipConfig | None:
  """The --adaptive-clip setting; None without it.

  Raises:
    ValueError: Its options without --adaptive-clip.
  """
  given = {name: value for name, value in (("target_quantile", args.clip_quantile),
                                           ("clip_lr", args.clip_lr),
                                           ("count_noise", args.clip_count_noise))
           if value is not None}
  if not args.adaptive_clip:
    if given:
      raise ValueError("--clip-quantile, --clip-lr and --clip-count-noise need --adaptive-clip")
    return None
  return AdaptiveClipConfig(**given)


def run_config(args: argparse.Namespace, scheme: Scheme, ratio: float, setting: dict,
               clip: float | None) -> simulation.RunConfig:
  """The RunConfig of one run of the sweep.

  Args:
    args: The parsed flags, the data set's defaults applied.
    scheme: The configured scheme (its family may derive sigma).
    ratio: r.
    setting: The run's preset-able settings (``experiment.settings``).
    clip: S, or None to calibrate it (:func:`clip_for`).

  Raises:
    ValueError: A combination of flags that does not apply (one line
      naming them), a bad backdoor class.
  """
  return simulation.RunConfig.of(
      ratio=ratio, rounds=setting["rounds"], clients_per_round=setting["clients_per_round"],
      local_steps=setting["local_steps"], batch_size=setting["batch_size"],
      lr=setting["lr"], local_optimizer=setting["local_optimizer"],
      noise_multiplier=schemes.noise_multiplier(scheme, args),
      clip_norm=clip, clip_ratio=args.clip_ratio if clip is None else None,
      aggregator=aggregator(args), attack=attack(args), audit=audit(args),
      adaptive_clip=adaptive_clip(args),
      delta=args.delta, accountant=args.accountant, sampler=args.sampling,
      init_steps=args.init_steps, seed=args.seed, eval_every=args.eval_every,
      max_cohort=args.max_cohort, secure_aggregation=args.secure_aggregation,
      secure_bits=args.secure_bits, secure_frac_bits=args.secure_frac_bits,
      secure_neighbours=args.secure_neighbours, max_dropouts=args.max_dropouts,
      dropout_rate=args.dropout_rate, client_chunk=args.client_chunk, devices=args.devices,
      selection_metric=datasets.get_dataset(args.dataset).selection_metric)


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
