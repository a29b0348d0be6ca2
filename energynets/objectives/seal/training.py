"""SEAL's losses and training step: L_E and L_F (`seal_losses`) and the objective that
alternates them (`seal_objective`: loss-net steps, then a task-net step, per round).
"""

from typing import Any, Callable, NamedTuple, Optional

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
from energynets.objectives.seal.options import resolve
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


def seal_losses(task_net: nn.Module, loss_net: Any, *, options: Optional[SealOptions] = None,
                loss_net_objective: Optional[LossNetObjective] = None,
                **flat_options: Any) -> SealLosses:
  """L_E and L_F of SEAL (see the module docstring).

  Args:
    task_net: `F_Φ`, called as `task_net(x, train=...) -> logits [B, L]`.
    loss_net: `E_Θ`, any energy `protocol.as_energy` accepts (an `Energy`, or a
      library energy such as `SPENEnergy`).
    options: `SealOptions` (default: `SealOptions()`); L_E and L_F read `phase`, the
      weights, `energy_term`, `score` and `train_mode`.
    loss_net_objective: L_E, a `LossNetObjective` value (default `SealNCE()`).
    **flat_options: instead of the two values, the flat form configs use
      (`objective='nce', num_samples=10, phase=...`; `seal_options_from_config`).

  Returns:
    `SealLosses(loss_net, task_net)`.
  """
  options, objective = resolve(options, loss_net_objective, flat_options)
  phase, train_mode, energy_term = options.phase, options.train_mode, options.energy_term
  energy_weight, bce_weight = options.energy_weight, options.bce_weight
  score_fn = options.score_fn()
  model = protocol.as_energy(loss_net)
  structure = outputs.for_domain(model.domain)
  check = getattr(objective, "check", None)
  if check is not None:
    check(phase, structure)
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
    return objective.loss(LossNetInputs(
        energy=model, params=loss_params, encoding=encoding, x=x, y=y,
        task_logits=task_logits, rng=sample_rng, extra_rng=extra_rng, phase=phase,
        structure=structure, score=real_score))

  def summed_term(loss_params, x, y_hat, rng):
    energy = energy_fn(loss_params, model.encode(loss_params, x, rng is not None, rng), y_hat)
    term = energy if energy_term == "energy" else -dvn.predicted_value(energy)
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
        loss_params, batch["x"], fixed, loss_rng)
    term_sum = term_sum + jnp.sum(jax.lax.stop_gradient(term_grad) * (y_hat - fixed))
    bce = structure.local_loss(logits, batch["y"])  # BCE, or token CE on sequences
    loss = energy_weight * term_sum / energy.shape[0] + bce_weight * bce
    y = jnp.asarray(batch["y"], fixed.dtype)
    score_grad = jax.grad(lambda v: -jnp.sum(real_score(v, y)))(fixed)
    return loss, {"energy": jnp.mean(energy), "bce": bce,
                  "score_grad_cosine": gradient_cosine(term_grad, score_grad)}

  return SealLosses(loss_net_loss, task_net_loss)


def gradient_cosine(a: jax.Array, b: jax.Array) -> jax.Array:
  """`[B, ...] x2 -> []`: the cosine of a and b per example, averaged over the batch: 1
  where the loss-net pushes ȳ exactly as the score would (a perfect regression
  loss-net), about 0 where it carries none of it, < 0 where it pushes against it."""
  axes = tuple(range(1, a.ndim))
  norms = jnp.sqrt(jnp.sum(a * a, axis=axes) * jnp.sum(b * b, axis=axes))
  return jnp.mean(jnp.sum(a * b, axis=axes) / jnp.maximum(norms, 1e-12))


