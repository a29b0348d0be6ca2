"""Gradient-based inference (GBI): batched minimization of an energy over an output domain.

Prediction with an energy network is `argmin_y E(x, y)` over a relaxation of y
(`energynets.domains`). GBI minimizes, per example,

    objective(y) = energy(params, x, y) − τ · domain.entropy(y)        (τ = entropy_weight)

optionally with τ annealed (`entropy_anneal_init`, `entropy_anneal_steps`): a
continuation from a smooth, nearly convex problem (large τ, the minimum near the
domain's centre) down to the energy itself, which on non-convex energies such as
SPEN's HardTanh measurements reaches lower minima than descending E from one start
(results/spen/spen.md);

with an update in the coordinates of `GBIConfig.parametrization`
(`energynets.inference.parametrizations`):

- `Projected()`: `y ← project(y − η d)` (Euclidean projected gradient);
- `Mirror()`:    `y ← domain.mirror_step(y, d, η)` (entropic mirror descent, SPEN §2 and
  E2E-SPEN Eq. 7);
- `Logit()`:     optimize `z` with `y = domain.from_logits(z)`: `z ← z − η d`
  (E2E-SPEN Eq. 8, the form it prefers for unrolled training);

where `d` is the search direction that `GBIConfig.direction`
(`energynets.inference.directions`) produces from the gradient in the optimized
coordinates (`y`, or `z` in logit mode): `SGD()` (d = g), `Momentum(μ)` (heavy ball
`m ← μ m + g`, d = m; SPEN uses μ = 0.95, η = 0.1) or `Adam(...)` (SEAL's GBI baseline).
In mirror mode the momentum/Adam direction replaces the gradient inside the mirror step.
Direction state is per example, so no example's trajectory depends on which other
examples share its batch. Both choices are values: a user's own parametrization or
direction (any hashable object with the same methods) plugs in by being passed.

On a device mesh with a `'model'` axis (`energynets.train.make_mesh`), the iterate and
its gradient, when `[B, L]`, are kept split over the label axis
(`energynets.sharding.constrain_label_axis`); elsewhere this is a no-op.

Two drivers share one step function:

- `gbi_scan`: `lax.scan` over a fixed `T = num_steps`. Differentiable w.r.t. params, x,
  y0 and the learned per-step sizes `GBIConfig.step_sizes`; returns every iterate for
  the E2E per-iterate loss. Optionally `jax.checkpoint`s each step (`remat`).
- `gbi_while`: `lax.while_loop` with per-example convergence (SPEN A.5: relative change
  of the objective below `rel_tol`, or l∞ change of the iterate below `abs_tol`).
  Converged examples are frozen; the loop ends when `stop_fraction` of the batch has
  converged (SPEN §7.4 uses 90%) or at `max_steps`. Used at test time; the number of
  steps each example took is reported.

What a driver returns is the last iterate, or with `GBIConfig.pick_best` the iterate of
lowest objective among all it visited, `y_0` included (SEAL's public GBI,
whose `BestSamplePicker` keeps the best point of the trajectory, since Adam on a
non-convex energy does not descend monotonically).

The energy contract: `energy(params, x, y) -> [B]`, one value per example, with
examples independent (no batch statistics). The gradient w.r.t. y is `jax.grad` of the
batch sum, which is then the per-example gradient. `y` may have any trailing shape
(`[B, L]`, `[B, T, K]`, `[B, H, W]`, ...). `x` and `params` are arbitrary pytrees.

jit: `GBIConfig` (`energynets.inference.gbi_config`) is a NamedTuple registered as a
pytree whose only leaf is `step_sizes`; every other field (the parametrization and
direction values included) is static metadata. It can therefore be passed either as a
static argument (when `step_sizes is None` it is hashable) or as an ordinary argument,
in which case the learned step sizes are traced and differentiable. Domains
are static pytrees too; `energy` must be static (a function).
"""

from collections.abc import Callable
import math
from typing import Any
from typing import NamedTuple

import jax
import jax.numpy as jnp

from energynets import domains as domains_lib
from energynets.inference import directions
from energynets.inference.gbi_config import GBIConfig
from energynets.inference.gbi_config import check_step_sizes
from energynets.inference.gbi_config import validate_config
from energynets.sharding import constrain_label_axis

__all__ = [
  "ANNEAL_RATIO",
  "EnergyFn",
  "entropy_weight_at",
  "gbi_scan",
  "gbi_step",
  "gbi_while",
  "GBIConfig",
  "GBIResult",
  "GBIState",
  "GBITrace",
  "init_state",
  "make_objective",
  "PyTree",
  "step_sizes",
  "to_y",
  "to_z",
  "check_step_sizes",
  "validate_config",
]

