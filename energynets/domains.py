"""Output domains: the continuous relaxations that gradient-based inference searches.

A domain says where a relaxed output `y` lives and supplies every operation the
inference engine (`energynets.inference.gbi`) and the objectives need on it:

| domain    | y lives in                       | used for                                  |
|-----------|----------------------------------|-------------------------------------------|
| `Box`     | [0, 1] per coordinate            | multi-label, binary segmentation pixels   |
| `Simplex` | Δ^K per position (last axis = K) | tokens (POS, NER), multi-class pixels     |
| `Real`    | R per coordinate                 | denoising                                 |

All share one interface (arrays carry a leading batch axis `B` and any trailing
shape; for `Simplex` the last axis holds the K classes of one position):

- `project(y)`: Euclidean projection onto the domain;
- `mirror_step(y, grad, lr)`: one entropic mirror-descent step
  (Simplex: `softmax(log y − η g)`; Box, per coordinate: `σ(logit y − η g)`;
  Real: `y − η g`);
- `to_logits(y)` / `from_logits(z)`: the unconstrained parametrization
  (Box: logit/sigmoid, Simplex: log/softmax, Real: identity);
- `entropy(y) -> [B]`: summed over all non-batch axes (Box: binary entropy per
  coordinate, Simplex: categorical entropy per position, Real: 0);
- `decode(y, threshold)`: a discrete output (Box: `y >= threshold`, the convention
  of `metrics.binarize`; Simplex: one-hot argmax; Real: identity), in `y.dtype` so
  that it can be scored by the same energy;
- `uniform_init(shape, dtype)`: the maximum-entropy starting point (Box 0.5,
  Simplex 1/K; Real 0).

Every logarithm sees `y` clipped to `[eps, 1 − eps]` (`[eps, 1]` on the simplex), so
boundary points (exact 0/1, one-hot decodings, projected iterates) give finite
logits, entropies and gradients.

Domains are frozen dataclasses registered as *static* pytrees: they hash and
compare by class and `eps` (so `Box() != Simplex()` and a jit cache never confuses
them) and can be passed to jitted functions either as static arguments or as
ordinary arguments (they have no array leaves).
"""

import dataclasses
from typing import Protocol

import jax
import jax.numpy as jnp

# Keeps logs and logits finite; 1 − 1e-6 is still distinct from 1 in float32.
DEFAULT_EPS = 1e-6
"""The default clip `eps` of every domain's logarithms (see the module docstring)."""

__all__ = ["DEFAULT_EPS", "Box", "Domain", "Real", "Simplex"]


class Domain(Protocol):
  """The interface shared by `Box`, `Simplex` and `Real`."""

  # Read-only, so the frozen dataclasses implement it.
  @property
  def eps(self) -> float:
    """The clip of every logarithm's argument (`DEFAULT_EPS` unless given)."""

  def project(self, y: jax.Array) -> jax.Array: ...

  def mirror_step(self, y: jax.Array, grad: jax.Array, lr: jax.Array | float) -> jax.Array: ...

  def to_logits(self, y: jax.Array) -> jax.Array: ...

  def from_logits(self, z: jax.Array) -> jax.Array: ...

  def entropy(self, y: jax.Array) -> jax.Array: ...

  def decode(self, y: jax.Array, threshold: float = 0.5) -> jax.Array: ...

  def uniform_init(self, shape: tuple[int, ...], dtype=jnp.float32) -> jax.Array: ...


def _sum_non_batch(v: jax.Array) -> jax.Array:
  """`[B, ...] -> [B]`."""
  return jnp.sum(v.reshape(v.shape[0], -1), axis=-1)


