"""Multi-label reporting metrics (numpy, exact, validated inputs).

Example-F1, micro-F1, macro-F1 and Hamming loss, threshold tuning on the validation
split, and `evaluate_multilabel`, which builds the flat `"<split>/<metric>"` results map
of the results contract. The conventions are those of `energynets.metrics`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from energynets.metrics._checks import ArrayLike
from energynets.metrics._checks import check_binary
from energynets.metrics._checks import check_probs
from energynets.metrics._checks import check_same_shape
from energynets.metrics._checks import check_threshold

__all__ = [
  "THRESHOLD_GRID",
  "binarize",
  "example_f1",
  "micro_f1",
  "macro_f1",
  "hamming_loss",
  "tune_threshold",
  "multilabel_report",
  "evaluate_multilabel",
]

# 0.05, 0.10, ..., 0.95. Rounded so each entry is the float nearest its
# two-decimal value (0.1 == 0.1, not 0.30000000000000004-style drift), which
# keeps the reported threshold printable and comparable with `==`.
THRESHOLD_GRID: tuple[float, ...] = tuple(round(0.05 * k, 2) for k in range(1, 20))
"""The decision thresholds 0.05, 0.10, ..., 0.95 that `tune_threshold` searches."""

# Scores within this distance are treated as tied in `tune_threshold`: equal
# F1 values reached through different summation orders may differ in the last
# ulps, and such noise must not override the documented tie rule.
_TIE_ATOL = 1e-12


def _check_gold_and_predicted(
  y_true: ArrayLike, y_pred: ArrayLike
) -> tuple[np.ndarray, np.ndarray]:
  y = check_binary("y_true", y_true)
  p = check_binary("y_pred", y_pred)
  check_same_shape("y_true", y, "y_pred", p)
  return y, p


def _check_grid(grid: Sequence[float]) -> np.ndarray:
  g = np.asarray(grid, dtype=np.float64)
  if g.ndim != 1 or g.size == 0:
    raise ValueError(f"threshold grid must be a non-empty 1-D sequence; got shape {g.shape}")
  if np.isnan(g).any() or (g < 0).any() or (g > 1).any():
    raise ValueError(f"threshold grid values must be in [0, 1]; got {list(grid)}")
  return g


# --------------------------------------------------------------------------
# Reporting metrics (numpy). The `_*` kernels take validated bool arrays so
# that `tune_threshold` validates once and then loops cheaply over the grid.
# --------------------------------------------------------------------------


def _example_f1_scores(y: np.ndarray, p: np.ndarray) -> np.ndarray:
  """Per-example F1 [N] of bool arrays [N, L], empty/empty -> 1."""
  tp = np.count_nonzero(y & p, axis=1)
  denom = np.count_nonzero(y, axis=1) + np.count_nonzero(p, axis=1)
  # denom == 0 only for empty gold and empty prediction: define as 1.
  return np.where(denom == 0, 1.0, 2.0 * tp / np.maximum(denom, 1))


def _micro_f1(y: np.ndarray, p: np.ndarray) -> float:
  tp = np.count_nonzero(y & p)
  denom = np.count_nonzero(y) + np.count_nonzero(p)  # = 2TP + FP + FN.
  return 1.0 if denom == 0 else float(2.0 * tp / denom)


def _macro_f1(y: np.ndarray, p: np.ndarray, zero_division: float) -> float:
  tp = np.count_nonzero(y & p, axis=0)
  denom = np.count_nonzero(y, axis=0) + np.count_nonzero(p, axis=0)
  per_label = np.where(denom == 0, zero_division, 2.0 * tp / np.maximum(denom, 1))
  return float(per_label.mean())


def _hamming(y: np.ndarray, p: np.ndarray) -> float:
  return float(np.count_nonzero(y != p) / y.size)


def binarize(probs: ArrayLike, threshold: float = 0.5) -> np.ndarray:
  """Thresholds probabilities: a label is predicted when `prob >= threshold`.

  Args:
    probs: [N, L] probabilities in [0, 1].
    threshold: scalar in [0, 1].

  Returns:
    [N, L] bool array.
  """
  return check_probs("probs", probs) >= check_threshold(threshold)


def example_f1(y_true: ArrayLike, y_pred: ArrayLike) -> float:
  """Example-based F1: mean over examples of `2|y ∧ ŷ| / (|y| + |ŷ|)`.

  An example with empty gold and empty prediction scores 1; empty gold with a
  non-empty prediction scores 0 (sklearn `average='samples'`,
  `zero_division=1.0`).

  Args:
    y_true: [N, L] binary gold labels.
    y_pred: [N, L] binary predictions.

  Returns:
    A float in [0, 1].
  """
  y, p = _check_gold_and_predicted(y_true, y_pred)
  return float(_example_f1_scores(y, p).mean())


def micro_f1(y_true: ArrayLike, y_pred: ArrayLike) -> float:
  """Micro-averaged F1, `2TP / (2TP + FP + FN)` over all label bits.

  Returns 1 when there are no gold and no predicted positives at all.

  Args:
    y_true: [N, L] binary gold labels.
    y_pred: [N, L] binary predictions.

  Returns:
    A float in [0, 1].
  """
  y, p = _check_gold_and_predicted(y_true, y_pred)
  return _micro_f1(y, p)


def macro_f1(y_true: ArrayLike, y_pred: ArrayLike, zero_division: float = 1.0) -> float:
  """Macro-averaged F1: unweighted mean over the L labels of per-label F1.

  A label with no gold and no predicted positive in the data has an undefined
  F1; it scores `zero_division`. The project default is 1 (the label was
  predicted perfectly, as for the empty/empty example in example-F1), which
  matches sklearn `f1_score(average='macro', zero_division=1.0)`. Pass 0 to
  reproduce sklearn's default behaviour (which scores such labels 0).

  Args:
    y_true: [N, L] binary gold labels.
    y_pred: [N, L] binary predictions.
    zero_division: score of a label that is absent from both gold and
      prediction.

  Returns:
    A float in [0, 1].
  """
  y, p = _check_gold_and_predicted(y_true, y_pred)
  zero_division = float(zero_division)
  if not 0.0 <= zero_division <= 1.0:
    raise ValueError(f"zero_division must be in [0, 1]; got {zero_division}")
  return _macro_f1(y, p, zero_division)


def hamming_loss(y_true: ArrayLike, y_pred: ArrayLike) -> float:
  """Hamming loss: the fraction of the N·L label bits that are wrong.

  Args:
    y_true: [N, L] binary gold labels.
    y_pred: [N, L] binary predictions.

  Returns:
    A float in [0, 1]; lower is better.
  """
  y, p = _check_gold_and_predicted(y_true, y_pred)
  return _hamming(y, p)


def tune_threshold(
  y_val: ArrayLike,
  probs_val: ArrayLike,
  grid: Sequence[float] = THRESHOLD_GRID,
  standard_errors: float = 0.0,
) -> float:
  """The grid threshold that maximizes example-F1 on validation data.

  Ties (scores within 1e-12) go to the threshold closest to 0.5, the untuned
  default, so tuning moves away from 0.5 only when that strictly helps; if two
  tied values are equally close (e.g. 0.45 and 0.55) the smaller wins. With
  `standard_errors` > 0 a threshold counts as tied with the best when its score is
  within that many standard errors of the best's, the standard error being that of
  the mean of their per-example F1 difference (1: the one-standard-error rule, which
  keeps 0.5 unless the validation rows show a gain beyond their noise).

  Call this on the validation split only; `evaluate_multilabel` does so and
  then applies the result unchanged to test.

  Args:
    y_val: [N, L] binary validation labels.
    probs_val: [N, L] validation probabilities in [0, 1].
    grid: candidate thresholds, by default `THRESHOLD_GRID`.
    standard_errors: how many standard errors below the best score still count as
      a tie (0: scores within 1e-12).

  Returns:
    The chosen threshold, one of `grid`, as a Python float.
  """
  y = check_binary("y_val", y_val)
  probs = check_probs("probs_val", probs_val)
  check_same_shape("y_val", y, "probs_val", probs)
  g = _check_grid(grid)
  if not standard_errors >= 0:
    raise ValueError(f"standard_errors must be >= 0; got {standard_errors}")
  per_example = np.stack([_example_f1_scores(y, probs >= t) for t in g])
  scores = per_example.mean(axis=1)
  margin = np.zeros_like(scores)
  if standard_errors and len(y) > 1:
    differences = per_example[np.argmax(scores)] - per_example
    margin = standard_errors * differences.std(axis=1, ddof=1) / np.sqrt(len(y))
  tied = scores >= scores.max() - margin - _TIE_ATOL
  # Round the distance so 0.45 and 0.55 count as equally close despite float
  # representation error; then lexsort: primary key distance, secondary value.
  dist = np.round(np.abs(g - 0.5), 9)
  candidates = np.flatnonzero(tied)
  order = np.lexsort((g[candidates], dist[candidates]))
  return float(g[candidates[order[0]]])


def multilabel_report(y_true: ArrayLike, probs: ArrayLike, threshold: float) -> dict[str, float]:
  """All multi-label metrics at one threshold.

  Args:
    y_true: [N, L] binary gold labels.
    probs: [N, L] probabilities in [0, 1].
    threshold: decision threshold (`prob >= threshold` is positive).

  Returns:
    `{"example_f1", "micro_f1", "macro_f1", "hamming"}` -> float in [0, 1]
    (macro-F1 with the default `zero_division=1`).
  """
  y = check_binary("y_true", y_true)
  p = check_probs("probs", probs)
  check_same_shape("y_true", y, "probs", p)
  pred = p >= check_threshold(threshold)
  return {
    "example_f1": float(_example_f1_scores(y, pred).mean()),
    "micro_f1": _micro_f1(y, pred),
    "macro_f1": _macro_f1(y, pred, 1.0),
    "hamming": _hamming(y, pred),
  }


def evaluate_multilabel(
  *,
  val: tuple[ArrayLike, ArrayLike],
  test: tuple[ArrayLike, ArrayLike],
  grid: Sequence[float] = THRESHOLD_GRID,
) -> dict[str, float]:
  """The multi-label part of the results contract (`results.json`).

  The threshold is tuned on `val` only and applied unchanged to both splits.
  The arguments are keyword-only so the two splits cannot be swapped by
  position.

  Args:
    val: `(y, probs)` of the validation split, each [N_val, L].
    test: `(y, probs)` of the test split, each [N_test, L].
    grid: thresholds searched by `tune_threshold`.

  Returns:
    A flat map with, for each split `s` in ("validation", "test"):
    `s/example_f1`, `s/micro_f1`, `s/macro_f1`, `s/hamming` at the tuned
    threshold and `s/example_f1@0.5`, `s/micro_f1@0.5`, `s/macro_f1@0.5`,
    `s/hamming@0.5` at 0.5; plus `"threshold"`, the tuned value. All values
    are fractions in [0, 1].
  """
  splits = {}
  for split, pair in (("validation", val), ("test", test)):
    if not isinstance(pair, (tuple, list)) or len(pair) != 2:
      raise ValueError(f"{split} must be a (y_true, probs) pair")
    y = check_binary(f"{split} y_true", pair[0])
    p = check_probs(f"{split} probs", pair[1])
    check_same_shape(f"{split} y_true", y, f"{split} probs", p)
    splits[split] = (y, p)
  if splits["validation"][0].shape[1] != splits["test"][0].shape[1]:
    raise ValueError(
      f"validation and test disagree on the number of labels: "
      f"{splits['validation'][0].shape[1]} vs {splits['test'][0].shape[1]}"
    )

  threshold = tune_threshold(*splits["validation"], grid=grid)
  results: dict[str, float] = {}
  for split, (y, p) in splits.items():
    for suffix, t in (("", threshold), ("@0.5", 0.5)):
      for metric, value in multilabel_report(y, p, t).items():
        results[f"{split}/{metric}{suffix}"] = value
  results["threshold"] = threshold
  return results
