"""The papers' settings and published figures, for presets and comparison.

Source: UAI 2021 FL-TOP paper (``seeds/fl-top-uai2021-full-with-appendix.txt``),
Table 5 (common setting), Table 6 (clip norms S on Fashion-MNIST) and Table 8
(best accuracy over 200 rounds, the round it was reached and epsilon; Table 1
is its subset for r in {0.5%, 5%, 10%} and FL-STD at 100%).
"""

from __future__ import annotations

from typing import NamedTuple

# UAI 2021 Table 5, Fashion-MNIST row (thesis Table 8.8).
FASHION_MNIST = {
    "num_clients": 6000,
    "samples_per_client": 10,
    "clients_per_round": 100,  # C = 1/60
    "rounds": 200,
    "local_steps": 5,
    "batch_size": 10,
    "lr": 0.215,
    "delta": 1e-5,
    "noise_multiplier": 1.54,
    "init_steps": 5,
    "public_batch": 10,
}

PAPER_RATIOS = (0.001, 0.005, 0.01, 0.05, 0.1)

# Table 8 row order within one ratio.
_ORDER = ("FL-BASIC", "FL-BAS-2", "FL-BAS-3", "FL-BAS-4", "FL-CS", "FL-TOP-BIS", "FL-TOP")


class PaperResult(NamedTuple):
  """One published cell: best accuracy, its round, epsilon (None if N/A)."""

  accuracy: float
  round: int
  epsilon: float | None


# (non-DP accuracies, rounds), (DP accuracies, rounds, epsilons), per ratio.
# None marks the table's "-" (FL-BAS-3-DP did not learn at r = 0.1%).
_TABLE8 = {
    0.001: ((.14, .16, .27, .17, .37, .59, .78), (111, 185, 200, 200, 200, 198, 199),
            (.14, .14, None, .15, .36, .59, .76), (167, 124, None, 137, 197, 196, 199),
            (.95, .88, None, .90, 1.0, .99, 1.0)),
    0.005: ((.65, .46, .73, .41, .57, .76, .82), (193, 196, 200, 197, 185, 200, 200),
            (.59, .38, .56, .33, .53, .68, .81), (200, 200, 200, 200, 200, 184, 200),
            (1.0, 1.0, 1.0, 1.0, 1.0, .97, 1.0)),
    0.01: ((.71, .59, .76, .56, .69, .79, .83), (194, 200, 200, 195, 200, 197, 200),
           (.65, .62, .66, .52, .66, .70, .81), (197, 198, 198, 198, 189, 174, 183),
           (1.0, 1.0, 1.0, 1.0, .98, .96, .97)),
    0.05: ((.78, .72, .81, .76, .82, .83, .84), (196, 199, 199, 196, 200, 196, 200),
           (.76, .72, .76, .75, .78, .71, .81), (195, 195, 199, 191, 160, 152, 152),
           (.99, .99, 1.0, .99, .94, .92, .92)),
    0.1: ((.81, .78, .82, .79, .85, .84, .85), (196, 199, 195, 200, 182, 196, 199),
          (.79, .77, .79, .78, .72, .69, .80), (189, 189, 183, 195, 167, 138, 157),
          (.98, .98, .97, .99, .95, .90, .93)),
}

# Table 6: S per DP scheme at r = 0.1%, 0.5%, 1%, 5%, 10%; FL-STD-DP: 2.40.
_TABLE6 = {
    "FL-BASIC-DP": (.05, .12, .16, .34, .45),
    "FL-BAS-2-DP": (.07, .16, .23, .52, .75),
    "FL-BAS-3-DP": (.05, .11, .16, .33, .44),
    "FL-BAS-4-DP": (.06, .15, .21, .51, .74),
    "FL-CS-DP": (.21, .26, .32, .57, .79),
    "FL-TOP-BIS-DP": (1.25, 1.59, 1.79, 2.18, 2.34),
    "FL-TOP-DP": (.50, .61, .64, .87, 1.0),
}
_STD_DP_CLIP = 2.40


def _build_results() -> dict[tuple[str, float], PaperResult]:
  table = {("FL-STD", 1.0): PaperResult(.86, 200, None),
           ("FL-STD-DP", 1.0): PaperResult(.56, 60, .76)}
  for ratio, (acc, rnd, acc_dp, rnd_dp, eps_dp) in _TABLE8.items():
    for i, name in enumerate(_ORDER):
      table[(name, ratio)] = PaperResult(acc[i], rnd[i], None)
      if acc_dp[i] is not None:
        table[(name + "-DP", ratio)] = PaperResult(acc_dp[i], rnd_dp[i], eps_dp[i])
  return table


PAPER_RESULTS = _build_results()


def paper_result(scheme: str, ratio: float) -> PaperResult | None:
  """The published figure for a scheme at a ratio (FL-STD: ratio 1.0), if any."""
  return PAPER_RESULTS.get((scheme, round(ratio, 6)))


def paper_clip_norm(scheme: str, ratio: float) -> float | None:
  """UAI Table 6's clip norm S for a DP scheme at a ratio, if published."""
  if scheme == "FL-STD-DP":
    return _STD_DP_CLIP
  row = _TABLE6.get(scheme)
  if row is None:
    return None
  for r, s in zip(PAPER_RATIOS, row):
    if abs(r - ratio) < 1e-12:
      return s
  return None
