"""A synthetic stand-in for the thesis' proprietary medical data (in-hospital mortality).

The thesis (Kerkouche, Sec. 8.4) and the UAI 2021 FL-TOP paper (Appendix A)
train on the Premier Healthcare Database, which cannot be shared. This module
generates a **synthetic stand-in** of the same shape from a seed. It is not
the thesis' data: no statistic of it was fitted to Premier data, and accuracy
or AUROC measured on it is not comparable with the thesis' numbers.

Shape (thesis Sec. 8.4, UAI App. A): 7,280 features; about 3.1% positives
(death); 5,010 client hospitals of 203 patients, each with at least one death;
one public hospital (356 patients in the thesis) whose data the server
downsamples to 12 positives + 12 negatives; clients train on class-balanced
downsampled data.

Feature layout (``num_features = 9 + num_indicators``):

=======  ==========================================================  =========
columns  feature                                                     stored as
=======  ==========================================================  =========
0        age, integer 15..89, min-max scaled ``(age - 15) / 74``     see below
1-3      gender one-hot (female, male, unknown)                      0 or 255
4-7      admission type one-hot (emergency, urgent, elective,        0 or 255
         trauma/other)
8        MRCI (medication regimen complexity index), integer         see below
         2..60, min-max scaled ``(mrci - 2) / 58``
9-       binary first-day drug / ICD9 indicators (7,271 by default)  0 or 255
=======  ==========================================================  =========

Storage is uint8, which the simulator scales by 1/255 on the fly (as it does
for images): one-hot and binary features are 0 or 255; age and MRCI are stored
as ``floor(255 * scaled + 0.5)``, so the decoded value ``stored / 255`` is
within 1/510 of the min-max scaled value. The steps (255/74 and 255/58) exceed
one, so the integer age and MRCI are recovered exactly. uint8 keeps the 5,010
padded class-balanced hospitals at a quarter of their float32 size: with the
default config (seed 0) 65,122 kept patients, padded to a width of 76 (the
hospital with the most deaths has 38), take 2.77 GB instead of 11.1 GB. The
padding dominates: the varying hospital death rates make the largest
balanced hospital about six times the mean (13.0).

Generative model. Labels first, then every feature drawn independently given
the label (naive-Bayes form). The reason: the Bayes-optimal score is then the
exact log-likelihood ratio, a sum over features (:func:`bayes_log_odds`), and
its test AUROC is a documented ceiling that no model can beat on this data.

* Hospital death rates ``r_h ~ Beta(c * pi, c * (1 - pi))`` with mean
  ``pi = positive_rate`` and concentration ``c = hospital_concentration``
  (50: the rates' standard deviation is about 0.024 around 0.031); each
  patient's label is Bernoulli(r_h). A hospital with no death gets one patient,
  chosen at random, set to death (thesis: every hospital has at least one
  death); a hospital of only deaths (possible only for tiny hospitals) gets
  one set to survivor, so every hospital has both classes. About 7.8% of the
  hospitals draw no death (``B(a, b + 203) / B(a, b)``), so the hospital
  patients' expected death rate is 0.031 + 0.078 / 203 = 3.14% (measured
  3.20% for seed 0).
* Age: a normal rounded to the nearest integer and clipped to 15..89, N(58, 18)
  for survivors and N(70, 14) for deaths.
* MRCI: likewise clipped to 2..60, N(16, 8) and N(20, 9).
* Admission type: (0.52, 0.17, 0.28, 0.03) for survivors, (0.68, 0.16, 0.12,
  0.04) for deaths: deaths are more often emergencies, rarely elective.
* Gender: (0.54, 0.455, 0.005) for both classes: not informative.
* Indicators: prevalences ``p_j`` log-uniform over [1e-4, 0.05] (mean
  0.0499 / ln 500 = 0.0080, so about 58 active indicators per patient;
  measured 59.5 on the default test set). 300 "informative" indicators, chosen
  at random, have prevalence ``min(p_j * exp(b_j), 0.5)`` among deaths,
  ``b_j ~ N(0, 0.55)``; the others have the same prevalence in both classes.
  The prevalences are rounded to multiples of 2**-24, so that the float32
  draw ``U < p`` realises them exactly.

The signal strength was tuned, and only on the generator's own Bayes score, so
that the Bayes-optimal AUROC on the default test set lands in 0.80-0.88: a
weak ground-truth signal, well above 0.5 but far from separable. Measured
(20,000 test patients): 0.821 for seed 0; 0.82-0.86 over seeds 0-5 (mean
0.838). The dense features alone reach about 0.76, the indicators alone 0.74.

Sizes. Only the patients a hospital keeps get features: all its deaths plus as
many survivors drawn at random without replacement, in random order. Hospitals
are padded to the largest balanced size with rows of zeros labelled
:data:`PADDING_LABEL`. The test set (default 20,000 patients) has i.i.d.
Bernoulli(positive_rate) labels, i.e. the pooled distribution. Of the public
hospital only the server's 12 + 12 downsample is generated.

Random streams. Each part draws from its own
``np.random.default_rng(np.random.SeedSequence([seed, stream]))``, so changing
the size of one part does not shift another.

Caching. :func:`load_medical_synth` keeps generated data in-process and in
``<cache>/medical-synth/v<VERSION>-<config hash>.npz`` under the folder of
:mod:`fedjax_dp.data.idx` (``$FEDJAX_DP_CACHE``, ``$XDG_CACHE_HOME/fedjax_dp``
or ``~/.cache/fedjax_dp``). The file holds the training rows without their
padding (0.62 GB for the default config); reading it back is faster than
generating it (the times: docs/performance.md, "Figures behind the code's
choices").
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import operator
import pathlib
import warnings
import zipfile
from typing import NamedTuple

import numpy as np
from scipy import special

from fedjax_dp import metrics
from fedjax_dp.atomic import atomic_file
from fedjax_dp.data import idx
from fedjax_dp.data.partitioning import PADDING_LABEL

__all__ = [
    "VERSION",
    "PADDING_LABEL",
    "MedicalSynth",
    "MedicalSynthConfig",
    "bayes_log_odds",
    "clear_memory_cache",
    "describe",
    "draw_hospital_labels",
    "generate",
    "load_medical_synth",
    "medical_cache_path",
]

#: Version of the generator; bump it whenever the arrays a config yields change,
#: so that stale cache files are not read.
VERSION = 1

#: Dense columns before the indicators, and their ranges.
_AGE, _GENDER, _ADMISSION, _MRCI, _DENSE = 0, slice(1, 4), slice(4, 8), 8, 9
_AGE_RANGE, _MRCI_RANGE = (15, 89), (2, 60)

# Stream ids of SeedSequence([seed, stream]).
_LABELS, _DOWNSAMPLE, _TRAIN, _TEST, _PUBLIC, _SIGNAL = range(6)

# Rows generated at once: bounds the float32 uniform buffer to ~60 MB.
_CHUNK = 2048

# Probabilities realised exactly by float32 uniforms (numpy: k * 2**-24).
_GRID = 2.0**24


def _check_int(name: str, value, low: int) -> None:
  try:
    value = operator.index(value)
  except TypeError:
    raise ValueError(f"{name} must be an integer >= {low}, got {value!r}") from None
  if value < low:
    raise ValueError(f"{name} must be an integer >= {low}, got {value}")


def _check_probs(name: str, probs, size: int) -> None:
  p = np.asarray(probs, dtype=np.float64)
  if p.shape != (size,) or not np.all(np.isfinite(p)) or np.any(p < 0) or abs(p.sum() - 1) > 1e-9:
    raise ValueError(f"{name} must be {size} non-negative probabilities summing to 1, "
                     f"got {probs!r}")


def _check_pair(name: str, pair, positive: bool) -> None:
  p = np.asarray(pair, dtype=np.float64)
  if p.shape != (2,) or not np.all(np.isfinite(p)) or (positive and np.any(p <= 0)):
    kind = "positive" if positive else "finite"
    raise ValueError(f"{name} must be a (survivors, deaths) pair of {kind} numbers, got {pair!r}")


@dataclasses.dataclass(frozen=True)
class MedicalSynthConfig:
  """Parameters of the synthetic stand-in (see the module docstring).

  Sizes follow the thesis (Sec. 8.4) and the UAI 2021 FL-TOP paper (App. A);
  the signal parameters are this generator's own, not estimates from Premier
  data. Pairs are ``(survivors, deaths)``. Invalid values raise ValueError on
  construction.

  Attributes:
    seed: Seed of every random stream (>= 0).
    hospitals: Client hospitals (5,010 in the thesis).
    patients_per_hospital: Patients per hospital before downsampling (203),
      at least 2.
    test_size: Patients of the pooled test set (>= 2).
    positive_rate: Mean death rate, in (0, 0.5) (about 3.1% in the thesis).
    public_positives: Deaths in the server's public downsample (12).
    public_negatives: Survivors in the server's public downsample (12).
    num_indicators: Binary indicator columns (7,271, for 7,280 features);
      fewer only for fast tests.
    hospital_concentration: ``a + b`` of the Beta law of hospital death rates.
    age_mean: Means of the age normals.
    age_sd: Standard deviations of the age normals.
    mrci_mean: Means of the MRCI normals.
    mrci_sd: Standard deviations of the MRCI normals.
    gender_probs: (female, male, unknown) probabilities, both classes.
    admission_probs: (emergency, urgent, elective, trauma/other)
      probabilities of survivors, then of deaths.
    indicator_rate_range: Range of the log-uniform indicator prevalences.
    informative_indicators: Indicators whose prevalence differs by class.
    indicator_effect_sd: Standard deviation of the log prevalence ratios
      ``b_j`` of the informative indicators.
    indicator_rate_cap: Cap of the informative indicators' prevalence among
      deaths.
  """

  seed: int = 0
  hospitals: int = 5010
  patients_per_hospital: int = 203
  test_size: int = 20000
  positive_rate: float = 0.031
  public_positives: int = 12
  public_negatives: int = 12
  num_indicators: int = 7271
  hospital_concentration: float = 50.0
  age_mean: tuple[float, float] = (58.0, 70.0)
  age_sd: tuple[float, float] = (18.0, 14.0)
  mrci_mean: tuple[float, float] = (16.0, 20.0)
  mrci_sd: tuple[float, float] = (8.0, 9.0)
  gender_probs: tuple[float, float, float] = (0.54, 0.455, 0.005)
  admission_probs: tuple[tuple[float, float, float, float],
                         tuple[float, float, float, float]] = (
                             (0.52, 0.17, 0.28, 0.03), (0.68, 0.16, 0.12, 0.04))
  indicator_rate_range: tuple[float, float] = (1e-4, 0.05)
  informative_indicators: int = 300
  indicator_effect_sd: float = 0.55
  indicator_rate_cap: float = 0.5

  def __post_init__(self):
    self.validate()

  def validate(self) -> None:
    """Raises a one-line ValueError naming the first invalid parameter."""
    _check_int("seed", self.seed, 0)
    _check_int("hospitals", self.hospitals, 1)
    _check_int("patients_per_hospital", self.patients_per_hospital, 2)
    _check_int("test_size", self.test_size, 2)
    _check_int("public_positives", self.public_positives, 1)
    _check_int("public_negatives", self.public_negatives, 1)
    _check_int("num_indicators", self.num_indicators, 1)
    _check_int("informative_indicators", self.informative_indicators, 0)
    if not 0 < self.positive_rate < 0.5:
      raise ValueError(f"positive_rate must be in (0, 0.5), got {self.positive_rate}")
    if self.informative_indicators > self.num_indicators:
      raise ValueError(f"informative_indicators must be <= num_indicators "
                       f"({self.num_indicators}), got {self.informative_indicators}")
    if not 0 < self.hospital_concentration < np.inf:
      raise ValueError(f"hospital_concentration must be > 0, got {self.hospital_concentration}")
    _check_pair("age_mean", self.age_mean, positive=False)
    _check_pair("age_sd", self.age_sd, positive=True)
    _check_pair("mrci_mean", self.mrci_mean, positive=False)
    _check_pair("mrci_sd", self.mrci_sd, positive=True)
    _check_probs("gender_probs", self.gender_probs, 3)
    if len(self.admission_probs) != 2:
      raise ValueError(f"admission_probs must be a (survivors, deaths) pair, "
                       f"got {self.admission_probs!r}")
    for probs in self.admission_probs:
      _check_probs("admission_probs", probs, 4)
    rate = np.asarray(self.indicator_rate_range, dtype=np.float64)
    if rate.shape != (2,) or not 0 < rate[0] <= rate[1] < 1:
      raise ValueError(f"indicator_rate_range must be (low, high) with 0 < low <= high < 1, "
                       f"got {self.indicator_rate_range!r}")
    if not 0 <= self.indicator_effect_sd < np.inf:
      raise ValueError(f"indicator_effect_sd must be >= 0, got {self.indicator_effect_sd}")
    if not 0 < self.indicator_rate_cap < 1:
      raise ValueError(f"indicator_rate_cap must be in (0, 1), got {self.indicator_rate_cap}")

  @property
  def num_features(self) -> int:
    """Columns of a patient: 9 dense features plus the indicators."""
    return _DENSE + self.num_indicators


class MedicalSynth(NamedTuple):
  """A generated synthetic stand-in for the thesis' medical data.

  Not the thesis' Premier data: see the module docstring. Features are uint8
  (scale by 1/255); labels are 1 for death, 0 for survival.

  Attributes:
    train_x: uint8 ``(hospitals, width, num_features)``: each hospital's
      class-balanced downsample (all its deaths and as many survivors, in
      random order), then all-zero padding rows up to ``width``, the largest
      balanced size.
    train_y: int32 ``(hospitals, width)``; padding rows are
      :data:`PADDING_LABEL`.
    hospital_labels: int8 ``(hospitals, patients_per_hospital)``: every
      patient's label before downsampling.
    test_x: uint8 ``(test_size, num_features)``, the pooled test set.
    test_y: int32 ``(test_size,)``.
    public_x: uint8 ``(public_positives + public_negatives, num_features)``:
      the server's downsample of its public hospital (UAI App. A: 12 + 12 of
      356 patients; only the downsample is generated), in random order.
    public_y: int32 ``(public_positives + public_negatives,)``.
    config: The configuration that generated the arrays.
  """

  train_x: np.ndarray
  train_y: np.ndarray
  hospital_labels: np.ndarray
  test_x: np.ndarray
  test_y: np.ndarray
  public_x: np.ndarray
  public_y: np.ndarray
  config: MedicalSynthConfig


class _Signal(NamedTuple):
  """Class-conditional laws of one config, as sampling and scoring tables."""

  age_cdf: np.ndarray          # (2, 75) float64 CDFs over ages 15..89
  mrci_cdf: np.ndarray         # (2, 59) float64 CDFs over MRCI 2..60
  gender_cdf: np.ndarray       # (2, 3)
  admission_cdf: np.ndarray    # (2, 4)
  indicator_p: np.ndarray      # (2, num_indicators) float32 prevalences
  age_llr: np.ndarray          # (75,) log P(age | death) - log P(age | survivor)
  mrci_llr: np.ndarray         # (59,)
  gender_llr: np.ndarray       # (3,)
  admission_llr: np.ndarray    # (4,)
  informative: np.ndarray      # (K,) indicator indices whose prevalence differs
  indicator_w: np.ndarray      # (K,) log-odds weight of an active indicator
  constant: float              # prior log odds + sum of the inactive terms


def _rng(seed: int, stream: int) -> np.random.Generator:
  return np.random.default_rng(np.random.SeedSequence([seed, stream]))


def _codes(lo: int, hi: int) -> np.ndarray:
  """uint8 codes of the integers lo..hi, min-max scaled: floor(255 * s + 0.5)."""
  k = np.arange(hi - lo + 1, dtype=np.float64)
  return np.floor(255.0 * k / (hi - lo) + 0.5).astype(np.uint8)


def _decode(codes: np.ndarray, lo: int, hi: int) -> np.ndarray:
  """Index (value - lo) of uint8 codes; exact because 255 / (hi - lo) > 1."""
  k = np.rint(codes.astype(np.float64) * ((hi - lo) / 255.0)).astype(np.intp)
  return np.clip(k, 0, hi - lo)


def _rounded_normal_pmf(mean: float, sd: float, lo: int, hi: int) -> np.ndarray:
  """Law of N(mean, sd**2) rounded to an integer and clipped to lo..hi."""
  edges = np.arange(lo, hi, dtype=np.float64) + 0.5  # between consecutive integers
  cdf = np.concatenate([[0.0], special.ndtr((edges - mean) / sd), [1.0]])
  return np.diff(cdf)


def _cdf(pmf: np.ndarray) -> np.ndarray:
  cdf = np.cumsum(pmf, axis=-1)
  cdf[..., -1] = 1.0
  return cdf


def _llr(pmf: np.ndarray) -> np.ndarray:
  with np.errstate(divide="ignore"):
    return np.log(pmf[1]) - np.log(pmf[0])


@functools.lru_cache(maxsize=8)
def _signal(config: MedicalSynthConfig) -> _Signal:
  """The class-conditional laws of a config (stream ``_SIGNAL`` draws the indicators')."""
  age = np.stack([_rounded_normal_pmf(m, s, *_AGE_RANGE)
                  for m, s in zip(config.age_mean, config.age_sd)])
  mrci = np.stack([_rounded_normal_pmf(m, s, *_MRCI_RANGE)
                   for m, s in zip(config.mrci_mean, config.mrci_sd)])
  gender = np.tile(np.asarray(config.gender_probs, dtype=np.float64), (2, 1))
  admission = np.asarray(config.admission_probs, dtype=np.float64)

  rng = _rng(config.seed, _SIGNAL)
  low, high = config.indicator_rate_range
  p = np.exp(rng.uniform(np.log(low), np.log(high), config.num_indicators))
  informative = np.sort(rng.choice(config.num_indicators, config.informative_indicators,
                                   replace=False))
  b = rng.normal(0.0, config.indicator_effect_sd, config.informative_indicators)
  q = p.copy()
  q[informative] = np.minimum(p[informative] * np.exp(b), config.indicator_rate_cap)
  # On the 2**-24 grid, P(float32 uniform < p) == p exactly.
  p, q = (np.maximum(np.rint(v * _GRID), 1.0) / _GRID for v in (p, q))
  pi, qi = p[informative], q[informative]
  # Indicator j adds x_j * log(q/p) + (1 - x_j) * log((1-q)/(1-p)) to the log odds.
  w = np.log(qi / pi) - np.log1p(-qi) + np.log1p(-pi)
  constant = (np.log(config.positive_rate) - np.log1p(-config.positive_rate)
              + float(np.sum(np.log1p(-qi) - np.log1p(-pi))))
  return _Signal(
      age_cdf=_cdf(age), mrci_cdf=_cdf(mrci), gender_cdf=_cdf(gender),
      admission_cdf=_cdf(admission),
      indicator_p=np.stack([p, q]).astype(np.float32),
      age_llr=_llr(age), mrci_llr=_llr(mrci), gender_llr=_llr(gender),
      admission_llr=_llr(admission), informative=informative,
      indicator_w=w.astype(np.float32), constant=float(constant))


def _categorical(rng: np.random.Generator, cdf: np.ndarray, n: int) -> np.ndarray:
  return np.minimum(np.searchsorted(cdf, rng.random(n), side="right"), len(cdf) - 1)


def _sample(rng: np.random.Generator, label: int, out: np.ndarray, signal: _Signal,
            uniforms: np.ndarray, mask: np.ndarray) -> None:
  """Fills uint8 rows ``out`` with patients of class ``label``.

  ``uniforms`` (float32) and ``mask`` (bool) are scratch buffers with at least
  ``len(out)`` rows of ``num_indicators`` columns.
  """
  n = len(out)
  rows = np.arange(n)
  out[:, :_DENSE] = 0
  out[:, _AGE] = _codes(*_AGE_RANGE)[_categorical(rng, signal.age_cdf[label], n)]
  out[rows, _GENDER.start + _categorical(rng, signal.gender_cdf[label], n)] = 255
  out[rows, _ADMISSION.start + _categorical(rng, signal.admission_cdf[label], n)] = 255
  out[:, _MRCI] = _codes(*_MRCI_RANGE)[_categorical(rng, signal.mrci_cdf[label], n)]
  u, m = uniforms[:n], mask[:n]
  rng.random(dtype=np.float32, out=u)
  np.less(u, signal.indicator_p[label], out=m)
  np.multiply(m.view(np.uint8), np.uint8(255), out=out[:, _DENSE:])


def _fill(rng: np.random.Generator, x: np.ndarray, y: np.ndarray, signal: _Signal) -> None:
  """Writes features into the rows of ``x`` (2-D) whose label ``y`` is 0 or 1.

  Deaths first, then survivors, in chunks of ``_CHUNK`` rows.
  """
  rows_total = max(int(np.sum(y == label)) for label in (0, 1))
  chunk = min(_CHUNK, max(rows_total, 1))
  uniforms = np.empty((chunk, x.shape[1] - _DENSE), np.float32)
  mask = np.empty(uniforms.shape, bool)
  block = np.empty((chunk, x.shape[1]), np.uint8)
  for label in (1, 0):
    rows = np.flatnonzero(y == label)
    for start in range(0, len(rows), chunk):
      part = rows[start:start + chunk]
      _sample(rng, label, block[:len(part)], signal, uniforms, mask)
      x[part] = block[:len(part)]


def draw_hospital_labels(config: MedicalSynthConfig) -> np.ndarray:
  """Every hospital patient's label, before downsampling (stream ``_LABELS``).

  Rates ``r_h ~ Beta(c * pi, c * (1 - pi))``, labels Bernoulli(r_h); a
  hospital with no death gets one random patient set to death (thesis
  Sec. 8.4: each hospital has at least one death), one with only deaths gets
  one set to survivor. Cheap: no features are drawn.

  Args:
    config: The configuration.

  Returns:
    int8 ``(hospitals, patients_per_hospital)``, 1 for death.
  """
  rng = _rng(config.seed, _LABELS)
  h, n = config.hospitals, config.patients_per_hospital
  c, pi = config.hospital_concentration, config.positive_rate
  rates = rng.beta(c * pi, c * (1 - pi), size=h)
  labels = rng.random((h, n)) < rates[:, None]
  # Both picks are drawn for every hospital, so the stream never depends on the labels.
  first, second = rng.integers(0, n, size=(2, h))
  none = ~labels.any(axis=1)
  labels[none, first[none]] = True
  full = labels.all(axis=1)
  labels[full, second[full]] = False
  return labels.astype(np.int8)


def _balanced_downsample(labels: np.ndarray, seed: int) -> np.ndarray:
  """Kept patients' labels, per hospital in random order, padded with -1.

  Each hospital keeps ``m = min(deaths, survivors)`` patients of each class,
  drawn without replacement (all its deaths whenever deaths <= survivors).
  Stream ``_DOWNSAMPLE``. Only the labels matter: features are drawn later
  for the kept patients, independently given the label.
  """
  rng = _rng(seed, _DOWNSAMPLE)
  h, n = labels.shape
  deaths = labels.sum(axis=1, dtype=np.int64)
  keep = np.minimum(deaths, n - deaths)
  # Sorting label + U puts survivors (random order) before deaths (random order).
  order = np.argsort(labels + rng.random((h, n)), axis=1)
  position = np.arange(n)[None, :]
  survivors = (n - deaths)[:, None]
  rank = np.where(position < survivors, position, position - survivors)  # rank within class
  kept = rank < keep[:, None]
  # Kept patients in random order first, the others after.
  shuffle = np.argsort(np.where(kept, rng.random((h, n)), 2.0), axis=1)
  width = 2 * int(keep.max())
  chosen = np.take_along_axis(order, shuffle[:, :width], axis=1)
  y = np.take_along_axis(labels, chosen, axis=1).astype(np.int32)
  y[np.arange(width)[None, :] >= 2 * keep[:, None]] = PADDING_LABEL
  return y


def _class_rows(rng: np.random.Generator, positives: int, negatives: int) -> np.ndarray:
  y = np.concatenate([np.ones(positives, np.int32), np.zeros(negatives, np.int32)])
  return rng.permutation(y)


def generate(config: MedicalSynthConfig = MedicalSynthConfig()) -> MedicalSynth:
  """Generates the synthetic stand-in for the thesis' medical data.

  Deterministic given the config: the same seed yields identical arrays.
  Vectorised and chunked (the full default's time, 5,010 hospitals:
  docs/performance.md, "Figures behind the code's choices"). Nothing is
  cached (see :func:`load_medical_synth`).

  Args:
    config: Sizes, seed and signal parameters.

  Returns:
    A :class:`MedicalSynth` (synthetic stand-in, not the thesis' Premier data).

  Raises:
    ValueError: An invalid config.
  """
  config.validate()
  signal = _signal(config)
  features = config.num_features

  hospital_labels = draw_hospital_labels(config)
  train_y = _balanced_downsample(hospital_labels, config.seed)
  h, width = train_y.shape
  # np.zeros maps zero pages lazily; only the kept rows are written.
  train_x = np.zeros((h, width, features), np.uint8)
  _fill(_rng(config.seed, _TRAIN), train_x.reshape(h * width, features), train_y.reshape(-1),
        signal)

  rng = _rng(config.seed, _TEST)
  test_y = (rng.random(config.test_size) < config.positive_rate).astype(np.int32)
  # Both classes are always present (AUROC needs them); only matters for tiny test sets.
  flip = rng.integers(0, config.test_size, size=2)
  if not test_y.any():
    test_y[flip[0]] = 1
  if test_y.all():
    test_y[flip[1]] = 0
  test_x = np.empty((config.test_size, features), np.uint8)
  _fill(rng, test_x, test_y, signal)

  rng = _rng(config.seed, _PUBLIC)
  public_y = _class_rows(rng, config.public_positives, config.public_negatives)
  public_x = np.empty((len(public_y), features), np.uint8)
  _fill(rng, public_x, public_y, signal)

  return MedicalSynth(train_x=train_x, train_y=train_y, hospital_labels=hospital_labels,
                      test_x=test_x, test_y=test_y, public_x=public_x, public_y=public_y,
                      config=config)


def bayes_log_odds(x_uint8: np.ndarray, config: MedicalSynthConfig) -> np.ndarray:
  """The Bayes-optimal score: the exact posterior log odds of death.

  Features are independent given the label, so
  ``log P(y=1 | x) / P(y=0 | x) = log(pi / (1 - pi)) + sum_f log P(x_f | 1) / P(x_f | 0)``
  with ``pi = positive_rate`` (the test set's prior; hospitals' priors vary,
  which shifts the score but not its ranking). Its AUROC on the test set is
  the ceiling any model can reach on this synthetic stand-in. Scores of
  padding rows are meaningless.

  Args:
    x_uint8: uint8 patients of shape ``(..., num_features)``.
    config: The configuration that generated them.

  Returns:
    float64 log odds of shape ``x_uint8.shape[:-1]``.

  Raises:
    ValueError: x is not uint8 with ``config.num_features`` columns.
  """
  x = np.asarray(x_uint8)
  if x.dtype != np.uint8 or x.ndim < 1 or x.shape[-1] != config.num_features:
    raise ValueError(f"x_uint8 must be uint8 of shape (..., {config.num_features}), "
                     f"got {x.dtype} {x.shape}")
  s = _signal(config)
  flat = x.reshape(-1, config.num_features)
  score = np.full(len(flat), s.constant)
  score += s.age_llr[_decode(flat[:, _AGE], *_AGE_RANGE)]
  score += s.mrci_llr[_decode(flat[:, _MRCI], *_MRCI_RANGE)]
  score += s.gender_llr[np.argmax(flat[:, _GENDER], axis=1)]
  score += s.admission_llr[np.argmax(flat[:, _ADMISSION], axis=1)]
  for start in range(0, len(flat), 8 * _CHUNK):
    active = flat[start:start + 8 * _CHUNK, _DENSE + s.informative] != 0
    score[start:start + len(active)] += active.astype(np.float32) @ s.indicator_w
  return score.reshape(x.shape[:-1])


def describe(data: MedicalSynth) -> dict:
  """JSON-ready statistics of a generated synthetic stand-in.

  Returns:
    A dict: sizes, positive rates, balanced sizes, mean active indicators per
    test patient, the Bayes-optimal test AUROC (:func:`bayes_log_odds` scored
    with :func:`fedjax_dp.metrics.auroc`), the train array's size and a note
    that the data is a synthetic stand-in.
  """
  cfg = data.config
  real = data.train_y != PADDING_LABEL
  balanced = real.sum(axis=1)
  active = np.concatenate([
      np.count_nonzero(data.test_x[i:i + 8 * _CHUNK, _DENSE:], axis=1)
      for i in range(0, len(data.test_x), 8 * _CHUNK)])
  return {
      "note": "synthetic stand-in, not the thesis' Premier data",
      "version": VERSION,
      "seed": cfg.seed,
      "hospitals": int(data.train_x.shape[0]),
      "patients_per_hospital": int(cfg.patients_per_hospital),
      "width": int(data.train_x.shape[1]),
      "num_features": int(cfg.num_features),
      "hospital_positive_rate": float(data.hospital_labels.mean()),
      "min_positives_per_hospital": int(data.hospital_labels.sum(axis=1).min()),
      "max_positives_per_hospital": int(data.hospital_labels.sum(axis=1).max()),
      "mean_balanced_size": float(balanced.mean()),
      "train_examples": int(balanced.sum()),
      "train_x_bytes": int(data.train_x.nbytes),
      "test_size": int(len(data.test_y)),
      "test_positive_rate": float(data.test_y.mean()),
      "mean_active_indicators": float(active.mean()),
      "mean_active_indicators_deaths": float(active[data.test_y == 1].mean()),
      "mean_active_indicators_survivors": float(active[data.test_y == 0].mean()),
      "bayes_test_auroc": metrics.auroc(data.test_y, bayes_log_odds(data.test_x, cfg)),
  }


# ---------------------------------------------------------------------------
# Caching.

_MEMORY: dict[MedicalSynthConfig, MedicalSynth] = {}
_ARRAYS = ("train_x", "train_y", "hospital_labels", "test_x", "test_y", "public_x", "public_y")
# The file stores train_x's non-padding rows only ("train_rows"): 0.6 GB instead of 2.9 GB.
_STORED = ("train_rows",) + _ARRAYS[1:]


def _config_json(config: MedicalSynthConfig) -> str:
  return json.dumps(dataclasses.asdict(config), sort_keys=True)


def medical_cache_path(config: MedicalSynthConfig) -> pathlib.Path:
  """``<cache>/medical-synth/v<VERSION>-<sha256 of the config, 16 hex>.npz``."""
  digest = hashlib.sha256(_config_json(config).encode()).hexdigest()[:16]
  return idx.cache_dir() / "medical-synth" / f"v{VERSION}-{digest}.npz"


def clear_memory_cache() -> None:
  """Drops the in-process cache of :func:`load_medical_synth` (not the files)."""
  _MEMORY.clear()


def _expected_shapes(config: MedicalSynthConfig, hospital_labels: np.ndarray,
                     train_y: np.ndarray) -> dict:
  """Shapes and dtypes of the stored arrays, given the stored labels."""
  deaths = hospital_labels.sum(axis=1, dtype=np.int64)
  width = 2 * int(np.minimum(deaths, config.patients_per_hospital - deaths).max())
  h, f = config.hospitals, config.num_features
  pub = config.public_positives + config.public_negatives
  return {
      "train_rows": ((int(np.sum(train_y != PADDING_LABEL)), f), np.uint8),
      "train_y": ((h, width), np.int32),
      "hospital_labels": ((h, config.patients_per_hospital), np.int8),
      "test_x": ((config.test_size, f), np.uint8), "test_y": ((config.test_size,), np.int32),
      "public_x": ((pub, f), np.uint8), "public_y": ((pub,), np.int32),
  }


def _read(path: pathlib.Path, config: MedicalSynthConfig) -> MedicalSynth | None:
  """The cached data, or None if the file is missing, unreadable or stale."""
  if not path.is_file():
    return None
  try:
    with np.load(path, allow_pickle=False) as npz:
      meta = json.loads(str(npz["meta"]))
      if meta != {"version": VERSION, "config": json.loads(_config_json(config))}:
        return None
      arrays = {name: npz[name] for name in _STORED}
  except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
    return None
  expected = _expected_shapes(config, arrays["hospital_labels"], arrays["train_y"])
  for name, (shape, dtype) in expected.items():
    if arrays[name].shape != shape or arrays[name].dtype != dtype:
      return None
  rows = arrays.pop("train_rows")
  train_x = np.zeros(arrays["train_y"].shape + (config.num_features,), np.uint8)
  train_x[arrays["train_y"] != PADDING_LABEL] = rows
  return MedicalSynth(train_x=train_x, **arrays, config=config)


def _write(path: pathlib.Path, data: MedicalSynth) -> None:
  """Writes the cache file atomically; warns (and leaves nothing) on failure."""
  try:
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path) as out:
      meta = json.dumps({"version": VERSION, "config": dataclasses.asdict(data.config)})
      arrays = {name: getattr(data, name) for name in _ARRAYS[1:]}
      np.savez(out, meta=np.array(meta), train_rows=data.train_x[data.train_y != PADDING_LABEL],
               **arrays)
  except (OSError, ValueError) as err:
    warnings.warn(f"could not write the medical-synth cache {path}: {err}; "
                  "set FEDJAX_DP_CACHE to a writable folder", stacklevel=3)


