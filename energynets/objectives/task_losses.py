"""Task-loss surrogates Δ(ŷ, y): differentiable stand-ins for the Hamming loss.

Δ is summed over every output coordinate but the batch axis (labels, or pixels):
`'squared'` Σ(ŷ−y)²; `'log'` −Σ[y log ŷ + (1−y) log(1−ŷ)] with ŷ clipped to [ε, 1−ε]
(the clip bounds Δ by −log ε per coordinate and keeps every gradient finite);
`'l1'` Σ|ŷ−y| (for binary y the exact multilinear extension of Hamming). SSVM's
loss-augmented inference, E2E's per-iterate loss, the inference network's margin and
SEAL's margin costs use them.
"""

import jax
import jax.numpy as jnp

from energynets.objectives import outputs

SURROGATES = ("squared", "log", "l1")
DEFAULT_SURROGATE_EPS = 1e-3


def _elementwise_loss(y_hat: jax.Array, y: jax.Array, surrogate: str,
                      eps: float) -> jax.Array:
  """The surrogate's term for each output coordinate (Δ is their sum)."""
  if surrogate == "squared":
    return jnp.square(y_hat - y)
  if surrogate == "l1":
    return jnp.abs(y_hat - y)
  if surrogate == "log":
    p = jnp.clip(y_hat, eps, 1.0 - eps)
    return -(y * jnp.log(p) + (1.0 - y) * jnp.log1p(-p))
  raise ValueError(f"unknown surrogate {surrogate!r}; expected one of {SURROGATES}")


def task_loss(y_hat: jax.Array, y: jax.Array, surrogate: str = "squared",
              eps: float = DEFAULT_SURROGATE_EPS) -> jax.Array:
  """`[B, ...] x2 -> [B]`: the differentiable surrogate Δ(ŷ, y), summed over all but the
  batch axis (labels, or pixels of an image)."""
  v = _elementwise_loss(y_hat, y, surrogate, eps)
  return jnp.sum(v, axis=tuple(range(1, v.ndim)))


def task_loss_table(candidates: jax.Array, y: jax.Array, surrogate: str = "squared",
                    eps: float = DEFAULT_SURROGATE_EPS) -> jax.Array:
  """`[B, C]`: Δ(c, y_b) for every example `y [B, L]` and binary candidate
  `candidates [C, L]`.

  Δ is a sum over labels, so on c ∈ {0, 1}^L it is affine in c:
  `Σ_i δ(0, y_i) + Σ_i c_i (δ(1, y_i) − δ(0, y_i))`, one matmul for all pairs.
  """
  at_zero = _elementwise_loss(jnp.zeros_like(y), y, surrogate, eps)
  at_one = _elementwise_loss(jnp.ones_like(y), y, surrogate, eps)
  return jnp.sum(at_zero, axis=-1)[:, None] + (at_one - at_zero) @ candidates.T


def structured_task_loss(domain, y_hat: jax.Array, y: jax.Array, surrogate: str,
                         eps: float = DEFAULT_SURROGATE_EPS) -> jax.Array:
  """`task_loss` over real positions only: on the Simplex (sequences) the padded tokens
  of y (all-zero rows) are excluded (`outputs.mask_token_padding`), which the relaxed
  ŷ there (a point of the simplex, moved only by GBI's entropy) would otherwise add."""
  return task_loss(outputs.for_domain(domain).mask_padding(y_hat, y), y, surrogate, eps)
