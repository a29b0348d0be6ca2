"""Implicit differentiation of an inner minimization (Shankar & Piratla, Eq. 3-4).

A bilevel problem trains outer parameters φ through the solution of an inner problem,

    θ*(φ) = argmin_θ L_aux(θ, φ),        minimize over φ:  L_prim(θ*(φ), φ).

At a minimum, `∇_θ L_aux(θ*, φ) = 0`; differentiating that identity in φ (the implicit
function theorem) gives `dθ*/dφ = −H⁻¹ ∂²L_aux/∂θ∂φ`, `H = ∂²L_aux/∂θ²`, hence

    dL_prim/dφ = ∂_φ L_prim  −  (∂²L_aux/∂φ∂θ) · H⁻¹ · ∂_θ L_prim
                 (explicit)     (implicit term)

evaluated at whatever θ the inner optimizer reached. Nothing is differentiated through
the inner loop: its length costs no memory, and the gradient is exact only as far as θ
is a stationary point and the inverse-Hessian product is solved.

- `neumann_inverse_hvp`: the truncated von Neumann series
  `H⁻¹v ≈ α Σ_{k=0..K} (I − αH)^k v` (Lorraine, Vicol & Duvenaud 2020; the paper's
  choice): K Hessian-vector products. It converges when the eigenvalues of αH lie in
  (0, 2); truncated, it is a damped, always finite approximation, and for directions of
  negative or zero curvature (a non-convex inner problem, or a flat one) it grows at
  most linearly in K instead of blowing up like an exact inverse.
- `cg_inverse_hvp`: conjugate gradients on `(H + δI) w = v` (`jax.scipy.sparse.linalg.cg`,
  `num_terms` iterations at most): exact in as many steps as H has distinct eigenvalues
  when H is positive definite, unreliable when it is not (δ > 0 helps).
- `Neumann` and `ConjugateGradient`: the two solvers as values, each with one method
  `solve(hvp_fn, v) -> H⁻¹v`; any object with that method (`InverseHVPSolver`) is a
  solver too.
- `inverse_hvp`: `H⁻¹v` by any of these.
- `implicit_gradient(aux_loss, prim_loss, θ, φ, solver)`: the explicit and implicit
  terms above, separately (what the implicit objective logs), and their sum.
- `implicit_solution(aux_loss, solver)`: the same gradient as a `jax.custom_vjp`: an
  identity `θ ↦ θ` whose VJP w.r.t. φ (and any other argument of `L_aux`) is the
  implicit one, so `jax.grad(lambda φ: L_prim(implicit_solution(...)(θ, φ), φ))` is
  `dL_prim/dφ` and composes with anything else (in the style of jaxopt's `custom_root`,
  applied after the solve instead of around it).

Every Hessian product is forward-over-reverse (`jax.jvp` of `jax.grad` as in `diff.hvp`,
linearized once per solve): exact. The paper (and
E2E-SPEN before it) used finite differences of gradients, which `diff.hvp` keeps only
as a test oracle — a documented deviation.

All functions work on pytrees (`θ` and `φ` any pytrees of float arrays). Extra
arguments of `L_aux` in `implicit_solution` (the batch) may hold integer leaves: their
cotangents are `float0` zeros.
"""

from collections.abc import Callable
import dataclasses
from typing import Any
from typing import NamedTuple
from typing import Protocol

import jax
import jax.numpy as jnp

from energynets.diff.hvp import cross_hvp
from energynets.diff.hvp import tree_vdot

PyTree = Any

# Loop bodies unrolled at most this many iterations per loop iteration: small loops
# (the configs' K and T_inner) unroll fully, long ones stay quick to compile.
MAX_UNROLL = 16


def _check_solver_options(
  method: str, num_terms: int, alpha: float | None, damping: float, num_terms_name: str
) -> None:
  """The checks of the solver values' options.

  Args:
    method: `'neumann'` (K ≥ 0 terms, α > 0) or `'cg'` (K ≥ 1 iterations; α unused).
    num_terms: K, the number of Hessian-vector products.
    alpha: the Neumann scale α (None for CG).
    damping: δ, which must be ≥ 0.
    num_terms_name: how the message names K (e.g. `'CG max_iter'`).

  Raises:
    ValueError: one line naming the first bad option.
  """
  minimum = 0 if method == "neumann" else 1
  if num_terms < minimum:
    raise ValueError(f"{num_terms_name} must be >= {minimum}; got {num_terms}")
  if method == "neumann" and not (alpha is not None and alpha > 0):
    raise ValueError(f"the Neumann scale alpha must be > 0; got {alpha}")
  if damping < 0:
    raise ValueError(f"inverse-HVP damping must be >= 0; got {damping}")


