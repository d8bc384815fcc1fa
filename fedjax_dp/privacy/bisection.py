"""Bisection of a monotone predicate, for privacy parameters that must hold.

The accountants' inversions (epsilon for a sigma, a Gaussian pair's epsilon,
the one-run audit's bound) each look for where a monotone condition turns
true. Returning the end of the final bracket on the right side (where the
condition holds, or where it is still rejected) keeps a guarantee exact
instead of approximately met, which a root finder's midpoint would not.
"""

from typing import Callable

_STEPS = 200  # enough to shrink any float64 bracket below its precision


def bisect(ok: Callable[[float], bool], lo: float, hi: float, rel_tol: float, *,
           floor: float = 0.0) -> tuple[float, float]:
  """Shrinks ``[lo, hi]`` around where ``ok`` turns from False to True.

  Args:
    ok: A predicate that is False at ``lo``, True at ``hi`` and monotone
      between (the caller has checked both ends).
    lo: Lower end, ``ok(lo)`` False.
    hi: Upper end, ``ok(hi)`` True.
    rel_tol: Stop once ``hi - lo <= rel_tol * max(hi, floor)``.
    floor: The scale below which the tolerance is absolute
      (``rel_tol * floor``).

  Returns:
    ``(lo, hi)`` with ``ok(lo)`` False and ``ok(hi)`` True, as narrow as the
    tolerance or float64 allows.
  """
  for _ in range(_STEPS):
    mid = 0.5 * (lo + hi)
    if ok(mid):
      hi = mid
    else:
      lo = mid
    if hi - lo <= rel_tol * max(hi, floor):
      break
  return lo, hi


def smallest(ok: Callable[[float], bool], tolerance: float, lo: float = 0.0, hi: float = 1.0,
             top: float = 1e6) -> float | None:
  """The upper end of a bracket no wider than ``tolerance`` around where a
  monotone ``ok`` turns True: the smallest sigma meeting an epsilon, say.

  ``hi`` is doubled until ``ok(hi)`` (None once past ``top``), ``lo`` halved
  while ``ok(lo)`` (a guess that is already enough), then :func:`bisect`.
  ``ok(0)`` is taken to be False.

  >>> round(smallest(lambda x: x * x >= 2.0, 1e-6), 5)
  1.41421
  >>> smallest(lambda x: False, 1e-3, top=10.0) is None
  True
  """
  while not ok(hi):
    lo, hi = hi, 2.0 * hi
    if hi > top:
      return None
  while lo > 0.0 and ok(lo):
    lo, hi = lo / 2.0, lo
  if hi - lo <= tolerance:
    return hi
  return bisect(ok, lo, hi, rel_tol=tolerance / top, floor=top)[1]
