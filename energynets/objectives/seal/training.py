"""SEAL's losses and training step: L_E and L_F (`seal_losses`) and the objective that
alternates them (`seal_objective`: loss-net steps, then a task-net step, per round).
"""

from collections.abc import Callable
from typing import Any
from typing import NamedTuple

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from energynets.energies import protocol
from energynets.inference import gbi as gbi_lib
from energynets.objectives import base
from energynets.objectives import dvn
from energynets.objectives import outputs
from energynets.objectives.seal.blocks import first_present
from energynets.objectives.seal.blocks import frozen_group
from energynets.objectives.seal.blocks import task_net_logits
from energynets.objectives.seal.loss_net_objectives import LossNetInputs
from energynets.objectives.seal.loss_net_objectives import LossNetObjective
from energynets.objectives.seal.loss_net_objectives import SealNCE
from energynets.objectives.seal.options import SealOptions


class SealLosses(NamedTuple):
  """The two SEAL losses, pure functions returning `(scalar loss, metrics)`.

  Attributes:
    loss_net: `(loss_params, task_params, batch, rng)`: L_E, differentiable w.r.t.
      `loss_params` only (samples, ŷ and scores carry no gradient).
    task_net: `(task_params, loss_params, batch, rng)`: L_F of Eq. 1, differentiable
      w.r.t. `task_params` only (the loss-net is a constant).
  """

  loss_net: Callable[..., tuple[jax.Array, base.Metrics]]
  task_net: Callable[..., tuple[jax.Array, base.Metrics]]


def _is_energy(value: Any) -> bool:
  """An `Energy`, or a module that makes one (the library's energies)."""
  return isinstance(value, protocol.Energy) or callable(getattr(value, "as_energy", None))


def _check_loss_net_first(loss_net: Any, task_net: Any, signature: str) -> None:
  """Both networks are modules, so a swapped call would train each in the other's role:
  refuses a first argument that is not an energy (TypeError, one line)."""
  if _is_energy(loss_net):
    return
  hint = (
    "the task-net and the loss-net look swapped"
    if _is_energy(task_net)
    else "wrap a plain module with en.energy_from_module(module, domain=..., y_shape=...)"
  )
  raise TypeError(
    f"{signature} takes the loss-net, an energy, first; got {type(loss_net).__name__} there: {hint}"
  )


def seal_losses(
  loss_net: Any,
  task_net: nn.Module,
  *,
  options: SealOptions | None = None,
  loss_net_objective: LossNetObjective | None = None,
) -> SealLosses:
  """L_E and L_F of SEAL (see the module docstring).

  Args:
    loss_net: `E_Θ`, any energy `protocol.as_energy` accepts (an `Energy`, or a
      library energy such as `SPENEnergy`).
    task_net: `F_Φ`, called as `task_net(x, train=...) -> logits [B, L]`.
    options: `SealOptions` (default: `SealOptions()`); L_E and L_F read which networks
      train, the weights, `neg_value_term`, `score` and `train_mode`.
    loss_net_objective: L_E, a `LossNetObjective` value (default `SealNCE()`).

  Returns:
    `SealLosses(loss_net, task_net)`.

  Raises:
    TypeError: `loss_net` is not an energy (e.g. the networks given in the wrong order).
  """
  _check_loss_net_first(loss_net, task_net, "seal_losses(loss_net, task_net, *, ...)")
  options = SealOptions() if options is None else options
  objective = SealNCE() if loss_net_objective is None else loss_net_objective
  dynamic, train_mode = options.dynamic, options.train_mode
  energy_weight, bce_weight = options.energy_weight, options.bce_weight
  score_weight = options.score_weight
  neg_value_term, score_fn = options.neg_value_term, options.score
  model = protocol.as_energy(loss_net)
  structure = outputs.for_domain(model.domain)
  check = getattr(objective, "check", None)
  if check is not None and options.train_loss_net:
    check(dynamic, structure)
  link, real = structure.link, structure.mask_padding
  energy_fn = model.energy
  real_score = lambda y_hat, y: score_fn(real(y_hat, y), y)

  def loss_net_loss(loss_params, task_params, batch, rng):
    dropout_rng, sample_rng, extra_rng = jax.random.split(rng, 3)
    x = batch["x"]
    encoding = model.encode(loss_params, x, True, dropout_rng)
    # fold_in, not a wider split, so that runs without train_mode keep their streams.
    task_rng = jax.random.fold_in(rng, 1) if train_mode else None
    task_logits = jax.lax.stop_gradient(task_net_logits(task_net, task_params, x, task_rng))
    y = jnp.asarray(batch["y"], task_logits.dtype)
    return objective.loss(
      LossNetInputs(
        energy=model,
        params=loss_params,
        encoding=encoding,
        x=x,
        y=y,
        task_logits=task_logits,
        rng=sample_rng,
        extra_rng=extra_rng,
        dynamic=dynamic,
        structure=structure,
        score=real_score,
      )
    )

  def summed_term(loss_params, x, y_hat, rng):
    energy = energy_fn(loss_params, model.encode(loss_params, x, rng is not None, rng), y_hat)
    term = -dvn.predicted_value(energy) if neg_value_term else energy
    return jnp.sum(term), energy

  def task_net_loss(task_params, loss_params, batch, rng):
    logits = task_net_logits(task_net, task_params, batch["x"], rng)
    loss_params = jax.lax.stop_gradient(loss_params)
    y_hat = link(logits)
    fixed = jax.lax.stop_gradient(y_hat)
    # One loss-net pass gives the term and its gradient in ȳ. The task-net's gradient is
    # that ȳ-gradient chained through ȳ(Φ) (the linear part: value 0), and the alignment
    # metric compares the same gradient with the score's, so no second pass is needed.
    loss_rng = jax.random.fold_in(rng, 1) if train_mode and rng is not None else None
    (term_sum, energy), term_grad = jax.value_and_grad(summed_term, argnums=2, has_aux=True)(
      loss_params, batch["x"], fixed, loss_rng
    )
    term_sum = term_sum + jnp.sum(jax.lax.stop_gradient(term_grad) * (y_hat - fixed))
    bce = structure.local_loss(logits, batch["y"])  # BCE, or token CE on sequences
    loss = energy_weight * term_sum / energy.shape[0] + bce_weight * bce
    y = jnp.asarray(batch["y"], fixed.dtype)
    score_grad = jax.grad(lambda v: -jnp.sum(real_score(v, y)))(fixed)
    metrics = {
      "energy": jnp.mean(energy),
      "bce": bce,
      "score_grad_cosine": gradient_cosine(term_grad, score_grad),
    }
    if score_weight:
      score = jnp.mean(real_score(y_hat, y))
      loss = loss - score_weight * score
      metrics["score"] = score
    return loss, metrics

  return SealLosses(loss_net_loss, task_net_loss)