class InverseHVPSolver(Protocol):
  """What solves `H w = v` for an implicit gradient: any object with this method.

  A solver that solves a damped system `(H + δI) w = v` also has a `damping` attribute
  δ, against which the implicit gradient measures the solve's residual (0 if absent).
  """

  def solve(self, hvp_fn: Callable[[PyTree], PyTree], v: PyTree) -> PyTree:
    """`H⁻¹v` (approximately) from `hvp_fn: u -> H u`; a pytree shaped like `v`."""


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class Neumann:
  """The truncated von Neumann series `α Σ_{k=0..K} (I − α(H + δI))^k v`.

  Attributes:
    num_terms: K ≥ 0, the number of Hessian-vector products (K = 0 gives `αv`).
    alpha: the preconditioning scale α > 0 (at most about 1/‖H‖: the series converges
      when the eigenvalues of α(H + δI) lie in (0, 2)).
    damping: δ ≥ 0.
  """

  num_terms: int = 10
  alpha: float = 1e-2
  damping: float = 0.0

  def __post_init__(self):
    _check_solver_options("neumann", self.num_terms, self.alpha, self.damping, "Neumann num_terms")

  def solve(self, hvp_fn: Callable[[PyTree], PyTree], v: PyTree) -> PyTree:
    """`neumann_inverse_hvp(hvp_fn, v)` with these options.

    Args:
      hvp_fn: `u -> H u` (a pytree map).
      v: the right-hand side, any pytree.

    Returns:
      A pytree shaped like `v`.
    """
    return neumann_inverse_hvp(
      hvp_fn, v, num_terms=self.num_terms, alpha=self.alpha, damping=self.damping
    )


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class ConjugateGradient:
  """Conjugate gradients on `(H + δI) w = v` from w = 0.

  Attributes:
    max_iter: the maximum number of CG iterations (one Hessian product each), ≥ 1.
    tol: the relative residual at which CG stops early.
    damping: δ ≥ 0 (CG needs H + δI positive definite to be reliable).
  """

  max_iter: int = 10
  tol: float = 1e-6
  damping: float = 0.0

  def __post_init__(self):
    _check_solver_options("cg", self.max_iter, None, self.damping, "CG max_iter")

  def solve(self, hvp_fn: Callable[[PyTree], PyTree], v: PyTree) -> PyTree:
    """`cg_inverse_hvp(hvp_fn, v)` with these options.

    Args:
      hvp_fn: `u -> H u` for a symmetric H.
      v: the right-hand side, any pytree.

    Returns:
      A pytree shaped like `v`.
    """
    return cg_inverse_hvp(hvp_fn, v, num_terms=self.max_iter, damping=self.damping, tol=self.tol)


def check_solver(solver: Any) -> None:
  """Refuses anything that is not an inverse-HVP solver value.

  Args:
    solver: `Neumann(...)`, `ConjugateGradient(...)` or any object with a
      `solve(hvp_fn, v)` method (`InverseHVPSolver`).

  Raises:
    TypeError: one line naming what was given (a name, a class, ...).
  """
  if isinstance(solver, type) or not callable(getattr(solver, "solve", None)):
    raise TypeError(
      f"expected an inverse-HVP solver (Neumann(...), ConjugateGradient(...) "
      f"or an object with solve(hvp_fn, v)); got {solver!r}"
    )


def _solver_damping(solver: InverseHVPSolver) -> float:
  return getattr(solver, "damping", 0.0)


def _axpy(a, x: PyTree, y: PyTree) -> PyTree:
  return jax.tree.map(lambda xi, yi: a * xi + yi, x, y)


def _damped(hvp_fn: Callable[[PyTree], PyTree], damping: float) -> Callable[[PyTree], PyTree]:
  if not damping:
    return hvp_fn
  return lambda v: _axpy(damping, v, hvp_fn(v))


