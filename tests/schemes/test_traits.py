"""A scheme's declared traits: a fixed sensitivity comes with its reason."""

import dataclasses

import pytest

from fedjax_dp import schemes
from fedjax_dp.schemes import Traits, get_scheme


def test_a_fixed_sensitivity_says_why():
  sign = get_scheme("FL-SIGN-DP").traits
  assert sign.fixed_sensitivity is True and "sqrt(n)" in sign.sensitivity_reason
  std = get_scheme("FL-STD-DP").traits
  assert std.fixed_sensitivity is False and std.sensitivity_reason == ""
  for name in schemes.SCHEMES:  # every registered scheme's declaration agrees
    schemes.get_scheme(name).traits.check(name)


@pytest.mark.parametrize("traits", [Traits(dp=True, fixed_sensitivity=True),
                                    Traits(dp=True, sensitivity_reason="sqrt(n)")])
def test_register_refuses_traits_that_disagree(traits):
  base = type(get_scheme("FL-STD-DP"))

  @dataclasses.dataclass(frozen=True)
  class Contradicting(base):
    @property
    def traits(self):
      return traits

  scheme = dataclasses.replace(get_scheme("FL-STD-DP"))
  scheme = Contradicting(**{f.name: getattr(scheme, f.name) for f in dataclasses.fields(scheme)})
  scheme = dataclasses.replace(scheme, name="contradicting-test")
  with pytest.raises(ValueError, match="fixed_sensitivity needs a sensitivity_reason"):
    schemes.register(scheme)
  assert "contradicting-test" not in schemes.SCHEMES
