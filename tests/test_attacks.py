"""Thesis Chapter 6's attack settings, malicious set, poisoned labels and metrics."""

import numpy as np
import pytest

from fedjax_dp import attacks
from fedjax_dp.attacks import AttackConfig
from fedjax_dp.data.partitioning import PADDING_LABEL


@pytest.mark.parametrize("text,dataset,want", [
    ("5:7", "mnist", (5, 7)), ("Sandal:Sneaker", "fashion-mnist", (5, 7)),
    ("t-shirt:trouser", "fashion-mnist", (0, 1)), (" 0 : 1 ", "mnist", (0, 1)),
])
def test_backdoor_classes_by_index_or_name(text, dataset, want):
  assert attacks.parse_backdoor(text, dataset) == want


@pytest.mark.parametrize("text,dataset,match", [
    ("5:5", "mnist", "source and target must differ"),
    ("Sandal:Sandal", "fashion-mnist", "source and target must differ"),
    ("5:Cat", "fashion-mnist", "unknown class 'Cat' of fashion-mnist"),
    ("10:1", "mnist", "unknown class '10' of mnist"),
    ("5-7", "mnist", "backdoor must be SRC:DST"),
    ("1:2", "medical-synth", "backdoor classes are defined for"),
])
def test_bad_backdoors(text, dataset, match):
  with pytest.raises(ValueError, match=match):
    attacks.parse_backdoor(text, dataset)


@pytest.mark.parametrize("kwargs,match", [
    (dict(kind="poison", fraction=0.1), "unknown attack 'poison'"),
    (dict(kind="random-update", fraction=1.0), "fraction must be in"),
    (dict(kind="random-update", fraction=-0.1), "fraction must be in"),
    (dict(kind="gradient-ascent", fraction=0.1, boost=0.5), "boost must be >= 1"),
    (dict(kind="random-update", fraction=0.1, sigma=0.0), "sigma must be > 0"),
    (dict(kind="in-backdoor", fraction=0.1), "needs a source and a target"),
    (dict(kind="random-update", fraction=0.1, source=1, target=2), "takes no backdoor"),
    (dict(kind="in-backdoor", fraction=0.1, source=3, target=3), "must differ"),
    (dict(kind="in-backdoor", fraction=0.1, source=3, target=12), "target class must be"),
    (dict(kind="in-backdoor", fraction=0.1, source=1, target=2, selection="x"),
     "unknown selection"),
])
def test_bad_settings(kwargs, match):
  with pytest.raises(ValueError, match=match):
    AttackConfig(**kwargs).validate()


def test_valid_settings_and_collusion():
  AttackConfig("in-backdoor", 0.4, boost=7, source=5, target=7).validate()
  AttackConfig("random-update", 0.0).validate()
  assert AttackConfig("gradient-ascent", 0.1).colluding
  assert not AttackConfig("random-update", 0.1).colluding


def test_malicious_set_is_a_fixed_fraction_drawn_from_the_seed():
  a = attacks.malicious_set(np.random.default_rng(0), 1000, 0.1)
  assert a.sum() == 100 and a.dtype == bool
  np.testing.assert_array_equal(a, attacks.malicious_set(np.random.default_rng(0), 1000, 0.1))
  assert not np.array_equal(a, attacks.malicious_set(np.random.default_rng(1), 1000, 0.1))
  assert attacks.malicious_set(np.random.default_rng(0), 10, 0.0).sum() == 0


def _federation():
  rng = np.random.default_rng(0)
  y = rng.integers(0, 10, (6, 40)).astype(np.int32)
  y[5, 30:] = PADDING_LABEL  # a padded client
  x = rng.random((6, 40, 2, 2)).astype(np.float32) + 1.0  # no example is all zero
  x[5, 30:] = 0
  malicious = np.array([True, False, True, False, False, False])
  return x, y, malicious


def test_in_backdoor_relabels_only_the_malicious_source_examples():
  x, y, mal = _federation()
  cfg = AttackConfig("in-backdoor", 0.3, source=5, target=7)
  px, py = attacks.poison_labels(x, y, mal, cfg)
  np.testing.assert_array_equal(px, x)
  assert not (py[mal] == 5).any()
  np.testing.assert_array_equal(py[~mal], y[~mal])  # honest clients untouched
  flipped = mal[:, None] & (y == 5)
  assert flipped.any() and (py[flipped] == 7).all()
  assert (y == 5).any() and (y[mal] == 5).any()  # the inputs are not modified


def test_out_backdoor_removes_the_source_class_from_every_honest_client():
  x, y, mal = _federation()
  cfg = AttackConfig("out-backdoor", 0.3, source=0, target=1)
  px, py = attacks.poison_labels(x, y, mal, cfg)
  assert not (py == 0).any()  # honest: removed; malicious: relabelled
  for k in range(6):
    real = py[k] != PADDING_LABEL
    count = int(real.sum())
    assert real[:count].all() and not real[count:].any()  # examples first
    if mal[k]:
      np.testing.assert_array_equal(px[k], x[k])
      np.testing.assert_array_equal(py[k], np.where(y[k] == 0, 1, y[k]))
    else:
      kept = (y[k] != PADDING_LABEL) & (y[k] != 0)
      assert count == kept.sum()
      np.testing.assert_array_equal(py[k, :count], y[k, kept])  # same order
      np.testing.assert_array_equal(px[k, :count], x[k, kept])
      assert (px[k, count:] == 0).all()


def test_other_attacks_leave_the_data_alone():
  x, y, mal = _federation()
  px, py = attacks.poison_labels(x, y, mal, AttackConfig("random-update", 0.3))
  assert px is x and py is y


def test_metrics_use_the_source_class_test_images():
  labels = np.array([5, 5, 5, 5, 1, 2, 7, 7])
  preds = np.array([5, 7, 7, 3, 1, 2, 7, 0])
  cfg = AttackConfig("in-backdoor", 0.1, source=5, target=7)
  m = attacks.attack_metrics(preds, labels, cfg)
  assert m == {"accuracy": 4 / 8, "class_accuracy": 0.25, "attack_accuracy": 0.5}
  assert attacks.attack_metrics(preds, labels, None) == {"accuracy": 4 / 8}
