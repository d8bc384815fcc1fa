"""Coverage of the canary audit's bootstrap intervals on canaries of known epsilon.

Measures how often the intervals of the audit's epsilon estimate
(``fedjax_dp.privacy.audit.bootstrap_epsilon``: the reported *basic*,
reverse-percentile, interval and Efron's percentile interval) cover the true
epsilon, on synthetic canary statistics whose epsilon is known (issue 59).
Each draw is the audit's setting of docs/privacy.md: ``--candidates``
candidates, each inserted by a fair coin, statistic N(0, 1) held out and
N(mu, 1) inserted, so the true epsilon at ``--delta`` is that of mu-GDP
(``fedjax_dp.privacy.analytic_gaussian``). Draw d uses
``numpy.random.default_rng(d)`` for the statistics and bootstrap seed d,
d = 0 .. ``--draws`` - 1, so the first 20 draws are those of docs/privacy.md's
table.

For each mu and each interval it reports the share of draws whose interval
covers the truth, with its exact (Clopper-Pearson) 95% interval and the
two-sided exact binomial p-value of "coverage = the nominal level", and the
shares of draws whose interval lies entirely above / below the truth. A draw
costs about 0.1 s of CPU (1,000 resamples at 2,000 candidates).

  python benchmarks/audit_coverage.py --out coverage.json
"""

from __future__ import annotations

import json
import math
import os
import sys
import time

import numpy as np
from scipy import stats

from common import OneLineParser, check_out, machine  # benchmarks/common.py
from fedjax_dp import options
from fedjax_dp.atomic import atomic_file
from fedjax_dp.cli import types as flag_types  # imports no JAX
from fedjax_dp.privacy import analytic_gaussian, audit

PROG = "audit_coverage.py"
MUS = (0.5, 1.0, 2.0)
# The two intervals of bootstrap_epsilon: (name in the table, key in its result).
INTERVALS = (("basic (reported)", "interval"), ("percentile", "percentile_interval"))


def true_epsilon(mu: float, delta: float) -> float:
  """The epsilon at delta of mu-GDP: the Gaussian mechanism with sigma = 1 / mu."""
  return float(analytic_gaussian.epsilon_for_sigma(1.0 / mu, delta))


def draw(mu: float, seed: int, candidates: int) -> tuple[np.ndarray, np.ndarray]:
  """(statistics, inserted) of one draw: each candidate inserted by a fair coin,
  its statistic N(mu * inserted, 1); as in docs/privacy.md's command."""
  rng = np.random.default_rng(seed)
  inserted = rng.random(candidates) < 0.5
  return rng.normal(size=candidates) + mu * inserted, inserted


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
  """The exact (Clopper-Pearson) two-sided interval on a binomial proportion k / n."""
  alpha = 1.0 - level
  low = 0.0 if k == 0 else float(stats.beta.ppf(alpha / 2, k, n - k + 1))
  high = 1.0 if k == n else float(stats.beta.ppf(1 - alpha / 2, k + 1, n - k))
  return low, high


def one_mu(mu: float, draws: int, candidates: int, delta: float, confidence: float,
           samples: int) -> dict:
  """Every draw's estimate and intervals at one mu, and their coverage summary.

  Args:
    mu: The inserted statistic's mean (> 0).
    draws: Number of draws, seeds 0 .. draws - 1.
    candidates: Candidates per draw (each side needs >= 2; a draw with fewer
      is an error).
    delta: delta in (0, 1).
    confidence: The intervals' nominal coverage c in (0, 1).
    samples: Bootstrap resamples per draw.

  Returns:
    ``{"mu", "true_epsilon", "draws", "estimate": {...}, "intervals": {key:
    {...}}, "per_draw": {...}}``; see :func:`summarize`.
  """
  truth = true_epsilon(mu, delta)
  per_draw = {"estimate": [], "interval": [], "percentile_interval": []}
  for seed in range(draws):
    stat, inserted = draw(mu, seed, candidates)
    if min(inserted.sum(), (~inserted).sum()) < 2:
      raise ValueError(f"draw {seed} at mu {mu:g} has < 2 inserted or held-out "
                       f"candidates; use more --candidates.")
    boot = audit.bootstrap_epsilon(stat[inserted], stat[~inserted], delta, confidence,
                                   samples, seed=seed)
    per_draw["estimate"].append(boot["estimate"])
    for _, key in INTERVALS:
      per_draw[key].append(boot[key])
  return summarize(mu, truth, per_draw, confidence)


def summarize(mu: float, truth: float, per_draw: dict, confidence: float) -> dict:
  """Coverage of each interval, with a Clopper-Pearson 95% interval on it.

  ``intervals[key]``: ``covers`` (count), ``coverage``, ``coverage_ci95``,
  ``binomial_p_value`` (exact, two-sided, of coverage = ``confidence``),
  ``above`` / ``below`` (shares of draws whose interval lies entirely above /
  below the truth), ``mean_interval``, ``mean_width``.
  """
  estimates = np.asarray(per_draw["estimate"])
  n = estimates.size
  out = {"mu": mu, "true_epsilon": truth, "draws": n,
         "estimate": {"mean": float(estimates.mean()),
                      "above_truth": float(np.mean(estimates > truth))},
         "intervals": {}, "per_draw": per_draw}
  for _, key in INTERVALS:
    iv = np.asarray(per_draw[key]).reshape(n, 2)
    covers = int(np.sum((iv[:, 0] <= truth) & (truth <= iv[:, 1])))
    low, high = clopper_pearson(covers, n)
    out["intervals"][key] = {
        "covers": covers, "coverage": covers / n, "coverage_ci95": [low, high],
        "binomial_p_value": float(stats.binomtest(covers, n, confidence).pvalue),
        "above": float(np.mean(iv[:, 0] > truth)), "below": float(np.mean(iv[:, 1] < truth)),
        "mean_interval": [float(x) for x in iv.mean(0)],
        "mean_width": float((iv[:, 1] - iv[:, 0]).mean())}
  return out


