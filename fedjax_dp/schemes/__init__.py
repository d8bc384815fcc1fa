"""The schemes of the seed papers, by name (matched case-insensitively)."""

from fedjax_dp.schemes.base import LocalTraining, Scheme, SetupData
from fedjax_dp.schemes.masked import MASKED_SCHEMES, MaskedScheme

SCHEMES = dict(MASKED_SCHEMES)


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


__all__ = ["LocalTraining", "MaskedScheme", "SCHEMES", "Scheme", "SetupData",
           "get_scheme"]