PyTree = Any
EnergyFn = Callable[[PyTree, PyTree, jax.Array], jax.Array]


class GBIState(NamedTuple):
  """The loop carry shared by both drivers.

  `z` is the optimized variable (`GBIConfig.parametrization`): `y` itself for projected
  and mirror steps, the logits in logit mode; `opt` is the direction's state.
  `objective` and `grad` are evaluated at the current `z`, so a step needs one
  energy+gradient evaluation and convergence tests compare consecutive iterates.
  """

  z: jax.Array
  opt: PyTree
  objective: jax.Array  # [B]
  grad: jax.Array  # like z


class GBITrace(NamedTuple):
  """Everything `gbi_scan` visited after `y0`.

  Attributes:
    ys: `[T, B, ...]`, the iterates `y_1 .. y_T` (`ys[-1]` is the returned `y_T`).
    energies: `[T, B]`, the minimized objective at each of `ys`.
    initial_energy: `[B]`, the objective at `y_0`.
  """

  ys: jax.Array
  energies: jax.Array
  initial_energy: jax.Array


class GBIResult(NamedTuple):
  """Output of `gbi_while`.

  Attributes:
    y: `[B, ...]`, the final (frozen at convergence) iterate, in the domain (with
      `GBIConfig.pick_best`, the visited iterate of lowest objective).
    energy: `[B]`, the minimized objective (`energy − τ·entropy`) at `y`.
    steps: `[B]` int32, update steps each example took before it was frozen.
    converged: `[B]` bool, whether the example met a tolerance within `max_steps`.
  """

  y: jax.Array
  energy: jax.Array
  steps: jax.Array
  converged: jax.Array


ANNEAL_RATIO = 1e-3  # τ falls by this factor over `entropy_anneal_steps` steps.


def entropy_weight_at(config: GBIConfig, t: jax.Array | int) -> jax.Array | float:
  """τ of the objective evaluated after `t` steps (t = 0: at y0); see `GBIConfig`."""
  if not config.entropy_anneal_steps:
    return config.entropy_weight
  a = config.entropy_anneal_steps
  t = jnp.asarray(t, jnp.float32)
  annealed = config.entropy_anneal_init * ANNEAL_RATIO ** (t / a)
  return jnp.where(t < a, jnp.maximum(annealed, config.entropy_weight), config.entropy_weight)


def make_objective(
  energy: EnergyFn,
  domain: domains_lib.Domain,
  config: GBIConfig,
  tau: jax.Array | float | None = None,
) -> EnergyFn:
  """`(params, x, y) -> [B]`: the energy, minus `τ·entropy` when τ is non-zero.

  τ is `tau` when given (an annealing step's temperature, possibly traced), else
  `config.entropy_weight`."""
  if tau is None:
    tau = config.entropy_weight
  # A traced τ (annealing) always keeps the term; a Python 0 drops it at trace time.
  keep_entropy = isinstance(tau, jax.Array) or bool(tau)

  def objective(params, x, y):
    e = energy(params, x, y)
    if e.shape != y.shape[:1]:
      raise ValueError(
        f"energy must return one value per example, shape {y.shape[:1]}; got {e.shape}"
      )
    if keep_entropy:
      e = e - jnp.asarray(tau, e.dtype) * domain.entropy(y)
    return e

  return objective


# ---------------------------------------------------------------------------------------
# Coordinates: the optimized variable z and the domain point y it stands for.


def to_z(y: jax.Array, domain, config: GBIConfig) -> jax.Array:
  """The optimized variable z of the domain point y (`config.parametrization`)."""
  return config.parametrization.to_z(y, domain)


def to_y(z: jax.Array, domain, config: GBIConfig) -> jax.Array:
  """The domain point y that the optimized variable z stands for (inverse of `to_z`)."""
  return config.parametrization.to_y(z, domain)


def _value_and_grad(objective: EnergyFn, params, x, z, domain, config):
  """Per-example objective `[B]` and its gradient w.r.t. z (via the batch sum)."""

  def total(z_):
    per_example = objective(params, x, to_y(z_, domain, config))
    return jnp.sum(per_example), per_example

  (_, per_example), g = jax.value_and_grad(total, has_aux=True)(z)
  return per_example, constrain_label_axis(g)


