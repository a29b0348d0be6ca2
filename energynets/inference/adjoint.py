"""The adjoint strategy of `unrolled_gbi`: `HVPAdjoint()`.

A `jax.custom_vjp` whose forward pass keeps only the iterates and the direction state of
each step (`[T, B, ...]` arrays: the iterates are the output `ys` itself, plus the
logits where the parametrization does not optimize y itself; the momentum buffer, or the
gradient where it is the search direction (sgd) or not recoverable from the state
(adam, a user's direction)) and whose backward pass runs the reverse (adjoint) recursion
explicitly. Write one step as

    (z_{t+1}, m_{t+1}) = A(z_t, m_t, g_t, η_t)     update rule (elementwise: direction,
                                                   clip / mirror / additive step)
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
The direction state's floating-point leaves are differentiated (its integer step count
is not).
"""

import dataclasses
import functools
from typing import Any
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from energynets import domains as domains_lib
from energynets.diff.hvp import hvp_and_cross_hvp
from energynets.inference import directions
from energynets.inference import gbi as gbi_lib
from energynets.inference import parametrizations
from energynets.inference.gbi import EnergyFn
from energynets.inference.gbi import GBIConfig

__all__ = ["HVPAdjoint", "PyTree"]

PyTree = Any


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class HVPAdjoint:
  """The explicit adjoint recursion of the module docstring.

  Stores the iterates and direction state, no energy internals; the same gradients as
  `Unrolled`, reverse mode only. Entropy annealing is refused: the adjoint differentiates
  one fixed objective.
  """

  def __call__(
    self,
    energy: EnergyFn,
    params: PyTree,
    x: PyTree,
    y0: jax.Array,
    domain: domains_lib.Domain,
    config: GBIConfig,
  ) -> tuple[jax.Array, jax.Array]:
    """The iterates by the adjoint's forward pass (see `unrolled_gbi`).

    Returns:
      `(y_T [B, ...], ys [T, B, ...])`.
    """
    gbi_lib.check_step_sizes(config)
    if config.entropy_anneal_steps:
      raise ValueError(
        "the adjoint strategy differentiates one fixed objective; entropy "
        "annealing (entropy_anneal_steps > 0) needs Unrolled() or "
        "Rematerialized()"
      )
    lrs = gbi_lib.step_sizes(config, config.num_steps, y0.dtype)
    return _adjoint(
      energy, domain, config._replace(step_sizes=None, remat=False), params, x, y0, lrs
    )


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
  new = gbi_lib.gbi_step(
    _zero_energy, None, None, state, lr, domain, config._replace(entropy_weight=0.0)
  )
  return new.z, new.opt


def _moments(opt: PyTree) -> list:
  """The differentiable part of the direction state: its floating-point leaves (the
  integer step count is not)."""
  return _Inexact.split(opt).floats()


def _with_moments(opt: PyTree, moments: list) -> PyTree:
  """`opt` with its floating-point leaves replaced by `moments` (`_moments`' order)."""
  return _Inexact.split(opt).rebuild(moments)


def _recovers_gradient(config: GBIConfig) -> bool:
  """Whether the gradient of a step follows from the heavy-ball state (`_forward`)."""
  return isinstance(config.direction, directions.Momentum)


class _StepInput(NamedTuple):
  """What the forward pass keeps of each step's input state (not the objective).

  `z` only where it differs from the iterate y (logit mode), `grad` only where the
  direction state does not determine it (not for momentum); else None.
  """

  z: jax.Array | None
  opt: PyTree
  grad: jax.Array | None


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
    return self.treedef.unflatten(
      [next(it) if f else l for l, f in zip(self.leaves, self.is_float)]
    )

  def cotangent(self, float_cts):
    """The full cotangent tree: `float_cts` for float leaves, float0 zeros elsewhere."""
    it = iter(float_cts)
    return self.treedef.unflatten(
      [
        next(it) if f else np.zeros(np.shape(l), jax.dtypes.float0)
        for l, f in zip(self.leaves, self.is_float)
      ]
    )


def _pull_gradient(total, phi, z, v, domain, config):
  """VJP of `G(φ, z) = Jᵀ ∇_y total(φ, y(z))` against `v`: `(φ̄ floats, z̄)`.

  One `hvp_and_cross_hvp` of the energy at `y(z)` along `u = J v`; in logit mode the
  coordinate map's own second derivative adds the (elementwise or per-position) term
  `∂_z(J(z)ᵀ ∇_y)ᵀ v` at the fixed gradient, by `jax.vjp`.
  """
  if parametrizations.optimizes_y(config.parametrization):  # y = z: G is the gradient
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
  keep_z = not parametrizations.optimizes_y(config.parametrization)
  keep_grad = not _recovers_gradient(config)

  def body(state, lr):
    new = gbi_lib.gbi_step(energy, params, x, state, lr, domain, config)
    kept = _StepInput(state.z if keep_z else None, state.opt, state.grad if keep_grad else None)
    return new, (kept, gbi_lib.to_y(new.z, domain, config))

  final, (kept, ys) = jax.lax.scan(body, state, lrs)
  return gbi_lib.to_y(final.z, domain, config), ys, kept, final


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1, 2))
def _adjoint(energy, domain, config, params, x, y0, lrs):
  y_final, ys, _, _ = _forward(energy, domain, config, params, x, y0, lrs)
  return y_final, ys


def _adjoint_fwd(energy, domain, config, params, x, y0, lrs):
  y_final, ys, kept, final = _forward(energy, domain, config, params, x, y0, lrs)
  mu_final = final.opt.mu if _recovers_gradient(config) else None
  return (y_final, ys), (params, x, y0, lrs, kept, final.z, mu_final, ys)


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
    return mu_next - config.direction.momentum * step.opt.mu

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
      z_new, opt_new = _advance(z_, _with_moments(step.opt, moments), g, lr_, domain, config)
      return z_new, _moments(opt_new)

    _, advance_vjp = jax.vjp(advance, z, _moments(step.opt), gradient(step, mu_next), lr)
    z_bar, moments_bar, g_bar, lr_bar = advance_vjp((z_bar, moments_bar))
    phi_step, z_bar_g = _pull_gradient(total, phi, z, g_bar, domain, config)
    phi_bar = jax.tree.map(jnp.add, phi_bar, phi_step)
    mu = step.opt.mu if _recovers_gradient(config) else None
    return (z_bar + z_bar_g, moments_bar, phi_bar, z, mu), lr_bar

  phi_bar = jax.tree.map(jnp.zeros_like, phi)
  if num_steps:
    moments_bar = jax.tree.map(lambda a: jnp.zeros(a.shape[1:], a.dtype), _moments(kept.opt))
    steps = jnp.arange(num_steps)
    (z_bar, _, phi_bar, _, _), lrs_bar = jax.lax.scan(
      body,
      (z_bar, moments_bar, phi_bar, z_final, mu_final),
      (steps, kept, lrs, ct_ys),
      reverse=True,
    )
  else:
    lrs_bar = jnp.zeros_like(lrs)
  y0_bar = jax.vjp(lambda y: gbi_lib.to_z(y, domain, config), y0)[1](z_bar)[0]
  params_bar, x_bar = split.cotangent(phi_bar)
  return params_bar, x_bar, y0_bar, lrs_bar


_adjoint.defvjp(_adjoint_fwd, _adjoint_bwd)
