"""`e2e`: end-to-end SPEN training through unrolled GBI (Belanger, Yang & McCallum 2017).

Prediction is `T` steps of gradient-based inference from a starting point `y_0`
(E2E-SPEN Eq. 10, `y_T = Init(F(x)) − Σ_t η_t ∇E`, or its mirror/logit/momentum
variants), and training back-propagates a loss on the iterates through those steps:

    L = (1/T) Σ_{t=1..T} w_t ℓ(y_t, y*),   w_t = 1 / (T − t + 1)      (Eq. 9, per_iterate)
    L = ℓ(y_T, y*)                                                    (final iterate only)

averaged over the batch, plus `l2 · ½‖W‖²` on the trained groups' weight matrices.
`ℓ` is a task-loss surrogate value (`task_losses`) summed (`Sum()`) or averaged
(`Mean()`) over the output's coordinates: `Log(eps=1e-6)` (the default, a BCE)
−[y* log y + (1−y*) log(1−y)] for y in (0, 1) (Box), with y clipped to `[eps, 1 − eps]`
(a sigmoid saturates to exactly 1.0 in float32, and the clip keeps the loss finite; a
coordinate clipped there gets no gradient from ℓ, which at eps = 1e-6 means a logit
beyond ±13.8), or `Squared()` Σ (y − y*)² (any domain).

Choices, with reasons:

- The step sizes η_1..η_T are trainable (§6.1.3, "treats the learning rates η_t as
  trainable parameters"), kept positive as `η_t = softplus(ρ_t)`, with `ρ_t` initialized
  so that η_t equals the GBI config's `learning_rate` (or its `step_sizes`). They are
  their own parameter group (`state["inference"]`), updated by the same optimizer as
  the energy unless `step_size_optimizer` is given; `learn_step_sizes=False` freezes
  them. Momentum stays a fixed option.
- Prediction runs the same unrolled GBI, with the same T and the trained step sizes
  (§4.2: "maintain the same optimization configuration, such as T, at both train and
  test time"), not the convergence loop, and returns `y_T`.
- Entropy smoothing is GBI's `entropy_weight` (§4.2), present at train and test time.
- The gradient through the unroll is `unrolled_gbi`'s `gradient` strategy, a value
  (`inference.Unrolled()`, `Rematerialized()`, `HVPAdjoint()`, `Implicit(solver)`, or
  any callable with their signature); the first three give the same update
  (tests/test_e2e.py). `Implicit` instead
  differentiates `y_T` as the minimizer of the smoothed energy: the earlier iterates,
  the start `y_0` and the step sizes then get no gradient (see `unrolled.Implicit`).
- Energies trained through inference must be twice differentiable in y (the backward
  pass uses the Hessian of the energy; E2E-SPEN §5 uses SoftPlus): a `SPENEnergy` whose
  measurement activation is ReLU or HardTanh (or any energy module with such an
  `activation` attribute) is rejected. The SPEN feature network may use ReLU: F(x) is
  computed once before inference and enters the energy linearly (local term) or through
  the smooth conditional term.
- The starting point `y_0` is part of the differentiable network: SPEN's `'local'`
  start `sigmoid(local logits)` trains the local head through the unroll too.

The objective takes any `Energy` (`energynets.energies.protocol`): a SPEN (Box domain,
features precomputed once by `encode`, starts `'uniform'`/`'local'`), an image-denoising
energy (`Real` domain, `y_0 = x` by `'input'`, `ℓ = Squared()`) or a user's own energy.
`e2e_losses` gives its loss and unrolled inference as pure functions (for tests,
benchmarks and other objectives).

State: `{"energy": ParamGroup, "inference": ParamGroup({"step_sizes": ρ [T]})}`. The
`energy` group is exactly that of the SPEN objectives, so staged training (pretrain the
features with BCE via `spen_pretrain` or `local_bce`, then e2e) carries parameters with
`init_from`; `clamped` groups (`trainable`) are frozen as in `ssvm`.
"""

from collections.abc import Callable
import dataclasses
import functools
from typing import Any
from typing import NamedTuple
from typing import Protocol

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax

from energynets import domains
from energynets.energies import protocol
from energynets.inference import gbi as gbi_lib
from energynets.inference import unrolled
from energynets.inference.gbi import GBIConfig
from energynets.objectives import base
from energynets.objectives import task_losses

__all__ = [
  "DEFAULT_LOSS",
  "DEFAULT_LOSS_EPS",
  "e2e_losses",
  "e2e_objective",
  "E2ELosses",
  "E2EOptions",
  "init_step_sizes",
  "iterate_loss",
  "iterate_weights",
  "Mean",
  "Reduction",
  "step_sizes",
  "Sum",
]

