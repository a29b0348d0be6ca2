"""T unrolled GBI steps as a differentiable layer, with a choice of gradient strategy.

End-to-end SPEN training (Belanger, Yang & McCallum 2017, §3) treats `T` steps of
gradient-based inference as a feed-forward network from `(params, x, y0, η_{1..T})`
to the iterates `y_1 .. y_T`, and back-propagates a loss on them. `unrolled_gbi` runs
exactly `gbi.gbi_scan`'s trajectory (the same `init_state`/`gbi_step`, so the update
rules live only in `gbi.py`) and gets its vector-Jacobian product from a *strategy*: a
value called as `strategy(energy, params, x, y0, domain, config) -> (y_T, ys)`, in the
style of optimistix's `adjoint=`. Any object with that call signature is a strategy (a
user's own `jax.custom_vjp` plugs in by being passed); the library's are

- `Unrolled()`: reverse-mode AD through the `lax.scan` unroll. JAX
  stores every step's residuals (the energy's internals of each gradient evaluation)
  and differentiates the gradient computation itself (reverse-over-reverse).
- `Rematerialized()`: the same with `jax.checkpoint` on each step (E2E-SPEN
  §4.3: keep only the steps' inputs, recompute the energy's internals in the backward
  pass).
- `HVPAdjoint()` (`energynets.inference.adjoint`): a `jax.custom_vjp`
  whose forward pass keeps only the iterates and the direction state of each step and
  whose backward pass runs the reverse (adjoint) recursion explicitly, with one
  forward-over-reverse Hessian- and cross-Hessian-vector product of the energy per step;
  nothing of the energy's internals is stored.
- `Implicit(solver)`: no differentiation of the steps at all; `y_T` is treated as the
  minimizer of the final objective and gets the implicit-function-theorem gradient
  (see `Implicit`); the earlier iterates get none.

The first three give the same gradients (to rounding; tests/test_unrolled.py checks
them against each other and against finite differences) w.r.t. `params`, `x`, `y0` and
the step sizes `config.step_sizes`, for every parametrization (`Projected()`, `Mirror()`,
`Logit()`), direction (`SGD()`, `Momentum()`, `Adam()`) and domain, and the loss may depend on every
iterate (the per-iterate loss of E2E-SPEN Eq. 9). Where the update is not
differentiable (the clip of `projected` at the faces, Adam's square root at a zero
second moment), all three use the same one-sided derivative JAX defines for it.
`Implicit` agrees with them where the iterate has converged (tests/test_unrolled.py,
tests/test_e2e.py: a strongly convex energy against its closed-form minimizer).

Trade-offs (measured by benchmarks/e2e_gradients.py, results in
results/e2e/e2e_gradients.md): `'scan'` stores every step's residuals;
`'remat'` stores each step's input carry and recomputes the step in the backward pass;
`'adjoint'` stores the iterates and direction state and no energy internals, and its
backward pass is one forward-over-reverse product per step instead of reverse mode
through a recomputed gradient. The adjoint supports reverse mode only (no `jax.jvp`
through it) and no gradient w.r.t. static options such as `Momentum.momentum`.
`Implicit` stores nothing per step; its backward pass is the solver's Hessian-vector
products at `y_T`, and it reports how well it solved (its relative residual, and a
warning past a tolerance).
"""

import dataclasses
from typing import Any
from typing import ClassVar
from typing import Protocol
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from energynets import domains as domains_lib
from energynets.diff import implicit as implicit_lib
from energynets.diff.hvp import cross_hvp
from energynets.diff.hvp import tree_vdot
from energynets.inference import gbi as gbi_lib
from energynets.inference.adjoint import HVPAdjoint
from energynets.inference.gbi import EnergyFn
from energynets.inference.gbi import GBIConfig

__all__ = [
  "DEFAULT_IMPLICIT_SOLVER",
  "GradientStrategy",
  "HVPAdjoint",
  "Implicit",
  "PyTree",
  "Rematerialized",
  "Unrolled",
  "unrolled_gbi",
]

PyTree = Any


