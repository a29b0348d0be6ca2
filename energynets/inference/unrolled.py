"""T unrolled GBI steps as a differentiable layer, with a choice of gradient strategy.

End-to-end SPEN training (Belanger, Yang & McCallum 2017, §3) treats `T` steps of
gradient-based inference as a feed-forward network from `(params, x, y0, η_{1..T})`
to the iterates `y_1 .. y_T`, and back-propagates a loss on them. `unrolled_gbi` runs
exactly `gbi.gbi_scan`'s trajectory (the same `init_state`/`gbi_step`, so the update
rules live only in `gbi.py`) and gets its vector-Jacobian product from a *strategy*: a
value called as `strategy(energy, params, x, y0, domain, config) -> (y_T, ys)`, in the
style of optimistix's `adjoint=`. Any object with that call signature is a strategy (a
user's own `jax.custom_vjp` plugs in by being passed); the library's are

- `Unrolled()` (name `'scan'`): reverse-mode AD through the `lax.scan` unroll. JAX
  stores every step's residuals (the energy's internals of each gradient evaluation)
  and differentiates the gradient computation itself (reverse-over-reverse).
- `Rematerialized()` (`'remat'`): the same with `jax.checkpoint` on each step (E2E-SPEN
  §4.3: keep only the steps' inputs, recompute the energy's internals in the backward
  pass).
- `HVPAdjoint()` (`'adjoint'`): a `jax.custom_vjp` whose forward pass keeps only the
  iterates and the optimizer state of each step (`[T, B, ...]` arrays: the iterates are
  the output `ys` itself, plus the logits in logit mode; the momentum buffer, or the
  gradient where it is the search direction (sgd) or not recoverable from the state
  (adam)) and whose backward pass runs the reverse (adjoint) recursion explicitly.
  Write one step as

      (z_{t+1}, m_{t+1}) = A(z_t, m_t, g_t, η_t)     update rule (elementwise: optimizer
                                                     direction, clip / mirror / additive step)
      g_{t+1} = G(φ, z_{t+1}) = J(z_{t+1})ᵀ ∇_y Ê(φ, y(z_{t+1}))

  with `z` the optimized coordinates (y, or logits), `y(z)` the coordinate map (identity,
  or the sigmoid/softmax of logit mode), `J` its Jacobian, `Ê = E − τ·entropy` and
  `φ = (params, x)`. Going backwards, the adjoint `(z̄, m̄)` of a step's output is pulled
  through `A` by a plain `jax.vjp` (cheap, elementwise), which yields `ḡ_t` and `η̄_t`;
  `ḡ_t` is then pulled through `G` with the energy's second derivatives at `y_t`, from
  one forward-over-reverse pass (`diff.hvp_and_cross_hvp`, with `u = J ḡ_t`):

      z̄_t += Jᵀ ∇²_yy Ê u + ∂_z(Jᵀ ∇_y Ê)|_{∇Ê fixed}ᵀ ḡ_t,      φ̄ += (∂²Ê/∂φ∂y) u,

  plus `Jᵀ ȳ_t` for a loss on the iterate itself. Finally `ȳ_0` is `z̄_0` pulled back
  through the initial change of coordinates. Every second-order product of the energy is
  a Hessian- or cross-Hessian-vector product; nothing of the energy's internals is stored.
- `Implicit(solver)`: no differentiation of the steps at all; `y_T` is treated as the
  minimizer of the final objective and gets the implicit-function-theorem gradient
  (see `Implicit`); the earlier iterates get none.

The first three give the same gradients (to rounding; tests/test_unrolled.py checks
them against each other and against finite differences) w.r.t. `params`, `x`, `y0` and
the step sizes `config.step_sizes`, for every method (`projected`, `mirror`, `logit`),
optimizer (`sgd`, `momentum`, `adam`) and domain, and the loss may depend on every
iterate (the per-iterate loss of E2E-SPEN Eq. 9). Where the update is not
differentiable (the clip of `projected` at the faces, Adam's square root at a zero
second moment), all three use the same one-sided derivative JAX defines for it.
`Implicit` agrees with them where the iterate has converged (tests/test_unrolled.py,
tests/test_e2e.py: a strongly convex energy against its closed-form minimizer).

Trade-offs (measured by benchmarks/e2e_gradients.py, results in
results/e2e_gradients.md): `'scan'` stores every step's residuals;
`'remat'` stores each step's input carry and recomputes the step in the backward pass;
`'adjoint'` stores the iterates and optimizer state and no energy internals, and its
backward pass is one forward-over-reverse product per step instead of reverse mode
through a recomputed gradient. The adjoint supports reverse mode only (no `jax.jvp`
through it) and no gradient w.r.t. static options such as `momentum`. `Implicit` stores
nothing per step; its backward pass is the solver's Hessian-vector products at `y_T`.
"""