def _read_only(data: MedicalSynth) -> MedicalSynth:
  for name in _ARRAYS:
    getattr(data, name).setflags(write=False)
  return data


def load_medical_synth(config: MedicalSynthConfig = MedicalSynthConfig(),
                       cache: bool = True) -> MedicalSynth:
  """Loads the synthetic stand-in for the thesis' medical data, generating it if needed.

  With ``cache``, the data is kept in-process per config and on disk at
  :func:`medical_cache_path` (uncompressed ``.npz`` of the non-padding rows,
  0.62 GB for the default config). A cache file whose version, config or
  array shapes do not match, or that cannot be read, is regenerated and
  replaced. Files are
  written to a temporary file in the same folder and moved into place with
  ``os.replace``, so no half-written cache is ever read; a failed write only
  warns.

  Args:
    config: Sizes, seed and signal parameters.
    cache: Whether to use (and fill) the in-process and on-disk caches.

  Returns:
    A :class:`MedicalSynth` of read-only arrays (shared with the cache).

  Raises:
    ValueError: An invalid config.
  """
  config.validate()
  if not cache:
    return _read_only(generate(config))
  if config in _MEMORY:
    return _MEMORY[config]
  path = medical_cache_path(config)
  data = _read(path, config)
  if data is None:
    data = generate(config)
    _write(path, data)
  _MEMORY[config] = _read_only(data)
  return _MEMORY[config]
