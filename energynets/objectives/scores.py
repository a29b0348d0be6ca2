"""Differentiable task scores `s(ȳ, y) ∈ [0, 1]` of a relaxed output against the gold one.

Value-regression objectives (SEAL's `regression`/`regression_s` loss-nets, DVN) regress
σ(−E(x, ȳ)) onto `s(ȳ, y)` (`soft_f1` for multi-label outputs, `soft_iou` for
segmentation masks); SEAL's margin loss-net may use `1 − s` as its cost Δ. A score is
a pure function

    score(y_soft [B, ...], y [B, ...]) -> [B]

that sums over every non-batch axis (labels `[B, L]`, tokens `[B, T, K]`, pixels
`[B, H, W]`), equals the reported metric on binary inputs, and is differentiable in
`y_soft` (jit/vmap/grad-safe).

`soft_f1` is `energynets.metrics.soft_f1` at its default `eps = 0`: the exact
`2Σyŷ / (Σy + Σŷ)`, with the empty-gold-and-empty-prediction point (the only zero of
the denominator on `[0, 1]`) set to 1, as `metrics.example_f1` scores it. Near that
point, with empty gold, every non-zero ȳ scores exactly 0 with zero gradient: no
`1/eps` blow-up reaches an adversarial ascent that differentiates the score.

A score of your own is any function of that signature.
"""

from collections.abc import Callable

import jax
import jax.numpy as jnp

from energynets.metrics.surrogates import soft_f1

Score = Callable[[jax.Array, jax.Array], jax.Array]


def _check_shapes(y_soft: jax.Array, y: jax.Array) -> None:
  if jnp.shape(y_soft) != jnp.shape(y) or jnp.ndim(y) < 2:
    raise ValueError(
      f"a score needs y_soft and y of the same batched shape [B, ...]; got "
      f"{jnp.shape(y_soft)} and {jnp.shape(y)}"
    )


def soft_iou(y_soft: jax.Array, y: jax.Array) -> jax.Array:
  """`[B, ...] x2 -> [B]`: per-example soft IoU `Σ ȳ·y / (Σ ȳ + Σ y − Σ ȳ·y)`.

  The segmentation score of DVN (Gygli et al. 2017) and SEAL (Eq. 10, written there
  as `Σ min(ȳ, y) / Σ max(ȳ, y)`, which is this for binary gold y). On binary inputs
  it equals `energynets.metrics.per_image_iou`, including empty gold and empty
  prediction scoring 1 (the only zero of the denominator on [0, 1], since
  `ȳ + y − ȳy = 1 − (1 − ȳ)(1 − y) ≥ 0`).

  Args:
    y_soft: `[B, ...]` relaxed prediction in [0, 1] (masks `[B, H, W]`).
    y: `[B, ...]` gold output in [0, 1] (binary in practice).

  Returns:
    `[B]` scores in [0, 1], summed over all non-batch axes; the gradient is that of
    the ratio except at the empty point, where it is 0 (as `soft_f1`).
  """
  _check_shapes(y_soft, y)
  axes = tuple(range(1, jnp.ndim(y)))
  intersection = jnp.sum(y_soft * y, axis=axes)
  union = jnp.sum(y_soft, axis=axes) + jnp.sum(y, axis=axes) - intersection
  empty = union <= 0.0
  ratio = intersection / jnp.where(empty, 1.0, union)  # double `where`: see soft_f1
  return jnp.where(empty, jnp.ones_like(ratio), ratio)


__all__ = ["Score", "soft_f1", "soft_iou"]
