"""Task metrics and differentiable surrogates.

Three families live here:

* Reporting metrics (numpy, exact, validated inputs): example-F1, micro-F1,
  macro-F1 and Hamming loss for multi-label outputs, threshold tuning on the
  validation split, and `evaluate_multilabel`, which builds the flat
  `"<split>/<metric>"` results map of the design's results contract. They
  follow the project's metric protocol (DESIGN.md, "Metric protocol").
* Denoising (numpy): `psnr`, the mean over images of per-image PSNR in dB.
* Segmentation (numpy): `mean_iou` (mean over images of foreground IoU),
  `dataset_iou` (total intersection / total union) and `per_image_iou`.
* Differentiable surrogates (jax.numpy): `soft_f1` and `soft_iou`, per example,
  usable under `jit`, `vmap` and `grad` (SEAL/DVN scores, CD costs).

Conventions (every number in a table depends on these, so they are fixed here):

* Shapes: `y_true` and predictions are `[N, L]` (N examples, L labels).
* `binarize` predicts a label when `prob >= threshold`.
* Example-F1 of one example is `2|y ∧ ŷ| / (|y| + |ŷ|)`; an example with empty
  gold *and* empty prediction scores 1; empty gold with a non-empty prediction
  (or the reverse) scores 0. This equals scikit-learn's
  `f1_score(average='samples', zero_division=1.0)`.
* Micro-F1 is `2 TP / (2 TP + FP + FN)` over all label bits, and 1 when there
  is no gold and no predicted positive at all (`zero_division=1.0`).
* Macro-F1 is the unweighted mean over labels of the per-label F1; a label with
  no gold and no predicted positive scores `zero_division`, by default 1 (it
  was predicted perfectly, the same convention as the empty/empty example).
  Equals `f1_score(average='macro', zero_division=zero_division)`.
* Hamming loss is the fraction of wrong label bits (lower is better).
* All rates are fractions in [0, 1]; tables multiply by 100.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np

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
    "psnr",
    "soft_f1",
    "soft_iou",
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

_ArrayLike = Any  # np.ndarray, jax.Array, nested lists.


# --------------------------------------------------------------------------
# Input validation.
# --------------------------------------------------------------------------


def _first_index(mask: np.ndarray) -> tuple[int, ...]:
  return tuple(int(i) for i in np.argwhere(mask)[0])


def _as_2d(name: str, a: _ArrayLike) -> np.ndarray:
  a = np.asarray(a)
  if a.ndim != 2:
    raise ValueError(f"{name} must be a 2-D array [N, L]; got shape {a.shape}")
  if a.shape[0] == 0 or a.shape[1] == 0:
    raise ValueError(f"{name} must have at least one example and one label; "
                     f"got shape {a.shape}")
  if not (a.dtype == np.bool_ or np.issubdtype(a.dtype, np.integer)
          or np.issubdtype(a.dtype, np.floating)):
    raise ValueError(f"{name} must be numeric or boolean; got dtype {a.dtype}")
  return a


def _check_binary(name: str, a: _ArrayLike) -> np.ndarray:
  """Validates a {0,1} matrix [N, L] and returns it as a bool array."""
  a = _as_2d(name, a)
  if a.dtype == np.bool_:
    return a
  if np.issubdtype(a.dtype, np.floating):
    nan = np.isnan(a)
    if nan.any():
      raise ValueError(f"{name} contains NaN (first at index {_first_index(nan)})")
  bad = (a != 0) & (a != 1)
  if bad.any():
    idx = _first_index(bad)
    raise ValueError(f"{name} must be binary (0/1); found {a[idx]!r} at index {idx}")
  return a.astype(bool)


def _check_probs(name: str, p: _ArrayLike) -> np.ndarray:
  """Validates probabilities [N, L] in [0, 1] (no NaN) and returns them."""
  p = _as_2d(name, p)
  if p.dtype == np.bool_:
    return p.astype(np.float32)
  if np.issubdtype(p.dtype, np.floating):
    nan = np.isnan(p)
    if nan.any():
      raise ValueError(f"{name} contains NaN (first at index {_first_index(nan)})")
  bad = (p < 0) | (p > 1)
  if bad.any():
    idx = _first_index(bad)
    raise ValueError(f"{name} must be probabilities in [0, 1]; found {p[idx]!r} "
                     f"at index {idx}")
  return p


def _check_same_shape(name_a: str, a: np.ndarray, name_b: str, b: np.ndarray):
  if a.shape != b.shape:
    raise ValueError(f"shape mismatch: {name_a} has shape {a.shape} but {name_b} "
                     f"has shape {b.shape}")


def _check_gold_and_predicted(y_true: _ArrayLike, y_pred: _ArrayLike
                              ) -> tuple[np.ndarray, np.ndarray]:
  y = _check_binary("y_true", y_true)
  p = _check_binary("y_pred", y_pred)
  _check_same_shape("y_true", y, "y_pred", p)
  return y, p


def _check_threshold(threshold: float) -> float:
  t = float(threshold)
  if not 0.0 <= t <= 1.0:  # Also rejects NaN.
    raise ValueError(f"threshold must be in [0, 1]; got {threshold!r}")
  return t


def _check_grid(grid: Sequence[float]) -> np.ndarray:
  g = np.asarray(grid, dtype=np.float64)
  if g.ndim != 1 or g.size == 0:
    raise ValueError(f"threshold grid must be a non-empty 1-D sequence; got shape "
                     f"{g.shape}")
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


def binarize(probs: _ArrayLike, threshold: float = 0.5) -> np.ndarray:
  """Thresholds probabilities: a label is predicted when `prob >= threshold`.

  Args:
    probs: [N, L] probabilities in [0, 1].
    threshold: scalar in [0, 1].

  Returns:
    [N, L] bool array.
  """
  return _check_probs("probs", probs) >= _check_threshold(threshold)


def example_f1(y_true: _ArrayLike, y_pred: _ArrayLike) -> float:
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


def micro_f1(y_true: _ArrayLike, y_pred: _ArrayLike) -> float:
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


def macro_f1(y_true: _ArrayLike, y_pred: _ArrayLike,
             zero_division: float = 1.0) -> float:
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


def hamming_loss(y_true: _ArrayLike, y_pred: _ArrayLike) -> float:
  """Hamming loss: the fraction of the N·L label bits that are wrong.

  Args:
    y_true: [N, L] binary gold labels.
    y_pred: [N, L] binary predictions.

  Returns:
    A float in [0, 1]; lower is better.
  """
  y, p = _check_gold_and_predicted(y_true, y_pred)
  return _hamming(y, p)


def tune_threshold(y_val: _ArrayLike, probs_val: _ArrayLike,
                   grid: Sequence[float] = THRESHOLD_GRID) -> float:
  """The grid threshold that maximizes example-F1 on validation data.

  Ties (scores within 1e-12) go to the threshold closest to 0.5, the untuned
  default, so tuning moves away from 0.5 only when that strictly helps; if two
  tied values are equally close (e.g. 0.45 and 0.55) the smaller wins.

  Call this on the validation split only; `evaluate_multilabel` does so and
  then applies the result unchanged to test.

  Args:
    y_val: [N, L] binary validation labels.
    probs_val: [N, L] validation probabilities in [0, 1].
    grid: candidate thresholds, by default `THRESHOLD_GRID`.

  Returns:
    The chosen threshold, one of `grid`, as a Python float.
  """
  y = _check_binary("y_val", y_val)
  probs = _check_probs("probs_val", probs_val)
  _check_same_shape("y_val", y, "probs_val", probs)
  g = _check_grid(grid)
  scores = np.array([_example_f1_scores(y, probs >= t).mean() for t in g])
  tied = scores >= scores.max() - _TIE_ATOL
  # Round the distance so 0.45 and 0.55 count as equally close despite float
  # representation error; then lexsort: primary key distance, secondary value.
  dist = np.round(np.abs(g - 0.5), 9)
  candidates = np.flatnonzero(tied)
  order = np.lexsort((g[candidates], dist[candidates]))
  return float(g[candidates[order[0]]])


def multilabel_report(y_true: _ArrayLike, probs: _ArrayLike,
                      threshold: float) -> dict[str, float]:
  """All multi-label metrics at one threshold.

  Args:
    y_true: [N, L] binary gold labels.
    probs: [N, L] probabilities in [0, 1].
    threshold: decision threshold (`prob >= threshold` is positive).

  Returns:
    `{"example_f1", "micro_f1", "macro_f1", "hamming"}` -> float in [0, 1]
    (macro-F1 with the default `zero_division=1`).
  """
  y = _check_binary("y_true", y_true)
  p = _check_probs("probs", probs)
  _check_same_shape("y_true", y, "probs", p)
  pred = p >= _check_threshold(threshold)
  return {
      "example_f1": float(_example_f1_scores(y, pred).mean()),
      "micro_f1": _micro_f1(y, pred),
      "macro_f1": _macro_f1(y, pred, 1.0),
      "hamming": _hamming(y, pred),
  }


def evaluate_multilabel(
    *,
    val: tuple[_ArrayLike, _ArrayLike],
    test: tuple[_ArrayLike, _ArrayLike],
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
    y = _check_binary(f"{split} y_true", pair[0])
    p = _check_probs(f"{split} probs", pair[1])
    _check_same_shape(f"{split} y_true", y, f"{split} probs", p)
    splits[split] = (y, p)
  if splits["validation"][0].shape[1] != splits["test"][0].shape[1]:
    raise ValueError(
        f"validation and test disagree on the number of labels: "
        f"{splits['validation'][0].shape[1]} vs {splits['test'][0].shape[1]}")

  threshold = tune_threshold(*splits["validation"], grid=grid)
  results: dict[str, float] = {}
  for split, (y, p) in splits.items():
    for suffix, t in (("", threshold), ("@0.5", 0.5)):
      for metric, value in multilabel_report(y, p, t).items():
        results[f"{split}/{metric}{suffix}"] = value
  results["threshold"] = threshold
  return results


# --------------------------------------------------------------------------
# Image denoising (numpy).
# --------------------------------------------------------------------------


def psnr(clean: _ArrayLike, estimate: _ArrayLike, peak: float = 1.0) -> float:
  """Mean over images of the per-image PSNR `10 log10(peak² / MSE_i)`, in dB.

  Per-image PSNR averaged over the set is the usual denoising report (and what
  `skimage.metrics.peak_signal_noise_ratio(..., data_range=peak)` gives for one
  image); it is not the PSNR of the pooled MSE, which weights badly denoised
  images less. The project's images are in [0, 1] with peak 1 (for depth: the
  full depth range), i.e. the 8-bit convention with peak 255 divided by 255.
  Estimates are not clipped here; clip before calling if the method should be.
  An image reproduced exactly has PSNR +inf, and so then does the mean.

  Args:
    clean: [N, H, W] (or [N, ...]) ground-truth images; a 2-D array is one image.
    estimate: denoised images, the same shape as `clean`.
    peak: the maximum possible value range (> 0).

  Returns:
    The mean PSNR in dB, a Python float.
  """
  y = np.asarray(clean, np.float64)
  e = np.asarray(estimate, np.float64)
  _check_same_shape("clean", y, "estimate", e)
  if y.ndim < 2 or y.size == 0:
    raise ValueError(f"psnr needs images [N, H, W] or one image [H, W]; got shape {y.shape}")
  if not np.isfinite(y).all() or not np.isfinite(e).all():
    raise ValueError("psnr inputs must be finite")
  peak = float(peak)
  if not peak > 0:  # Also rejects NaN.
    raise ValueError(f"peak must be > 0; got {peak}")
  if y.ndim == 2:
    y, e = y[None], e[None]
  mse = np.mean((y - e).reshape(len(y), -1) ** 2, axis=1)
  with np.errstate(divide="ignore"):
    return float(np.mean(10.0 * np.log10(peak**2 / mse)))


# --------------------------------------------------------------------------
# Differentiable surrogates (jax.numpy).
# --------------------------------------------------------------------------


def _soft_inputs(y_true, y_soft):
  y_soft = jnp.asarray(y_soft)
  # Compute in at least float32: bf16 sums over ~1000 labels lose the score.
  dtype = jnp.promote_types(y_soft.dtype, jnp.float32)
  y_true = jnp.asarray(y_true, dtype=dtype)
  y_soft = y_soft.astype(dtype)
  if y_true.shape != y_soft.shape:
    raise ValueError(f"shape mismatch: y_true has shape {y_true.shape} but y_soft "
                     f"has shape {y_soft.shape}")
  return y_true, y_soft


def _check_eps(eps) -> None:
  # A traced eps cannot be checked; a concrete one must make empty/empty = 1.
  if isinstance(eps, (int, float)) and not eps > 0:
    raise ValueError(f"eps must be > 0 (it defines the empty/empty score); got {eps}")


def soft_f1(y_true: _ArrayLike, y_soft: _ArrayLike, eps: float = 1e-7,
            axis: int | tuple[int, ...] = -1) -> jnp.ndarray:
  """Per-example soft F1, `(2 Σ y·ŷ + eps) / (Σ y + Σ ŷ + eps)`.

  `eps` makes the empty/empty case (Σy = Σŷ = 0) score exactly 1, matching
  `example_f1`; on binary inputs it differs from the exact F1 by at most
  `eps / (|y| + |ŷ|)` otherwise. Near empty gold the score falls from 1 to ~0
  within Σŷ ≈ eps, so its gradient there is of order 1/eps, as the discrete
  metric's jump implies; keep eps small unless that steepness matters.

  Pure jax.numpy: works under `jit`, `vmap` and `grad`.

  Args:
    y_true: [B, L] gold labels (binary or soft), any shape equal to `y_soft`.
    y_soft: [B, L] relaxed prediction in [0, 1].
    eps: positive smoothing constant.
    axis: axes summed over (the label axis; e.g. `(-2, -1)` for [B, H, W]).

  Returns:
    [B] scores in [0, 1] (the input shape without `axis`).
  """
  _check_eps(eps)
  y_true, y_soft = _soft_inputs(y_true, y_soft)
  inter = jnp.sum(y_true * y_soft, axis=axis)
  total = jnp.sum(y_true, axis=axis) + jnp.sum(y_soft, axis=axis)
  return (2.0 * inter + eps) / (total + eps)


def soft_iou(y_true: _ArrayLike, y_soft: _ArrayLike, eps: float = 1e-7,
             axis: int | tuple[int, ...] | None = None) -> jnp.ndarray:
  """Per-example soft IoU, `(Σ y·ŷ + eps) / (Σ y + Σ ŷ − Σ y·ŷ + eps)`.

  The product form of intersection over union: on binary inputs it is
  `|y ∧ ŷ| / |y ∨ ŷ|` (up to eps), and since `y + ŷ − yŷ = 1 − (1−y)(1−ŷ) ≥ 0`
  on [0, 1] the denominator never goes negative. Empty/empty scores 1 via
  `eps`, as in `soft_f1`. Works under `jit`, `vmap` and `grad`.

  The two arguments play symmetric roles (the formula is symmetric in y and ŷ),
  so `soft_iou(pred, gold)` and `soft_iou(gold, pred)` are the same number.
  With binary gold it equals SEAL's Eq. 10, `Σ min(ŷ, y) / Σ max(ŷ, y)` (for
  y ∈ {0, 1}: min(ŷ, y) = ŷy and max(ŷ, y) = y + ŷ − ŷy); the two differ only
  when both arguments are soft.

  Args:
    y_true: [B, ...] gold labels (binary or soft), any shape equal to `y_soft`:
      [B, L] label vectors, [B, H, W] masks.
    y_soft: [B, ...] relaxed prediction in [0, 1].
    eps: positive smoothing constant.
    axis: axes summed over; None (default): every non-batch axis, one score
      per example whatever its shape (a [B, L] input: the label axis); a 1-D
      input is one example (e.g. under `vmap`) and is summed whole.

  Returns:
    [B] scores in [0, 1] (the input shape without `axis`).
  """
  _check_eps(eps)
  y_true, y_soft = _soft_inputs(y_true, y_soft)
  if axis is None:
    axis = tuple(range(1, y_soft.ndim)) if y_soft.ndim > 1 else -1
  inter = jnp.sum(y_true * y_soft, axis=axis)
  union = jnp.sum(y_true, axis=axis) + jnp.sum(y_soft, axis=axis) - inter
  return (inter + eps) / (union + eps)


# --------------------------------------------------------------------------
# Binary segmentation (numpy): mean per-image IoU and dataset IoU.
#
# A mask is [N, ...] (N images, usually [N, H, W]); every non-batch axis is
# a pixel axis. Foreground is predicted where `prob >= threshold` (as in
# `binarize`). The IoU of one image is |pred ∧ gold| / |pred ∨ gold|.
# Convention (DESIGN.md: "mean over test images of foreground IoU at 0.5"):
# an image with empty gold and empty prediction scores 1 (the prediction is
# exactly right; sklearn's `jaccard_score(..., zero_division=1.0)`), empty
# gold with a non-empty prediction scores 0. The Weizmann horse splits have no
# empty gold mask, so on them the convention never applies; it is fixed here
# so that crops or other data cannot silently change the metric.
# --------------------------------------------------------------------------


def _as_masks(name: str, a: _ArrayLike) -> np.ndarray:
  """[N, ...] with at least one pixel axis -> [N, P] (P pixels per image)."""
  a = np.asarray(a)
  if a.ndim < 2:
    raise ValueError(f"{name} must be masks [N, H, W] (or [N, ...]); got shape {a.shape}")
  return a.reshape(a.shape[0], -1) if a.ndim > 2 else a


def _check_masks(pred_probs: _ArrayLike, gold: _ArrayLike, threshold: float
                 ) -> tuple[np.ndarray, np.ndarray]:
  """Validated (predicted foreground, gold foreground), bool [N, P] each."""
  p, g = np.asarray(pred_probs), np.asarray(gold)
  _check_same_shape("pred_probs", p, "gold", g)
  probs = _check_probs("pred_probs", _as_masks("pred_probs", p))
  return probs >= _check_threshold(threshold), _check_binary("gold", _as_masks("gold", g))


def _iou_per_image(pred: np.ndarray, gold: np.ndarray) -> np.ndarray:
  """[N] IoU of bool masks [N, P]; empty/empty -> 1."""
  inter = np.count_nonzero(pred & gold, axis=1)
  union = np.count_nonzero(pred | gold, axis=1)
  return np.where(union == 0, 1.0, inter / np.maximum(union, 1))


def per_image_iou(pred_probs: _ArrayLike, gold: _ArrayLike,
                  threshold: float = 0.5) -> np.ndarray:
  """Foreground IoU of each image, `|ŷ ∧ y| / |ŷ ∨ y|` with `ŷ = pred_probs >= threshold`.

  Empty gold and empty prediction score 1 (see the convention above).

  Args:
    pred_probs: [N, H, W] (or [N, ...]) foreground probabilities in [0, 1].
    gold: binary masks of the same shape.
    threshold: decision threshold in [0, 1].

  Returns:
    [N] float64 scores in [0, 1].
  """
  return _iou_per_image(*_check_masks(pred_probs, gold, threshold))


def mean_iou(pred_probs: _ArrayLike, gold: _ArrayLike, threshold: float = 0.5) -> float:
  """Mean over images of the foreground IoU: the segmentation headline metric.

  What the SEAL and DVN papers report for Weizmann horses ("mean image IoU").
  An image with empty gold and empty prediction scores 1; empty gold with any
  predicted foreground scores 0.

  Args:
    pred_probs: [N, H, W] (or [N, ...]) foreground probabilities in [0, 1].
    gold: binary masks of the same shape.
    threshold: foreground where `prob >= threshold`.

  Returns:
    A float in [0, 1].
  """
  return float(per_image_iou(pred_probs, gold, threshold).mean())


def dataset_iou(pred_probs: _ArrayLike, gold: _ArrayLike, threshold: float = 0.5) -> float:
  """Dataset-level foreground IoU: total intersection / total union over all images.

  Unlike `mean_iou` it weighs images by their union's size (large horses count
  more). With no foreground anywhere, in gold or prediction, it is 1.

  Args:
    pred_probs: [N, H, W] (or [N, ...]) foreground probabilities in [0, 1].
    gold: binary masks of the same shape.
    threshold: foreground where `prob >= threshold`.

  Returns:
    A float in [0, 1].
  """
  pred, g = _check_masks(pred_probs, gold, threshold)
  union = np.count_nonzero(pred | g)
  return 1.0 if union == 0 else float(np.count_nonzero(pred & g) / union)


__all__ += ["per_image_iou", "mean_iou", "dataset_iou"]


# --------------------------------------------------------------------------
# Sequence labeling (numpy / Python): token accuracy and entity span F1.
#
# Tags are strings: 'O' or '<P>-<TYPE>', P in {B, I} (IOB2) or {B, I, E, S}
# (BIOES). Chunks follow conlleval exactly (the rules of conlleval.pl's
# startOfChunk / endOfChunk, with the S- rules every BIOES port of it adds,
# as seqeval's default mode does), also on ill-formed sequences:
#
# * a chunk ends before O, B-, S-, a tag of another type, or after E- / S-;
# * a chunk starts at B- or S-, and also at an I- or E- that follows O, E-,
#   S- or a tag of another type (so `O I-PER` is a PER chunk, not an error).
#
# On IOB2 tags these are exactly conlleval.pl's rules. Sentence boundaries
# end every chunk. Spans are `(type, start, end)` with `end` exclusive.
# --------------------------------------------------------------------------

# Tag prefixes allowed by each span scheme.
SPAN_SCHEMES: dict[str, frozenset[str]] = {
    "iob2": frozenset("BI"),
    "bioes": frozenset("BIES"),
}
"""The tag prefixes each span scheme allows: `'iob2'` B/I, `'bioes'` B/I/E/S."""


class SpanScores(NamedTuple):
  """Micro-averaged span scores, fractions in [0, 1]."""
  precision: float
  recall: float
  f1: float


def token_accuracy(gold: _ArrayLike, pred: _ArrayLike, mask: _ArrayLike) -> float:
  """Fraction of real tokens (mask True) whose predicted tag id equals the gold one.

  Padding positions are ignored whatever ids they hold, so padded batches of
  any length give the same number as the unpadded sentences.

  Args:
    gold: [N, T] integer tag ids.
    pred: [N, T] integer tag ids.
    mask: [N, T] bool (or 0/1), True on real tokens.

  Returns:
    A float in [0, 1].
  """
  g, p, m = np.asarray(gold), np.asarray(pred), np.asarray(mask)
  for name, a in (("gold", g), ("pred", p)):
    if not np.issubdtype(a.dtype, np.integer):
      raise ValueError(f"{name} must hold integer tag ids; got dtype {a.dtype}")
  _check_same_shape("gold", g, "pred", p)
  _check_same_shape("gold", g, "mask", m)
  if m.dtype != np.bool_:
    if not np.issubdtype(m.dtype, np.integer) or ((m != 0) & (m != 1)).any():
      raise ValueError(f"mask must be boolean or 0/1; got dtype {m.dtype}")
    m = m.astype(bool)
  num_tokens = np.count_nonzero(m)
  if num_tokens == 0:
    raise ValueError("mask selects no tokens: token accuracy is undefined")
  return float(np.count_nonzero((g == p) & m) / num_tokens)


def _split_tag(tag: str, scheme: str) -> tuple[str, str]:
  """'B-PER' -> ('B', 'PER'); 'O' -> ('O', ''). Rejects tags outside `scheme`."""
  if tag == "O":
    return "O", ""
  prefix, sep, kind = str(tag).partition("-")
  if not sep or not kind or prefix not in SPAN_SCHEMES[scheme]:
    allowed = "/".join(sorted(SPAN_SCHEMES[scheme]))
    raise ValueError(f"{tag!r} is not a {scheme} tag: expected 'O' or "
                     f"'<{allowed}>-<TYPE>'")
  return prefix, kind


def _chunk_ends(prev: str, prev_type: str, tag: str, tag_type: str) -> bool:
  return prev != "O" and (prev in "ES" or tag in "BSO" or prev_type != tag_type)


def _chunk_starts(prev: str, prev_type: str, tag: str, tag_type: str) -> bool:
  return tag != "O" and (tag in "BS" or prev in "OES" or prev_type != tag_type)


def extract_spans(tags: Sequence[str], scheme: str = "iob2"
                  ) -> list[tuple[str, int, int]]:
  """The chunks of one tag sequence, with conlleval semantics (see above).

  Ill-formed sequences are not errors: like conlleval, `O I-PER I-PER` has the
  chunk ('PER', 1, 3) and `B-PER I-LOC` has two chunks. (seqeval's strict
  mode would drop such chunks instead; its default mode agrees with this.)

  Args:
    tags: one sentence's tags, e.g. ['B-PER', 'I-PER', 'O'].
    scheme: 'iob2' or 'bioes'; a tag with another prefix raises ValueError.

  Returns:
    `(type, start, end)` spans in order, `end` exclusive: tags[start:end].
  """
  if scheme not in SPAN_SCHEMES:
    raise ValueError(f"unknown tagging scheme {scheme!r}; expected one of "
                     f"{sorted(SPAN_SCHEMES)}")
  if isinstance(tags, str):
    raise ValueError(f"tags must be a sequence of tags, not the string {tags!r}")
  spans = []
  prev, prev_type, start = "O", "", 0
  parsed = [_split_tag(t, scheme) for t in tags] + [("O", "")]  # "O" flushes the end.
  for i, (tag, tag_type) in enumerate(parsed):
    if _chunk_ends(prev, prev_type, tag, tag_type):
      spans.append((prev_type, start, i))
    if _chunk_starts(prev, prev_type, tag, tag_type):
      start = i
    prev, prev_type = tag, tag_type
  return spans


def span_f1(gold_seqs: Sequence[Sequence[str]], pred_seqs: Sequence[Sequence[str]],
            scheme: str = "iob2") -> SpanScores:
  """Entity precision, recall and F1: micro over all spans, exact span and type.

  What conlleval reports (as fractions, not percentages): a predicted chunk is
  correct when a gold chunk of the same sentence has the same start, end and
  type. With no predicted chunks precision is 0, with no gold chunks recall is
  0, and F1 is 0 when both are 0 (conlleval's and seqeval's convention).

  Args:
    gold_seqs: one tag sequence per sentence.
    pred_seqs: predicted tag sequences, the same lengths as `gold_seqs`.
    scheme: 'iob2' or 'bioes', the scheme of both.

  Returns:
    `SpanScores(precision, recall, f1)`.
  """
  if isinstance(gold_seqs, str) or isinstance(pred_seqs, str):
    raise ValueError("gold_seqs and pred_seqs must be sequences of tag sequences")
  if len(gold_seqs) != len(pred_seqs):
    raise ValueError(f"{len(gold_seqs)} gold sentences but {len(pred_seqs)} predicted")
  num_gold = num_pred = num_correct = 0
  for i, (gold, pred) in enumerate(zip(gold_seqs, pred_seqs)):
    if isinstance(gold, str) or isinstance(pred, str):
      raise ValueError(f"sentence {i} is a string, not a tag sequence: pass one list "
                       f"of tags per sentence")
    if len(gold) != len(pred):
      raise ValueError(f"sentence {i}: {len(gold)} gold tags but {len(pred)} predicted")
    g, p = set(extract_spans(gold, scheme)), set(extract_spans(pred, scheme))
    num_gold += len(g)
    num_pred += len(p)
    num_correct += len(g & p)
  precision = num_correct / num_pred if num_pred else 0.0
  recall = num_correct / num_gold if num_gold else 0.0
  f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
  return SpanScores(precision, recall, f1)


__all__ += ["SPAN_SCHEMES", "SpanScores", "token_accuracy", "extract_spans", "span_f1"]