# ---------------------------------------------------------------------------------------
# The step shared by both drivers.


def init_state(
  energy: EnergyFn,
  params: PyTree,
  x: PyTree,
  y0: jax.Array,
  domain: domains_lib.Domain,
  config: GBIConfig,
) -> GBIState:
  """The carry at `y0` (objective and gradient already evaluated there, at τ_0)."""
  objective = make_objective(energy, domain, config, entropy_weight_at(config, 0))
  z = constrain_label_axis(to_z(y0, domain, config))
  e, g = _value_and_grad(objective, params, x, z, domain, config)
  return GBIState(z, config.direction.init(z), e, g)


def gbi_step(
  energy: EnergyFn,
  params: PyTree,
  x: PyTree,
  state: GBIState,
  lr: jax.Array | float,
  domain: domains_lib.Domain,
  config: GBIConfig,
  tau: jax.Array | float | None = None,
) -> GBIState:
  """One update of every example in the batch, then objective and gradient at the new
  point (with entropy temperature `tau`, default `config.entropy_weight`)."""
  d, opt = config.direction.update(state.grad, state.opt)
  z = constrain_label_axis(config.parametrization.update(state.z, d, lr, domain))
  objective = make_objective(energy, domain, config, tau)
  e, g = _value_and_grad(objective, params, x, z, domain, config)
  return GBIState(z, opt, e, g)


def step_sizes(config: GBIConfig, length: int, dtype) -> jax.Array:
  """`[length]` step sizes η_t: `config.step_sizes`, else `learning_rate` at every step."""
  if config.step_sizes is None:
    return jnp.full((length,), config.learning_rate, dtype)
  return jnp.asarray(config.step_sizes, dtype)


# ---------------------------------------------------------------------------------------
# Drivers.


def gbi_scan(
  energy: EnergyFn,
  params: PyTree,
  x: PyTree,
  y0: jax.Array,
  domain: domains_lib.Domain,
  config: GBIConfig,
) -> tuple[jax.Array, GBITrace]:
  """`T = config.num_steps` GBI steps by `lax.scan`; differentiable end to end.

  Args:
    energy: `(params, x, y [B, ...]) -> [B]`.
    params: the energy's parameters (any pytree).
    x: the energy's conditioning input (any pytree, e.g. precomputed features).
    y0: `[B, ...]` starting point in the domain (`domain.uniform_init(shape)` or a
      feed-forward net's output).
    domain: a `energynets.domains` domain.
    config: `GBIConfig`; with `step_sizes` its length must equal `num_steps`.

  Returns:
    `(y [B, ...], GBITrace)`: y is `y_T`, or with `pick_best` the visited iterate of
    lowest objective (`y_0` included). Gradients flow to params, x, y0 and step_sizes
    (except through projection kinks, where the projected method's derivative is that
    of the clip).
  """
  check_step_sizes(config)
  num_steps = config.num_steps
  state = init_state(energy, params, x, y0, domain, config)
  lrs = step_sizes(config, num_steps, y0.dtype)
  # τ of the point reached by each step (None: the fixed entropy_weight, no scan input).
  taus = (
    entropy_weight_at(config, jnp.arange(1, num_steps + 1)) if config.entropy_anneal_steps else None
  )

  def body(carry, lr_and_tau):
    state, best = carry
    lr, tau = lr_and_tau
    state = gbi_step(energy, params, x, state, lr, domain, config, tau)
    y = to_y(state.z, domain, config)
    return (state, _keep_best(best, y, state.objective)), (y, state.objective)

  if config.remat:
    body = jax.checkpoint(body)
  (final, best), (ys, energies) = jax.lax.scan(
    body, (state, _first_best(state, domain, config)), (lrs, taus)
  )
  # y_T from the final carry, not ys[-1]: a caller that drops the trace then lets XLA
  # remove it (measured 10-25% of GBI time at T=20 in benchmarks/gbi.py).
  y_out = to_y(final.z, domain, config) if best is None else best.y
  return y_out, GBITrace(ys, energies, state.objective)


def _select(mask: jax.Array, new: PyTree, old: PyTree) -> PyTree:
  """Per-example `where(mask, new, old)` over matching pytrees with leading axis B."""
  return jax.tree.map(lambda n, o: jnp.where(directions.expand(mask, n), n, o), new, old)


class _Best(NamedTuple):
  """`pick_best`: per example, the visited point of lowest objective so far."""

  y: jax.Array  # [B, ...] in the domain
  objective: jax.Array  # [B]


