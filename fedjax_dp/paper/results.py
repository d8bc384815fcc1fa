"""The papers' published figures, to compare the runs with (the papers' app).

Source: UAI 2021 FL-TOP paper (``seeds/fl-top-uai2021-full-with-appendix.txt``),
Table 6 (clip norms S on Fashion-MNIST), Table 7 (S on the medical data) and
Table 8 (best accuracy over 200 rounds, the round it was reached and epsilon;
Table 1 is its subset for r in {0.5%, 5%, 10%} and FL-STD at 100%).

The compressive-sensing family (FL-CS, FL-RND, FL-FREQ and their -DP
variants) at r in {5%, 10%, 20%} comes from the thesis
(``seeds/kerkouche-thesis-dp-fl-bandwidth-energy.txt``): Table 8.4 (one clip
norm S per ratio, shared by the three DP schemes), Table 4.2 (non-private) and
Table 5.3 (DP, epsilon). Where both sources cover a cell (FL-CS(-DP) at 5% and
10%), the thesis is used, since its S and its accuracies come from the same
runs; ``paper_source`` and ``paper_clip_source`` name the table.

The sign family (FL-SIGN, FL-SIGN-DP, signSGD) comes from thesis Tables 4.1,
4.2, 5.2 and 5.5, and FL-SIGN run in UAI Table 5's data setting from Table
4.4 (``paper_result``'s ``setting``).
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple

from fedjax_dp.paper.settings import FASHION_MNIST, PAPER_RATIOS

# UAI Table 7 = thesis Table 8.10: S on the medical data per ratio.
_MEDICAL_RATIOS = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1)
_MEDICAL_CLIP = {
    "FL-BASIC-DP": (.01, .03, .05, .11, .16, .34, .46),
    "FL-CS-DP": (.002, .005, .006, .01, .02, .04, .06),
    "FL-TOP-DP": (.23, .46, .59, 1.03, 1.18, 1.31, 1.32),
}
_MEDICAL_STD_DP_CLIP = 1.40

# Table 8 row order within one ratio.
UAI_ORDER = ("FL-BASIC", "FL-BAS-2", "FL-BAS-3", "FL-BAS-4", "FL-CS", "FL-TOP-BIS", "FL-TOP")


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
    for i, name in enumerate(UAI_ORDER):
      table[(name, ratio)] = PaperResult(acc[i], rnd[i], None)
      if acc_dp[i] is not None:
        table[(name + "-DP", ratio)] = PaperResult(acc_dp[i], rnd_dp[i], eps_dp[i])
  return table


# Thesis Table 8.4 (Fashion-MNIST): S for FL-CS-DP, FL-RND-DP and FL-FREQ-DP.
_THESIS_CS_RATIOS = (0.05, 0.1, 0.2)
_THESIS_CS_CLIP = (.47, .69, .98)
# Thesis Table 4.2 (accuracy, round) and Table 5.3 (accuracy, round, epsilon)
# per ratio of _THESIS_CS_RATIOS.
_THESIS_TABLE4_2 = {
    "FL-RND": ((.73, 192), (.78, 200), (.82, 200)),
    "FL-FREQ": ((.73, 189), (.78, 197), (.82, 195)),
    "FL-CS": ((.82, 200), (.85, 199), (.87, 193)),
}
_THESIS_TABLE5_3 = {
    "FL-RND-DP": ((.73, 196, .99), (.77, 199, 1.0), (.80, 199, 1.0)),
    "FL-FREQ-DP": ((.72, 200, 1.0), (.76, 200, 1.0), (.79, 200, 1.0)),
    "FL-CS-DP": ((.78, 197, 1.0), (.73, 101, .84), (.66, 150, .92)),
}


def _thesis_results() -> dict[tuple[str, float], PaperResult]:
  table = {}
  for i, ratio in enumerate(_THESIS_CS_RATIOS):
    for name, cells in _THESIS_TABLE4_2.items():
      table[(name, ratio)] = PaperResult(cells[i][0], cells[i][1], None)
    for name, cells in _THESIS_TABLE5_3.items():
      table[(name, ratio)] = PaperResult(*cells[i])
  return table


THESIS_RESULTS = _thesis_results()

# The sign family (thesis Sec. 4.1.1-4.1.3, 5.2), Fashion-MNIST, ratio 1.0, each
# figure from the table measured in the setting the scheme runs by default (its
# preset, fedjax_dp.paper.presets.SIGN). FL-SIGN: Table 4.1 (l.717; Table 8.1
# setting, 100 rounds; FL-STD reached 0.89 at round 90 in that setting, against
# 0.86 in UAI Table 1's). FL-SIGN-DP: Table 5.2 (0.63 at epsilon 1, 22 bits per
# value) with the round and epsilon of Table 5.5 (l.1562), both UAI Table 5's data
# setting (Table 8.2). signSGD: Table 4.2 (Table 8.4 setting, all clients every
# round).
SIGN_RESULTS = {
    ("FL-SIGN", 1.0): PaperResult(.87, 68, None),
    ("FL-SIGN-DP", 1.0): PaperResult(.63, 187, .98),
    ("signSGD", 1.0): PaperResult(.85, 200, None),
}
_SIGN_SOURCES = {"FL-SIGN": "thesis Table 4.1", "FL-SIGN-DP": "thesis Tables 5.2, 5.5",
                 "signSGD": "thesis Table 4.2"}
# FL-SIGN run in UAI Table 5's data setting instead (N 6000, |D_k| = |B| = 10,
# T_gd 5, T_cl 200: thesis Table 8.2, as Tables 6.9-6.12 run it, l.1789): thesis
# Table 4.4 (l.1022, Sec. 4.2.2-4.2.3, gamma 0.001 as l.992) gives 0.84 at round
# 197, beside FL-STD's 0.86 at 200 (UAI Table 1) and FL-TOP's; Table 4.1's 0.87 at
# 68 is the Table 8.1 setting's (N 1000, |D_k| 60, T_gd 30, T_cl 100).
SIGN_RESULTS_UAI_SETTING = {("FL-SIGN", 1.0): PaperResult(.84, 197, None)}
_SIGN_SOURCES_UAI_SETTING = {"FL-SIGN": "thesis Table 4.4"}
# The settings' keys that tell UAI Table 5's data setting from Table 8.1's (the
# rounds are not among them: a shortened run is compared as any other).
_DATA_SETTING_KEYS = ("num_clients", "samples_per_client", "local_steps", "batch_size")
# Upstream bits per value reported by the thesis (Sec. 4.1.3), and FL-SIGN-DP's
# secure-sum modulus at epsilon 1, 2 and 4 (Tables 5.1-5.2, footnote 5 l.1232).
PAPER_UPSTREAM_BITS = {"FL-SIGN": 1, "signSGD": 1}
SIGN_DP_PAPER_BITS = {1.0: 22, 2.0: 21, 4.0: 21}


def paper_upstream_bits(scheme: str, epsilon: float | None = None) -> int | None:
  """The thesis' upstream bits per value for a scheme; FL-SIGN-DP's at the
  run's ``epsilon`` (within 5% of a table's 1, 2 or 4), else None.

  >>> paper_upstream_bits("FL-SIGN-DP", 2.01), paper_upstream_bits("FL-SIGN-DP", 3.0)
  (21, None)
  """
  if scheme != "FL-SIGN-DP":
    return PAPER_UPSTREAM_BITS.get(scheme)
  return next((bits for eps, bits in SIGN_DP_PAPER_BITS.items()
               if epsilon is not None and abs(epsilon - eps) <= 0.05 * eps), None)

UAI_RESULTS = _build_results()
PAPER_RESULTS = {**UAI_RESULTS, **THESIS_RESULTS, **SIGN_RESULTS}

# UAI Table 6 as published (FL-CS-DP's S at 5% and 10% differs from thesis
# Table 8.4's, which ``paper_clip_norm`` prefers).
UAI_CLIP_NORMS = {name: dict(zip(PAPER_RATIOS, row)) for name, row in _TABLE6.items()}
UAI_STD_DP_CLIP = _STD_DP_CLIP

# Thesis Table 4.1, Fashion-MNIST row (Table 8.1 setting): FL-STD 0.89 at
# round 90 beside FL-SIGN's 0.87 at 68. Table 4.2 (Table 8.4 setting): FL-STD
# 0.87 at round 191, signSGD 0.85 at 200.
THESIS_TABLE4_1_FASHION = {"FL-SIGN": PaperResult(.87, 68, None),
                           "FL-STD": PaperResult(.89, 90, None)}
THESIS_TABLE4_2_FULL = {"FL-STD": PaperResult(.87, 191, None),
                        "signSGD": PaperResult(.85, 200, None)}
# Thesis Table 5.3 (l.1422; Table 8.4 setting, S 2.15 and sigma 1.54, l.2301-2303):
# FL-STD-DP 0.61 at round 25, epsilon 0.69 (Sec. 5.3, l.1403: "converges to the best accuracy
# (61%) after only 25 rounds").
THESIS_TABLE5_3_FULL = {"FL-STD-DP": PaperResult(.61, 25, .69)}
THESIS_TABLE8_4_STD_DP_CLIP = 2.15
# Thesis Table 4.4 (l.1008-1024; UAI Table 5's setting, 200 rounds; FL-SIGN gamma 0.001,
# l.992): best accuracy and its round, FL-BASIC, FL-CS and FL-TOP at r = 0.5/5/10%
# (l.1012-1020), FL-STD and FL-SIGN at 100% (l.1021-1022). Its FL-CS at 10% (0.85 at 182)
# differs from Table 4.2's (0.85 at 199) in the round only.
THESIS_TABLE4_4 = {
    ("FL-BASIC", 0.005): PaperResult(.65, 193, None),
    ("FL-CS", 0.005): PaperResult(.57, 185, None),
    ("FL-TOP", 0.005): PaperResult(.82, 200, None),
    ("FL-BASIC", 0.05): PaperResult(.78, 196, None),
    ("FL-CS", 0.05): PaperResult(.82, 200, None),
    ("FL-TOP", 0.05): PaperResult(.84, 200, None),
    ("FL-BASIC", 0.1): PaperResult(.81, 196, None),
    ("FL-CS", 0.1): PaperResult(.85, 182, None),
    ("FL-TOP", 0.1): PaperResult(.85, 199, None),
    ("FL-STD", 1.0): PaperResult(.86, 200, None),
    **SIGN_RESULTS_UAI_SETTING,  # FL-SIGN 0.84 at round 197
}

# Thesis Tables 5.1 (MNIST) and 5.2 (Fashion-MNIST): best accuracy at
# epsilon 1, 2, 4 (Table 8.2 setting, sigma from epsilon by the moments
# accountant with delta = 1e-5, thesis Sec. 5.2.4 footnote 5). No round given.
THESIS_EPSILONS = (1.0, 2.0, 4.0)
THESIS_TABLE5_1 = {"FL-STD-DP": (.86, .92, .93), "FL-SIGN-DP": (.87, .90, .91)}
THESIS_TABLE5_2 = {"FL-STD-DP": (.61, .74, .78), "FL-SIGN-DP": (.63, .70, .73)}
# Thesis Table 8.2 caption: FL-STD-DP's S (FL-SIGN-DP: sqrt(n), no clipping);
# Table 8.4 uses 2.15 on Fashion-MNIST as well.
THESIS_STD_DP_CLIP = {"mnist": 1.73, "fashion-mnist": 2.15}

def _thesis_cs_ratio(scheme: str, ratio: float) -> float | None:
  """The Table 8.4 ratio matching ``ratio`` for a CS-family scheme, if any."""
  if scheme.removesuffix("-DP") not in _THESIS_TABLE4_2:
    return None
  return next((r for r in _THESIS_CS_RATIOS if abs(r - ratio) < 1e-12), None)


# Thesis Table 4.1, MNIST column (Table 8.1 setting): best accuracy over 100
# rounds and its round.
MNIST_RESULTS = {
    ("FL-SIGN", 1.0): PaperResult(.98, 48, None),
    ("FL-STD", 1.0): PaperResult(.99, 88, None),
}
_MNIST_SOURCES = {"FL-SIGN": "thesis Table 4.1 (MNIST)", "FL-STD": "thesis Table 4.1 (MNIST)"}


def in_uai_data_setting(setting: Mapping[str, Any] | None) -> bool:
  """Whether a run's setting (its ``num_clients``, ``samples_per_client``,
  ``local_steps``, ``batch_size``) is UAI Table 5's data setting (thesis Table
  8.2); False without one."""
  if setting is None or any(key not in setting for key in _DATA_SETTING_KEYS):
    return False
  return all(setting[key] == FASHION_MNIST[key] for key in _DATA_SETTING_KEYS)


def _uai_setting_sign(scheme: str, ratio: float, dataset: str,
                      setting: Mapping[str, Any] | None) -> bool:
  """FL-SIGN on Fashion-MNIST in UAI Table 5's data setting (thesis Table 4.4)."""
  return (dataset == "fashion-mnist" and (scheme, round(ratio, 6)) in SIGN_RESULTS_UAI_SETTING
          and in_uai_data_setting(setting))