class GradientStrategy(Protocol):
  """How the gradient through `T` unrolled GBI steps is computed: any callable with
  this signature (a frozen dataclass with `__call__`, or a plain function)."""

  def __call__(
    self,
    energy: EnergyFn,
    params: PyTree,
    x: PyTree,
    y0: jax.Array,
    domain: domains_lib.Domain,
    config: GBIConfig,
  ) -> tuple[jax.Array, jax.Array]:
    """`(y_T [B, ...], ys [T, B, ...])`: `gbi_scan`'s iterates, differentiable its way."""


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class Unrolled:
  """Reverse-mode AD through the `lax.scan` of `gbi_scan`.

  Stores every step's residuals; exact for every option (annealing included), and the
  only library strategy that also supports forward mode (`jax.jvp`).
  """

  # Whether each scan step is wrapped in `jax.checkpoint` (`Rematerialized`).
  remat: ClassVar[bool] = False

  def __call__(
    self,
    energy: EnergyFn,
    params: PyTree,
    x: PyTree,
    y0: jax.Array,
    domain: domains_lib.Domain,
    config: GBIConfig,
  ) -> tuple[jax.Array, jax.Array]:
    """The iterates by `gbi_scan` (see `unrolled_gbi` for the arguments).

    Returns:
      `(y_T [B, ...], ys [T, B, ...])`.
    """
    y_final, trace = gbi_lib.gbi_scan(
      energy, params, x, y0, domain, config._replace(remat=self.remat)
    )
    return y_final, trace.ys


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class Rematerialized(Unrolled):
  """`Unrolled` with `jax.checkpoint` on each step.

  Keeps each step's input carry and recomputes the step in the backward pass (E2E-SPEN
  §4.3); the same gradients as `Unrolled`.
  """

  remat: ClassVar[bool] = True


