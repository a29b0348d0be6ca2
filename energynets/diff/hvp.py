"""Second-order products without materializing a Hessian.

Training through gradient-based inference (E2E-SPEN §3) differentiates a computation
that already contains `∇_y E`, so its backward pass needs products of second
derivatives of the energy with vectors. They are computed exactly by composing
JAX transforms (E2E-SPEN's "second" option; the paper itself used finite differences,
Domke 2012, which we keep only as a test oracle):

- `hvp(f, x, v)`: `∇²f(x) v`, forward-over-reverse (`jax.jvp` of `jax.grad`): one
  gradient evaluation carried with a tangent, about the cost of 2-3 gradients and no
  `[n, n]` matrix;
- `cross_hvp(f, phi, y, v)`: the mixed product `∂/∂φ ⟨∇_y f(φ, y), v⟩ = (∂²f/∂φ∂y) v`,
  the term through which a change of the energy's parameters moves the GBI iterates;
- `hvp_and_cross_hvp(f, phi, y, v)`: `∇_y f`, `∇²_yy f v` and `(∂²f/∂φ∂y) v` from one
  forward-over-reverse pass, what an adjoint step of unrolled GBI needs at each iterate;
- `finite_difference_hvp(f, x, v, eps)`: central differences of the gradient, a test
  oracle only (its error is O(eps²) truncation plus O(u/eps) rounding).

Everything works on pytrees: `x`, `phi`, `y` and `v` may be any pytree (`v` shaped
like the variable it multiplies), and `f` returns a scalar. Integer leaves of `phi`
(masks, lengths) are allowed: their "gradients" are `float0` zeros, as `jax.grad(...,
allow_int=True)` gives.
"""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

PyTree = Any


def hvp(f: Callable[[PyTree], jax.Array], x: PyTree, v: PyTree) -> PyTree:
  """`∇²f(x) v` for scalar `f`, by forward-over-reverse (`jax.jvp` of `jax.grad`).

  Args:
    f: `x -> scalar`, twice differentiable at `x`.
    x: the point (any pytree of float arrays).
    v: the direction, a pytree shaped like `x`.

  Returns:
    A pytree shaped like `x`.
  """
  return jax.jvp(jax.grad(f), (x,), (v,))[1]


def cross_hvp(
  f: Callable[[PyTree, PyTree], jax.Array], phi: PyTree, y: PyTree, v: PyTree
) -> PyTree:
  """`∂/∂φ ⟨∇_y f(φ, y), v⟩ = (∂²f/∂φ∂y) v`, a pytree shaped like `phi`.

  Defined as the VJP of `φ ↦ ∇_y f(φ, y)` against `v`. It is computed, by the symmetry
  of mixed partials (f twice continuously differentiable), as the directional
  derivative of `∇_φ f` along `v` in y: forward-over-reverse, the same cost as `hvp`,
  with no second reverse pass.

  Args:
    f: `(phi, y) -> scalar`.
    phi: the parameters (any pytree; integer leaves get `float0` zeros).
    y: the point.
    v: the direction, shaped like `y`.
  """
  return hvp_and_cross_hvp(f, phi, y, v)[2]


def hvp_and_cross_hvp(
  f: Callable[[PyTree, PyTree], jax.Array], phi: PyTree, y: PyTree, v: PyTree
) -> tuple[PyTree, PyTree, PyTree]:
  """`(∇_y f, ∇²_yy f v, (∂²f/∂φ∂y) v)` at `(phi, y)` from one forward-over-reverse pass.

  The adjoint of an unrolled GBI step needs all three at every iterate: the gradient
  (for the chain rule of non-identity coordinates, e.g. logit mode), the Hessian
  product (how the iterate's adjoint propagates to the previous iterate) and the mixed
  product (what the step contributes to the parameters' gradient). Taking the JVP of
  the joint gradient `(∇_φ f, ∇_y f)` along `(0, v)` gives the last two as tangents and
  the first as a primal, in one pass.

  Args:
    f: `(phi, y) -> scalar`.
    phi: the parameters (any pytree; integer leaves get `float0` zeros).
    y: the point (any pytree of float arrays).
    v: the direction, shaped like `y`.

  Returns:
    `(grad_y, hvp_y, cross)`: shaped like `y`, `y`, `phi`.
  """

  def joint_grad(y_):
    return jax.grad(f, argnums=(0, 1), allow_int=True)(phi, y_)

  (_, grad_y), (cross, hess_v) = jax.jvp(joint_grad, (y,), (v,))
  return grad_y, hess_v, cross


def finite_difference_hvp(
  f: Callable[[PyTree], jax.Array], x: PyTree, v: PyTree, eps: float = 1e-5
) -> PyTree:
  """`(∇f(x + εv) − ∇f(x − εv)) / 2ε`: a test oracle for `hvp`, never used in training.

  This is how E2E-SPEN (following Domke 2012) computed its Hessian-vector products.
  Use float64 for a tight check: in float32 the rounding error `~u‖∇f‖/ε` dominates
  for any `ε` small enough to make the truncation error negligible.
  """
  grad = jax.grad(f)
  shifted = lambda s: jax.tree.map(lambda a, b: a + s * eps * b, x, v)
  return jax.tree.map(lambda p, m: (p - m) / (2.0 * eps), grad(shifted(1.0)), grad(shifted(-1.0)))


def tree_vdot(a: PyTree, b: PyTree) -> jax.Array:
  """`Σ ⟨a_i, b_i⟩` over matching float leaves (a scalar)."""
  return sum(
    (jnp.vdot(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b))), jnp.zeros(())
  )