def gradient_cosine(a: jax.Array, b: jax.Array) -> jax.Array:
  """`[B, ...] x2 -> []`: the cosine of a and b per example, averaged over the batch: 1
  where the loss-net pushes ȳ exactly as the score would (a perfect regression
  loss-net), about 0 where it carries none of it, < 0 where it pushes against it."""
  axes = tuple(range(1, a.ndim))
  norms = jnp.sqrt(jnp.sum(a * a, axis=axes) * jnp.sum(b * b, axis=axes))
  return jnp.mean(jnp.sum(a * b, axis=axes) / jnp.maximum(norms, 1e-12))


def seal_objective(
  loss_net: Any,
  task_net: nn.Module,
  loss_net_optimizer: optax.GradientTransformation,
  task_net_optimizer: optax.GradientTransformation,
  *,
  options: SealOptions | None = None,
  loss_net_objective: LossNetObjective | None = None,
) -> base.Objective:
  """The SEAL objective (see the module docstring).

  Args:
    loss_net: `E_Θ`, any energy `protocol.as_energy` accepts (an `Energy` from
      `energy_from_module` / `energy_from_function`, or a library energy); checked
      against the first batch at `init` (`protocol.EnergyShapeError`).
    task_net: `F_Φ`, called as `task_net(x, train=...) -> logits [B, L]`.
    loss_net_optimizer: the loss-net's optimizer (SEAL: Adam).
    task_net_optimizer: the task-net's optimizer (SEAL: a separate Adam).
    options: the family's options, `SealOptions` (default: SEAL-dynamic, λ1 = λ2 = 1,
      one loss-net step then one task-net step per update, prediction σ(F(x))).
    loss_net_objective: L_E, a `LossNetObjective` value: `SealMargin`,
      `SealRegression`, `SealRegressionS`, `SealNCE` (the default, K = 10) or your own.

  Returns:
    An `Objective` with state `{"task_net": ParamGroup, "loss_net": ParamGroup}`.

  Raises:
    TypeError: `loss_net` is not an energy (e.g. the networks given in the wrong order).
  """
  _check_loss_net_first(
    loss_net,
    task_net,
    "seal_objective(loss_net, task_net, loss_net_optimizer, task_net_optimizer, *, ...)",
  )
  options = SealOptions() if options is None else options
  model = protocol.as_energy(loss_net)
  losses = seal_losses(model, task_net, options=options, loss_net_objective=loss_net_objective)
  fresh_task_net = options.fresh_task_net
  loss_net_steps, rounds = options.loss_net_steps, options.rounds
  predict_gbi, predict_from_task_net = options.predict_gbi, options.predict_from_task_net
  trains_loss_net, trains_task_net = options.train_loss_net, options.train_task_net
  structure = outputs.for_domain(model.domain)

  def fresh_task_params(rng, x):
    return flax.core.unfreeze(task_net.init({"params": rng}, x)["params"])

  def gold(batch):
    return jnp.asarray(batch["y"], jnp.result_type(float))

  def make_state(task_params, loss_params):
    task = (
      base.init_group(task_params, task_net_optimizer)
      if trains_task_net
      else frozen_group(task_params)
    )
    loss = (
      base.init_group(loss_params, loss_net_optimizer)
      if trains_loss_net
      else frozen_group(loss_params)
    )
    return {"task_net": task, "loss_net": loss}

  def init(rng, batch):
    if not trains_loss_net:
      raise ValueError(
        "SEAL's static task-net phase trains against a frozen, trained "
        "loss-net: continue a loss-net-phase or SPEN state with init_from, "
        "not init"
      )
    task_rng, loss_rng = jax.random.split(rng)
    task_params = fresh_task_params(task_rng, batch["x"])
    loss_params = protocol.init_checked(model, loss_rng, batch["x"], gold(batch))
    return make_state(task_params, loss_params)

  def init_from(prev_state, rng, batch):
    known = ("task_net", "net", "loss_net", "energy")
    if not any(k in prev_state for k in known):
      raise ValueError(
        f"cannot continue from a state with keys {sorted(prev_state)}; expected some of {known}"
      )
    x = batch["x"]
    task_rng, loss_rng = jax.random.split(rng)
    task_params = fresh_task_params(task_rng, x)
    task_key = first_present(prev_state, ("task_net", "net"))
    if not fresh_task_net and task_key:
      task_params = base.carried(
        prev_state[task_key].params,
        task_params,
        f"the previous {task_key!r} params into the task-net",
      )
    loss_key = first_present(prev_state, ("loss_net", "energy"))
    if loss_key:
      # Only the loss-net's group continues into the energy: a {"net"} in the same state
      # is the task-net's.
      loss_params = model.continue_from({"energy": prev_state[loss_key]}, loss_rng, x, gold(batch))
      protocol.check(model, x, gold(batch), loss_params)
    elif not trains_loss_net:
      raise ValueError(
        "SEAL's static task-net phase needs a trained loss-net, but the "
        f"previous state has only {sorted(prev_state)}"
      )
    else:
      loss_params = protocol.init_checked(model, loss_rng, x, gold(batch))
    return make_state(task_params, loss_params)

  def group_step(state, batch, rng, group, other, loss_fn, optimizer):
    metrics, grads = base.metrics_and_grads(
      loss_fn, state[group].params, state[other].params, batch, rng
    )
    return dict(state, **{group: base.apply_gradients(state[group], grads, optimizer)}), metrics

  def loss_net_phase(state, batch, rng):
    """`loss_net_steps` loss-net updates on the batch; the metrics of the last one."""

    def body(state, step_rng):
      return group_step(
        state, batch, step_rng, "loss_net", "task_net", losses.loss_net, loss_net_optimizer
      )

    return _scan_last(body, state, rng, loss_net_steps)

  def task_net_phase(state, batch, rng):
    return group_step(
      state, batch, rng, "task_net", "loss_net", losses.task_net, task_net_optimizer
    )

  phases = [
    (group, fn)
    for group, fn, trains in (
      ("loss_net", loss_net_phase, trains_loss_net),
      ("task_net", task_net_phase, trains_task_net),
    )
    if trains
  ]

  def one_round(state, batch, rng):
    """Eq. 4-5's order: the task-net step sees the loss-net just updated (Θ_t)."""
    metrics, step_losses, norms = {}, [], []
    # One key per group, whichever groups the phase trains, so a group's randomness does
    # not depend on whether the other group is trained (static vs dynamic).
    keys = dict(zip(("loss_net", "task_net"), jax.random.split(rng)))
    for group, fn in phases:
      state, step_metrics = fn(state, batch, keys[group])
      metrics.update({f"{group}_{k}": v for k, v in step_metrics.items()})
      step_losses.append(step_metrics["loss"])
      norms.append(step_metrics["grad_norm"])
    metrics["loss"] = sum(step_losses)
    metrics["grad_norm"] = jnp.sqrt(sum(jnp.square(n) for n in norms))
    return state, metrics

  def update(state, batch, rng):
    return _scan_last(lambda st, r: one_round(st, batch, r), dict(state), rng, rounds)

  def predict_fn(state, x):
    logits = task_net_logits(task_net, state["task_net"].params, x)
    if predict_gbi is None:
      return structure.link(logits)
    params = state["loss_net"].params
    encoding = jax.lax.stop_gradient(model.encode(params, x))
    domain = structure.domain
    y0 = (
      structure.link(logits)
      if predict_from_task_net
      else domain.uniform_init(logits.shape, logits.dtype)
    )
    return gbi_lib.gbi_while(model.energy, params, encoding, y0, domain, predict_gbi).y

  return base.Objective(init, update, predict_fn, init_from)


def _scan_last(body, state, rng, length: int):
  """`length` applications of `body(state, rng) -> (state, metrics)` with split keys;
  the metrics of the last. One application is traced inline (no scan): the common case."""
  if length == 1:
    return body(state, rng)
  state, metrics = jax.lax.scan(body, state, jax.random.split(rng, length))
  return state, jax.tree.map(lambda m: m[-1], metrics)
