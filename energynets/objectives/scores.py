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
`soft_iou` is `energynets.metrics.soft_iou` at its default `eps = 0`, likewise exact.

A score of your own is any function of that signature.
"""

from collections.abc import Callable

import jax

from energynets.metrics.surrogates import soft_f1
from energynets.metrics.surrogates import soft_iou

Score = Callable[[jax.Array, jax.Array], jax.Array]

__all__ = ["Score", "check_weight", "soft_f1", "soft_iou"]


def check_weight(score: Score | None, weight: float) -> None:
  """Refuses a loss term `− weight · mean score(ȳ, y)` that is not one: a weight without
  a score, or a score without a positive weight.

  Raises:
    ValueError: naming the weight.
  """
  if score is None and weight:
    raise ValueError(f"score_weight={weight} needs a score to weigh")
  if score is not None and weight <= 0:
    raise ValueError(f"score_weight must be positive with a score; got {weight}")
