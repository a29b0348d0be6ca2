"""Image metrics (numpy): denoising PSNR and binary-segmentation IoU.

`psnr` is the mean over images of per-image PSNR in dB. Segmentation: `mean_iou` (mean
over images of foreground IoU), `dataset_iou` (total intersection / total union) and
`per_image_iou`.

A mask is [N, ...] (N images, usually [N, H, W]); every non-batch axis is a pixel axis.
Foreground is predicted where `prob >= threshold` (as in `binarize`). The IoU of one
image is |pred ∧ gold| / |pred ∨ gold|. Convention (docs/datasets.md: the mean over test images
of the foreground IoU at 0.5): an image with empty gold and empty prediction scores 1 (the
prediction is exactly right; sklearn's `jaccard_score(..., zero_division=1.0)`), empty
gold with a non-empty prediction scores 0. The Weizmann horse splits have no empty gold
mask, so on them the convention never applies; it is fixed here so that crops or other
data cannot silently change the metric.
"""

from __future__ import annotations

import numpy as np

from energynets.metrics._checks import ArrayLike
from energynets.metrics._checks import check_binary
from energynets.metrics._checks import check_probs
from energynets.metrics._checks import check_same_shape
from energynets.metrics._checks import check_threshold

__all__ = ["psnr", "per_image_iou", "mean_iou", "dataset_iou"]


def psnr(clean: ArrayLike, estimate: ArrayLike, peak: float = 1.0) -> float:
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
  check_same_shape("clean", y, "estimate", e)
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


def _as_masks(name: str, a: ArrayLike) -> np.ndarray:
  """[N, ...] with at least one pixel axis -> [N, P] (P pixels per image)."""
  a = np.asarray(a)
  if a.ndim < 2:
    raise ValueError(f"{name} must be masks [N, H, W] (or [N, ...]); got shape {a.shape}")
  return a.reshape(a.shape[0], -1) if a.ndim > 2 else a


def _check_masks(
  pred_probs: ArrayLike, gold: ArrayLike, threshold: float
) -> tuple[np.ndarray, np.ndarray]:
  """Validated (predicted foreground, gold foreground), bool [N, P] each."""
  p, g = np.asarray(pred_probs), np.asarray(gold)
  check_same_shape("pred_probs", p, "gold", g)
  probs = check_probs("pred_probs", _as_masks("pred_probs", p))
  return probs >= check_threshold(threshold), check_binary("gold", _as_masks("gold", g))


def _iou_per_image(pred: np.ndarray, gold: np.ndarray) -> np.ndarray:
  """[N] IoU of bool masks [N, P]; empty/empty -> 1."""
  inter = np.count_nonzero(pred & gold, axis=1)
  union = np.count_nonzero(pred | gold, axis=1)
  return np.where(union == 0, 1.0, inter / np.maximum(union, 1))


def per_image_iou(pred_probs: ArrayLike, gold: ArrayLike, threshold: float = 0.5) -> np.ndarray:
  """Foreground IoU of each image, `|ŷ ∧ y| / |ŷ ∨ y|` with `ŷ = pred_probs >= threshold`.

  Empty gold and empty prediction score 1 (the convention of this module).

  Args:
    pred_probs: [N, H, W] (or [N, ...]) foreground probabilities in [0, 1].
    gold: binary masks of the same shape.
    threshold: decision threshold in [0, 1].

  Returns:
    [N] float64 scores in [0, 1].
  """
  return _iou_per_image(*_check_masks(pred_probs, gold, threshold))


def mean_iou(pred_probs: ArrayLike, gold: ArrayLike, threshold: float = 0.5) -> float:
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


def dataset_iou(pred_probs: ArrayLike, gold: ArrayLike, threshold: float = 0.5) -> float:
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