DEFAULT_LOSS_EPS = 1e-6
DEFAULT_LOSS = task_losses.Log(DEFAULT_LOSS_EPS)


# ---------------------------------------------------------------------------------------
# The loss on the iterates.


class Reduction(Protocol):
  """How ℓ's sum over an example's coordinates becomes its loss."""

  def __call__(self, total: jax.Array, num_coordinates: int) -> jax.Array:
    """`total [B]` (the sum over `num_coordinates` coordinates) -> `[B]`."""


@dataclasses.dataclass(frozen=True)
class Sum:
  """ℓ summed over an example's coordinates."""

  def __call__(self, total: jax.Array, num_coordinates: int) -> jax.Array:
    """`total` itself."""
    del num_coordinates
    return total


@dataclasses.dataclass(frozen=True)
class Mean:
  """ℓ averaged over an example's coordinates."""

  def __call__(self, total: jax.Array, num_coordinates: int) -> jax.Array:
    """`total / num_coordinates`."""
    return total / num_coordinates


def iterate_loss(
  y_hat: jax.Array,
  y: jax.Array,
  loss: task_losses.Surrogate = DEFAULT_LOSS,
  reduction: Reduction = Sum(),
) -> jax.Array:
  """`[B, ...] x2 -> [B]`: ℓ(ŷ, y), a `task_losses` surrogate value on the flattened
  outputs, summed over every non-batch axis and then reduced by `reduction`."""
  flat = lambda a: a.reshape(a.shape[0], -1)
  value = task_losses.task_loss(flat(y_hat), flat(y).astype(y_hat.dtype), loss)
  return reduction(value, flat(y_hat).shape[1])


def iterate_weights(num_steps: int, per_iterate: bool = True, dtype=jnp.float32) -> jax.Array:
  """`[T]`: `w_t / T` with `w_t = 1/(T − t + 1)` (Eq. 9), or one-hot on `y_T`."""
  if not per_iterate:
    return jnp.zeros((num_steps,), dtype).at[-1].set(1.0)
  t = jnp.arange(1, num_steps + 1, dtype=dtype)
  return 1.0 / (num_steps - t + 1.0) / num_steps


def init_step_sizes(config: GBIConfig) -> jax.Array:
  """`[T]` raw step sizes ρ with `softplus(ρ)` = the config's step sizes or learning rate.

  Computed in NumPy (float64) when the objective is built, so that a bad value fails
  there and `init` stays a pure function of its arguments.
  """
  if config.step_sizes is not None:
    eta = np.asarray(config.step_sizes, np.float64)
  else:
    eta = np.full((config.num_steps,), config.learning_rate, np.float64)
  if eta.shape != (config.num_steps,) or np.any(eta <= 0):
    raise ValueError(
      f"learned step sizes start from {config.num_steps} positive values "
      f"(softplus(ρ) > 0); got {eta}"
    )
  return jnp.asarray(np.log(np.expm1(eta)), jnp.float32)


def step_sizes(inference_params) -> jax.Array:
  """`[T]`: η_t = softplus(ρ_t) > 0."""
  return jax.nn.softplus(inference_params["step_sizes"])


# ---------------------------------------------------------------------------------------
# The objective.


@dataclasses.dataclass(frozen=True)
class E2EOptions:
  """End-to-end SPEN's options (defaults: E2E-SPEN §3-4).

  Attributes:
    gbi: the unrolled inference, used identically for training and prediction: method
      (`'logit'`, `'mirror'` or `'projected'`), optimizer, momentum, `entropy_weight`,
      `num_steps` (T ≥ 1) and the initial step size (`learning_rate`, or `step_sizes`).
    loss: ℓ, a `task_losses` surrogate value: `Log(eps=1e-6)` (BCE, outputs in (0, 1);
      its eps the clip), `Squared()`, or your own.
    per_iterate: Eq. 9's weighted average over all iterates; False: `y_T` only.
    gradient: how the unroll is differentiated: a strategy value (`Unrolled()`,
      `Rematerialized()`, `HVPAdjoint()`, `Implicit(solver)`, or any callable
      `(energy, params, x, y0, domain, config) -> (y_T, ys)`). With `Implicit`, only
      the loss on `y_T` trains, and `y_0` and the step sizes get zero gradient.
    init: y_0, a start name of the energy (SPEN: `'local'`, `'uniform'`; energies from
      modules: `'input'`, `'uniform'`, `'zeros'`); None: `'local'` where the energy has
      it, else its first start.
    learn_step_sizes: train η_t jointly with the energy (False: fixed at their init).
    trainable: top-level energy groups that are updated (None: all).
    l2: weight of `½‖W‖²` on the trainable groups' weight matrices.
    loss_reduction: `Sum()` or `Mean()` of ℓ over an example's coordinates (a
      `Reduction`).
  """

  gbi: GBIConfig | None = None
  loss: task_losses.Surrogate = DEFAULT_LOSS
  per_iterate: bool = True
  gradient: unrolled.GradientStrategy = unrolled.Unrolled()
  init: str | None = None
  learn_step_sizes: bool = True
  trainable: tuple[str, ...] | None = None
  l2: float = 0.0
  loss_reduction: Reduction = Sum()

  def __post_init__(self):
    if self.gbi is None:
      raise ValueError("e2e needs gbi, the unrolled inference (a GBIConfig)")
    gbi_lib.validate_config(self.gbi)
    if self.gbi.num_steps < 1:
      raise ValueError("e2e needs at least one unrolled GBI step (gbi.num_steps >= 1)")
    task_losses.check_surrogate(self.loss)
    if not callable(self.loss_reduction):
      raise TypeError(
        f"loss_reduction is a value such as Sum() or Mean(), not {self.loss_reduction!r}"
      )
    if isinstance(self.gradient, type) or not callable(self.gradient):
      raise TypeError(
        f"gradient is a strategy value such as Unrolled() or HVPAdjoint(), not {self.gradient!r}"
      )


