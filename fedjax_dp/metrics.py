"""Evaluation metrics: accuracy, balanced accuracy and AUROC.

UAI 2021, Appendix A.4: the medical task reports balanced accuracy (the mean
of the per-class recalls) and the area under the ROC curve.
"""

from __future__ import annotations

import numpy as np
from scipy import stats


def accuracy(labels: np.ndarray, predictions: np.ndarray) -> float:
  """Fraction of correct predictions.

  >>> accuracy([0, 1, 1, 2], [0, 1, 2, 2])
  0.75
  """
  return float(np.mean(np.asarray(labels) == np.asarray(predictions)))


def balanced_accuracy(labels: np.ndarray, predictions: np.ndarray) -> float:
  """Mean recall over the classes present in ``labels``.

  Always predicting the majority class of an unbalanced task:

  >>> balanced_accuracy([0, 0, 0, 1], [0, 0, 0, 0])
  0.5
  """
  labels, predictions = np.asarray(labels), np.asarray(predictions)
  recalls = [np.mean(predictions[labels == c] == c) for c in np.unique(labels)]
  return float(np.mean(recalls))


def auroc(labels: np.ndarray, scores: np.ndarray) -> float:
  """Area under the ROC curve of a binary task (Mann-Whitney U statistic).

  Ties in ``scores`` count one half, as in the trapezoidal ROC area.

  Raises:
    ValueError: If ``labels`` does not hold both classes 0 and 1.

  >>> auroc([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8])
  0.75
  >>> auroc([0, 1], [0.5, 0.5])
  0.5
  """
  labels = np.asarray(labels).astype(bool)
  scores = np.asarray(scores, dtype=np.float64)
  pos, neg = int(labels.sum()), int((~labels).sum())
  if pos == 0 or neg == 0:
    raise ValueError("AUROC needs both positive and negative labels")
  ranks = stats.rankdata(scores)  # average ranks for ties
  return float((ranks[labels].sum() - pos * (pos + 1) / 2) / (pos * neg))
