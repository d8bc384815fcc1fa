"""The flags' argparse value types (``cli.types``): the library's parsers with
the flag written in front of their one-line message."""

import argparse

import pytest

from fedjax_dp.cli import types


def _refused(parse, text):
  with pytest.raises(argparse.ArgumentTypeError) as error:
    parse(text)
  assert error.value.__suppress_context__  # raised from None: no chained traceback
  return str(error.value)


def test_flagged_names_the_flag_and_passes_a_value_through():
  def even(text):
    if int(text) % 2:
      raise ValueError(f"must be even, got {text}")
    return int(text)

  typed = types.flagged("--pairs", even)
  assert typed("4") == 4 and typed.__name__ == "even"  # argparse names the type by it
  assert _refused(typed, "3") == "--pairs must be even, got 3"


def test_flagged_leaves_other_errors_alone():
  def broken(text):
    raise KeyError(text)

  with pytest.raises(KeyError):
    types.flagged("--x", broken)("1")


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "infinity"])
def test_finite_refuses_every_non_finite_spelling(text):
  assert _refused(types.finite("--lr"), text) == f"--lr must be a finite number, got {text}"


def test_finite_takes_numbers_only():
  assert types.finite("--lr")("-0.5") == -0.5
  assert _refused(types.finite("--lr"), "fast") == "--lr takes a number, got 'fast'"


def test_positive_floats_and_ints():
  assert types.positive("--clip")("0.25") == 0.25
  assert _refused(types.positive("--clip"), "0") == "--clip must be > 0, got 0"
  assert _refused(types.positive("--clip"), "nan") == "--clip must be a finite number, got nan"
  rounds = types.positive("--rounds", kind=int)
  assert rounds("3") == 3 and isinstance(rounds("3"), int)
  assert _refused(rounds, "1.5") == "--rounds takes an int, got '1.5'"
  assert _refused(rounds, "-2") == "--rounds must be > 0, got -2"


@pytest.mark.parametrize("text, value", [("0", 0.0), ("0.999", 0.999)])
def test_unit_interval_takes_zero_up_to_one(text, value):
  assert types.unit_interval("--dropout-rate")(text) == value


@pytest.mark.parametrize("text", ["1", "-0.1", "inf"])
def test_unit_interval_refuses_one_and_outside(text):
  message = _refused(types.unit_interval("--dropout-rate"), text)
  assert message.startswith("--dropout-rate ") and "\n" not in message
