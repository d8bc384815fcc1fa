"""The schemes of the seed papers, by name (matched case-insensitively).

Every scheme implements :class:`~fedjax_dp.schemes.base.Scheme`; the
families register here (one line each), each declaring its options as data
(:class:`~fedjax_dp.options.Option`; the command line, ``fedjax_dp.cli``,
makes them flags), and :func:`register` adds a scheme of your own (see
``experiments/examples/``).
"""

from fedjax_dp.options import Option
from fedjax_dp.schemes import cdp_lq, coordinate_subset, cs, fedsmp, sign
from fedjax_dp.schemes.base import Family, LocalTraining, Noise, Scheme, SetupData, Traits
from fedjax_dp.schemes.cdp_lq import LatticeScheme
from fedjax_dp.schemes.cs import CSScheme
from fedjax_dp.schemes.fedsmp import FedSMPScheme
from fedjax_dp.schemes.coordinate_subset import MaskedScheme
from fedjax_dp.schemes.sign import SignScheme

# The registry: one line per family, in the order of --help and listings.
FAMILIES: list[Family] = [
    coordinate_subset.FAMILY,  # UAI 2021 Alg. 1-6, App. D
    cs.FAMILY,  # thesis Sec. 4.1.4-4.1.6 and 5.3
    sign.FAMILY,  # thesis Sec. 4.1.1 and 5.2
    cdp_lq.FAMILY,  # poster (seed 001), Alg. 1-2
    fedsmp.FAMILY,  # Fed-SMP paper Sec. 4, 6 (DP-FedAvg: FL-STD-DP)
]
# Schemes registered with :func:`register` (no flags, no presets).
USER_FAMILY = Family("schemes registered by the user", {})
SCHEMES: dict[str, Scheme] = {name: s for f in FAMILIES for name, s in f.schemes.items()}


def register(scheme: Scheme) -> Scheme:
  """Adds a scheme to the registry (``get_scheme``, the sweep's --schemes).

  Raises:
    TypeError: ``scheme`` does not implement :class:`Scheme`.
    ValueError: A scheme of that name (ignoring case) is registered, or its
      traits contradict themselves (``Traits.check``).
  """
  if not isinstance(scheme, Scheme):
    raise TypeError(f"{scheme!r} does not implement fedjax_dp.schemes.Scheme")
  scheme.traits.check(scheme.name)
  if scheme.name.lower() in {k.lower() for k in SCHEMES}:
    raise ValueError(f"a scheme named {scheme.name!r} is already registered")
  SCHEMES[scheme.name] = scheme
  USER_FAMILY.schemes[scheme.name] = scheme
  return scheme


def family_of(scheme: Scheme) -> Family:
  """The family a scheme (or a configured copy of one) belongs to, by name."""
  for family in FAMILIES:
    if scheme.name in family.schemes:
      return family
  return USER_FAMILY


def get_scheme(name: str) -> Scheme:
  """Looks a scheme up by name, ignoring case.

  Raises:
    ValueError: For an unknown name, listing the known ones.
  """
  by_lower = {k.lower(): v for k, v in SCHEMES.items()}
  try:
    return by_lower[name.lower()]
  except KeyError:
    raise ValueError(f"unknown scheme {name!r}; known schemes: "
                     f"{', '.join(SCHEMES)}") from None


__all__ = ["CSScheme", "FAMILIES", "Family", "FedSMPScheme", "LatticeScheme", "Noise",
           "LocalTraining", "MaskedScheme", "Option", "SCHEMES", "Scheme", "SetupData",
           "SignScheme", "Traits", "family_of", "get_scheme", "register"]
