"""GBI's parametrizations: the coordinates GBI optimizes and how a step moves in them.

A parametrization is a value (`GBIConfig.parametrization`) with three methods:

- `to_z(y, domain)`: the optimized variable z of a domain point y;
- `to_y(z, domain)`: the domain point that z stands for (the inverse of `to_z`);
- `update(z, d, lr, domain)`: the next z after a step of size `lr` along the search
  direction `d` (computed from the gradient w.r.t. z).

The library's three (SPEN §2, E2E-SPEN Eq. 7-8):

- `Projected()`: z = y, `y ← project(y − η d)` (Euclidean projected gradient);
- `Mirror()`:    z = y, `y ← domain.mirror_step(y, d, η)` (entropic mirror descent);
- `Logit()`:     z = `domain.to_logits(y)`, `z ← z − η d` (unconstrained logits, the form
  E2E-SPEN prefers for unrolled training).

Any hashable object with these methods is a parametrization (a frozen dataclass, as
here): it is static metadata of a jitted `GBIConfig`. One whose z is y itself may set the
class attribute `optimizes_y = True`, which lets the adjoint strategy
(`unrolled.HVPAdjoint`) skip the coordinate map's derivatives; without it the adjoint
differentiates `to_y` (exact for any parametrization, merely more work).
"""

import dataclasses
from typing import ClassVar
from typing import Protocol

import jax

__all__ = ["Logit", "Mirror", "Parametrization", "Projected", "optimizes_y"]


class Parametrization(Protocol):
  """The coordinates GBI optimizes: any hashable object with these methods."""

  def to_z(self, y: jax.Array, domain) -> jax.Array:
    """The optimized variable of the domain point `y` `[B, ...]`."""

  def to_y(self, z: jax.Array, domain) -> jax.Array:
    """The domain point that the optimized variable `z` stands for."""

  def update(self, z: jax.Array, d: jax.Array, lr: jax.Array | float, domain) -> jax.Array:
    """The next optimized variable after a step of size `lr` along direction `d`."""


class _DomainCoordinates:
  """Parametrizations that optimize the domain point itself (z = y)."""

  optimizes_y: ClassVar[bool] = True

  def to_z(self, y: jax.Array, domain) -> jax.Array:
    """`y` itself.

    Args:
      y: a domain point `[B, ...]`.
      domain: the output domain (unused).

    Returns:
      `y`.
    """
    del domain
    return y

  def to_y(self, z: jax.Array, domain) -> jax.Array:
    """`z` itself (the inverse of `to_z`).

    Args:
      z: the optimized variable, a domain point `[B, ...]`.
      domain: the output domain (unused).

    Returns:
      `z`.
    """
    del domain
    return z


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class Projected(_DomainCoordinates):
  """Euclidean projected gradient: `y ← domain.project(y − η d)`."""

  def update(self, z: jax.Array, d: jax.Array, lr: jax.Array | float, domain) -> jax.Array:
    """One projected step.

    Args:
      z: the iterate y `[B, ...]`.
      d: the search direction, like `z`.
      lr: the step size η.
      domain: the output domain (its `project`).

    Returns:
      The next iterate, in the domain.
    """
    return domain.project(z - lr * d)


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class Mirror(_DomainCoordinates):
  """Entropic mirror descent: `y ← domain.mirror_step(y, d, η)` (SPEN §2, E2E-SPEN Eq. 7).

  With a momentum or Adam direction, the direction replaces the gradient inside the
  mirror step.
  """

  def update(self, z: jax.Array, d: jax.Array, lr: jax.Array | float, domain) -> jax.Array:
    """One mirror step.

    Args:
      z: the iterate y `[B, ...]`.
      d: the search direction, like `z`.
      lr: the step size η.
      domain: the output domain (its `mirror_step`).

    Returns:
      The next iterate, in the domain.
    """
    return domain.mirror_step(z, d, lr)


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class Logit:
  """Gradient steps on the logits: `z ← z − η d`, `y = domain.from_logits(z)` (E2E-SPEN
  Eq. 8)."""

  optimizes_y: ClassVar[bool] = False

  def to_z(self, y: jax.Array, domain) -> jax.Array:
    """`domain.to_logits(y)`.

    Args:
      y: a domain point `[B, ...]`.
      domain: the output domain.

    Returns:
      The logits of `y`.
    """
    return domain.to_logits(y)

  def to_y(self, z: jax.Array, domain) -> jax.Array:
    """`domain.from_logits(z)`.

    Args:
      z: logits `[B, ...]`.
      domain: the output domain.

    Returns:
      The domain point of `z`.
    """
    return domain.from_logits(z)

  def update(self, z: jax.Array, d: jax.Array, lr: jax.Array | float, domain) -> jax.Array:
    """One unconstrained step on the logits.

    Args:
      z: the logits `[B, ...]`.
      d: the search direction, like `z`.
      lr: the step size η.
      domain: the output domain (unused).

    Returns:
      The next logits.
    """
    del domain
    return z - lr * d


def optimizes_y(parametrization) -> bool:
  """Whether `parametrization`'s optimized variable is the domain point itself."""
  return bool(getattr(parametrization, "optimizes_y", False))
