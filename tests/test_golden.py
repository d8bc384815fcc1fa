"""Golden records: every scheme's numbers are pinned (see tests/golden_cases.py).

Regenerate with ``python -m pytest tests/test_golden.py --update-golden`` in a
commit of its own that says why the numbers changed.

Under the JAX version that wrote a record, weights and other floats (S,
epsilon, KB, norms) must agree to amplified float32 round-off (``ROUNDOFF``),
integers, strings and flags exactly, and accuracies to 0.002 (two of the 1,000
test images). XLA's CPU code, hence float32 round-off, differs between
processor models, and some paths amplify it: secure aggregation rounds each
update to integers (one ulp can move a value across a rounding boundary), and
FL-CS's decoder iterates. Between two 2-core VMs of this project (the
second an AMD EPYC family 25 model 17, AVX-512) the largest differences were 9.3e-6
relative on the weights (FL-CS-DP) and 6.5e-6 on a picked weight; on the
other floats, FL-CS-DP's error-feedback norm moved by 3.4e-4 relative and
every other by 1.1e-6 or less. A real change (another key, scale or formula)
moves them by 1e-3 or more. Under another JAX version weights,
floats and accuracies agree to 1e-3 relative, 1e-3 and 0.02; the rest exactly.
"""

import json
import math

import jax
import numpy as np
import pytest

import golden_cases

CASES = golden_cases.cases()
# Same JAX version: relative tolerance of weight sums and norms and of other
# floats, and absolute tolerance of the picked weights (the measured
# differences between processor models, above, times about 3 to 10).
# FL-CS's error-feedback norm is a residual, the difference of two nearly
# equal vectors: its round-off is relative to them, not to it (3.4e-4 seen
# under FL-CS-DP).
ROUNDOFF = {"weights": 3e-5, "picks": 3e-5, "floats": 1e-5, "error_norm": 2e-3}


def _compare(got, want, where, loose):
  if isinstance(want, dict):
    assert isinstance(got, dict) and set(got) == set(want), (
        f"{where}: keys differ: {sorted(set(got) ^ set(want))}")
    for k in want:
      _compare(got[k], want[k], f"{where}.{k}", loose)
  elif isinstance(want, list):
    assert isinstance(got, list) and len(got) == len(want), f"{where}: length differs"
    for i, (g, w) in enumerate(zip(got, want)):
      _compare(g, w, f"{where}[{i}]", loose)
  elif isinstance(want, float) and "accuracy" in where and not isinstance(got, bool):
    assert abs(got - want) <= (0.02 if loose else 0.002), f"{where}: {got} != {want}"
  elif isinstance(want, float) and isinstance(got, float) and math.isfinite(want):
    rel = ROUNDOFF["error_norm" if where.endswith("error_norm") else "floats"]
    assert got == pytest.approx(want, rel=max(rel, 1e-3) if loose else rel, abs=1e-12), (
        f"{where}: {got!r} != {want!r}")
  else:
    assert got == want or (isinstance(want, float) and math.isnan(want) and math.isnan(got)), (
        f"{where}: {got!r} != {want!r}")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_golden(case, request):
  got = golden_cases.run_case(case)
  if case.model == "cnn":  # the paper CNN learns: chance is 0.1, 0.15 is 7 standard errors above
    assert got["record"]["best_accuracy"] > 0.15, got["record"]["history"]
  path = golden_cases.path(case)
  if request.config.getoption("--update-golden"):
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    return
  assert path.exists(), f"no golden record {path.name}: run with --update-golden"
  _check(got, json.loads(path.read_text()))


def _check(got: dict, want: dict) -> None:
  """Asserts that a case's output ``got`` agrees with its record ``want``."""
  loose = want["jax"] != jax.__version__
  gw, ww = got["weights"], want["weights"]
  rtol = 1e-3 if loose else ROUNDOFF["weights"]
  for key in ("sum", "abs_sum", "l2"):
    np.testing.assert_allclose(gw[key], ww[key], rtol=rtol, atol=rtol * ww["abs_sum"] / 1e3,
                               err_msg=f"weights.{key}")
  np.testing.assert_allclose(gw["picks"], ww["picks"], rtol=rtol,
                             atol=1e-4 if loose else ROUNDOFF["picks"],
                             err_msg="weights.picks")
  _compare(got["record"], want["record"], "record", loose)


def _moved(record: dict, where: tuple, factor: float) -> dict:
  """A deep copy of ``record`` with the number at path ``where`` times ``factor``."""
  out = json.loads(json.dumps(record))
  node = out
  for key in where[:-1]:
    node = node[key]
  node[where[-1]] = node[where[-1]] * factor
  return out


@pytest.mark.parametrize("where,factor", [
    (("weights", "sum"), 1 + 1e-4),  # a weight change 3x the tolerance
    (("weights", "l2"), 1 - 1e-4),
    (("weights", "picks", 0), 1 + 1e-2),
    (("record", "epsilon"), 1 + 1e-4),
    (("record", "history", -1, "error_norm"), 1 + 1e-2),
])
def test_a_change_beyond_round_off_fails_the_comparison(where, factor):
  """The tolerances catch a real change (another key, scale or formula moves
  numbers by 1e-3 or more) on the stored FL-CS-DP record, whose round-off
  is the largest."""
  want = json.loads(golden_cases.path(
      next(c for c in CASES if c.name == "FL-CS-DP")).read_text())
  _check(want, want)
  with pytest.raises(AssertionError):
    _check(_moved(want, where, factor), want)


def test_every_registered_scheme_has_a_golden_case():
  from fedjax_dp.schemes import SCHEMES
  assert set(SCHEMES) <= {c.scheme for c in CASES}
