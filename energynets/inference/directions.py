"""GBI's search directions: the gradient turned into a step direction, per example.

A direction is a value (`GBIConfig.direction`) in the style of an optax transformation,
with two methods:

- `init(z) -> state`: the state before the first step at the iterate `z` `[B, ...]`;
- `update(g, state) -> (d, state)`: the direction for the gradient `g` and the next state.

The library's three: `SGD()` (the gradient), `Momentum(momentum)` (heavy ball
`m ← μ m + g`, SPEN A.5: μ = 0.95) and `Adam(b1, b2, eps, eps_root)` (with bias
correction; SEAL's GBI baseline). Their state (`OptState`) is elementwise plus a
per-example step count, so no example's trajectory depends on which other examples
share its batch, and an example frozen at convergence does not advance its count.

Any hashable object with these methods is a direction (a frozen dataclass, as here): it
is static metadata of a jitted `GBIConfig`. Its state may be any pytree whose leaves
all have the batch axis first (`gbi_while` freezes converged examples leaf by leaf); the
adjoint strategy (`unrolled.HVPAdjoint`) differentiates its floating-point leaves.
"""

import dataclasses
from typing import Any
from typing import NamedTuple
from typing import Protocol

import jax
import jax.numpy as jnp

__all__ = ["Adam", "Direction", "Momentum", "OptState", "SGD", "expand", "PyTree"]

PyTree = Any


class Direction(Protocol):
  """A GBI search direction: any hashable object with these methods."""

  def init(self, z: jax.Array) -> PyTree:
    """The state before the first step at iterate `z` `[B, ...]` (leaves `[B, ...]`)."""

  def update(self, g: jax.Array, state: PyTree) -> tuple[jax.Array, PyTree]:
    """`(d, state)`: the direction for gradient `g` (like `z`) and the next state."""


class OptState(NamedTuple):
  """Per-example state of the library's directions; `mu`/`nu` have z's shape (None where
  unused), `count` is `[B]` int32."""

  mu: jax.Array | None
  nu: jax.Array | None
  count: jax.Array  # type: ignore[assignment]  # a field; shadowing tuple.count is intended


def expand(v: jax.Array, like: jax.Array) -> jax.Array:
  """`[B] -> [B, 1, ..., 1]` broadcastable against `like`."""
  return v.reshape(v.shape + (1,) * (like.ndim - v.ndim))


def _count(z: jax.Array) -> jax.Array:
  return jnp.zeros(z.shape[:1], jnp.int32)


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class SGD:
  """The gradient itself: `d = g`."""

  def init(self, z: jax.Array) -> OptState:
    """The state at iterate `z` `[B, ...]`: a step count only."""
    return OptState(None, None, _count(z))

  def update(self, g: jax.Array, state: OptState) -> tuple[jax.Array, OptState]:
    """`(g, state)` with the count advanced.

    Args:
      g: the gradient, like the iterate.
      state: the state after the previous step.

    Returns:
      `(d, state)`.
    """
    return g, OptState(None, None, state.count + 1)


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class Momentum:
  """Heavy ball: `m ← μ m + g`, `d = m` (SPEN A.5 uses μ = 0.95).

  Attributes:
    momentum: μ.
  """

  momentum: float = 0.95

  def init(self, z: jax.Array) -> OptState:
    """The state at iterate `z` `[B, ...]`: a zero momentum buffer."""
    return OptState(jnp.zeros_like(z), None, _count(z))

  def update(self, g: jax.Array, state: OptState) -> tuple[jax.Array, OptState]:
    """The new momentum buffer, which is also the direction.

    Args:
      g: the gradient, like the iterate.
      state: the state after the previous step.

    Returns:
      `(d, state)`.
    """
    assert state.mu is not None  # set by `init`
    mu = self.momentum * state.mu + g
    return mu, OptState(mu, None, state.count + 1)


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class Adam:
  """Adam with bias correction by each example's own step count.

  Attributes:
    b1, b2: the decay rates of the first and second moments.
    eps: added to the denominator's square root.
    eps_root: added inside the square root, so that differentiating through a zero
      second moment (e.g. a coordinate with zero gradient) stays finite, as in optax.
  """

  b1: float = 0.9
  b2: float = 0.999
  eps: float = 1e-8
  eps_root: float = 1e-16

  def init(self, z: jax.Array) -> OptState:
    """The state at iterate `z` `[B, ...]`: zero moments."""
    return OptState(jnp.zeros_like(z), jnp.zeros_like(z), _count(z))

  def update(self, g: jax.Array, state: OptState) -> tuple[jax.Array, OptState]:
    """The bias-corrected Adam direction.

    Args:
      g: the gradient, like the iterate.
      state: the state after the previous step.

    Returns:
      `(d, state)`.
    """
    assert state.mu is not None and state.nu is not None  # set by `init`
    count = state.count + 1
    mu = self.b1 * state.mu + (1.0 - self.b1) * g
    nu = self.b2 * state.nu + (1.0 - self.b2) * jnp.square(g)
    # Bias correction by each example's own count: frozen examples do not advance it.
    t = expand(count, g).astype(g.dtype)
    mu_hat = mu / (1.0 - self.b1**t)
    nu_hat = nu / (1.0 - self.b2**t)
    d = mu_hat / (jnp.sqrt(nu_hat + self.eps_root) + self.eps)
    return d, OptState(mu, nu, count)
