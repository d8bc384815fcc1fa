"""The library's errors as the command line says them (``cli.errors``): each
setting's field looked up as its flag, whatever part of the library declares
it (mapping a ConfigError's field: tests/cli/test_cli_options.py)."""

import dataclasses
from collections import defaultdict

import pytest

from fedjax_dp import datasets, features, options, simulation
from fedjax_dp.cli import errors as cli_errors
from fedjax_dp.cli import parser as cli_parser
from fedjax_dp.errors import ConfigError
from fedjax_dp.features import Feature


def test_no_two_options_give_one_field_two_flags():
  """A field (or option name) that two declared options spelled differently
  would be reported as whichever came first."""
  spellings = defaultdict(set)
  for option in (*cli_parser.declared_options(), *datasets.LOAD_OPTIONS):
    spellings[option.setting].add(option.flag)
    spellings[option.name].add(option.flag)
  assert {k: v for k, v in spellings.items() if len(v) > 1} == {}


def test_a_field_and_its_options_name_give_the_same_flag():
  flags = cli_errors.setting_flags()
  assert flags["clip_norm"] == flags["clip"] == "--clip"
  assert flags["sampler"] == flags["sampling"] == "--sampling"
  assert flags["test_size"] == "--test-size" and flags["rounds"] == "--rounds"
  assert cli_errors.SETTING_FLAGS == {**cli_errors.RUN_FLAGS, **cli_errors.DATA_FLAGS}


@pytest.mark.parametrize("settings, message", [
    (dict(clip_norm=0.0), "--clip must be > 0, got 0.0"),
    (dict(sampler="fixed"),
     "--accountant 'moments' assumes Poisson sampling; use accountant 'rdp' with sampler "
     "'fixed'"),
    (dict(accountant="monte-carlo", sampler="b-min-sep"),
     "--min-separation is b of --sampling b-min-sep; give it"),
    (dict(dropout_rate=1.0), "--dropout-rate must be in [0, 1), got 1.0"),
])
def test_a_run_config_check_reaches_the_user_as_its_flag(settings, message):
  with pytest.raises(ConfigError) as error:
    simulation.RunConfig.of(**settings).validate(600)
  reported = cli_errors.flag_error(error.value)
  assert type(reported) is ValueError and str(reported) == message


def test_given_flags_replace_the_settings():
  """A scheme family's checks are mapped with its own flags (``field_flags``)."""
  gamma = ConfigError("gamma", "must be < 1, got 2")
  assert cli_errors.flag_error(gamma) is gamma  # no run setting is called gamma
  assert str(cli_errors.flag_error(gamma, {"gamma": "--sign-gamma"})) == (
      "--sign-gamma must be < 1, got 2")
  clip = ConfigError("clip_norm", "must be > 0, got 0")
  assert cli_errors.flag_error(clip, {"gamma": "--sign-gamma"}) is clip  # those flags only


@dataclasses.dataclass(frozen=True)
class _LateConfig:
  reach: int = options.setting(2, "a test's setting", int, name="late_reach")


class _Late(Feature):
  """A feature registered after ``cli.errors`` was imported."""

  kind = "late"
  config_type = _LateConfig
  title = "late feature (a test's)"
  switch = "late"
  options = (options.Option("late", bool, False, "turn it on"),
             *options.declared(_LateConfig))
  conflicts = ()
  key_purposes = ()


@pytest.fixture
def late():
  features.register(_Late)
  yield
  features.unregister("late")


def test_setting_flags_are_current_the_import_time_table_is_not(late):
  assert cli_errors.setting_flags()["reach"] == "--late-reach"
  assert "reach" not in cli_errors.RUN_FLAGS
  reported = cli_errors.flag_error(ConfigError("reach", "must be >= 1, got 0"))
  assert str(reported) == "--late-reach must be >= 1, got 0"
