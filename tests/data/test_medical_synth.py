"""fedjax_dp.data.medical: the synthetic stand-in for the thesis' medical data (Sec. 8.4)."""

import dataclasses
import json
import os

import numpy as np
import pytest
from scipy import special

from fedjax_dp import metrics
from fedjax_dp.data import PADDING_LABEL, medical
from fedjax_dp.data.medical import (MedicalSynth, MedicalSynthConfig, bayes_log_odds, describe,
                                    draw_hospital_labels, generate, load_medical_synth,
                                    medical_cache_path)

SMALL = MedicalSynthConfig(hospitals=60, test_size=4000)
TINY = MedicalSynthConfig(hospitals=8, test_size=300)


@pytest.fixture(scope="module")
def small():
  return generate(SMALL)


def _real(data):
  return data.train_y != PADDING_LABEL


def _all_rows(data):
  """Every non-padding row: train, test and public."""
  return np.concatenate([data.train_x[_real(data)], data.test_x, data.public_x])


def test_shapes_and_dtypes(small):
  f = 7280
  assert MedicalSynthConfig().num_features == f
  _, width = small.train_y.shape
  assert small.train_x.shape == (60, width, f) and small.train_x.dtype == np.uint8
  assert small.train_y.shape == (60, width) and small.train_y.dtype == np.int32
  assert small.hospital_labels.shape == (60, 203) and small.hospital_labels.dtype == np.int8
  assert small.test_x.shape == (4000, f) and small.test_x.dtype == np.uint8
  assert small.test_y.shape == (4000,) and small.test_y.dtype == np.int32
  assert small.public_x.shape == (24, f) and small.public_x.dtype == np.uint8
  assert small.public_y.shape == (24,) and small.public_y.dtype == np.int32
  assert sorted(small.public_y.tolist()) == [0] * 12 + [1] * 12
  assert small.config == SMALL


def test_padding_rows_follow_the_examples_and_are_zero(small):
  real = _real(small)
  sizes = real.sum(axis=1)
  # Examples first, then padding, and the widest hospital fills the width.
  np.testing.assert_array_equal(real, np.arange(real.shape[1])[None, :] < sizes[:, None])
  assert sizes.max() == small.train_y.shape[1] and sizes.min() < sizes.max()
  assert not small.train_x[~real].any()
  assert set(np.unique(small.train_y[real])) == {0, 1}


def test_feature_encoding(small):
  rows = _all_rows(small)
  for group in (slice(1, 4), slice(4, 8)):  # gender, admission type
    block = rows[:, group]
    assert set(np.unique(block)) == {0, 255}
    np.testing.assert_array_equal((block == 255).sum(axis=1), 1)
  assert set(np.unique(small.train_x[..., 9:])) == {0, 255}
  assert set(np.unique(np.concatenate([small.test_x[:, 9:], small.public_x[:, 9:]]))) == {0, 255}
  for col, (lo, hi) in ((0, (15, 89)), (8, (2, 60))):  # age, MRCI
    value = lo + rows[:, col] / 255 * (hi - lo)
    nearest = np.rint(value)
    # Stored as round(255 * scaled): within 1/510 of the scaled integer.
    assert np.abs(value - nearest).max() <= (hi - lo) / 510 + 1e-9
    assert nearest.min() >= lo and nearest.max() <= hi
    assert len(np.unique(nearest)) > 20


def test_hospital_positive_rate_matches_the_beta_binomial_law():
  cfg = MedicalSynthConfig(hospitals=20000)
  labels = draw_hospital_labels(cfg)
  assert labels.shape == (20000, 203) and labels.dtype == np.int8
  deaths = labels.sum(axis=1)
  assert deaths.min() >= 1 and deaths.max() < 203
  n, pi, c = 203, cfg.positive_rate, cfg.hospital_concentration
  a, b = c * pi, c * (1 - pi)
  no_death = np.exp(special.betaln(a, b + n) - special.betaln(a, b))  # P(Beta-binomial = 0)
  expected = pi + no_death / n  # each death-free hospital gets one death
  # Binomial variance inflated by the Beta law of the rates (beta-binomial).
  sd = np.sqrt(n * pi * (1 - pi) * (1 + (n - 1) / (c + 1)) / cfg.hospitals) / n
  assert abs(labels.mean() - expected) < 4 * sd
  # The rates vary: a binomial would almost never put 25 deaths in a hospital.
  assert deaths.max() >= 25


def test_test_set_positive_rate(small):
  n, pi = len(small.test_y), SMALL.positive_rate
  assert set(np.unique(small.test_y)) == {0, 1}
  assert abs(small.test_y.mean() - pi) < 4 * np.sqrt(pi * (1 - pi) / n)


