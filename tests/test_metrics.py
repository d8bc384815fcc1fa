"""Accuracy, balanced accuracy and AUROC against direct definitions."""

import numpy as np
import pytest

from fedjax_dp import metrics


def test_accuracy_and_balanced_accuracy():
  y = np.array([0, 0, 0, 0, 1, 1])
  p = np.array([0, 0, 0, 0, 0, 1])
  assert metrics.accuracy(y, p) == pytest.approx(5 / 6)
  assert metrics.balanced_accuracy(y, p) == pytest.approx((1.0 + 0.5) / 2)


def test_auroc_equals_the_pairwise_definition():
  rng = np.random.default_rng(0)
  y = rng.integers(0, 2, 300)
  s = np.round(rng.normal(size=300) + y, 1)  # rounding creates ties
  pos, neg = s[y == 1], s[y == 0]
  pairs = (pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean()
  assert metrics.auroc(y, s) == pytest.approx(pairs, rel=1e-12)
  assert metrics.auroc(y, -s) == pytest.approx(1 - pairs, rel=1e-12)
  with pytest.raises(ValueError):
    metrics.auroc(np.ones(4), np.arange(4))
