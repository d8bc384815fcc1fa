"""The scheme families' flags, built from their declared options.

A family (``fedjax_dp.schemes.base.Family``) declares its options as data
(:class:`~fedjax_dp.options.Option`); here each becomes a flag of the
family's group (``lattice_step``: ``--lattice-step``), the parsed values go
back to the family as a plain mapping (``fedjax_dp.cli.resolve``), and a scheme's
:class:`~fedjax_dp.errors.ConfigError` naming an option's field is reported
with the option's flag.
"""

from __future__ import annotations

import argparse
from typing import Iterable

from fedjax_dp import options
from fedjax_dp.cli import types
from fedjax_dp.options import Option
from fedjax_dp.schemes import Family


def add_option(group: argparse._ArgumentGroup, option: Option) -> None:
  """``option`` as a flag of ``group``: a switch for ``bool``, ``str`` as
  argparse parses it, a seed's ``int`` too, another ``int`` bounded by
  ``options.INT_MAX``, and any other parser through
  :func:`~fedjax_dp.cli.types.flagged` (its message after the flag); its
  help states the declared default (``Option.described``)."""
  if option.parse is bool:
    group.add_argument(option.flag, action="store_true", default=bool(option.default),
                       help=option.described)
    return
  parse = option.parse
  if parse is int:
    parse = options.bounded_int  # a count that jitted code takes as int32
  if parse not in (int, str):
    parse = types.flagged(option.flag, parse)
  group.add_argument(option.flag, type=None if parse is str else parse,
                     choices=option.choices, default=option.default, help=option.described,
                     **({"nargs": "+"} if option.many else {}))


def add_family_flags(parser: argparse.ArgumentParser, families: Iterable[Family]) -> None:
  """A group per family, under its title, with a flag per declared option."""
  for family in families:
    group = parser.add_argument_group(family.title)
    for option in family.options:
      add_option(group, option)


def field_flags(family: Family) -> dict[str, str]:
  """The flag of each scheme attribute the family's options set."""
  return {option.setting: option.flag for option in family.options}
