"""Differentiable task scores `s(ȳ, y) ∈ [0, 1]` of a relaxed output against the gold one.

Value-regression objectives (SEAL's `regression`/`regression_s` loss-nets, DVN) regress
σ(−E(x, ȳ)) onto `s(ȳ, y)` (`soft_f1` for multi-label outputs, `soft_iou` for
segmentation masks); SEAL's margin loss-net may use `1 − s` as its cost Δ. A score is
a pure function

    score(y_soft [B, ...], y [B, ...]) -> [B]

that sums over every non-batch axis (labels `[B, L]`, tokens `[B, T, K]`, pixels
`[B, H, W]`), equals the reported metric on binary inputs, and is differentiable in
`y_soft` (jit/vmap/grad-safe).

`soft_f1` versus `energynets.metrics.soft_f1`: the metrics version smooths with an `eps`
(`(2Σyŷ + eps) / (Σy + Σŷ + eps)`), so it is off by up to `eps/(|y|+|ŷ|)` on binary
inputs and its gradient near empty gold is of order `1/eps`. Here the score is exact:
`2Σyŷ / (Σy + Σŷ)`, with the empty-gold-and-empty-prediction point (the only zero of
the denominator on `[0, 1]`) set to 1, as `metrics.example_f1` scores it. Near that
point, with empty gold, every non-zero ȳ scores exactly 0 with zero gradient: no
`1/eps` blow-up reaches an adversarial ascent that differentiates the score.
"""

from typing import Callable

import jax
import jax.numpy as jnp

Score = Callable[[jax.Array, jax.Array], jax.Array]


def _check_shapes(y_soft: jax.Array, y: jax.Array) -> None:
  if jnp.shape(y_soft) != jnp.shape(y) or jnp.ndim(y) < 2:
    raise ValueError(f"a score needs y_soft and y of the same batched shape [B, ...]; got "
                     f"{jnp.shape(y_soft)} and {jnp.shape(y)}")


def soft_f1(y_soft: jax.Array, y: jax.Array) -> jax.Array:
  """`[B, ...] x2 -> [B]`: per-example soft F1 `2 Σ ȳ·y / (Σ ȳ + Σ y)` (Gygli et al. 2017).

  On binary inputs it equals the example-F1 of `energynets.metrics.example_f1` per
  example, including its empty cases: empty gold and empty prediction score 1, empty
  gold with a non-empty prediction (or the reverse) 0.

  Args:
    y_soft: `[B, ...]` relaxed prediction in [0, 1].
    y: `[B, ...]` gold output in [0, 1] (binary in practice).

  Returns:
    `[B]` scores in [0, 1], summed over all non-batch axes. The gradient w.r.t.
    `y_soft` is that of the ratio except at the one point `Σȳ = Σy = 0`, where it is 0.
  """
  _check_shapes(y_soft, y)
  axes = tuple(range(1, jnp.ndim(y)))
  intersection = jnp.sum(y_soft * y, axis=axes)
  total = jnp.sum(y_soft, axis=axes) + jnp.sum(y, axis=axes)
  empty = total <= 0.0
  # The double `where` keeps the unselected branch finite, so its (masked) gradient
  # cannot turn into NaN at the empty point.
  ratio = 2.0 * intersection / jnp.where(empty, 1.0, total)
  return jnp.where(empty, jnp.ones_like(ratio), ratio)


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


SCORES: dict[str, Score] = {"soft_f1": soft_f1, "soft_iou": soft_iou}


def get_score(name: str | Score) -> Score:
  """The score called `name` (a key of `SCORES`), or `name` itself when it is a
  function `(y_soft, y) -> [B]`; ValueError naming an unknown name."""
  if callable(name):
    return name
  try:
    return SCORES[name]
  except KeyError:
    raise ValueError(f"unknown score {name!r}; expected one of {tuple(SCORES)}") from None
