"""The schemes of the seed papers, by name (matched case-insensitively)."""

from fedjax_dp.schemes.masked import MASKED_SCHEMES, MaskedScheme, fixed_subset

SCHEMES = dict(MASKED_SCHEMES)


def get_scheme(name: str) -> MaskedScheme:
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


__all__ = ["MaskedScheme", "SCHEMES", "fixed_subset", "get_scheme"]