def table(record: dict) -> str:
  """The record as a Markdown table, one row per (mu, interval)."""
  c = record["confidence"]
  lines = [f"| μ | true ε | draws | estimate: mean (above truth) | interval | mean "
           f"interval | covers (95% CI) | p vs {c:.0%} | entirely above | entirely below |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
  for row in record["results"]:
    est = row["estimate"]
    for name, key in INTERVALS:
      s = row["intervals"][key]
      low, high = s["coverage_ci95"]
      lines.append(
          f"| {row['mu']:g} | {row['true_epsilon']:.2f} | {row['draws']} | "
          f"{est['mean']:.2f} ({est['above_truth']:.1%}) | {name} | "
          f"[{s['mean_interval'][0]:.2f}, {s['mean_interval'][1]:.2f}] | "
          f"{s['coverage']:.1%} ({low:.1%}-{high:.1%}) | {s['binomial_p_value']:.2g} | "
          f"{s['above']:.1%} | {s['below']:.1%} |")
  return "\n".join(lines)


def measure(mus, draws: int, candidates: int, delta: float, confidence: float,
            samples: int) -> dict:
  """The whole record: settings, machine, CPU seconds and one result per mu."""
  wall, cpu = time.perf_counter(), time.process_time()
  results = [one_mu(mu, draws, candidates, delta, confidence, samples) for mu in mus]
  return {"what": "coverage of fedjax_dp.privacy.audit.bootstrap_epsilon's intervals on "
                  "mu-GDP canary statistics (issue 59)",
          "candidates": candidates, "draws": draws, "seeds": f"0..{draws - 1}",
          "delta": delta, "confidence": confidence, "bootstrap_samples": samples,
          "cpu_seconds": time.process_time() - cpu, "wall_seconds": time.perf_counter() - wall,
          "machine": machine(), "versions": _versions(), "results": results}


def _versions() -> dict:
  import jax  # pylint: disable=import-outside-toplevel
  import scipy  # pylint: disable=import-outside-toplevel
  return {"python": sys.version.split()[0], "jax": jax.__version__,
          "numpy": np.__version__, "scipy": scipy.__version__}


def main(argv: list[str] | None = None) -> int:
  p = OneLineParser(prog=PROG, description=__doc__.split("\n\n", 1)[0],
                    epilog="Each draw: --candidates fair-coin canaries, N(0, 1) held out, "
                           "N(mu, 1) inserted, true epsilon that of mu-GDP. Per mu and "
                           "interval (basic, the audit's; percentile) it prints the share "
                           "of draws covering the truth with its Clopper-Pearson 95% "
                           "interval, the binomial p-value of coverage = --confidence, and "
                           "the shares of intervals wholly above / below the truth.")
  p.add_argument("--mus", default=",".join(f"{m:g}" for m in MUS),
                 help="comma-separated mu of the mu-GDP canaries (default %(default)s)")
  p.add_argument("--draws", type=flag_types.positive("--draws", int), default=1000,
                 help="independent draws per mu, seeds 0..draws-1 (default %(default)s)")
  p.add_argument("--candidates", type=flag_types.flagged("--candidates", options.bounded_int),
                 default=2000, help="candidates per draw (default %(default)s)")
  p.add_argument("--delta", type=float, default=1e-5, help="delta (default %(default)s)")
  p.add_argument("--confidence", type=float, default=0.95,
                 help="the intervals' nominal coverage (default %(default)s)")
  p.add_argument("--samples", type=flag_types.positive("--samples", int),
                 default=audit.BOOTSTRAP_SAMPLES,
                 help="bootstrap resamples per draw (default %(default)s, the audit's)")
  p.add_argument("--out", help="also write the record (per-draw values included) as JSON; "
                 "an existing file is refused without --overwrite")
  p.add_argument("--overwrite", action="store_true", help="replace an existing --out")
  p.add_argument("--json", action="store_true", help="print the JSON record, not the table")
  args = p.parse_args(argv)
  try:
    mus = tuple(float(m) for m in args.mus.split(","))
  except ValueError:
    p.error(f"--mus must be comma-separated numbers, got {args.mus!r}")
  if not all(math.isfinite(m) and m > 0 for m in mus):
    p.error(f"--mus must be positive, got {args.mus}")
  check_out(p, args.out)  # its folder missing, a folder itself, read-only: before measuring
  if args.out and os.path.exists(args.out) and not args.overwrite:
    p.error(f"--out {args.out} exists (another run's record): choose another --out, or "
            "add --overwrite to replace it")
  if args.candidates < 8:
    p.error(f"--candidates must be >= 8, got {args.candidates}")
  if not 0 < args.delta < 1:
    p.error(f"--delta must be in (0, 1), got {args.delta}")
  if not 0 < args.confidence < 1:
    p.error(f"--confidence must be in (0, 1), got {args.confidence}")
  try:
    record = measure(mus, args.draws, args.candidates, args.delta, args.confidence,
                     args.samples)
  except ValueError as e:
    p.error(str(e))
  if args.out:
    with atomic_file(args.out, "w") as f:
      json.dump(record, f)
      f.write("\n")
  if args.json:
    print(json.dumps(record))
  else:
    print(table(record))
    print(f"\n{args.draws} draws per mu, {args.candidates} candidates, delta {args.delta:g}, "
          f"{args.samples} resamples; {record['cpu_seconds']:.0f} CPU s; "
          f"{record['machine']}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
