"""argparse value types shared by the command line and the scheme families.

Each returns the parsed value or raises ``argparse.ArgumentTypeError`` with a
one-line message naming the flag (the command line turns it into exit code 2).
"""

from __future__ import annotations

import argparse
import math
import re
from typing import Callable, Mapping

# RunConfig's parameters and the sweep's flags for them.
RUN_FLAGS = {
    "ratio": "--ratio", "rounds": "--rounds", "clients_per_round": "--clients-per-round",
    "local_steps": "--local-steps", "batch_size": "--batch-size", "lr": "--lr",
    "noise_multiplier": "--noise-multiplier", "clip_norm": "--clip",
    "clip_ratio": "--clip-ratio", "delta": "--delta",
    "init_steps": "--init-steps", "eval_every": "--eval-every", "sampler": "--sampling",
    "accountant": "--accountant", "max_cohort": "--max-cohort",
    "secure_bits": "--secure-bits", "secure_frac_bits": "--secure-frac-bits",
    "secure_neighbours": "--secure-neighbours", "max_dropouts": "--max-dropouts",
    "dropout_rate": "--dropout-rate", "client_chunk": "--client-chunk",
    "devices": "--devices", "aggregator": "--aggregator", "trim": "--trim-fraction",
    "norm_bound": "--norm-bound", "fraction": "--malicious-fraction", "boost": "--boost",
    "sigma": "--attack-sigma", "attack": "--attack", "selection": "--malicious-selection",
    "audit_canaries": "--audit-canaries", "audit_confidence": "--audit-confidence",
}


# Data-loading parameters (``fedjax_dp.datasets.load``) and their flags.
DATA_FLAGS = {
    "alpha": "--dirichlet-alpha", "shards_per_client": "--shards-per-client",
    "num_clients": "--num-clients", "samples_per_client": "--samples-per-client",
    "hospitals": "--num-clients", "patients_per_hospital": "--samples-per-client",
    "test_size": "--test-size", "public_size": "--public-size",
}


def as_flags(message: str, names: Mapping[str, str]) -> str:
  """A library error with its parameter names turned into flags.

  The parameter that starts the message (``"clip_norm must be > 0"`` becomes
  ``"--clip must be > 0"``) and any name followed by a quoted value
  (``sampler 'fixed'`` becomes ``--sampling fixed``) or by a parenthesis
  (``shards_per_client (3)`` becomes ``--shards-per-client (3)``).
  """
  def quoted(match: re.Match) -> str:
    name = match.group(1)
    return f"{names[name]} {match.group(2)}" if name in names else match.group(0)

  message = re.sub(r"(?<![-\w])([a-z][a-z_]*) '([^']*)'", quoted, message)
  message = re.sub(r"(?<![-\w])([a-z][a-z_]*)(?= \()",
                   lambda m: names.get(m.group(1), m.group(1)), message)
  first = re.match(r"([a-z][a-z_]*)\b", message)
  if first and first.group(1) in names:
    message = names[first.group(1)] + message[first.end():]
  return message


def finite(flag: str) -> Callable[[str], float]:
  """A finite number: ``nan``, ``inf``, ``-inf``, ``infinity`` refused.

  Every float flag of the command line parses through it (directly, or via
  :func:`positive` and :func:`unit_interval`): a non-finite
  hyper-parameter would train a non-finite model.
  """
  def parse(value: str) -> float:
    try:
      number = float(value)
    except ValueError:
      raise argparse.ArgumentTypeError(f"{flag} takes a number, got {value!r}") from None
    if not math.isfinite(number):
      raise argparse.ArgumentTypeError(f"{flag} must be a finite number, got {value}")
    return number
  return parse


def positive(flag: str, kind=float) -> Callable[[str], float]:
  """A finite number > 0 (an int for ``kind=int``)."""
  def parse(value: str):
    if kind is float:
      number = finite(flag)(value)
    else:
      try:
        number = kind(value)
      except ValueError:
        raise argparse.ArgumentTypeError(f"{flag} takes an int, got {value!r}") from None
    if not number > 0:
      raise argparse.ArgumentTypeError(f"{flag} must be > 0, got {value}")
    return number
  return parse


def unit_interval(flag: str) -> Callable[[str], float]:
  """A number in [0, 1)."""
  def parse(value: str) -> float:
    number = finite(flag)(value)
    if not 0.0 <= number < 1.0:
      raise argparse.ArgumentTypeError(f"{flag} must be in [0, 1), got {value}")
    return number
  return parse


def cohort(value: str) -> int | str:
  """--clients-per-round: an int or 'all'."""
  if value == "all":
    return value
  try:
    return int(value)
  except ValueError:
    raise argparse.ArgumentTypeError(
        f"--clients-per-round takes an int or 'all', got {value!r}") from None


def clip(value: str) -> float | str:
  """--clip: a number > 0, 'calibrate' or 'paper'."""
  if value in ("calibrate", "paper"):
    return value
  try:
    float(value)
  except ValueError:
    raise argparse.ArgumentTypeError(
        f"--clip takes a number, 'calibrate' or 'paper', got {value!r}") from None
  return positive("--clip")(value)
