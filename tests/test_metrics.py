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


def _roc_auc_trapezoid(y, s):
  """scikit-learn's roc_auc_score: the ROC curve over every distinct
  threshold (ties at one point), integrated with the trapezoidal rule."""
  order = np.argsort(-s, kind="stable")
  y, s = y[order], s[order]
  last = np.r_[np.nonzero(np.diff(s))[0], len(s) - 1]  # end of each tie group
  tps, fps = np.cumsum(y)[last], np.cumsum(1 - y)[last]
  tpr = np.r_[0, tps] / y.sum()
  fpr = np.r_[0, fps] / (1 - y).sum()
  return float(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2))


def test_binary_metrics_match_scikit_learn_style_references():
  """Thesis Sec. 8.4.2 on imbalanced labels (3% positive, as the medical
  data): balanced accuracy = (TPR + TNR) / 2 from the confusion matrix, and
  AUROC = the trapezoidal area under the ROC curve."""
  from fedjax_dp import simulation
  from fedjax_dp.models import medical_mlp
  rng = np.random.default_rng(1)
  y = (rng.random(5000) < 0.03).astype(np.int32)
  s = np.round(rng.normal(size=5000) + 1.2 * y, 2)
  p = (s > 0.8).astype(np.int32)
  tp, fn = np.sum((p == 1) & (y == 1)), np.sum((p == 0) & (y == 1))
  tn, fp = np.sum((p == 0) & (y == 0)), np.sum((p == 1) & (y == 0))
  assert metrics.balanced_accuracy(y, p) == pytest.approx((tp / (tp + fn) + tn / (tn + fp)) / 2)
  assert metrics.auroc(y, s) == pytest.approx(_roc_auc_trapezoid(y, s), rel=1e-12)
  # What a binary model's evaluation records, and a 10-class model's.
  got = simulation.evaluation_metrics(medical_mlp(), y, p, s)
  assert got == {"accuracy": pytest.approx(np.mean(y == p)),
                 "balanced_accuracy": metrics.balanced_accuracy(y, p),
                 "auroc": metrics.auroc(y, s)}
  # Why the medical runs are selected by it: predicting "survives" for
  # everyone is 97% accurate and no better than chance.
  none = np.zeros_like(y)
  assert metrics.accuracy(y, none) > 0.95 and metrics.balanced_accuracy(y, none) == 0.5
