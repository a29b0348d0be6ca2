"""InfNet's losses: the energy as the losses see it, and the I-step and E-step losses
(`infnet_losses`).
"""

from collections.abc import Callable
from typing import Any
from typing import NamedTuple

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp

from energynets.energies import protocol
from energynets.objectives import base
from energynets.objectives import outputs
from energynets.objectives import task_losses
from energynets.objectives.infnet.architectures import apply_net
from energynets.objectives.infnet.energy_objectives import EnergyOf
from energynets.objectives.infnet.energy_objectives import InfNetCompound
from energynets.objectives.infnet.energy_objectives import InfNetEnergyInputs
from energynets.objectives.infnet.energy_objectives import InfNetEnergyObjective
from energynets.objectives.infnet.options import InfNetOptions

NetParams = dict[str, Any]  # {"test_net": Ψ, "cost_net": Φ (absent without F_Φ)}


# ---------------------------------------------------------------------------------------
# The energy as the losses see it.


def energy_evaluator(
  energy, params, x: jax.Array, *, train: bool = False, rng: jax.Array | None = None
) -> EnergyOf:
  """`ȳ [B, L] -> E(x, ȳ) [B]` for a fixed `x [B, D]`.

  `energy` is anything `protocol.as_energy` accepts; x is encoded once here
  (`Energy.encode`, with the dropout `rng` in training) and every evaluation reuses the
  encoding (same dropout mask).
  """
  model = protocol.as_energy(energy)
  encoding = model.encode(params, x, train, rng if train else None)
  return lambda y: model.energy(params, encoding, y)


# ---------------------------------------------------------------------------------------
# The two losses.


class InfNetLosses(NamedTuple):
  """The pure functions `inference_network` is built from (exposed for tests and reuse).

  Attributes:
    net_logits: `(net_params, x [B, D], y [B, L], train, rng) -> (test_logits [B, L],
      cost_logits [B, L] or None)`; `y` only feeds F_Φ (`InfNetStacked`'s).
    init_nets: `(rng, batch) -> net_params`, fresh `{"test_net", "cost_net"}`.
    inference_loss: `(net_params, energy_of, batch, rng) -> (loss, metrics)`, the I-step
      loss (module docstring) at a fixed energy `energy_of = energy_evaluator(...)`.
    energy_loss: `(energy_params, batch, y_cost, y_test, rng) -> (loss, metrics)`, the
      E-step loss at fixed net outputs (`[B, L]` probabilities; `y_cost` is None for
      an objective without F_Φ, `y_test` is unused by `InfNetMargin`).
    structure: the `OutputStructure` (link, local CE, padding) the losses use.
  """

  net_logits: Callable[..., tuple[jax.Array, jax.Array | None]]
  init_nets: Callable[[jax.Array, base.Batch], NetParams]
  inference_loss: Callable[..., tuple[jax.Array, base.Metrics]]
  energy_loss: Callable[..., tuple[jax.Array, base.Metrics]]
  structure: outputs.OutputStructure = outputs.MULTILABEL