def _check_batched(y: jax.Array, min_ndim: int = 1) -> None:
  if y.ndim < min_ndim:
    raise ValueError(
      f"expected an array with a leading batch axis and at least "
      f"{min_ndim} dims; got shape {y.shape}"
    )


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class Box:
  """`[0, 1]` per coordinate: independent binary variables (multi-label, pixels)."""

  eps: float = DEFAULT_EPS

  def _clip(self, y: jax.Array) -> jax.Array:
    return jnp.clip(y, self.eps, 1.0 - self.eps)

  def project(self, y: jax.Array) -> jax.Array:
    """Clips to `[0, 1]`; any shape."""
    return jnp.clip(y, 0.0, 1.0)

  def mirror_step(self, y: jax.Array, grad: jax.Array, lr: jax.Array | float) -> jax.Array:
    """`σ(logit y − η g)`: entropic mirror descent on each coordinate's 2-simplex.

    Computed as `y e^{−ηg} / (y e^{−ηg} + 1 − y)` (SPEN §2, "normalizing over each
    coordinate"), divided through by `e^{−ηg}` where `ηg < 0`, so that the exponent is
    never positive (no overflow) and one exp replaces the logit form's two logs and exp
    (5x faster on CPU; the step is most of a GBI step's time, benchmarks/suite.py). `y`
    is clipped to `[eps, 1 − eps]` first, as `to_logits` does, so that a coordinate at 0
    or 1 can still move.
    """
    y = self._clip(y)
    a = lr * grad
    # e^{−|a|}, written with a branch per sign so that its derivative at a = 0 is −1
    # (the derivative of |a| there would be 0).
    t = jnp.exp(jnp.where(a >= 0, -a, a))
    return jnp.where(a >= 0, y * t / (y * t + (1.0 - y)), y / (y + (1.0 - y) * t))

  def to_logits(self, y: jax.Array) -> jax.Array:
    y = self._clip(y)
    return jnp.log(y) - jnp.log1p(-y)

  def from_logits(self, z: jax.Array) -> jax.Array:
    return jax.nn.sigmoid(z)

  def entropy(self, y: jax.Array) -> jax.Array:
    """`[B, ...] -> [B]`: `−Σ y log y + (1−y) log(1−y)` over all non-batch axes."""
    _check_batched(y)
    # Weights are the unclipped y and each log's argument is clipped only from below,
    # so an exact 0/1 point has entropy exactly 0 and a finite gradient.
    h = -(
      y * jnp.log(jnp.clip(y, self.eps, 1.0))
      + (1.0 - y) * jnp.log(jnp.clip(1.0 - y, self.eps, 1.0))
    )
    return _sum_non_batch(h)

  def decode(self, y: jax.Array, threshold: float = 0.5) -> jax.Array:
    return (y >= threshold).astype(y.dtype)

  def uniform_init(self, shape: tuple[int, ...], dtype=jnp.float32) -> jax.Array:
    return jnp.full(shape, 0.5, dtype)


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class Simplex:
  """A probability simplex over the last axis at every position (`[..., K]`)."""

  eps: float = DEFAULT_EPS

  def project(self, y: jax.Array) -> jax.Array:
    """Euclidean projection of every `y[..., :]` onto Δ^K (sort-based, Duchi et al. 2008)."""
    k = y.shape[-1]
    u = -jnp.sort(-y, axis=-1)  # descending
    css = jnp.cumsum(u, axis=-1) - 1.0
    idx = jnp.arange(1, k + 1, dtype=y.dtype)
    support = u - css / idx > 0
    # The support is a prefix of the sorted order; its length rho is >= 1 always.
    rho = jnp.sum(support, axis=-1, keepdims=True)
    theta = jnp.take_along_axis(css, rho - 1, axis=-1) / rho.astype(y.dtype)
    return jnp.maximum(y - theta, 0.0)

  def mirror_step(self, y: jax.Array, grad: jax.Array, lr: jax.Array | float) -> jax.Array:
    """`softmax(log y − η g)` over the last axis (E2E-SPEN Eq. 7)."""
    return jax.nn.softmax(self.to_logits(y) - lr * grad, axis=-1)

  def to_logits(self, y: jax.Array) -> jax.Array:
    """`log y` (clipped): one representative of the logits, defined up to a constant."""
    return jnp.log(jnp.clip(y, self.eps, 1.0))

  def from_logits(self, z: jax.Array) -> jax.Array:
    return jax.nn.softmax(z, axis=-1)

  def entropy(self, y: jax.Array) -> jax.Array:
    """`[B, ..., K] -> [B]`: categorical entropy per position, summed over positions."""
    _check_batched(y, 2)
    h = -y * jnp.log(jnp.clip(y, self.eps, 1.0))
    return _sum_non_batch(h)

  def decode(self, y: jax.Array, threshold: float = 0.5) -> jax.Array:
    """One-hot argmax over the last axis; `threshold` is unused (interface parity)."""
    del threshold
    return jax.nn.one_hot(jnp.argmax(y, axis=-1), y.shape[-1], dtype=y.dtype)

  def uniform_init(self, shape: tuple[int, ...], dtype=jnp.float32) -> jax.Array:
    return jnp.full(shape, 1.0 / shape[-1], dtype)


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class Real:
  """Unconstrained real outputs (denoising): every operation is the Euclidean one."""

  eps: float = DEFAULT_EPS  # unused; kept so that all domains share one signature

  def project(self, y: jax.Array) -> jax.Array:
    return y

  def mirror_step(self, y: jax.Array, grad: jax.Array, lr: jax.Array | float) -> jax.Array:
    """With the Euclidean mirror map, mirror descent is plain gradient descent."""
    return y - lr * grad

  def to_logits(self, y: jax.Array) -> jax.Array:
    return y

  def from_logits(self, z: jax.Array) -> jax.Array:
    return z

  def entropy(self, y: jax.Array) -> jax.Array:
    _check_batched(y)
    return jnp.zeros(y.shape[:1], y.dtype)

  def decode(self, y: jax.Array, threshold: float = 0.5) -> jax.Array:
    del threshold
    return y

  def uniform_init(self, shape: tuple[int, ...], dtype=jnp.float32) -> jax.Array:
    """Zeros: Real has no uniform distribution; callers usually pass the noisy input."""
    return jnp.zeros(shape, dtype)
