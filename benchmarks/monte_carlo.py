"""Monte Carlo accounting: its cost, its bound, and sigma at a target epsilon.

Times ``fedjax_dp.privacy.monte_carlo.estimate`` (both directions of the
dominating pair, no cache) on the strategies of issue 59's study at UAI
Table 1's setting (T = 200 rounds, q = 1/60, delta 1e-5): independent noise
under Poisson sampling (one band, beside PLD's epsilon), banded Toeplitz
noise under b-min-sep, and BLT noise under balls-in-bins. With
``--calibrate`` each case's sigma is first calibrated to ``--epsilon`` on
the draws of seed 1 (``sigma_for_epsilon``, bracketed around the case's
``--sigma``, cached) and then accounted on seed 0's, as a run records it
(``paper.studies.AMPLIFIED_SIGMA`` holds the study's sigmas).

    python benchmarks/monte_carlo.py                  # cost at the study's sigmas
    python benchmarks/monte_carlo.py --calibrate      # sigma for epsilon 1 first
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import warnings

from fedjax_dp import host_devices, options
from fedjax_dp.cli import types as flag_types  # imports no JAX

host_devices.configure()

# pylint: disable=wrong-import-position
import numpy as np

from common import OneLineParser  # benchmarks/common.py
from fedjax_dp.privacy import accounting, correlated, monte_carlo

# The sigmas at which the cases are timed without --calibrate, and around
# which --calibrate brackets its search: the study's (epsilon 1 at the defaults).
DEFAULT_SIGMA = {"independent": 1.2246, "banded": 2.075, "blt": 4.02}
CASES = ("independent", "banded", "blt")
DEFAULT_EPSILON = 1.0  # --calibrate's target without --epsilon


class OutOfReach(ValueError):
  """No sigma up to 1e4 reaches --epsilon in a case (one line)."""


def cases(rounds: int, rate: float, bands: tuple[int, ...], blt_bins: int,
          blt_separations: tuple[int, ...], kinds: tuple[str, ...] = CASES):
  """(name, noise, participation, strategy column, prefix noise std per unit
  sigma: after the last round and over the rounds, root mean square)."""
  out = []
  if "independent" in kinds:
    out.append(("independent, Poisson", "independent",
                monte_carlo.Participation("b-min-sep", rounds, 1, rate), np.ones(1),
                np.sqrt(np.arange(1, rounds + 1))))
  for b in bands if "banded" in kinds else ():
    strategy = correlated.make_strategy("banded", rounds, b, b, toeplitz=True)
    out.append((f"banded {b}, b-min-sep b={b}", "banded",
                monte_carlo.Participation("b-min-sep", rounds, b,
                                          monte_carlo.min_sep_prob(rate, b)),
                strategy.column, correlated.prefix_noise_std(strategy)))
  for m in blt_separations if "blt" in kinds else ():
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      strategy = correlated.make_strategy("blt", rounds, 1, m, toeplitz=True)
    out.append((f"BLT (min-sep {m}), balls-in-bins {blt_bins}", "blt",
                monte_carlo.Participation("balls-in-bins", rounds, blt_bins),
                strategy.column, correlated.prefix_noise_std(strategy)))
  return out


def measure(args) -> list[dict]:
  rows = []
  for name, noise, part, column, prefix in cases(args.rounds, args.rate, args.bands,
                                                args.blt_bins, args.blt_separations,
                                                args.cases):
    sigma = DEFAULT_SIGMA[noise] if args.sigma is None else args.sigma
    calibrated = None
    if args.calibrate:
      started = time.perf_counter()
      try:
        sigma = monte_carlo.sigma_for_epsilon(part, column, args.epsilon, args.delta,
                                              samples=args.samples, seed=1,
                                              tolerance=args.tolerance,
                                              bracket=(0.9 * sigma, 1.05 * sigma))
      except ValueError as e:  # no sigma up to 1e4 reaches the target
        raise OutOfReach(f"--epsilon {args.epsilon:g} is out of reach in case {name!r}: "
                         f"{e}") from e
      calibrated = round(time.perf_counter() - started, 1)
    found = monte_carlo.estimate(part, column, sigma, args.delta, samples=args.samples,
                                 seed=0, cache=False)
    row = {"case": name, "noise": noise, "participation": part.kind,
           "separation": part.separation, "prob": part.prob, "bands": len(column),
           "sigma": sigma, "epsilon": found.epsilon, "epsilon_estimate": found.epsilon_estimate,
           "epsilon_lower": found.epsilon_lower, "samples": found.samples,
           "confidence": found.confidence, "seconds": found.seconds,
           "calibration_seconds": calibrated, "prefix_noise_std": float(prefix[-1] * sigma),
           "prefix_noise_rms": float(np.sqrt(np.mean(prefix ** 2)) * sigma),
           "rounds": args.rounds, "rate": args.rate, "delta": args.delta}
    if noise == "independent":
      row["pld_epsilon"] = accounting.epsilon(sigma, args.rate, args.rounds, args.delta, "pld")
    rows.append(row)
  return rows


def _cases(text: str) -> tuple[str, ...]:
  values = tuple(c for c in text.split(",") if c)
  if not values or any(c not in CASES for c in values):
    raise argparse.ArgumentTypeError(f"expected some of {', '.join(CASES)}, got {text!r}")
  return values


def _bands(text: str) -> tuple[int, ...]:
  try:
    values = tuple(int(b) for b in text.split(",") if b)
  except ValueError:
    raise argparse.ArgumentTypeError(f"expected comma-separated ints, got {text!r}") from None
  if any(b < 1 for b in values):
    raise argparse.ArgumentTypeError(f"bands must be >= 1, got {text!r}")
  if any(b > options.INT_MAX for b in values):
    raise argparse.ArgumentTypeError(f"bands must be at most {options.INT_MAX}, got {text!r}")
  return values


def main(argv=None) -> int:
  p = OneLineParser(description=__doc__.splitlines()[0])
  p.add_argument("--rounds", type=int, default=200, help="T (default %(default)s)")
  p.add_argument("--rate", type=float, default=1 / 60, help="q (default 1/60)")
  p.add_argument("--delta", type=float, default=1e-5, help="delta (default %(default)s)")
  p.add_argument("--samples", type=flag_types.flagged("--samples", options.bounded_int),
                 default=monte_carlo.DEFAULT_SAMPLES,
                 help="draws of each direction (default %(default)s)")
  p.add_argument("--bands", type=_bands, default=(4,),
                 help="banded cases' bands, comma-separated (default 4)")
  p.add_argument("--cases", type=_cases, default=CASES,
                 help="comma-separated, of independent, banded, blt (default all)")
  p.add_argument("--blt-bins", type=flag_types.positive("--blt-bins", int), default=60,
                 help="balls-in-bins' bins of the BLT cases (default 60 = 1/q)")
  p.add_argument("--blt-separations", type=_bands, default=(3,),
                 help="the min-separations the BLT cases are optimised for, "
                 "comma-separated (default 3)")
  p.add_argument("--sigma", type=float, default=None,
                 help="one sigma for every case (default: each case's, DEFAULT_SIGMA)")
  p.add_argument("--calibrate", action="store_true",
                 help="calibrate each case's sigma to --epsilon first (seed 1's draws)")
  p.add_argument("--epsilon", type=float, default=None,
                 help=f"--calibrate's target (default {DEFAULT_EPSILON:g}; needs --calibrate)")
  p.add_argument("--tolerance", type=flag_types.positive("--tolerance"), default=5e-3,
                 help="--calibrate's resolution of sigma (default %(default)s)")
  p.add_argument("--json", action="store_true", help="one JSON line per case")
  args = p.parse_args(argv)
  if args.rounds < 1:
    p.error(f"--rounds must be >= 1, got {args.rounds}")
  if args.rounds > options.INT_MAX:
    p.error(f"--rounds must be at most {options.INT_MAX}, got {args.rounds}")
  if not 0 < args.rate <= 1:
    p.error(f"--rate must be in (0, 1], got {args.rate}")
  if not 0 < args.delta < 1:
    p.error(f"--delta must be in (0, 1), got {args.delta}")
  if args.samples < monte_carlo.fewest_samples(args.delta, monte_carlo.DEFAULT_CONFIDENCE):
    p.error(f"--samples {args.samples} cannot bound delta {args.delta:g}: at least "
            f"{monte_carlo.fewest_samples(args.delta, monte_carlo.DEFAULT_CONFIDENCE)}")
  if args.sigma is not None and not 0 < args.sigma < math.inf:
    p.error(f"--sigma must be finite and > 0, got {args.sigma}")
  if args.epsilon is not None and not args.calibrate:
    p.error("--epsilon needs --calibrate (it is the target sigma is calibrated to)")
  if args.epsilon is None:
    args.epsilon = DEFAULT_EPSILON
  if not 0 < args.epsilon < math.inf:
    p.error(f"--epsilon must be finite and > 0, got {args.epsilon}")
  if any(b * args.rate > 1 + 1e-9 for b in args.bands):
    p.error(f"--bands must be at most 1/rate = {1 / args.rate:g}")
  try:
    rows = measure(args)
  except OutOfReach as e:
    p.error(str(e))
  where = host_devices.machine()
  for r in rows:
    r["machine"], r["load"] = where, round(os.getloadavg()[0], 2)
    if args.json:
      print(json.dumps(r))
      continue
    pld = f", PLD {r['pld_epsilon']:.3f}" if "pld_epsilon" in r else ""
    cal = ("" if r["calibration_seconds"] is None
           else f", calibrated in {r['calibration_seconds']:.0f} s")
    print(f"{r['case']:40s} sigma {r['sigma']:.4f}: epsilon <= {r['epsilon']:.3f} "
          f"(estimate {r['epsilon_estimate']:.3f}, lower {r['epsilon_lower']:.3f}{pld}) "
          f"in {r['seconds']:.1f} s{cal}; summed noise after T {r['prefix_noise_std']:.2f} S, "
          f"over the rounds {r['prefix_noise_rms']:.2f} S (rms)")
  if not args.json:
    print(f"{rows[0]['samples']} draws a direction, confidence {rows[0]['confidence']:g}; "
          f"machine: {where}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
