"""Options declared as data: what a setting is called, takes and defaults to.

A scheme family (``fedjax_dp.schemes.base.Family``) declares its options as
a tuple of :class:`Option`; a front end builds its own controls from them
(``fedjax_dp.cli`` makes each one a flag, ``--lattice-step`` for
``lattice_step``) and hands the family the parsed values as a plain mapping.
Nothing here knows a command line.

The parsers turn a setting's text into its value or raise ``ValueError``
whose message is what follows the setting's name (``"must be > 0, got 0"``);
the front end writes the name in front of it.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable


def number(text: str) -> float:
  """A finite number: ``nan``, ``inf``, ``-inf``, ``infinity`` refused (a
  non-finite hyper-parameter would train a non-finite model).

  >>> number("0.5")
  0.5
  >>> number("inf")
  Traceback (most recent call last):
  ...
  ValueError: must be a finite number, got inf
  """
  try:
    value = float(text)
  except ValueError:
    raise ValueError(f"takes a number, got {text!r}") from None
  if not math.isfinite(value):
    raise ValueError(f"must be a finite number, got {text}")
  return value


def positive(text: str) -> float:
  """A finite number > 0.

  >>> positive("2")
  2.0
  >>> positive("0")
  Traceback (most recent call last):
  ...
  ValueError: must be > 0, got 0
  """
  value = number(text)
  if not value > 0:
    raise ValueError(f"must be > 0, got {text}")
  return value


def positive_int(text: str) -> int:
  """An int > 0.

  >>> positive_int("3")
  3
  >>> positive_int("1.5")
  Traceback (most recent call last):
  ...
  ValueError: takes an int, got '1.5'
  """
  try:
    value = int(text)
  except ValueError:
    raise ValueError(f"takes an int, got {text!r}") from None
  if not value > 0:
    raise ValueError(f"must be > 0, got {text}")
  return value


def unit_interval(text: str) -> float:
  """A number in [0, 1).

  >>> unit_interval("0.25")
  0.25
  >>> unit_interval("1")
  Traceback (most recent call last):
  ...
  ValueError: must be in [0, 1), got 1
  """
  value = number(text)
  if not 0.0 <= value < 1.0:
    raise ValueError(f"must be in [0, 1), got {text}")
  return value


@dataclasses.dataclass(frozen=True)
class Option:
  """One setting of a scheme family, as data.

  Attributes:
    name: The option's key in the values a family is configured with; its
      flag is ``--`` and the name with dashes (``lattice_step``:
      ``--lattice-step``). Unique over every family.
    parse: Turns the setting's text into its value: ``int`` or ``str`` as
      they are, one of this module's parsers, or your own raising
      ``ValueError`` with what follows the name; ``bool``: a switch that
      takes no value (True when given).
    default: The value when the setting is not given.
    help: One sentence or two for the user, the default included.
    choices: The values allowed (None: any that parses).
    field: The scheme attribute the option sets, as the scheme's
      ``validate`` names it in a :class:`~fedjax_dp.errors.ConfigError`
      (default: ``name``), so that a front end names the option instead.
  """

  name: str
  parse: Callable[[str], Any] = str
  default: Any = None
  help: str = ""
  choices: tuple[str, ...] | None = None
  field: str | None = None

  @property
  def flag(self) -> str:
    """The command line's spelling: ``--lattice-step`` for ``lattice_step``.

    >>> Option("lattice_step", positive, 0.25, "the lattice's step").flag
    '--lattice-step'
    """
    return "--" + self.name.replace("_", "-")

  @property
  def setting(self) -> str:
    """The scheme attribute the option sets (``field``, else ``name``)."""
    return self.field or self.name