def seal_objective(task_net: nn.Module, loss_net: Any,
                   task_optimizer: optax.GradientTransformation,
                   loss_net_optimizer: optax.GradientTransformation, *,
                   options: Optional[SealOptions] = None,
                   loss_net_objective: Optional[LossNetObjective] = None,
                   **flat_options: Any) -> base.Objective:
  """The SEAL objective (see the module docstring).

  Args:
    task_net: `F_Φ`, called as `task_net(x, train=...) -> logits [B, L]`.
    loss_net: `E_Θ`, any energy `protocol.as_energy` accepts (an `Energy` from
      `energy_from_module` / `energy_from_function`, or a library energy); checked
      against the first batch at `init` (`protocol.EnergyShapeError`).
    task_optimizer: the task-net's optimizer (SEAL: Adam).
    loss_net_optimizer: the loss-net's optimizer (SEAL: a separate Adam).
    options: the family's options, `SealOptions` (default: SEAL-dynamic, λ1 = λ2 = 1,
      one loss-net step then one task-net step per update, prediction σ(F(x))).
    loss_net_objective: L_E, a `LossNetObjective` value: `SealMargin`,
      `SealRegression`, `SealRegressionS`, `SealNCE` (the default, K = 10) or your own.
    **flat_options: instead of the two values, the flat form configs use
      (`objective='nce', num_samples=10, phase=...`; see `seal_options_from_config`).

  Returns:
    An `Objective` with state `{"task_net": ParamGroup, "loss_net": ParamGroup}`.
  """
  options, loss_net_objective = resolve(options, loss_net_objective, flat_options)
  model = protocol.as_energy(loss_net)
  losses = seal_losses(task_net, model, options=options,
                       loss_net_objective=loss_net_objective)
  phase, task_net_init = options.phase, options.task_net_init
  loss_net_steps, rounds = options.loss_net_steps, options.rounds
  predict, predict_init, predict_gbi = (options.predict, options.predict_init,
                                        options.predict_gbi)
  trains_loss_net = phase in ("dynamic", "loss_net")
  trains_task_net = phase in ("dynamic", "task_net")
  structure = outputs.for_domain(model.domain)

  def fresh_task_params(rng, x):
    return flax.core.unfreeze(task_net.init({"params": rng}, x)["params"])

  def gold(batch):
    return jnp.asarray(batch["y"], jnp.result_type(float))

  def make_state(task_params, loss_params):
    task = (base.init_group(task_params, task_optimizer) if trains_task_net
            else frozen_group(task_params))
    loss = (base.init_group(loss_params, loss_net_optimizer) if trains_loss_net
            else frozen_group(loss_params))
    return {"task_net": task, "loss_net": loss}

  def init(rng, batch):
    if phase == "task_net":
      raise ValueError("SEAL phase 'task_net' trains against a frozen, trained loss-net: "
                       "continue a 'loss_net'-phase or SPEN state with init_from, not init")
    task_rng, loss_rng = jax.random.split(rng)
    task_params = fresh_task_params(task_rng, batch["x"])
    loss_params = protocol.init_checked(model, loss_rng, batch["x"], gold(batch))
    return make_state(task_params, loss_params)

  def init_from(prev_state, rng, batch):
    known = ("task_net", "net", "loss_net", "energy")
    if not any(k in prev_state for k in known):
      raise ValueError(f"cannot continue from a state with keys {sorted(prev_state)}; "
                       f"expected some of {known}")
    x = batch["x"]
    task_rng, loss_rng = jax.random.split(rng)
    task_params = fresh_task_params(task_rng, x)
    task_key = first_present(prev_state, ("task_net", "net"))
    if task_net_init == "carry" and task_key:
      task_params = base.carried(prev_state[task_key].params, task_params,
                                 f"the previous {task_key!r} params into the task-net")
    loss_key = first_present(prev_state, ("loss_net", "energy"))
    if loss_key:
      # Only the loss-net's group continues into the energy: a {"net"} in the same state
      # is the task-net's.
      loss_params = model.continue_from({"energy": prev_state[loss_key]}, loss_rng, x,
                                        gold(batch))
      protocol.check(model, x, gold(batch), loss_params)
    elif phase == "task_net":
      raise ValueError("SEAL phase 'task_net' needs a trained loss-net, but the previous "
                       f"state has only {sorted(prev_state)}")
    else:
      loss_params = protocol.init_checked(model, loss_rng, x, gold(batch))
    return make_state(task_params, loss_params)

  def group_step(state, batch, rng, group, other, loss_fn, optimizer):
    metrics, grads = base.metrics_and_grads(loss_fn, state[group].params,
                                            state[other].params, batch, rng)
    return dict(state, **{group: base.apply_gradients(state[group], grads, optimizer)}), metrics

  def loss_net_phase(state, batch, rng):
    """`loss_net_steps` loss-net updates on the batch; the metrics of the last one."""
    def body(state, step_rng):
      return group_step(state, batch, step_rng, "loss_net", "task_net", losses.loss_net,
                        loss_net_optimizer)
    return _scan_last(body, state, rng, loss_net_steps)

  def task_net_phase(state, batch, rng):
    return group_step(state, batch, rng, "task_net", "loss_net", losses.task_net,
                      task_optimizer)

  phases = [(group, fn) for group, fn, trains in (
      ("loss_net", loss_net_phase, trains_loss_net),
      ("task_net", task_net_phase, trains_task_net)) if trains]

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
    if predict == "task_net":
      return structure.link(logits)
    params = state["loss_net"].params
    encoding = jax.lax.stop_gradient(model.encode(params, x))
    domain = structure.domain
    y0 = (domain.uniform_init(logits.shape, logits.dtype) if predict_init == "uniform"
          else structure.link(logits))
    return gbi_lib.gbi_while(model.energy, params, encoding, y0, domain, predict_gbi).y

  return base.Objective(init, update, predict_fn, init_from)


def _scan_last(body, state, rng, length: int):
  """`length` applications of `body(state, rng) -> (state, metrics)` with split keys;
  the metrics of the last. One application is traced inline (no scan): the common case."""
  if length == 1:
    return body(state, rng)
  state, metrics = jax.lax.scan(body, state, jax.random.split(rng, length))
  return state, jax.tree.map(lambda m: m[-1], metrics)