class E2ELosses(NamedTuple):
  """The pure functions of `e2e_objective`, for tests and for composing other methods.

  Attributes:
    loss_fn: `((energy_params, inference_params), batch, rng) -> (loss, metrics)`; its
      gradient is the training update's (clamped groups get zeros). With an `Implicit`
      gradient, a third parameter, a zero scalar, gets the solve's residual as gradient.
    unroll: `(energy_params, inference_params, x, train=False, rng=None,
      residual_probe=None) -> (y0, y_T, ys)`, the unrolled inference (`ys [T, B, ...]`)
      by the configured gradient strategy (`residual_probe`: `Implicit`'s).
    model: the `EnergyModel` the energy was adapted to.
    initial_step_sizes: `[T]` raw ρ that start the `inference` group.
  """

  loss_fn: Callable[..., tuple[jax.Array, dict]]
  unroll: Callable[..., tuple[jax.Array, jax.Array, jax.Array]]
  model: protocol.Energy
  initial_step_sizes: jax.Array


def _check_options(options: Any) -> E2EOptions:
  if not isinstance(options, E2EOptions):
    raise TypeError(f"e2e takes options=E2EOptions(...), not {options!r}")
  return options


def e2e_losses(energy: Any, *, options: E2EOptions | None = None) -> E2ELosses:
  """The loss of `e2e_objective` (the same energy and options, without the optimizers).

  What to differentiate to compare gradient strategies on one batch, or to build another
  method on the unrolled inference.

  Args:
    energy: E_Θ, anything `protocol.as_energy` accepts.
    options: `E2EOptions` (required: it holds `gbi`).

  Returns:
    `E2ELosses`: the loss function, the unrolled inference, the energy model and the
    initial step sizes of the `inference` group.

  Raises:
    TypeError: `options` is not an `E2EOptions` (it is required: it holds `gbi`).
  """
  o = _check_options(options)
  protocol.check_smooth(energy)
  model = protocol.as_energy(energy)
  init = o.init
  if init is None:
    init = "local" if "local" in model.starts else model.inits[0]
  if init not in model.inits:
    raise ValueError(f"unknown init {init!r}; expected one of {model.inits}")
  if isinstance(o.loss, task_losses.Log) and isinstance(model.domain, domains.Real):
    raise ValueError(
      "loss=Log() (BCE) needs outputs in (0, 1); the Real domain takes loss=Squared()"
    )
  gbi, loss, loss_reduction, l2 = o.gbi, o.loss, o.loss_reduction, o.l2
  assert gbi is not None  # `E2EOptions` rejects None
  learn_step_sizes = o.learn_step_sizes
  strategy = o.gradient
  clamped = protocol.trainable_groups(model, o.trainable)
  weights = iterate_weights(gbi.num_steps, o.per_iterate)

  def unroll(energy_params, inference_params, x, train=False, rng=None, residual_probe=None):
    inputs = model.encode(energy_params, x, train, rng)
    y0 = model.start(inputs, x, init)
    eta = step_sizes(inference_params)
    if not learn_step_sizes:
      eta = jax.lax.stop_gradient(eta)
    config = gbi._replace(step_sizes=eta.astype(y0.dtype))
    gradient = (
      strategy
      if residual_probe is None
      else functools.partial(strategy, residual_probe=residual_probe)
    )
    y_final, ys = unrolled.unrolled_gbi(
      model.energy, energy_params, inputs, y0, model.domain, config, gradient
    )
    return y0, y_final, ys

  def loss_fn(params, batch, rng):
    # An `Implicit` update passes a third, zero parameter: its gradient is the residual.
    energy_params, inference_params, *residual_probe = params
    energy_params = base.clamp_groups(energy_params, clamped)
    y0, _, ys = unroll(energy_params, inference_params, batch["x"], True, rng, *residual_probe)
    y = batch["y"]
    per_step = jax.vmap(lambda y_t: jnp.mean(iterate_loss(y_t, y, loss, loss_reduction)))(ys)
    value = jnp.sum(weights.astype(per_step.dtype) * per_step)
    total = value + l2 * base.groups_l2(energy_params, clamped) if l2 else value
    return total, {
      "unrolled_loss": value,
      "final_loss": per_step[-1],
      "initial_loss": jnp.mean(iterate_loss(y0, y, loss, loss_reduction)),
      "step_size_mean": jnp.mean(step_sizes(inference_params)),
    }

  return E2ELosses(loss_fn, unroll, model, init_step_sizes(gbi))