DEFAULT_IMPLICIT_SOLVER = implicit_lib.ConjugateGradient(max_iter=50, tol=1e-6, damping=1e-3)
"""`Implicit`'s default solver: damped conjugate gradients. The damping δ = 1e-3 keeps
`(H + δI)⁻¹v` within 1000‖v‖ where H is positive semi-definite (in logit coordinates a
saturated label has a near-zero curvature, and an undamped solve a near-infinite
`H⁻¹v`), at the cost of a bias where H has eigenvalues near δ; 50 iterations let CG
converge on small problems (it stops early at `tol`)."""


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class Implicit:
  """The implicit-function-theorem gradient at the last iterate.

  The steps themselves are not differentiated: `y_T` is treated as the minimizer of the
  (entropy-smoothed) objective `Ê = E − τ·entropy` that GBI minimized (τ of the last
  step when annealing), so for a loss L on `y_T`

      dL/dφ = −(∂²Ê/∂φ∂z) (H + δI)⁻¹ ∂L/∂z_T,     H = ∇²_zz Ê(φ, y(z)),  φ = (params, x),

  with the solve by `solver` (δ its damping). z are the domain's logit coordinates
  (`domain.to_logits`, `y = domain.from_logits(z)`: identity on `Real`, sigmoid on `Box`,
  softmax per position on `Simplex`), in which an interior minimizer is a stationary
  point (on the simplex, the shift of z that softmax ignores is a null direction of H
  orthogonal to the right-hand side, which CG and Neumann never leave). Memory does not
  grow with T and the backward pass costs the solver's Hessian products, not T steps.

  What it gives, by design (and what `e2e_objective` trains with it):

  - only `y_T` (`y_T` and `ys[-1]`, the same value) carries a gradient; the earlier
    iterates `ys[:-1]` are `stop_gradient`ed, so a per-iterate loss trains through its
    last term only;
  - `y0` (e.g. a differentiable start such as SPEN's `'local'`) and the step sizes get
    zero gradient (the minimizer depends on neither), so learned step sizes stay where
    they start;
  - the gradient is exact only as far as `y_T` is a stationary point of `Ê` inside the
    domain and the solve is accurate: use enough steps, and `τ > 0` or damping where
    the energy is not strictly convex (the default solver's δ = 1e-3 biases the
    gradient where H has eigenvalues of that order; pass an undamped solver, e.g.
    `diff.ConjugateGradient()`, where H is known to be well conditioned). On a face of
    the domain (projected steps without entropy) the saturating coordinate map gives
    the clipped coordinates a near-zero gradient;
  - reverse mode only (a `jax.custom_vjp`).

  How well the backward pass solved its system is measured: the relative residual
  `‖(H + δI) w − v‖ / ‖v‖` of the solution w for the right-hand side `v = ∂L/∂z_T` (one
  more Hessian product). It is the cotangent of `residual_probe` (so `jax.grad` w.r.t. a
  zero probe returns it; `e2e_objective` logs it as `implicit_residual`), and a residual
  above `residual_tolerance` raises a `RuntimeWarning` from the backward pass (a
  `jax.debug.callback`, jit-safe; Python shows it once per process unless the warnings
  filter says otherwise).

  `config.pick_best` is refused (the best visited iterate is not the last one).

  Attributes:
    solver: the inverse-HVP solver (`diff.ConjugateGradient`, `diff.Neumann`, or any
      object with `solve(hvp_fn, v)` and, if it solves a damped system, `damping`).
    residual_tolerance: the relative residual above which the backward pass warns;
      None never warns.
  """

  solver: Any = DEFAULT_IMPLICIT_SOLVER
  residual_tolerance: float | None = 1e-3

  def __post_init__(self):
    implicit_lib.check_solver(self.solver)

  def __call__(
    self,
    energy: EnergyFn,
    params: PyTree,
    x: PyTree,
    y0: jax.Array,
    domain: domains_lib.Domain,
    config: GBIConfig,
    residual_probe: jax.Array | None = None,
  ) -> tuple[jax.Array, jax.Array]:
    """The iterates by `gbi_scan`, with the implicit gradient on `y_T` (`unrolled_gbi`).

    Args:
      energy, params, x, y0, domain, config: as `unrolled_gbi`.
      residual_probe: an optional float scalar whose cotangent is the backward solve's
        relative residual (differentiate w.r.t. a zero probe to read it).

    Returns:
      `(y_T [B, ...], ys [T, B, ...])`; `ys[:-1]` carry no gradient.
    """
    gbi_lib.check_step_sizes(config)
    if config.pick_best:
      raise ValueError(
        "the implicit strategy differentiates the last iterate; pick_best "
        "returns another (use pick_best=False)"
      )
    if residual_probe is None:
      residual_probe = jnp.zeros((), y0.dtype)
    # The forward pass sees no tangents: no residuals are stored for the steps.
    params_, x_, y0_, config_ = jax.lax.stop_gradient((params, x, y0, config))
    y_final, trace = gbi_lib.gbi_scan(
      energy, params_, x_, y0_, domain, config_._replace(remat=False)
    )
    if config.num_steps == 0:
      return y_final, trace.ys
    objective = gbi_lib.make_objective(
      energy, domain, config, gbi_lib.entropy_weight_at(config, config.num_steps)
    )
    total = lambda phi, z: jnp.sum(objective(phi[0], phi[1], domain.from_logits(z)))
    solution = _implicit_solution(total, self.solver, self.residual_tolerance)
    y_implicit = domain.from_logits(
      solution(domain.to_logits(y_final), (params, x), residual_probe)
    )
    # The value is gbi_scan's y_T exactly; the gradient is that of y(z*(φ)).
    y_final = y_final + (y_implicit - jax.lax.stop_gradient(y_implicit))
    return y_final, jnp.concatenate([trace.ys[:-1], y_final[None]], axis=0)


def _relative_residual(hvp_fn, w: jax.Array, v: jax.Array, damping: float) -> jax.Array:
  """`‖(H + δI) w − v‖ / ‖v‖` (0 where v = 0)."""
  err = hvp_fn(w) + damping * w - v if damping else hvp_fn(w) - v
  v_norm = jnp.sqrt(tree_vdot(v, v))
  safe = jnp.where(v_norm > 0, v_norm, 1.0)
  return jnp.where(v_norm > 0, jnp.sqrt(tree_vdot(err, err)) / safe, 0.0)