import dataclasses
import functools
from typing import Any, ClassVar, NamedTuple, Optional, Protocol, Union

import jax
import jax.numpy as jnp
import numpy as np

from energynets import domains as domains_lib
from energynets.diff import implicit as implicit_lib
from energynets.diff.hvp import hvp_and_cross_hvp
from energynets.inference import directions
from energynets.inference import gbi as gbi_lib
from energynets.inference.gbi import EnergyFn, GBIConfig

PyTree = Any


class GradientStrategy(Protocol):
  """How the gradient through `T` unrolled GBI steps is computed: any callable with
  this signature (a frozen dataclass with `__call__`, or a plain function)."""

  def __call__(self, energy: EnergyFn, params: PyTree, x: PyTree, y0: jax.Array,
               domain: domains_lib.Domain,
               config: GBIConfig) -> tuple[jax.Array, jax.Array]:
    """`(y_T [B, ...], ys [T, B, ...])`: `gbi_scan`'s iterates, differentiable its way."""


def _check_step_sizes(config: GBIConfig) -> None:
  gbi_lib.validate_config(config)
  num_steps = config.num_steps
  if config.step_sizes is not None and jnp.shape(config.step_sizes) != (num_steps,):
    raise ValueError(f"step_sizes must have shape ({num_steps},) = (num_steps,); got "
                     f"{jnp.shape(config.step_sizes)}")


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class Unrolled:
  """Reverse-mode AD through the `lax.scan` of `gbi_scan` (the name `'scan'`).

  Stores every step's residuals; exact for every option (annealing included), and the
  only library strategy that also supports forward mode (`jax.jvp`).
  """

  # Whether each scan step is wrapped in `jax.checkpoint` (`Rematerialized`).
  remat: ClassVar[bool] = False

  def __call__(self, energy: EnergyFn, params: PyTree, x: PyTree, y0: jax.Array,
               domain: domains_lib.Domain,
               config: GBIConfig) -> tuple[jax.Array, jax.Array]:
    """The iterates by `gbi_scan` (see `unrolled_gbi` for the arguments).

    Returns:
      `(y_T [B, ...], ys [T, B, ...])`.
    """
    y_final, trace = gbi_lib.gbi_scan(energy, params, x, y0, domain,
                                      config._replace(remat=self.remat))
    return y_final, trace.ys


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class Rematerialized(Unrolled):
  """`Unrolled` with `jax.checkpoint` on each step (the name `'remat'`).

  Keeps each step's input carry and recomputes the step in the backward pass (E2E-SPEN
  §4.3); the same gradients as `Unrolled`.
  """
  remat: ClassVar[bool] = True


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class HVPAdjoint:
  """The explicit adjoint recursion of the module docstring (the name `'adjoint'`).

  Stores the iterates and optimizer state, no energy internals; the same gradients as
  `Unrolled`, reverse mode only. Entropy annealing is refused: the adjoint differentiates
  one fixed objective.
  """

  def __call__(self, energy: EnergyFn, params: PyTree, x: PyTree, y0: jax.Array,
               domain: domains_lib.Domain,
               config: GBIConfig) -> tuple[jax.Array, jax.Array]:
    """The iterates by the adjoint's forward pass (see `unrolled_gbi`).

    Returns:
      `(y_T [B, ...], ys [T, B, ...])`.
    """
    _check_step_sizes(config)
    if config.entropy_anneal_steps:
      raise ValueError("the adjoint strategy differentiates one fixed objective; entropy "
                       "annealing (entropy_anneal_steps > 0) needs gradient='scan' or "
                       "'remat'")
    lrs = gbi_lib.step_sizes(config, config.num_steps, y0.dtype)
    return _adjoint(energy, domain, config._replace(step_sizes=None, remat=False), params,
                    x, y0, lrs)


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class Implicit:
  """The implicit-function-theorem gradient at the last iterate.

  The steps themselves are not differentiated: `y_T` is treated as the minimizer of the
  (entropy-smoothed) objective `Ê = E − τ·entropy` that GBI minimized (τ of the last
  step when annealing), so for a loss L on `y_T`

      dL/dφ = −(∂²Ê/∂φ∂z) H⁻¹ ∂L/∂z_T,     H = ∇²_zz Ê(φ, y(z)),  φ = (params, x),

  with `H⁻¹v` from `solver`. z are the domain's logit coordinates (`domain.to_logits`,
  `y = domain.from_logits(z)`: identity on `Real`, sigmoid on `Box`, softmax per position
  on `Simplex`), in which an interior minimizer is a stationary point (on the simplex,
  the shift of z that softmax ignores is a null direction of H orthogonal to the
  right-hand side, which CG and Neumann never leave). Memory does not grow with T and
  the backward pass costs the solver's Hessian products, not T steps.

  What it gives, by design (and what `e2e_objective` trains with it):

  - only `y_T` (`y_T` and `ys[-1]`, the same value) carries a gradient; the earlier
    iterates `ys[:-1]` are `stop_gradient`ed, so a per-iterate loss trains through its
    last term only;
  - `y0` (e.g. a differentiable start such as SPEN's `'local'`) and the step sizes get
    zero gradient (the minimizer depends on neither), so learned step sizes stay where
    they start;
  - the gradient is exact only as far as `y_T` is a stationary point of `Ê` inside the
    domain and the solve is accurate: use enough steps, and `τ > 0` or `damping > 0`
    where the energy is not strictly convex. On a face of the domain (projected steps
    without entropy) the saturating coordinate map gives the clipped coordinates a
    near-zero gradient;
  - reverse mode only (a `jax.custom_vjp`).

  `config.pick='best'` is refused (the best visited iterate is not the last one).

  Attributes:
    solver: the inverse-HVP solver (`diff.ConjugateGradient`, `diff.Neumann`, any object
      with `solve(hvp_fn, v)`, or an `InverseHVP` record).
  """
  solver: Any = implicit_lib.ConjugateGradient()

  def __call__(self, energy: EnergyFn, params: PyTree, x: PyTree, y0: jax.Array,
               domain: domains_lib.Domain,
               config: GBIConfig) -> tuple[jax.Array, jax.Array]:
    """The iterates by `gbi_scan`, with the implicit gradient on `y_T` (`unrolled_gbi`).

    Returns:
      `(y_T [B, ...], ys [T, B, ...])`; `ys[:-1]` carry no gradient.
    """
    _check_step_sizes(config)
    if config.pick != "last":
      raise ValueError("the implicit strategy differentiates the last iterate; "
                       f"pick={config.pick!r} returns another (use pick='last')")
    solver = implicit_lib.get_solver(self.solver)
    # The forward pass sees no tangents: no residuals are stored for the steps.
    params_, x_, y0_, config_ = jax.lax.stop_gradient((params, x, y0, config))
    y_final, trace = gbi_lib.gbi_scan(energy, params_, x_, y0_, domain,
                                      config_._replace(remat=False))
    if config.num_steps == 0:
      return y_final, trace.ys
    objective = gbi_lib.make_objective(
        energy, domain, config, gbi_lib.entropy_weight_at(config, config.num_steps))
    aux = lambda z, p, x__: jnp.sum(objective(p, x__, domain.from_logits(z)))
    z = domain.to_logits(y_final)
    y_implicit = domain.from_logits(implicit_lib.implicit_solution(aux, solver)(z, params, x))
    # The value is gbi_scan's y_T exactly; the gradient is that of y(z*(φ)).
    y_final = y_final + (y_implicit - jax.lax.stop_gradient(y_implicit))
    return y_final, jnp.concatenate([trace.ys[:-1], y_final[None]], axis=0)