def paper_result(scheme: str, ratio: float, dataset: str = "fashion-mnist",
                 setting: Mapping[str, Any] | None = None) -> PaperResult | None:
  """The published figure for a scheme at a ratio (FL-STD: ratio 1.0), if any.

  Fashion-MNIST: UAI Tables 1/8 and the thesis' tables; MNIST: thesis Table
  4.1. None on any other data set: medical-synth is a synthetic stand-in,
  never compared with the thesis' medical figures.

  ``setting``: the run's settings (``num_clients``, ``samples_per_client``,
  ``local_steps``, ``batch_size``), where the thesis gives a scheme's figure
  in more than one: FL-SIGN in UAI Table 5's data setting is thesis Table
  4.4's (0.84 at round 197), in its preset's (Table 8.1; the default) Table
  4.1's (0.87 at round 68).
  """
  if dataset == "mnist":
    return MNIST_RESULTS.get((scheme, round(ratio, 6)))
  if dataset != "fashion-mnist":
    return None
  if _uai_setting_sign(scheme, ratio, dataset, setting):
    return SIGN_RESULTS_UAI_SETTING[(scheme, round(ratio, 6))]
  return PAPER_RESULTS.get((scheme, round(ratio, 6)))


def paper_source(scheme: str, ratio: float, dataset: str = "fashion-mnist",
                 setting: Mapping[str, Any] | None = None) -> str | None:
  """Which table :func:`paper_result` comes from, if any."""
  if paper_result(scheme, ratio, dataset, setting) is None:
    return None
  if dataset == "mnist":
    return _MNIST_SOURCES[scheme]
  if _uai_setting_sign(scheme, ratio, dataset, setting):
    return _SIGN_SOURCES_UAI_SETTING[scheme]
  if (scheme, round(ratio, 6)) in SIGN_RESULTS:
    return _SIGN_SOURCES[scheme]
  if (scheme, round(ratio, 6)) in THESIS_RESULTS:
    return "thesis Table 5.3" if scheme.endswith("-DP") else "thesis Table 4.2"
  return "UAI Table 8" if ratio < 1.0 else "UAI Table 1"