def neumann_inverse_hvp(
  hvp_fn: Callable[[PyTree], PyTree],
  v: PyTree,
  *,
  num_terms: int,
  alpha: float,
  damping: float = 0.0,
) -> PyTree:
  """`α Σ_{k=0..K} (I − α(H + δI))^k v` with K = `num_terms` Hessian products.

  Args:
    hvp_fn: `u -> H u` for the Hessian H (a pytree map).
    v: the right-hand side, shaped like `hvp_fn`'s input.
    num_terms: K ≥ 0 (K = 0 gives `αv`, a scaled gradient).
    alpha: the preconditioning scale α > 0.
    damping: δ ≥ 0.
  """
  apply = _damped(hvp_fn, damping)

  def term(carry, _):
    power, total = carry
    power = _axpy(-alpha, apply(power), power)  # (I − αH) power
    return (power, jax.tree.map(jnp.add, total, power)), None

  # Unrolled (up to MAX_UNROLL terms per loop iteration): K is small, and XLA:CPU ran a
  # loop over an LSTM's Hessian products several times slower than the unrolled terms
  # (objectives/implicit/training.py).
  (_, total), _ = jax.lax.scan(
    term, (v, v), None, length=num_terms, unroll=max(1, min(num_terms, MAX_UNROLL))
  )
  return jax.tree.map(lambda t: alpha * t, total)


def cg_inverse_hvp(
  hvp_fn: Callable[[PyTree], PyTree],
  v: PyTree,
  *,
  num_terms: int,
  damping: float = 0.0,
  tol: float = 1e-6,
) -> PyTree:
  """`(H + δI)⁻¹ v` by at most `num_terms` conjugate-gradient iterations from 0.

  Args:
    hvp_fn: `u -> H u` for a symmetric H (positive definite for CG to be reliable).
    v: the right-hand side, any pytree (e.g. parameters, or outputs `[B, L]`).
    num_terms: the maximum number of CG iterations (one Hessian product each).
    damping: δ ≥ 0.
    tol: the relative residual at which CG stops early.

  Returns:
    A pytree shaped like `v`.
  """
  solution, _ = jax.scipy.sparse.linalg.cg(_damped(hvp_fn, damping), v, tol=tol, maxiter=num_terms)
  return solution


def inverse_hvp(
  hvp_fn: Callable[[PyTree], PyTree], v: PyTree, solver: InverseHVPSolver = Neumann()
) -> PyTree:
  """`H⁻¹ v` by `solver`.

  Args:
    hvp_fn: `u -> H u` (a pytree map, e.g. `lambda u: hvp(f, x, u)`).
    v: the right-hand side, any pytree.
    solver: a solver value (`Neumann`, `ConjugateGradient`, any `InverseHVPSolver`).

  Returns:
    A pytree shaped like `v`.

  Raises:
    TypeError: `solver` has no `solve` method.
  """
  check_solver(solver)
  return solver.solve(hvp_fn, v)


class ImplicitGradient(NamedTuple):
  """`dL_prim/dφ = explicit + implicit`, each shaped like φ.

  Attributes:
    value: `L_prim(θ, φ)`.
    total: `explicit + implicit`, the gradient to step on.
    explicit: `∂_φ L_prim` at fixed θ (all that alternating training, e.g. InfNet, uses).
    implicit: `−(∂²L_aux/∂φ∂θ) H⁻¹ ∂_θ L_prim`.
    prim_grad_theta: `∂_θ L_prim`, the right-hand side (zero means no implicit term).
    residual: `‖(H + δI) w − ∂_θ L_prim‖ / ‖∂_θ L_prim‖` for the solved w (one extra
      Hessian product): how well the inverse-HVP was solved.
    aux: what `prim_loss` returned beside its value when `has_aux` (else None).
  """

  value: jax.Array
  total: PyTree
  explicit: PyTree
  implicit: PyTree
  prim_grad_theta: PyTree
  residual: jax.Array
  aux: Any = None


