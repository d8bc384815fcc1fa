"""The library's errors as the command line says them: fields become flags.

A bad setting raises :class:`~fedjax_dp.errors.ConfigError`, whose ``field``
is the setting's name as the library spells it (``clip_norm``). The command
line looks the field up (:data:`SETTING_FLAGS`, generated from the options
the library declares; a scheme family's options:
:func:`fedjax_dp.cli.schemes.field_flags`) and writes its flag in front of
the error's ``detail``: ``--clip must be > 0, got -2``. Any other error, or
a field with no flag, keeps its message.
"""

from __future__ import annotations

from typing import Mapping

from fedjax_dp import datasets
from fedjax_dp.errors import ConfigError

def _run_flags() -> dict[str, str]:
  """The flag of every run setting the library declares as an option, by the
  setting's field and by the option's name (``fedjax_dp.cli.parser.declared_options``)."""
  from fedjax_dp.cli import parser  # pylint: disable=import-outside-toplevel
  flags = {}
  for option in parser.declared_options():
    flags.setdefault(option.setting, option.flag)
    flags.setdefault(option.name, option.flag)
  return flags


# RunConfig's fields (its parts', its aggregator's and features') and their flags,
# as at import (selection_metric has none: the data set's); setting_flags() is
# current (a feature registered later included).
RUN_FLAGS = _run_flags()

# Data-loading parameters (``fedjax_dp.datasets.load``, its partition and
# federations) and their flags, from the options the data layer declares.
DATA_FLAGS = {o.setting: o.flag for o in datasets.LOAD_OPTIONS}

# Every setting outside the scheme families, by field (as at import).
SETTING_FLAGS = {**RUN_FLAGS, **DATA_FLAGS}


def setting_flags() -> dict[str, str]:
  """Every setting outside the scheme families and its flag, by field: the
  declared options of the run, the aggregator, the registered features and
  the data."""
  return {**_run_flags(), **DATA_FLAGS}


def flag_error(error: Exception, flags: Mapping[str, str] | None = None) -> Exception:
  """``error`` as the command line reports it.

  Args:
    error: An error of the library.
    flags: The flag of each field (default: :func:`setting_flags`; for a
      scheme's checks, with its family's ``field_flags`` too).

  Returns:
    A ``ValueError`` whose message is the flag and the error's detail, for
    a :class:`~fedjax_dp.errors.ConfigError` whose field has a flag;
    otherwise ``error`` itself.
  """
  flags = setting_flags() if flags is None else flags
  if isinstance(error, ConfigError) and error.field in flags:
    return ValueError(f"{flags[error.field]} {error.detail}")
  return error
