"""Goodness-of-fit tests for the discrete Gaussian samplers (shared by their tests)."""

import numpy as np
from scipy import stats

from fedjax_dp.privacy import discrete_gaussian_pmf


def chi2_pvalue(samples, probs_fn, lo, hi):
  """Chi-square goodness of fit on integer bins [lo, hi] plus two tail bins.

  ``probs_fn(support)`` gives the model pmf; bins merge integers so that each
  expects >= 20 counts.
  """
  support = np.arange(lo, hi + 1)
  pmf = probs_fn(support)
  counts = np.bincount(np.clip(samples, lo - 1, hi + 1) - (lo - 1),
                       minlength=hi - lo + 3).astype(np.float64)
  expected = np.concatenate([[max(0.0, 1 - pmf.sum()) / 2], pmf,
                             [max(0.0, 1 - pmf.sum()) / 2]]) * samples.size
  # Merge adjacent cells until each expects at least 20.
  obs_m, exp_m, o, e = [], [], 0.0, 0.0
  for oc, ec in zip(counts, expected):
    o, e = o + oc, e + ec
    if e >= 20:
      obs_m.append(o)
      exp_m.append(e)
      o, e = 0.0, 0.0
  if e > 0 or o > 0:
    obs_m[-1] += o
    exp_m[-1] += e
  obs_m, exp_m = np.array(obs_m), np.array(exp_m)
  stat = np.sum((obs_m - exp_m) ** 2 / exp_m)
  return stats.chi2.sf(stat, len(obs_m) - 1)


def binned_pvalue(samples, mean, sigma, width):
  """Chi-square on bins of ``width`` integers over mean +- 5 sigma (large sigma)."""
  edges = np.floor(mean) + np.arange(-5 * sigma, 5 * sigma + width, width)
  edges = np.round(edges).astype(np.int64)
  support = np.arange(edges[0], edges[-1])
  pmf = discrete_gaussian_pmf(support, mean, sigma)
  bin_p = np.add.reduceat(pmf, edges[:-1] - edges[0])
  probs = np.concatenate([[pmf[0] * 0 + (1 - pmf.sum()) / 2], bin_p,
                          [(1 - pmf.sum()) / 2]])
  idx = np.searchsorted(edges, samples, side="right")
  counts = np.bincount(idx, minlength=len(edges) + 1).astype(np.float64)
  expected = probs * samples.size
  keep = expected >= 20
  o = np.concatenate([counts[keep], [counts[~keep].sum()]])
  e = np.concatenate([expected[keep], [expected[~keep].sum()]])
  if e[-1] < 20:  # fold a tiny remainder into the last kept bin
    o[-2] += o[-1]
    e[-2] += e[-1]
    o, e = o[:-1], e[:-1]
  return stats.chi2.sf(np.sum((o - e) ** 2 / e), len(o) - 1)