def _solve(
  aux_at_phi: Callable[[PyTree], jax.Array], theta: PyTree, rhs: PyTree, solver: InverseHVPSolver
) -> tuple[PyTree, jax.Array]:
  """`(w, relative residual)` with `w ≈ (H + δI)⁻¹ rhs`, H the Hessian of `aux_at_phi`.

  The gradient is linearized once (`jax.linearize` of `jax.grad`: the forward-over-
  reverse of `hvp`, with the primal pass shared): each of the K + 1 products then costs
  one linear (tangent) pass and recomputes nothing that depends on θ alone or on
  neither (e.g. the energy's encoding of x).
  """
  _, hvp_fn = jax.linearize(jax.grad(aux_at_phi), theta)
  w = solver.solve(hvp_fn, rhs)
  err = jax.tree.map(jnp.subtract, _damped(hvp_fn, _solver_damping(solver))(w), rhs)
  norm = lambda t: jnp.sqrt(tree_vdot(t, t))
  rhs_norm = norm(rhs)
  residual = jnp.where(rhs_norm > 0, norm(err) / jnp.where(rhs_norm > 0, rhs_norm, 1.0), 0.0)
  return w, residual


def implicit_gradient(
  aux_loss: Callable[[PyTree, PyTree], jax.Array],
  prim_loss: Callable[[PyTree, PyTree], jax.Array],
  theta: PyTree,
  phi: PyTree,
  solver: InverseHVPSolver = Neumann(),
  *,
  has_aux: bool = False,
) -> ImplicitGradient:
  """The gradient of `φ ↦ L_prim(θ*(φ), φ)` at `θ ≈ θ*(φ)`, by Eq. 4.

  Args:
    aux_loss: `(θ, φ) -> scalar` L_aux, the inner objective θ minimizes.
    prim_loss: `(θ, φ) -> scalar` L_prim, the outer objective.
    theta: the inner solution reached (treated as θ*; no gradient flows through how).
    phi: the outer parameters.
    solver: the inverse-HVP solver, a value (`Neumann`, `ConjugateGradient`, any
      `InverseHVPSolver`).
    has_aux: `prim_loss` returns `(value, aux)` (as `jax.value_and_grad`'s `has_aux`).

  Returns:
    An `ImplicitGradient`.

  Raises:
    TypeError: `solver` has no `solve` method.
  """
  check_solver(solver)
  value, (prim_grad_theta, explicit) = jax.value_and_grad(
    prim_loss, argnums=(0, 1), has_aux=has_aux
  )(theta, phi)
  value, aux = value if has_aux else (value, None)
  w, residual = _solve(lambda t: aux_loss(t, phi), theta, prim_grad_theta, solver)
  cross = cross_hvp(lambda p, t: aux_loss(t, p), phi, theta, w)
  implicit = jax.tree.map(jnp.negative, cross)
  total = jax.tree.map(jnp.add, explicit, implicit)
  return ImplicitGradient(value, total, explicit, implicit, prim_grad_theta, residual, aux)


def implicit_solution(
  aux_loss: Callable[..., jax.Array], solver: InverseHVPSolver = Neumann()
) -> Callable[..., PyTree]:
  """`solution(θ, φ, *args) -> θ`, whose VJP is that of the inner argmin at θ.

  `aux_loss(θ, φ, *args)` is L_aux. The returned function is the identity on θ; its
  VJP against a cotangent `g` (= `∂_θ L_prim` when composed with L_prim) is zero for θ
  (the argmin does not depend on where the inner optimizer started) and
  `−∂/∂(φ, args) ⟨∇_θ L_aux(θ, φ, *args), H⁻¹ g⟩` for φ and the args.

  Args:
    aux_loss: `(θ, φ, *args) -> scalar`, the inner objective θ minimizes.
    solver: the inverse-HVP solver, a value (`Neumann`, `ConjugateGradient`, any
      `InverseHVPSolver`).

  Returns:
    `solution(θ, φ, *args) -> θ`.

  Raises:
    TypeError: `solver` has no `solve` method.
  """
  check_solver(solver)

  @jax.custom_vjp
  def solution(theta, phi, *args):
    return theta

  def fwd(theta, phi, *args):
    return theta, (theta, phi, args)

  def bwd(residuals, g):
    theta, phi, args = residuals
    w, _ = _solve(lambda t: aux_loss(t, phi, *args), theta, g, solver)
    cross_phi, cross_args = cross_hvp(
      lambda phi_args, t: aux_loss(t, phi_args[0], *phi_args[1]), (phi, args), theta, w
    )
    negate = lambda c: c if c.dtype == jax.dtypes.float0 else -c
    theta_bar = jax.tree.map(jnp.zeros_like, theta)
    return (theta_bar, jax.tree.map(negate, cross_phi), *jax.tree.map(negate, cross_args))

  solution.defvjp(fwd, bwd)
  return solution