def _first_best(state: GBIState, domain, config: GBIConfig) -> _Best | None:
  """The start `y_0` as the best point so far; None unless `config.pick_best`."""
  if not config.pick_best:
    return None
  return _Best(to_y(state.z, domain, config), state.objective)


def _keep_best(best: _Best | None, y: jax.Array, objective: jax.Array) -> _Best | None:
  """`best` updated with the point `y` of `objective` where it is strictly lower (ties
  keep the earlier point; a NaN objective never replaces one)."""
  if best is None:
    return None
  return _select(objective < best.objective, _Best(y, objective), best)


def _linf_change(a: jax.Array, b: jax.Array) -> jax.Array:
  """`[B, ...] x2 -> [B]`."""
  return jnp.max(jnp.abs(a - b).reshape(a.shape[0], -1), axis=-1)


class _WhileCarry(NamedTuple):
  t: jax.Array  # scalar int32, loop iterations so far
  state: GBIState
  steps: jax.Array  # [B] int32
  converged: jax.Array  # [B] bool
  best: _Best | None  # pick_best only


def gbi_while(
  energy: EnergyFn,
  params: PyTree,
  x: PyTree,
  y0: jax.Array,
  domain: domains_lib.Domain,
  config: GBIConfig,
) -> GBIResult:
  """GBI until per-example convergence, by `lax.while_loop` (not reverse-differentiable).

  Each iteration updates only the not-yet-converged examples (converged examples keep
  their y, optimizer state and step count). An example converges when the relative
  objective change or the l∞ change of its y (in the domain, also in logit mode) falls
  below `rel_tol` / `abs_tol`, tested only after entropy annealing (if any) has ended.
  The loop stops when at least `ceil(stop_fraction · B)` examples have converged, or
  after `max_steps` iterations.
  With `stop_fraction = 1` each example's result is independent of its batch-mates.

  Args: as `gbi_scan`.

  Returns:
    `GBIResult(y [B, ...], energy [B], steps [B] int32, converged [B] bool)`; with
    `pick_best`, y and energy are those of the best visited iterate.
  """
  validate_config(config)
  batch = y0.shape[0]
  # round() absorbs float fuzz such as 0.9 * 10 = 9.000000000000002.
  needed = math.ceil(round(config.stop_fraction * batch, 9))
  if config.step_sizes is not None:
    lrs = jnp.asarray(config.step_sizes, y0.dtype)
    if lrs.ndim != 1 or lrs.shape[0] == 0:
      raise ValueError(f"step_sizes must be a non-empty [T] array; got {lrs.shape}")
  else:
    lrs = None
  tiny = jnp.finfo(y0.dtype).tiny

  def lr_at(t):
    if lrs is None:
      return config.learning_rate
    return lrs[jnp.minimum(t, lrs.shape[0] - 1)]

  def cond(carry: _WhileCarry):
    return (carry.t < config.max_steps) & (jnp.sum(carry.converged) < needed)

  def body(carry: _WhileCarry) -> _WhileCarry:
    old = carry.state
    tau = entropy_weight_at(config, carry.t + 1)
    new = gbi_step(energy, params, x, old, lr_at(carry.t), domain, config, tau)
    rel = jnp.abs(new.objective - old.objective) / jnp.maximum(jnp.abs(old.objective), tiny)
    dy = _linf_change(to_y(new.z, domain, config), to_y(old.z, domain, config))
    # Both objectives are at the final τ only from step A + 1 on.
    done_now = ((rel < config.rel_tol) | (dy < config.abs_tol)) & (
      carry.t >= config.entropy_anneal_steps
    )
    active = ~carry.converged
    state = _select(active, new, old)
    return _WhileCarry(
      t=carry.t + 1,
      state=state,
      steps=carry.steps + active.astype(jnp.int32),
      converged=carry.converged | (active & done_now),
      best=_keep_best(carry.best, to_y(state.z, domain, config), state.objective),
    )

  state = init_state(energy, params, x, y0, domain, config)
  init = _WhileCarry(
    t=jnp.zeros((), jnp.int32),
    state=state,
    steps=jnp.zeros((batch,), jnp.int32),
    converged=jnp.zeros((batch,), bool),
    best=_first_best(state, domain, config),
  )
  final = jax.lax.while_loop(cond, body, init)
  if final.best is not None:
    return GBIResult(final.best.y, final.best.objective, final.steps, final.converged)
  return GBIResult(
    to_y(final.state.z, domain, config), final.state.objective, final.steps, final.converged
  )