def paper_clip_source(scheme: str, ratio: float, dataset: str = "fashion-mnist") -> str | None:
  """Which table :func:`paper_clip_norm` comes from, if any."""
  if paper_clip_norm(scheme, ratio, dataset) is None:
    return None
  if dataset == "medical-synth":
    return "UAI Table 7 (medical data)"
  return "thesis Table 8.4" if _thesis_cs_ratio(scheme, ratio) is not None else "UAI Table 6"


def _at_ratio(ratios: tuple[float, ...], row: tuple[float, ...] | None,
              ratio: float) -> float | None:
  if row is None:
    return None
  return next((s for r, s in zip(ratios, row) if abs(r - ratio) < 1e-12), None)


def paper_clip_norm(scheme: str, ratio: float, dataset: str = "fashion-mnist") -> float | None:
  """The published clip norm S for a DP scheme at a ratio, if any.

  Image data: thesis Table 8.4 for FL-CS-DP, FL-RND-DP and FL-FREQ-DP at 5%,
  10% and 20%; UAI Table 6 otherwise (FL-STD-DP: 2.40). medical-synth: UAI
  Table 7, the medical data's S (FL-STD-DP: 1.40) -- tuned on the real data,
  so only a starting point on the stand-in. None on shakespeare.
  """
  if dataset == "medical-synth":
    if scheme == "FL-STD-DP":
      return _MEDICAL_STD_DP_CLIP
    return _at_ratio(_MEDICAL_RATIOS, _MEDICAL_CLIP.get(scheme), ratio)
  if dataset not in ("fashion-mnist", "mnist"):
    return None  # Shakespeare: Fed-SMP's S is lost
  thesis = _thesis_cs_ratio(scheme, ratio) if scheme.endswith("-DP") else None
  if thesis is not None:
    return _THESIS_CS_CLIP[_THESIS_CS_RATIOS.index(thesis)]
  if scheme == "FL-STD-DP":
    return _STD_DP_CLIP
  return _at_ratio(PAPER_RATIOS, _TABLE6.get(scheme), ratio)
