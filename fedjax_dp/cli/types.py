"""argparse value types of the command line's flags.

Each returns the parsed value or raises ``argparse.ArgumentTypeError`` with
a one-line message naming the flag (the parser turns it into exit code 2).
The checks themselves are :mod:`fedjax_dp.options`' parsers, which know no
command line; :func:`flagged` writes the flag in front of their message.
"""

from __future__ import annotations

import argparse
from typing import Any, Callable

from fedjax_dp import options


def once(message: str) -> str:
  """argparse's ``"argument --lr: --lr must be > 0"`` with the flag said once
  (the types here name it themselves): ``"--lr must be > 0"``.

  >>> once("argument --lr: --lr must be > 0, got 0")
  '--lr must be > 0, got 0'
  >>> once("argument --lr: invalid float value: 'x'")
  "argument --lr: invalid float value: 'x'"
  """
  head, _, rest = message.partition(": ")
  if head.startswith("argument --") and rest.startswith(head.removeprefix("argument ") + " "):
    return rest
  return message


class OneLineParser(argparse.ArgumentParser):
  """argparse whose errors are one line on stderr, ``<prog>: error: ...``
  (the flag said :func:`once`), exit code 2, without the usage block
  argparse prints first: the scripts' and benchmarks' parser."""

  def error(self, message):
    self.exit(2, f"{self.prog}: error: {once(message)}\n")


def flagged(flag: str, parse: Callable[[str], Any]) -> Callable[[str], Any]:
  """``parse`` (raising ``ValueError("must be > 0, got 0")``) as the type of
  ``flag`` (raising ``ArgumentTypeError("--flag must be > 0, got 0")``)."""
  def typed(text: str):
    try:
      return parse(text)
    except ValueError as e:
      raise argparse.ArgumentTypeError(f"{flag} {e}") from None
  typed.__name__ = getattr(parse, "__name__", "value")
  return typed


def finite(flag: str) -> Callable[[str], float]:
  """A finite number: ``nan``, ``inf``, ``-inf``, ``infinity`` refused.

  Every float flag of the command line parses through it (directly, or via
  :func:`positive` and :func:`unit_interval`): a non-finite
  hyper-parameter would train a non-finite model.
  """
  return flagged(flag, options.number)


def positive(flag: str, kind=float) -> Callable[[str], float]:
  """A finite number > 0 (an int for ``kind=int``)."""
  return flagged(flag, options.positive_int if kind is int else options.positive)


def unit_interval(flag: str) -> Callable[[str], float]:
  """A number in [0, 1)."""
  return flagged(flag, options.unit_interval)