StrategyLike = Union[str, GradientStrategy]

STRATEGIES = {"scan": Unrolled(), "remat": Rematerialized(), "adjoint": HVPAdjoint()}
"""The strategy names the experiment configs use, and the values they stand for."""

GRADIENTS = tuple(STRATEGIES)


def get_strategy(gradient: StrategyLike) -> GradientStrategy:
  """The strategy a name stands for (`STRATEGIES`), or a strategy value as is.

  Args:
    gradient: `'scan'`, `'remat'`, `'adjoint'`, or any callable
      `(energy, params, x, y0, domain, config) -> (y_T, ys)` (`Unrolled()`,
      `Rematerialized()`, `HVPAdjoint()`, `Implicit(solver)`, or a user's own).

  Returns:
    A `GradientStrategy`.

  Raises:
    ValueError: an unknown name. TypeError: neither a name nor a callable instance.
  """
  if isinstance(gradient, str):
    if gradient not in STRATEGIES:
      raise ValueError(f"unknown gradient strategy {gradient!r}; expected one of "
                       f"{GRADIENTS} or a strategy value (Unrolled(), Rematerialized(), "
                       "HVPAdjoint(), Implicit(solver), your own)")
    return STRATEGIES[gradient]
  if isinstance(gradient, type) or not callable(gradient):
    raise TypeError(f"gradient must be one of {GRADIENTS} or a strategy value called as "
                    f"strategy(energy, params, x, y0, domain, config); got {gradient!r}")
  return gradient


