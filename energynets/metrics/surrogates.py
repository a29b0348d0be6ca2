"""Differentiable surrogates of the reporting metrics (jax.numpy).

`soft_f1` and `soft_iou` score relaxed predictions per example and work under `jit`,
`vmap` and `grad` (SEAL/DVN scores, CD costs). On binary inputs they match the exact
host-side metrics (exactly at their default `eps = 0`, otherwise up to the smoothing
constant `eps`).
"""

from __future__ import annotations

import jax.numpy as jnp

from energynets.metrics._checks import ArrayLike

__all__ = ["soft_f1", "soft_iou"]


def _soft_inputs(y_true, y_soft):
  y_soft = jnp.asarray(y_soft)
  # Compute in at least float32: bf16 sums over ~1000 labels lose the score.
  dtype = jnp.promote_types(y_soft.dtype, jnp.float32)
  y_true = jnp.asarray(y_true, dtype=dtype)
  y_soft = y_soft.astype(dtype)
  if y_true.shape != y_soft.shape:
    raise ValueError(
      f"shape mismatch: y_true has shape {y_true.shape} but y_soft has shape {y_soft.shape}"
    )
  return y_true, y_soft


def _check_eps(eps, allow_zero: bool = False) -> None:
  # A traced eps cannot be checked; a concrete one must make empty/empty = 1.
  if isinstance(eps, (int, float)) and not (eps > 0 or (allow_zero and eps == 0)):
    raise ValueError(
      f"eps must be {'>=' if allow_zero else '>'} 0 (it defines the empty/empty score); got {eps}"
    )


def _overlap_ratio(y_soft, y, eps, axis, terms):
  """`(num + eps) / (den + eps)` per example, `(num, den) = terms(Σŷ·y, Σŷ + Σy)`.

  At `eps = 0` (a concrete zero) the exact ratio in the inputs' dtype, 1 where the
  denominator vanishes (empty gold and prediction); otherwise the smoothed ratio in at
  least float32.
  """
  _check_eps(eps, allow_zero=True)
  if axis is None:
    axis = tuple(range(1, jnp.ndim(y_soft))) if jnp.ndim(y_soft) > 1 else -1
  if isinstance(eps, (int, float)) and eps == 0:
    if jnp.shape(y_soft) != jnp.shape(y):
      raise ValueError(
        f"shape mismatch: y_soft has shape {jnp.shape(y_soft)} but y has shape {jnp.shape(y)}"
      )
    num, den = terms(
      jnp.sum(y_soft * y, axis=axis), jnp.sum(y_soft, axis=axis) + jnp.sum(y, axis=axis)
    )
    empty = den <= 0.0
    # The double `where` keeps the unselected branch finite, so its (masked) gradient
    # cannot turn into NaN at the empty point.
    ratio = num / jnp.where(empty, 1.0, den)
    return jnp.where(empty, jnp.ones_like(ratio), ratio)
  y, y_soft = _soft_inputs(y, y_soft)
  num, den = terms(
    jnp.sum(y * y_soft, axis=axis), jnp.sum(y, axis=axis) + jnp.sum(y_soft, axis=axis)
  )
  return (num + eps) / (den + eps)


def soft_f1(
  y_soft: ArrayLike, y: ArrayLike, eps: float = 0.0, axis: int | tuple[int, ...] | None = None
) -> jnp.ndarray:
  """Per-example soft F1, `(2 Σ ŷ·y + eps) / (Σ ŷ + Σ y + eps)` (Gygli et al. 2017).

  The argument order is the library's `(y_hat, y)`: a task score
  `s(y_soft, y) -> [B]` (`objectives.scores`, DVN, SEAL).

  `eps = 0` (default): the exact ratio `2Σŷy / (Σŷ + Σy)`, computed in the inputs'
  dtype, with the empty-gold-and-empty-prediction point (the only zero of the
  denominator on [0, 1]) set to 1, as `example_f1` scores it. On binary inputs it
  equals `example_f1` per example; with empty gold every non-zero ŷ scores exactly 0
  with zero gradient (no `1/eps` blow-up reaches an ascent that differentiates it).
  The gradient is that of the ratio except at the empty point, where it is 0.

  `eps > 0`: the smoothed ratio, computed in at least float32; empty/empty scores 1
  through `eps`, and on binary inputs it differs from the exact F1 by at most
  `eps / (|y| + |ŷ|)`. Near empty gold the score falls from 1 to ~0 within Σŷ ≈ eps,
  so its gradient there is of order 1/eps.

  Pure jax.numpy: works under `jit`, `vmap` and `grad`.

  Args:
    y_soft: `[B, ...]` relaxed prediction in [0, 1].
    y: `[B, ...]` gold output in [0, 1] (binary in practice), shaped like `y_soft`.
    eps: non-negative smoothing constant.
    axis: axes summed over; None (default): every non-batch axis (a 1-D input is one
      example, e.g. under `vmap`, and is summed whole).

  Returns:
    `[B]` scores in [0, 1] (the input shape without `axis`).

  Raises:
    ValueError: shapes that differ, or a negative eps.
  """
  return _overlap_ratio(y_soft, y, eps, axis, lambda inter, total: (2.0 * inter, total))


def soft_iou(
  y_soft: ArrayLike, y: ArrayLike, eps: float = 0.0, axis: int | tuple[int, ...] | None = None
) -> jnp.ndarray:
  """Per-example soft IoU, `(Σ ŷ·y + eps) / (Σ ŷ + Σ y − Σ ŷ·y + eps)`.

  The segmentation score of DVN (Gygli et al. 2017) and SEAL (Eq. 10, written there as
  `Σ min(ŷ, y) / Σ max(ŷ, y)`, which is this for binary gold y; the two differ only when
  both arguments are soft). The argument order is the library's `(y_hat, y)`, as
  `soft_f1`: a task score `s(y_soft, y) -> [B]` (`objectives.scores`, DVN, SEAL); the
  formula is symmetric in its two arguments. Since `ŷ + y − ŷy = 1 − (1−ŷ)(1−y) ≥ 0` on
  [0, 1], the denominator never goes negative.

  `eps = 0` (default): the exact ratio, computed in the inputs' dtype, with the
  empty-gold-and-empty-prediction point (the only zero of the denominator on [0, 1])
  set to 1; on binary inputs it equals `|y ∧ ŷ| / |y ∨ ŷ|` (`per_image_iou`). The
  gradient is that of the ratio except at the empty point, where it is 0 (as
  `soft_f1`). `eps > 0`: the smoothed ratio, computed in at least float32; empty/empty
  scores 1 through `eps`.

  Pure jax.numpy: works under `jit`, `vmap` and `grad`.

  Args:
    y_soft: `[B, ...]` relaxed prediction in [0, 1] (`[B, L]` label vectors, `[B, H, W]`
      masks).
    y: `[B, ...]` gold output in [0, 1] (binary in practice), shaped like `y_soft`.
    eps: non-negative smoothing constant.
    axis: axes summed over; None (default): every non-batch axis (a 1-D input is one
      example, e.g. under `vmap`, and is summed whole).

  Returns:
    `[B]` scores in [0, 1] (the input shape without `axis`).

  Raises:
    ValueError: shapes that differ, or a negative eps.
  """
  return _overlap_ratio(y_soft, y, eps, axis, lambda inter, total: (inter, total - inter))