def infnet_losses(
  energy: Any,
  net: nn.Module,
  *,
  options: InfNetOptions | None = None,
  energy_objective: InfNetEnergyObjective | None = None,
) -> InfNetLosses:
  """The I-step and E-step losses and the nets' forward pass (see `inference_network`).

  Args:
    energy: E_Θ, anything `protocol.as_energy` accepts.
    net: the inference networks' architecture (see `inference_network`).
    options: `InfNetOptions` (default: `InfNetOptions()`).
    energy_objective: the E-step loss, an `InfNetEnergyObjective` value (default
      `InfNetCompound()`).

  Returns:
    `InfNetLosses`.
  """
  options = InfNetOptions() if options is None else options
  objective = InfNetCompound() if energy_objective is None else energy_objective
  architecture, surrogate = options.architecture, options.surrogate
  ce_weight, l2, net_l2 = options.ce_weight, options.l2, options.net_l2
  model = protocol.as_energy(energy)
  structure = outputs.for_domain(model.domain) if options.output is None else options.output
  link = structure.link
  truncate_cost = options.truncate.inference_step
  truncated = options.truncate.energy_hinge

  def delta_of(y_hat, y):  # Δ over real positions (sequences: padding excluded)
    return task_losses.task_loss(structure.mask_padding(y_hat, y), y, surrogate)

  uses_cost = bool(getattr(objective, "uses_cost_net", True))
  energy_weight = options.energy_weight
  if energy_weight is None:
    energy_weight = getattr(objective, "default_energy_weight", 1.0)

  def net_logits(net_params, x, y, train=False, rng=None):
    test_rng = cost_rng = None
    if train:
      test_rng, cost_rng = jax.random.split(rng)
    if not uses_cost:
      return apply_net(net, net_params["test_net"], x, train, test_rng), None
    return architecture.logits(net, net_params, x, y, link, train, test_rng, cost_rng)

  def init_nets(rng, batch):
    test_rng, cost_rng = jax.random.split(rng)
    x, y = batch["x"], batch["y"]
    params = {"test_net": flax.core.unfreeze(net.init({"params": test_rng}, x)["params"])}
    if not uses_cost:
      return params
    cost = architecture.init_cost_net(net, cost_rng, x, y, params["test_net"])
    params["cost_net"] = flax.core.unfreeze(cost)
    return params

  def inference_loss(net_params, energy_of, batch, rng):
    y = batch["y"]
    test_logits, cost_logits = net_logits(net_params, batch["x"], y, train=True, rng=rng)
    y_test = link(test_logits)
    e_test = jnp.mean(energy_of(y_test))
    ce_test = structure.local_loss(test_logits, y)
    loss = energy_weight * e_test + ce_weight * ce_test
    metrics = {"energy_test": e_test, "ce_test": ce_test}
    if uses_cost:
      y_cost = link(cost_logits)
      delta = delta_of(y_cost, y)
      e_cost = energy_of(y_cost)
      if truncate_cost:  # Tu & Gimpel 2018: maximize the truncated hinge
        cost_term = -jnp.mean(jax.nn.relu(delta - e_cost + energy_of(y)))
      else:  # −(Δ − E(F)); E(x, y) is constant in Φ
        cost_term = jnp.mean(e_cost - delta)
      ce_cost = structure.local_loss(cost_logits, y)
      loss = loss + cost_term + ce_weight * ce_cost
      metrics.update(
        cost_augmented=jnp.mean(delta - e_cost), delta=jnp.mean(delta), ce_cost=ce_cost
      )
    if net_l2:
      loss = loss + net_l2 * base.l2_penalty(net_params)
    return loss, metrics

  def energy_loss(energy_params, batch, y_cost, y_test, rng):
    energy_of = energy_evaluator(model, energy_params, batch["x"], train=True, rng=rng)
    y = batch["y"]
    gold = jnp.asarray(y, _float_dtype(energy_params))
    e_gold = energy_of(gold)
    gold_metric = jnp.mean(e_gold)
    delta = None
    if uses_cost:
      y_cost = jax.lax.stop_gradient(y_cost)
      delta = delta_of(y_cost, y)
    loss, metrics = objective.loss(
      InfNetEnergyInputs(
        energy_of=energy_of,
        y=gold,
        energy_gold=e_gold,
        y_cost=y_cost if uses_cost else None,
        y_test=jax.lax.stop_gradient(y_test),
        delta=delta,
        truncate=truncated,
        structure=structure,
      )
    )
    metrics = {"energy_gold": gold_metric, **metrics}
    if l2:
      loss = loss + l2 * base.l2_penalty(energy_params)
    return loss, metrics

  return InfNetLosses(net_logits, init_nets, inference_loss, energy_loss, structure)


def _float_dtype(params) -> jnp.dtype:
  """The dtype of a parameter pytree's first leaf (gold labels are cast to it)."""
  leaves = jax.tree.leaves(params)
  return leaves[0].dtype if leaves else jnp.float32
