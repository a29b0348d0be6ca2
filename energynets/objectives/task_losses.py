"""Task-loss surrogates Δ(ŷ, y): differentiable stand-ins for the Hamming loss.

A surrogate is a value: a callable `(y_hat, y) -> per-coordinate terms` (shaped like
`y`), which `task_loss` sums over every output coordinate but the batch axis (labels, or
pixels). The library's:

- `Squared()`: Σ(ŷ−y)²;
- `Log(eps)`: −Σ[y log ŷ + (1−y) log(1−ŷ)] with ŷ clipped to [ε, 1−ε] (the clip bounds Δ
  by −log ε per coordinate and keeps every gradient finite);
- `L1()`: Σ|ŷ−y| (for binary y the exact multilinear extension of Hamming).

A surrogate of your own is any callable of that shape (a frozen dataclass keeps it
hashable, so objectives that hold it stay usable as static jit arguments). SSVM's
loss-augmented inference, E2E's per-iterate loss, the inference network's margin and
SEAL's margin costs use them.
"""

from collections.abc import Callable
import dataclasses

import jax
import jax.numpy as jnp

from energynets.objectives import outputs

__all__ = [
  "check_surrogate",
  "DEFAULT_SURROGATE_EPS",
  "L1",
  "Log",
  "Squared",
  "structured_task_loss",
  "Surrogate",
  "task_loss",
  "task_loss_table",
]

DEFAULT_SURROGATE_EPS = 1e-3

Surrogate = Callable[[jax.Array, jax.Array], jax.Array]
"""`(y_hat, y) -> terms`: Δ's term for each output coordinate, shaped like `y`."""


@dataclasses.dataclass(frozen=True)
class Squared:
  """Δ = Σ(ŷ−y)²."""

  def __call__(self, y_hat: jax.Array, y: jax.Array) -> jax.Array:
    """`(ŷ − y)²` per coordinate."""
    return jnp.square(y_hat - y)


@dataclasses.dataclass(frozen=True)
class Log:
  """Δ = −Σ[y log ŷ + (1−y) log(1−ŷ)], ŷ clipped to [ε, 1−ε].

  Attributes:
    eps: the clip ε (bounds Δ by −log ε per coordinate).
  """

  eps: float = DEFAULT_SURROGATE_EPS

  def __call__(self, y_hat: jax.Array, y: jax.Array) -> jax.Array:
    """The clipped binary cross-entropy per coordinate."""
    p = jnp.clip(y_hat, self.eps, 1.0 - self.eps)
    return -(y * jnp.log(p) + (1.0 - y) * jnp.log1p(-p))


@dataclasses.dataclass(frozen=True)
class L1:
  """Δ = Σ|ŷ−y|."""

  def __call__(self, y_hat: jax.Array, y: jax.Array) -> jax.Array:
    """`|ŷ − y|` per coordinate."""
    return jnp.abs(y_hat - y)


def check_surrogate(surrogate: Surrogate) -> None:
  """Refuses a surrogate that is not callable (e.g. a name).

  Raises:
    TypeError: one line naming what was given.
  """
  if not callable(surrogate):
    raise TypeError(
      f"a surrogate is a callable (y_hat, y) -> terms such as Squared(), "
      f"Log() or L1(), not {surrogate!r}"
    )


def task_loss(y_hat: jax.Array, y: jax.Array, surrogate: Surrogate = Squared()) -> jax.Array:
  """`[B, ...] x2 -> [B]`: the differentiable surrogate Δ(ŷ, y), summed over all but the
  batch axis (labels, or pixels of an image)."""
  check_surrogate(surrogate)
  v = surrogate(y_hat, y)
  return jnp.sum(v, axis=tuple(range(1, v.ndim)))


def task_loss_table(
  candidates: jax.Array, y: jax.Array, surrogate: Surrogate = Squared()
) -> jax.Array:
  """`[B, C]`: Δ(c, y_b) for every example `y [B, L]` and binary candidate
  `candidates [C, L]`.

  Δ is a sum over labels, so on c ∈ {0, 1}^L it is affine in c:
  `Σ_i δ(0, y_i) + Σ_i c_i (δ(1, y_i) − δ(0, y_i))`, one matmul for all pairs.
  """
  check_surrogate(surrogate)
  at_zero = surrogate(jnp.zeros_like(y), y)
  at_one = surrogate(jnp.ones_like(y), y)
  return jnp.sum(at_zero, axis=-1)[:, None] + (at_one - at_zero) @ candidates.T


def structured_task_loss(domain, y_hat: jax.Array, y: jax.Array, surrogate: Surrogate) -> jax.Array:
  """`task_loss` over real positions only: on the Simplex (sequences) the padded tokens
  of y (all-zero rows) are excluded (`outputs.mask_token_padding`), which the relaxed
  ŷ there (a point of the simplex, moved only by GBI's entropy) would otherwise add."""
  return task_loss(outputs.for_domain(domain).mask_padding(y_hat, y), y, surrogate)