def test_balanced_downsample(small):
  real = _real(small)
  kept_pos = ((small.train_y == 1) & real).sum(axis=1)
  kept_neg = ((small.train_y == 0) & real).sum(axis=1)
  deaths = small.hospital_labels.sum(axis=1)
  assert deaths.min() >= 1
  np.testing.assert_array_equal(kept_pos, deaths)
  np.testing.assert_array_equal(kept_neg, kept_pos)
  # Random order: a hospital keeping k >= 3 deaths has its first k rows of one
  # class with probability 2 / C(2k, k) <= 0.1.
  pure = [len(np.unique(small.train_y[h, :k])) == 1 for h, k in enumerate(deaths) if k >= 3]
  assert len(pure) >= 20 and np.mean(pure) < 0.4


def test_the_seed_fixes_the_data():
  a, b = generate(TINY), generate(TINY)
  c = generate(dataclasses.replace(TINY, seed=1))
  for name in medical._ARRAYS:
    np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
  for name in ("train_x", "hospital_labels", "test_x", "public_x"):
    assert not np.array_equal(getattr(a, name), getattr(c, name)), name


def test_parts_draw_from_separate_streams():
  a = generate(TINY)
  b = generate(dataclasses.replace(TINY, test_size=500))
  c = generate(dataclasses.replace(TINY, public_negatives=20))
  for name in ("train_x", "train_y", "hospital_labels", "public_x", "public_y"):
    np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
  for name in ("train_x", "train_y", "hospital_labels", "test_x", "test_y"):
    np.testing.assert_array_equal(getattr(a, name), getattr(c, name))
  assert not np.array_equal(a.test_x, b.test_x[:len(a.test_x)])


def test_bayes_score_shows_a_weak_signal(small):
  score = bayes_log_odds(small.test_x, SMALL)
  assert score.shape == (4000,) and score.dtype == np.float64
  auc = metrics.auroc(small.test_y, score)
  assert 0.7 < auc < 0.97
  # Both the dense features and the indicators carry signal: blanking one
  # part shifts every score by the same constant.
  for part in (slice(0, 9), slice(9, None)):
    x = small.test_x.copy()
    x[:, part] = 0
    assert metrics.auroc(small.test_y, bayes_log_odds(x, SMALL)) > 0.62
  # The score is the posterior log odds: calibrated in the large.
  p = 1 / (1 + np.exp(-score))
  assert abs(small.test_y.mean() - p.mean()) < 4 * np.sqrt(np.mean(p * (1 - p)) / len(p))
  # Batched input, and a padded train array, score row by row.
  np.testing.assert_allclose(bayes_log_odds(small.test_x[:6].reshape(2, 3, -1), SMALL),
                             score[:6].reshape(2, 3))
  assert bayes_log_odds(small.train_x, SMALL).shape == small.train_y.shape
  with pytest.raises(ValueError, match="x_uint8"):
    bayes_log_odds(small.test_x.astype(np.float32), SMALL)
  with pytest.raises(ValueError, match="x_uint8"):
    bayes_log_odds(small.test_x[:, :100], SMALL)


def test_logistic_regression_learns_from_the_balanced_train_data():
  # 200 hospitals (about 2,500 balanced patients): with fewer, the 7,271 sparse
  # indicators overfit and the test AUROC drops towards 0.65.
  cfg = dataclasses.replace(SMALL, hospitals=200)
  data = generate(cfg)
  real = _real(data)
  x = data.train_x[real].astype(np.float32) / 255
  y = data.train_y[real].astype(np.float32)
  w, b = np.zeros(x.shape[1], np.float32), np.float32(0)
  for _ in range(300):  # full-batch gradient descent on the L2-regularised log loss
    p = 1 / (1 + np.exp(-(x @ w + b)))
    w -= 2.0 * (x.T @ (p - y) / len(y) + 3e-2 * w)
    b -= 2.0 * np.mean(p - y)
  test = data.test_x.astype(np.float32) / 255
  auc = metrics.auroc(data.test_y, test @ w + b)
  assert auc > 0.6
  # No model beats the Bayes score (up to the test set's noise).
  assert auc < metrics.auroc(data.test_y, bayes_log_odds(data.test_x, cfg)) + 0.02


def test_describe(small):
  stats = describe(small)
  json.dumps(stats)
  assert "synthetic stand-in" in stats["note"]
  assert stats["hospitals"] == 60 and stats["width"] == small.train_y.shape[1]
  assert stats["min_positives_per_hospital"] >= 1
  assert stats["mean_balanced_size"] == pytest.approx(_real(small).sum(axis=1).mean())
  assert 40 < stats["mean_active_indicators"] < 80
  assert stats["bayes_test_auroc"] == pytest.approx(
      metrics.auroc(small.test_y, bayes_log_odds(small.test_x, SMALL)))
  for doc in (medical.__doc__, MedicalSynth.__doc__, generate.__doc__):
    assert "synthetic stand-in" in doc


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
  monkeypatch.setenv("FEDJAX_DP_CACHE", str(tmp_path))
  medical.clear_memory_cache()
  yield tmp_path / "medical-synth"
  medical.clear_memory_cache()