def e2e_objective(
  energy: Any,
  optimizer: optax.GradientTransformation,
  *,
  options: E2EOptions | None = None,
  step_size_optimizer: optax.GradientTransformation | None = None,
) -> base.Objective:
  """End-to-end training through `gbi.num_steps` unrolled GBI steps (module docstring).

  Args:
    energy: any energy `protocol.as_energy` accepts: an `Energy`
      (`en.energy_from_function`, `en.energy_from_module`) or a library energy.
    optimizer: updates the energy's `trainable` groups (and the step sizes, unless
      `step_size_optimizer` is given).
    options: an `E2EOptions` (required; its `gbi` is the unrolled inference).
    step_size_optimizer: a separate optimizer for the step sizes (default `optimizer`).

  Returns:
    An `Objective` with state `{"energy", "inference"}` (`ParamGroup`s); `update`'s
    metrics: `loss`, `grad_norm`, `unrolled_loss` (the loss without l2), `final_loss`
    (mean ℓ(y_T, y*)), `initial_loss` (ℓ(y_0, y*)), `step_size_mean`; with an
    `inference.Implicit` gradient also `implicit_residual`, the relative residual of its
    backward solve (large: the implicit update is unreliable; `Implicit` also warns).
  """
  options = _check_options(options)
  fns = e2e_losses(energy, options=options)
  trainable, learn_step_sizes = options.trainable, options.learn_step_sizes
  model = fns.model
  reports_residual = isinstance(options.gradient, unrolled.Implicit)
  energy_opt = base.masked_optimizer(optimizer, protocol.trainable_groups(model, trainable))
  step_opt = (step_size_optimizer or optimizer) if learn_step_sizes else optax.set_to_zero()

  def make_state(energy_params, inference_params):
    return {
      "energy": base.init_group(energy_params, energy_opt),
      "inference": base.init_group(inference_params, step_opt),
    }

  def fresh_inference():
    return {"step_sizes": jnp.array(fns.initial_step_sizes)}  # a copy: states are donated

  def init(rng, batch):
    params = protocol.init_checked(model, rng, batch["x"], batch["y"], trainable)
    return make_state(params, fresh_inference())

  def init_from(prev_state, rng, batch):
    protocol.check_y(model, batch["x"], batch["y"])
    energy_params = model.continue_from(prev_state, rng, batch["x"], batch["y"])
    protocol.check_trainable(trainable, energy_params, model.name)
    inference_params = fresh_inference()
    previous = prev_state.get("inference") if hasattr(prev_state, "get") else None
    if previous is not None and base.same_shapes(previous.params, inference_params):
      inference_params = flax.core.unfreeze(previous.params)
    return make_state(energy_params, inference_params)

  def update(state, batch, rng):
    params = (state["energy"].params, state["inference"].params)
    if reports_residual:
      params += (jnp.zeros((), jnp.float32),)
    metrics, grads = base.metrics_and_grads(fns.loss_fn, params, batch, rng)
    energy_grads, inference_grads = grads[:2]
    if reports_residual:
      metrics = dict(metrics, grad_norm=optax.tree.norm(grads[:2]), implicit_residual=grads[2])
    return {
      "energy": base.apply_gradients(state["energy"], energy_grads, energy_opt),
      "inference": base.apply_gradients(state["inference"], inference_grads, step_opt),
    }, metrics

  def predict(state, x):
    return fns.unroll(state["energy"].params, state["inference"].params, x)[1]

  return base.Objective(init, update, predict, init_from)