def _warn_above(residual: jax.Array, tolerance: float) -> None:
  """A `RuntimeWarning` from the host when `residual` exceeds `tolerance` (jit-safe)."""

  def warn(value):
    if not np.all(value <= tolerance):  # NaN too
      warnings.warn(  # noqa: B028  (from a host callback: no user frame to point at)
        f"Implicit: the inverse-HVP solve's relative residual exceeds residual_tolerance="
        f"{tolerance}, so the implicit gradient is unreliable (more solver iterations, "
        "more damping, or more GBI steps; e2e logs the value as implicit_residual)",
        RuntimeWarning,
      )

  jax.lax.cond(
    ~(residual <= tolerance), lambda r: jax.debug.callback(warn, r), lambda r: None, residual
  )


def _implicit_solution(total, solver, tolerance: float | None):
  """`solution(z, φ, probe) -> z` whose VJP is that of the minimizer of `total(φ, ·)` at z.

  The cotangent of φ is `−(∂²total/∂φ∂z) w`, `w = solver((H + δI), ḡ)`; z gets zero, and
  `probe` gets the solve's relative residual.
  """

  @jax.custom_vjp
  def solution(z, phi, probe):
    del phi, probe
    return z

  def fwd(z, phi, probe):
    return z, (z, phi, probe)

  def bwd(saved, g):
    z, phi, probe = saved
    _, hvp_fn = jax.linearize(jax.grad(lambda z_: total(phi, z_)), z)
    w = solver.solve(hvp_fn, g)
    residual = _relative_residual(hvp_fn, w, g, getattr(solver, "damping", 0.0))
    if tolerance is not None:
      _warn_above(residual, tolerance)
    cross = cross_hvp(total, phi, z, w)
    negate = lambda c: c if c.dtype == jax.dtypes.float0 else -c
    return (
      jnp.zeros_like(z),
      jax.tree.map(negate, cross),
      residual.astype(jnp.result_type(probe)).reshape(jnp.shape(probe)),
    )

  solution.defvjp(fwd, bwd)
  return solution


def _check_strategy(gradient: Any) -> None:
  """TypeError unless `gradient` is a strategy value (a callable instance, not a name or
  a class)."""
  if isinstance(gradient, (str, type)) or not callable(gradient):
    raise TypeError(
      f"gradient must be a strategy value (Unrolled(), Rematerialized(), "
      f"HVPAdjoint(), Implicit(), or your own strategy(energy, params, x, y0, "
      f"domain, config)); got {gradient!r}"
    )


def unrolled_gbi(
  energy: EnergyFn,
  params: PyTree,
  x: PyTree,
  y0: jax.Array,
  domain: domains_lib.Domain,
  config: GBIConfig,
  gradient: GradientStrategy = Unrolled(),
) -> tuple[jax.Array, jax.Array]:
  """`T = config.num_steps` GBI steps from `y0`, differentiable by the chosen strategy.

  Args:
    energy: `(params, x, y [B, ...]) -> [B]` (static: a function).
    params: the energy's parameters, any pytree.
    x: the energy's conditioning input, any pytree (e.g. features a network computed
      from the raw input; its cotangent is returned, so that network trains too).
      Integer leaves are allowed and get no gradient.
    y0: `[B, ...]` starting point in the domain.
    domain: a `energynets.domains` domain.
    config: `GBIConfig`; `config.step_sizes` (`[T]`, may be traced) replaces
      `learning_rate` and is differentiable.
    gradient: a strategy value (see the module docstring).

  Returns:
    `(y_T [B, ...], ys [T, B, ...])`, the iterates `y_1 .. y_T` (`ys[-1] == y_T`), in the
    domain, identical to `gbi_scan`'s.

  Raises:
    TypeError: `gradient` is not a strategy value (e.g. a name, or a class).
  """
  gbi_lib.check_step_sizes(config)
  _check_strategy(gradient)
  return gradient(energy, params, x, y0, domain, config)