def unrolled_gbi(energy: EnergyFn, params: PyTree, x: PyTree, y0: jax.Array,
                 domain: domains_lib.Domain, config: GBIConfig,
                 gradient: StrategyLike = "scan") -> tuple[jax.Array, jax.Array]:
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
    gradient: a strategy value or its name (`get_strategy`; see the module docstring).

  Returns:
    `(y_T [B, ...], ys [T, B, ...])`, the iterates `y_1 .. y_T` (`ys[-1] == y_T`), in the
    domain, identical to `gbi_scan`'s.
  """
  _check_step_sizes(config)
  strategy = get_strategy(gradient)
  return strategy(energy, params, x, y0, domain, config)


# ---------------------------------------------------------------------------------------
# The pieces of one step.


def _zero_energy(params, x, y):
  del params, x
  return jnp.zeros(y.shape[:1], y.dtype)


def _advance(z, opt, g, lr, domain, config):
  """`A`: the update of `gbi_step` alone — direction and step, no energy evaluation.

  Calling `gbi_step` with the zero energy (and no entropy) keeps the update rules in one
  place; the gradient it then evaluates is identically zero and compiled away.
  """
  state = gbi_lib.GBIState(z, opt, jnp.zeros(z.shape[:1], z.dtype), g)
  new = gbi_lib.gbi_step(_zero_energy, None, None, state, lr, domain,
                         config._replace(entropy_weight=0.0))
  return new.z, new.opt


def _moments(opt: directions.OptState):
  """The differentiable part of the optimizer state (the integer count is not)."""
  return opt.mu, opt.nu


class _StepInput(NamedTuple):
  """What the forward pass keeps of each step's input state (not the objective).

  `z` only where it differs from the iterate y (logit mode), `grad` only where the
  optimizer state does not determine it (not for momentum); else None.
  """
  z: Optional[jax.Array]
  opt: directions.OptState
  grad: Optional[jax.Array]


class _Inexact(NamedTuple):
  """`(params, x)` split into float leaves (differentiated) and the rest (not)."""
  leaves: list
  is_float: list
  treedef: Any

  @classmethod
  def split(cls, tree):
    leaves, treedef = jax.tree.flatten(tree)
    is_float = [jnp.issubdtype(jnp.result_type(l), jnp.inexact) for l in leaves]
    return cls(leaves, is_float, treedef)

  def floats(self):
    return [l for l, f in zip(self.leaves, self.is_float) if f]

  def rebuild(self, floats):
    it = iter(floats)
    return self.treedef.unflatten([next(it) if f else l
                                   for l, f in zip(self.leaves, self.is_float)])

  def cotangent(self, float_cts):
    """The full cotangent tree: `float_cts` for float leaves, float0 zeros elsewhere."""
    it = iter(float_cts)
    return self.treedef.unflatten([
        next(it) if f else np.zeros(np.shape(l), jax.dtypes.float0)
        for l, f in zip(self.leaves, self.is_float)])


def _pull_gradient(total, phi, z, v, domain, config):
  """VJP of `G(φ, z) = Jᵀ ∇_y total(φ, y(z))` against `v`: `(φ̄ floats, z̄)`.

  One `hvp_and_cross_hvp` of the energy at `y(z)` along `u = J v`; in logit mode the
  coordinate map's own second derivative adds the (elementwise or per-position) term
  `∂_z(J(z)ᵀ ∇_y)ᵀ v` at the fixed gradient, by `jax.vjp`.
  """
  if config.method != "logit":  # y = z: G is the gradient itself
    _, hess_v, cross = hvp_and_cross_hvp(total, phi, z, v)
    return cross, hess_v
  to_y = lambda z_: gbi_lib.to_y(z_, domain, config)
  y, coords_vjp = jax.vjp(to_y, z)
  u = jax.jvp(to_y, (z,), (v,))[1]
  grad_y, hess_u, cross = hvp_and_cross_hvp(total, phi, y, u)
  _, curvature_vjp = jax.vjp(lambda z_: jax.vjp(to_y, z_)[1](grad_y)[0], z)
  return cross, coords_vjp(hess_u)[0] + curvature_vjp(v)[0]


# ---------------------------------------------------------------------------------------
# The adjoint strategy.


def _forward(energy, domain, config, params, x, y0, lrs):
  """gbi_scan's trajectory, keeping each step's input state: (y_T, ys, kept, z_T).

  The iterate itself is kept only in logit mode: otherwise z_k = y_k is already in the
  output `ys` (and `y0`), which the backward pass reads instead of a second copy.
  """
  state = gbi_lib.init_state(energy, params, x, y0, domain, config)
  keep_z = config.method == "logit"
  keep_grad = config.optimizer != "momentum"

  def body(state, lr):
    new = gbi_lib.gbi_step(energy, params, x, state, lr, domain, config)
    kept = _StepInput(state.z if keep_z else None, state.opt,
                      state.grad if keep_grad else None)
    return new, (kept, gbi_lib.to_y(new.z, domain, config))

  final, (kept, ys) = jax.lax.scan(body, state, lrs)
  return gbi_lib.to_y(final.z, domain, config), ys, kept, final


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1, 2))
def _adjoint(energy, domain, config, params, x, y0, lrs):
  y_final, ys, _, _ = _forward(energy, domain, config, params, x, y0, lrs)
  return y_final, ys


def _adjoint_fwd(energy, domain, config, params, x, y0, lrs):
  y_final, ys, kept, final = _forward(energy, domain, config, params, x, y0, lrs)
  return (y_final, ys), (params, x, y0, lrs, kept, final.z, final.opt.mu, ys)


def _adjoint_bwd(energy, domain, config, residuals, cotangents):
  params, x, y0, lrs, kept, z_final, mu_final, ys = residuals
  ct_final, ct_ys = cotangents
  num_steps = lrs.shape[0]
  objective = gbi_lib.make_objective(energy, domain, config)
  split = _Inexact.split((params, x))

  def total(phi_floats, y):
    p, x_ = split.rebuild(phi_floats)
    return jnp.sum(objective(p, x_, y))

  def coords_vjp(z, ct_y):
    return jax.vjp(lambda z_: gbi_lib.to_y(z_, domain, config), z)[1](ct_y)[0]

  def iterate(k, step):
    """z_k: kept in logit mode; else y_0 or ys[k − 1] (the same numbers)."""
    if step.z is not None:
      return step.z
    return jnp.where(k == 0, y0, ys[jnp.maximum(k - 1, 0)])

  def gradient(step, mu_next):
    """g_k: kept, or for heavy-ball momentum recovered from m_{k+1} = μ m_k + g_k (the
    update rule's vjp then sees d = m_{k+1} up to rounding)."""
    if step.grad is not None:
      return step.grad
    return mu_next - config.momentum * step.opt.mu

  # ys[k] = y(z_{k+1}): its cotangent joins z̄_{k+1} at the top of step k's reverse
  # iteration, where z_{k+1} (and m_{k+1}) are carried in from the later iteration.
  z_bar = coords_vjp(z_final, ct_final)
  phi = split.floats()

  def body(carry, inputs):
    z_bar, moments_bar, phi_bar, z_next, mu_next = carry
    k, step, lr, ct_y = inputs
    z = iterate(k, step)
    z_bar = z_bar + coords_vjp(z_next, ct_y)

    def advance(z_, moments, g, lr_):
      opt = step.opt._replace(mu=moments[0], nu=moments[1])
      z_new, opt_new = _advance(z_, opt, g, lr_, domain, config)
      return z_new, _moments(opt_new)

    _, advance_vjp = jax.vjp(advance, z, _moments(step.opt), gradient(step, mu_next), lr)
    z_bar, moments_bar, g_bar, lr_bar = advance_vjp((z_bar, moments_bar))
    phi_step, z_bar_g = _pull_gradient(total, phi, z, g_bar, domain, config)
    phi_bar = jax.tree.map(jnp.add, phi_bar, phi_step)
    return (z_bar + z_bar_g, moments_bar, phi_bar, z, step.opt.mu), lr_bar

  phi_bar = jax.tree.map(jnp.zeros_like, phi)
  if num_steps:
    moments_bar = jax.tree.map(lambda a: jnp.zeros(a.shape[1:], a.dtype), _moments(kept.opt))
    steps = jnp.arange(num_steps)
    (z_bar, _, phi_bar, _, _), lrs_bar = jax.lax.scan(
        body, (z_bar, moments_bar, phi_bar, z_final, mu_final), (steps, kept, lrs, ct_ys),
        reverse=True)
  else:
    lrs_bar = jnp.zeros_like(lrs)
  y0_bar = jax.vjp(lambda y: gbi_lib.to_z(y, domain, config), y0)[1](z_bar)[0]
  params_bar, x_bar = split.cotangent(phi_bar)
  return params_bar, x_bar, y0_bar, lrs_bar


_adjoint.defvjp(_adjoint_fwd, _adjoint_bwd)