def _forbid_generation(monkeypatch):
  def fail(config):
    raise AssertionError("generated instead of read from the cache")
  monkeypatch.setattr(medical, "generate", fail)


def _assert_same(a, b):
  for name in medical._ARRAYS:
    np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


def test_cache_is_written_once_and_read_back(cache_dir, monkeypatch):
  first = load_medical_synth(TINY)
  path = medical_cache_path(TINY)
  assert path.parent == cache_dir and path.name.startswith(f"v{medical.VERSION}-")
  assert os.listdir(cache_dir) == [path.name]  # no temporary file left
  assert all(not getattr(first, name).flags.writeable for name in medical._ARRAYS)
  assert load_medical_synth(TINY) is first  # in-process
  _forbid_generation(monkeypatch)
  medical.clear_memory_cache()
  second = load_medical_synth(TINY)  # from disk
  assert second is not first and second.config == TINY
  assert not second.train_x.flags.writeable
  _assert_same(first, second)
  with pytest.raises(AssertionError, match="generated"):
    load_medical_synth(dataclasses.replace(TINY, seed=5))


def test_corrupt_or_stale_cache_is_regenerated(cache_dir, monkeypatch):
  expected = generate(TINY)
  path = medical_cache_path(TINY)
  path.parent.mkdir(parents=True)
  calls = []
  real_generate = medical.generate
  monkeypatch.setattr(medical, "generate", lambda c: calls.append(c) or real_generate(c))

  path.write_bytes(b"PK\x03\x04 not a zip file")
  _assert_same(load_medical_synth(TINY), expected)
  assert len(calls) == 1

  # A truncated file.
  data = path.read_bytes()
  path.write_bytes(data[:len(data) // 2])
  medical.clear_memory_cache()
  _assert_same(load_medical_synth(TINY), expected)
  assert len(calls) == 2

  # The right config with an array of the wrong shape.
  with np.load(path) as npz:
    arrays = dict(npz)
  arrays["train_rows"] = arrays["train_rows"][:-1]
  with open(path, "wb") as out:
    np.savez(out, **arrays)
  medical.clear_memory_cache()
  _assert_same(load_medical_synth(TINY), expected)
  assert len(calls) == 3

  # Another config's file under this config's name.
  other = dataclasses.replace(TINY, seed=3)
  load_medical_synth(other)
  os.replace(medical_cache_path(other), path)
  medical.clear_memory_cache()
  _assert_same(load_medical_synth(TINY), expected)
  assert len(calls) == 5
  assert sorted(os.listdir(cache_dir)) == [path.name]

  # The rewritten file is valid.
  medical.clear_memory_cache()
  _assert_same(load_medical_synth(TINY), expected)
  assert len(calls) == 5


def test_failed_write_warns_and_leaves_nothing(cache_dir, monkeypatch):
  def half_write(file, **arrays):
    file.write(b"PK\x03\x04 half of an archive")
    raise OSError("No space left on device")
  monkeypatch.setattr(medical.np, "savez", half_write)
  with pytest.warns(UserWarning, match="medical-synth cache"):
    data = load_medical_synth(TINY)
  _assert_same(data, generate(TINY))
  assert os.listdir(cache_dir) == []


def test_cache_false_writes_nothing(cache_dir):
  data = load_medical_synth(TINY, cache=False)
  assert not cache_dir.exists()
  assert not data.test_x.flags.writeable


@pytest.mark.parametrize("field, value", [
    ("hospitals", 0), ("patients_per_hospital", 1), ("test_size", 1), ("positive_rate", 0.0),
    ("positive_rate", 0.5), ("public_positives", 0), ("public_negatives", 0),
    ("num_indicators", 0), ("seed", -1), ("hospitals", 2.5), ("informative_indicators", 8000),
    ("hospital_concentration", 0.0), ("age_sd", (1.0, 0.0)), ("gender_probs", (0.5, 0.5, 0.5)),
    ("admission_probs", ((0.25,) * 4,)), ("indicator_rate_range", (0.1, 0.01)),
    ("indicator_effect_sd", -1.0), ("indicator_rate_cap", 1.0),
])
def test_invalid_config(field, value):
  with pytest.raises(ValueError, match=field) as err:
    MedicalSynthConfig(**{field: value})
  assert "\n" not in str(err.value)
