"""InfNet's networks and losses: the cost-augmented net's extra heads, the energy as the
losses see it, and the I-step and E-step losses (`infnet_losses`).
"""

from typing import Any, Callable, NamedTuple, Optional

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp

from energynets.energies import protocol
from energynets.objectives import base
from energynets.objectives import outputs
from energynets.objectives import task_losses
from energynets.objectives.infnet.energy_objectives import EnergyOf
from energynets.objectives.infnet.energy_objectives import InfNetEnergyInputs
from energynets.objectives.infnet.energy_objectives import InfNetEnergyObjective
from energynets.objectives.infnet.options import InfNetOptions
from energynets.objectives.infnet.options import resolve

NetParams = dict[str, Any]  # {"test_net": Ψ, "cost_net": Φ (absent without F_Φ)}


# ---------------------------------------------------------------------------------------
# The cost-augmented network's extra heads.


class CostHead(nn.Module):
  """`'shared'` F_Φ: `features [B, H] -> logits [B, L]` on A_Ψ's feature network."""
  num_labels: int

  @nn.compact
  def __call__(self, features: jax.Array) -> jax.Array:
    return nn.Dense(self.num_labels, name="head")(features)


class StackedCostNet(nn.Module):
  """`'stacked'` F_Φ: `(A_Ψ(x) [B, L] probabilities, y [B, L]) -> logits [B, L]`.

  `W[A_Ψ(x); y] + b`; the caller stops the gradient at A_Ψ(x).
  """
  num_labels: int

  @nn.compact
  def __call__(self, test_probs: jax.Array, y: jax.Array) -> jax.Array:
    inputs = jnp.concatenate([test_probs, y.astype(test_probs.dtype)], axis=-1)
    return nn.Dense(self.num_labels, name="head")(inputs)


# ---------------------------------------------------------------------------------------
# The energy as the losses see it.


def energy_evaluator(energy, params, x: jax.Array, *, train: bool = False,
                     rng: Optional[jax.Array] = None) -> EnergyOf:
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
      cost_logits [B, L] or None)`; `y` only feeds the `'stacked'` F_Φ.
    init_nets: `(rng, batch) -> net_params`, fresh `{"test_net", "cost_net"}`.
    inference_loss: `(net_params, energy_of, batch, rng) -> (loss, metrics)`, the I-step
      loss (module docstring) at a fixed energy `energy_of = energy_evaluator(...)`.
    energy_loss: `(energy_params, batch, y_cost, y_test, rng) -> (loss, metrics)`, the
      E-step loss at fixed net outputs (`[B, L]` probabilities; `y_cost` is None for
      an objective without F_Φ, `y_test` is unused by `InfNetMargin`).
    structure: the `OutputStructure` (link, local CE, padding) the losses use.
  """
  net_logits: Callable[..., tuple[jax.Array, Optional[jax.Array]]]
  init_nets: Callable[[jax.Array, base.Batch], NetParams]
  inference_loss: Callable[..., tuple[jax.Array, base.Metrics]]
  energy_loss: Callable[..., tuple[jax.Array, base.Metrics]]
  structure: outputs.OutputStructure = outputs.MULTILABEL


def infnet_losses(energy: Any, net: nn.Module, *, options: Optional[InfNetOptions] = None,
                  energy_objective: Optional[InfNetEnergyObjective] = None,
                  **flat_options: Any) -> InfNetLosses:
  """The I-step and E-step losses and the nets' forward pass (see `inference_network`).

  Args:
    energy: E_Θ, anything `protocol.as_energy` accepts.
    net: the inference networks' architecture (see `inference_network`).
    options: `InfNetOptions` (default: `InfNetOptions()`).
    energy_objective: the E-step loss, an `InfNetEnergyObjective` value (default
      `InfNetCompound()`).
    **flat_options: instead of the two values, the flat form configs use
      (`objective='margin', truncate='both', ...`; `infnet_options_from_config`).

  Returns:
    `InfNetLosses`.
  """
  options, objective = resolve(options, energy_objective, flat_options)
  architecture, surrogate = options.architecture, options.surrogate
  ce_weight, l2, net_l2 = options.ce_weight, options.l2, options.net_l2
  model = protocol.as_energy(energy)
  structure = (outputs.for_domain(model.domain) if options.output is None
               else outputs.get_structure(options.output))
  link = structure.link
  truncate_cost = options.truncate == "both"
  truncated = jax.nn.relu if options.truncate != "none" else (lambda v: v)

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
    test_vars = {"params": net_params["test_net"]}
    test_kwargs = {"train": train, "rngs": {"dropout": test_rng} if train else None}
    if not uses_cost:
      return net.apply(test_vars, x, **test_kwargs), None
    if architecture == "shared":
      # One pass of the feature network feeds both heads (one dropout mask).
      test_logits, features = net.apply(test_vars, x, return_features=True, **test_kwargs)
      cost_logits = CostHead(test_logits.shape[-1]).apply(
          {"params": net_params["cost_net"]}, features)
      return test_logits, cost_logits
    test_logits = net.apply(test_vars, x, **test_kwargs)
    if architecture == "separated":
      cost_logits = net.apply({"params": net_params["cost_net"]}, x, train=train,
                              rngs={"dropout": cost_rng} if train else None)
    else:  # stacked: F_Φ's terms must not reach Ψ
      test_probs = jax.lax.stop_gradient(link(test_logits))
      cost_logits = StackedCostNet(test_logits.shape[-1]).apply(
          {"params": net_params["cost_net"]}, test_probs, y)
    return test_logits, cost_logits

  def init_nets(rng, batch):
    test_rng, cost_rng = jax.random.split(rng)
    x, y = batch["x"], batch["y"]
    params = {"test_net": flax.core.unfreeze(net.init({"params": test_rng}, x)["params"])}
    if not uses_cost:
      return params
    num_labels = y.shape[-1]
    if architecture == "separated":
      cost = net.init({"params": cost_rng}, x)["params"]
    elif architecture == "shared":
      _, features = net.apply({"params": params["test_net"]}, x, return_features=True)
      cost = CostHead(num_labels).init({"params": cost_rng}, features)["params"]
    else:
      probs = jnp.zeros(y.shape, x.dtype)
      cost = StackedCostNet(num_labels).init({"params": cost_rng}, probs, y)["params"]
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
      metrics.update(cost_augmented=jnp.mean(delta - e_cost), delta=jnp.mean(delta),
                     ce_cost=ce_cost)
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
    loss, metrics = objective.loss(InfNetEnergyInputs(
        energy_of=energy_of, y=gold, energy_gold=e_gold,
        y_cost=y_cost if uses_cost else None, y_test=jax.lax.stop_gradient(y_test),
        delta=delta, truncate=truncated, structure=structure))
    metrics = {"energy_gold": gold_metric, **metrics}
    if l2:
      loss = loss + l2 * base.l2_penalty(energy_params)
    return loss, metrics

  return InfNetLosses(net_logits, init_nets, inference_loss, energy_loss, structure)


def _float_dtype(params) -> jnp.dtype:
  """The dtype of a parameter pytree's first leaf (gold labels are cast to it)."""
  leaves = jax.tree.leaves(params)
  return leaves[0].dtype if leaves else jnp.float32
