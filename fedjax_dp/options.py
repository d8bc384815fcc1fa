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


# Where a preset option's value comes from when it is not given.
PRESET_SOURCES = {"scheme": "the scheme's preset, else the data set's setting",
                  "dataset": "the data set's setting"}


# The largest float32: a hyper-parameter beyond it is inf on the device.
FLOAT32_MAX = 3.4028234663852886e38


def number(text: str) -> float:
  """A finite number: ``nan``, ``inf``, ``-inf``, ``infinity`` refused (a
  non-finite hyper-parameter would train a non-finite model).

  >>> number("0.5")
  0.5
  >>> number("inf")
  Traceback (most recent call last):
  ...
  ValueError: must be a finite number, got inf

  Beyond float32's range (the device's: 1e308 became inf there) is refused too.
  """
  try:
    value = float(text)
  except ValueError:
    raise ValueError(f"takes a number, got {text!r}") from None
  if not math.isfinite(value):
    raise ValueError(f"must be a finite number, got {text}")
  if abs(value) > FLOAT32_MAX:
    raise ValueError(f"must be at most {FLOAT32_MAX:.4g} in magnitude (float32), got {text}")
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


#: The largest int an int option takes: counts reach jitted code as JAX's
#: default int32, which a larger value overflows in the first call.
INT_MAX = 2**31 - 1


def positive_int(text: str) -> int:
  """An int in [1, :data:`INT_MAX`].

  >>> positive_int("3")
  3
  >>> positive_int("1.5")
  Traceback (most recent call last):
  ...
  ValueError: takes an int, got '1.5'
  >>> positive_int("99999999999")
  Traceback (most recent call last):
  ...
  ValueError: must be at most 2147483647, got 99999999999
  """
  value = _int(text)
  if not value > 0:
    raise ValueError(f"must be > 0, got {text}")
  return value


def non_negative_int(text: str) -> int:
  """An int in [0, :data:`INT_MAX`]."""
  value = _int(text)
  if value < 0:
    raise ValueError(f"must be >= 0, got {text}")
  return value


#: Seeds are PRNGKey's: a non-negative int64 (``keys.run_key`` takes
#: [0, SEED_LIMIT)).
SEED_LIMIT = 2 ** 63

def seed(text: str) -> int:
  """A PRNG seed: an int in [0, 2**63).

  >>> seed("7")
  7
  >>> seed("-1")
  Traceback (most recent call last):
  ...
  ValueError: must be in [0, 2**63), got -1
  """
  try:
    value = int(text)
  except ValueError:
    raise ValueError(f"takes an int, got {text!r}") from None
  if not 0 <= value < SEED_LIMIT:
    raise ValueError(f"must be in [0, 2**63), got {text}")
  return value


def bounded_int(text: str) -> int:
  """An int of at most :data:`INT_MAX` (a plain ``int`` option's flag: its
  own checks bound it below; seeds declare :func:`seed`).

  >>> bounded_int("-3")
  -3
  """
  return _int(text)


def _int(text: str) -> int:
  try:
    value = int(text)
  except ValueError:
    raise ValueError(f"takes an int, got {text!r}") from None
  if value > INT_MAX:
    raise ValueError(f"must be at most {INT_MAX}, got {text}")
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


def cohort(text: str) -> int | str:
  """An int, or ``all`` (every client)."""
  if text == "all":
    return text
  try:
    return int(text)
  except ValueError:
    raise ValueError(f"takes an int or 'all', got {text!r}") from None


def clip(text: str) -> float | str:
  """A clip norm: a number > 0, ``calibrate`` or ``paper``."""
  if text in ("calibrate", "paper"):
    return text
  try:
    float(text)
  except ValueError:
    raise ValueError(f"takes a number, 'calibrate' or 'paper', got {text!r}") from None
  return positive(text)


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
    field: The setting the option sets, as the library names it in a
      :class:`~fedjax_dp.errors.ConfigError` (a scheme's attribute, a
      config's field; default: ``name``), so that a front end names the
      option instead.
    many: The option takes one value or more (a list).
    preset: Where the value comes from when the option is not given (the
      option's default is then None): ``"scheme"`` (the scheme's preset,
      else the declared default), ``"dataset"`` (the data set's setting).
    applies_to: For a scheme family's option, which of the family's schemes
      read it (None: every one); a front end refuses an option given to a
      run of none of them, which would ignore it.
  """

  name: str
  parse: Callable[[str], Any] = str
  default: Any = None
  help: str = ""
  choices: tuple[str, ...] | None = None
  field: str | None = None
  many: bool = False
  preset: str | None = None
  applies_to: Callable[[Any], bool] | None = dataclasses.field(default=None, compare=False)

  @property
  def described(self) -> str:
    """``help`` with the default stated from the declared value (none for
    None, a switch's False, or a help that states its own)."""
    default = self.default
    if self.preset is not None:
      return f"{self.help} (default: {PRESET_SOURCES[self.preset]})"
    if default is None or default is False or "default" in self.help:
      return self.help
    if isinstance(default, (list, tuple)):
      default = " ".join(map(str, default))
    return f"{self.help} (default {default})"

  def with_(self, **changes: Any) -> "Option":
    """This option with some attributes changed."""
    return dataclasses.replace(self, **changes)

  @property
  def flag(self) -> str:
    """The command line's spelling: ``--lattice-step`` for ``lattice_step``.

    >>> Option("lattice_step", positive, 0.25, "the lattice's step").flag
    '--lattice-step'
    """
    return "--" + self.name.replace("_", "-")

  @property
  def setting(self) -> str:
    """The setting the option sets (``field``, else ``name``)."""
    return self.field or self.name


def declared(cls: type) -> tuple[Option, ...]:
  """The options a frozen config dataclass declares on its fields
  (:func:`setting`), in field order; each option's default is the field's."""
  out = []
  for f in dataclasses.fields(cls):
    option = f.metadata.get("option")
    if option is not None:
      missing = f.default is dataclasses.MISSING
      default = None if option.preset is not None or missing else f.default
      out.append(option.with_(name=option.name or f.name, default=default, field=f.name))
  return tuple(out)


def setting(default: Any, help: str, parse: Callable[[str], Any] = str, *,
            name: str | None = None, choices: tuple[str, ...] | None = None,
            preset: str | None = None) -> Any:
  """A config dataclass field declared with its option: the field's default
  is the option's (:func:`declared` reads them back).

  Args:
    default: The field's default.
    help: What the setting does, without its default (stated from ``default``).
    parse: As :class:`Option`'s.
    name: The option's name where it differs from the field's
      (``sampling`` for ``sampler``: ``--sampling``).
    choices: The values allowed.
    preset: As :class:`Option`'s.
  """
  return dataclasses.field(default=default, metadata={"option": Option(
      name or "", parse, default, help, choices, preset=preset)})
