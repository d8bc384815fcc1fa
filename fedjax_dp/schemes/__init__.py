"""The schemes of the seed papers, by name (matched case-insensitively)."""

from fedjax_dp.schemes.base import LocalTraining, Scheme, SetupData
from fedjax_dp.schemes.cdp_lq import CDP_LQ_SCHEMES, LatticeScheme
from fedjax_dp.schemes.cs import CS_SCHEMES, CSScheme
from fedjax_dp.schemes.fedsmp import ALIASES, FEDSMP_SCHEMES, FedSMPScheme
from fedjax_dp.schemes.masked import MASKED_SCHEMES, MaskedScheme
from fedjax_dp.schemes.sign import SIGN_SCHEMES, SignScheme

SCHEMES = dict(MASKED_SCHEMES)
SCHEMES.update(CS_SCHEMES)  # thesis Sec. 4.1.4-4.1.6 and 5.3
SCHEMES.update(SIGN_SCHEMES)  # thesis Sec. 4.1.1 and 5.2
SCHEMES.update(CDP_LQ_SCHEMES)  # poster (seed 001), Alg. 1-2
SCHEMES.update(FEDSMP_SCHEMES)  # Fed-SMP paper Sec. 4, 6 (DP-FedAvg: FL-STD-DP)


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


__all__ = ["ALIASES", "CSScheme", "FedSMPScheme", "LocalTraining", "MaskedScheme", "SCHEMES",
           "Scheme", "SetupData", "SignScheme", "get_scheme", "LatticeScheme"]
