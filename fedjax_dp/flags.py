"""argparse value types shared by the command line and the scheme families.

Each returns the parsed value or raises ``argparse.ArgumentTypeError`` with a
one-line message naming the flag (the command line turns it into exit code 2).
"""

from __future__ import annotations

import argparse
from typing import Callable


def positive(flag: str, kind=float) -> Callable[[str], float]:
  """A number > 0 (an int for ``kind=int``)."""
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


def unit_interval(flag: str) -> Callable[[str], float]:
  """A number in [0, 1)."""
  def parse(value: str) -> float:
    try:
      number = float(value)
    except ValueError:
      raise argparse.ArgumentTypeError(f"{flag} takes a number, got {value!r}") from None
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
