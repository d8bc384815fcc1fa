"""Issue 59's candidates: sigma for epsilon 1 by Monte Carlo accounting at
1,000,000 draws (seed 1, to 0.01; monte_carlo.sigma_for_epsilon from [0, 1])
and the summed noise after round 200 and over the rounds, at UAI Table 1's
setting (T = 200, q = 1/60, delta 1e-5). Wrote candidates.jsonl:

    python benchmarks/records/issue59-monte-carlo/candidates.py > candidates.jsonl
"""
import json
import warnings

import numpy as np

from fedjax_dp.privacy import correlated, monte_carlo as mc

warnings.filterwarnings("ignore")
T, Q, DELTA, N = 200, 1 / 60, 1e-5, 1_000_000
CANDIDATES = ([("banded", b, b, "b-min-sep") for b in (2, 4, 8, 16)]
              + [("blt", 1, m, "balls-in-bins") for m in (20, 40, 60, 10, 5, 3, 2)])
for noise, bands, sep, kind in CANDIDATES:
  s = correlated.make_strategy(noise, T, bands, sep, toeplitz=True)
  part = (mc.Participation(kind, T, sep, mc.min_sep_prob(Q, sep)) if kind == "b-min-sep"
          else mc.Participation(kind, T, 60))
  sigma = mc.sigma_for_epsilon(part, s.column, 1.0, DELTA, samples=N, seed=1, tolerance=0.01)
  std = correlated.prefix_noise_std(s)
  print(json.dumps(dict(noise=noise, bands=bands, sep=sep, kind=kind, sigma=sigma,
                        final=float(sigma * std[-1]),
                        mean_sq=float(np.sqrt(np.mean((sigma * std) ** 2))))), flush=True)
