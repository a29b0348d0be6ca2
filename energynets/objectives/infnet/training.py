"""InfNet's joint training step (`inference_network`: k I steps on the nets, then one E
step on the energy) and how a stage carries the previous one's parameters (`carry_params`).
"""

from collections.abc import Mapping
from typing import Any

from absl import logging
import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from energynets.energies import protocol
from energynets.objectives import base
from energynets.objectives.infnet.architectures import InfNetArchitecture
from energynets.objectives.infnet.energy_objectives import InfNetCompound
from energynets.objectives.infnet.energy_objectives import InfNetEnergyObjective
from energynets.objectives.infnet.losses import NetParams
from energynets.objectives.infnet.losses import energy_evaluator
from energynets.objectives.infnet.losses import infnet_losses
from energynets.objectives.infnet.options import InfNetOptions

# ---------------------------------------------------------------------------------------
# Carrying parameters between stages.


def _local_net(energy_params) -> Any:
  """The `local_net` group of an energy's parameter tree (a SPEN's local classifier),
  None when the tree has none."""
  if isinstance(energy_params, Mapping):
    return energy_params.get("local_net")
  return None


def carry_params(
  prev_state,
  fresh_energy,
  fresh_nets: NetParams,
  architecture: InfNetArchitecture,
  carry_energy: bool = True,
) -> tuple[Any, NetParams, dict[str, str]]:
  """(energy params, net params, {group: source}) continuing `prev_state`.

  See the module docstring for the rules; `fresh_*` supply every group not carried
  and the shapes a carried group must have; `architecture.cost_net_from_test_net` says
  what a pretrained A_Ψ seeds F_Φ with. `carry_energy=False` keeps the fresh energy
  (the nets are still carried).
  """
  prev = {k: getattr(v, "params", v) for k, v in prev_state.items()}
  if not {"energy", "net", "test_net"} & set(prev):
    raise ValueError(
      f"cannot continue from a state with keys {sorted(prev)}; expected "
      "'energy' (a SPEN or infnet stage), 'net' (local_bce) or 'test_net'"
    )
  sources = {}
  energy_params = fresh_energy
  if not carry_energy:
    sources["energy"] = "fresh (carry_energy=False)"
  elif "energy" in prev:
    energy_params = base.carried(prev["energy"], fresh_energy, "the previous energy")
    sources["energy"] = "energy"
  elif _local_net(fresh_energy) is not None and base.first_match(
    [("net", prev.get("net"))], _local_net(fresh_energy)
  ):
    energy_params = dict(fresh_energy, local_net=flax.core.unfreeze(prev["net"]))
    sources["energy"] = "net -> local_net"
  else:
    sources["energy"] = "fresh"

  nets = dict(fresh_nets)
  energy_local = _local_net(prev["energy"]) if "energy" in prev else None
  if "test_net" in prev:
    nets["test_net"] = base.carried(
      prev["test_net"], fresh_nets["test_net"], "the previous test-time network"
    )
    sources["test_net"] = "test_net"
  else:
    match = base.first_match(
      [("net", prev.get("net")), ("energy.local_net", energy_local)], fresh_nets["test_net"]
    )
    if match:
      sources["test_net"], nets["test_net"] = match
    else:
      sources["test_net"] = "fresh"

  if "cost_net" in fresh_nets:
    reference = fresh_nets["cost_net"]
    pretrained = sources["test_net"] != "fresh"
    candidates = [("cost_net", prev.get("cost_net"))]
    seed = architecture.cost_net_from_test_net(nets["test_net"]) if pretrained else None
    if seed is not None:
      what, params = seed
      candidates.append((f"{sources['test_net']} {what}", params))
    match = base.first_match(candidates, reference)
    if match:
      sources["cost_net"], nets["cost_net"] = match
    else:
      sources["cost_net"] = "fresh"
  return energy_params, nets, sources


# ---------------------------------------------------------------------------------------
# The objective.


def inference_network(
  energy: Any,
  net: nn.Module,
  optimizer: optax.GradientTransformation,
  test_net_optimizer: optax.GradientTransformation,
  cost_net_optimizer: optax.GradientTransformation | None = None,
  *,
  options: InfNetOptions | None = None,
  energy_objective: InfNetEnergyObjective | None = None,
) -> base.Objective:
  """The joint energy / inference-network objective (see the module docstring).

  Args:
    energy: E_Θ, any `Energy` (`energy_from_function`, `energy_from_module`) or a
      library energy (`SPENEnergy`, `SequenceEnergy`, ...; `protocol.as_energy`).
    net: the inference networks' architecture, `net(x, train=..., return_features=...)
      -> [B, L]` logits (an `energynets.nets.MLP`); `InfNetShared` needs
      `return_features` and a final layer named `head`.
    optimizer: for Θ, the energy (the paper: Adam).
    test_net_optimizer: for Ψ, and the shared feature network under `InfNetShared` (the
      paper: SGD with momentum with CE, Adam without it for POS; Adam for NER).
    cost_net_optimizer: for Φ; None uses `test_net_optimizer`'s transformation (own
      state).
    options: the family's options, `InfNetOptions` (default: the paper's best setting:
      stacked nets, local CE of weight 1, truncation in the E step only, k = 5, Δ = L1).
    energy_objective: the E-step loss, an `InfNetEnergyObjective` value:
      `InfNetMargin()` (the margin-rescaled hinge on F_Φ), `InfNetPerceptron()` (on A_Ψ;
      no F_Φ), `InfNetCompound(compound_weight=λ_c)` (their sum, the default) or your own.

  Returns:
    An `Objective` whose state is `{"energy", "test_net", "cost_net"}` `ParamGroup`s
    (no `cost_net` for an objective without F_Φ). `update`'s metrics: `loss` and
    `grad_norm` (the E step), `energy_gold` and the energy objective's metrics (the
    library's: `hinge_margin`, `active_margin`, `energy_cost`, `delta` of the margin
    term, `hinge_perceptron`, `active_perceptron`, `energy_test` of the perceptron
    term), and the last I step's `infnet_loss`, `infnet_grad_norm`,
    `infnet_energy_test`, `infnet_ce_test` (+ `infnet_cost_augmented` = mean
    Δ − E(x, F_Φ(x)), the paper's l1, `infnet_delta`, `infnet_ce_cost`).
    `predict(state, x)` is σ(A_Ψ(x)) `[B, L]`.
  """
  options = InfNetOptions() if options is None else options
  energy_objective = InfNetCompound() if energy_objective is None else energy_objective
  num_inner_steps, architecture = options.num_inner_steps, options.architecture
  carry_energy = options.carry_energy
  model = protocol.as_energy(energy)
  losses = infnet_losses(model, net, options=options, energy_objective=energy_objective)
  optimizers = {
    "energy": optimizer,
    "test_net": test_net_optimizer,
    "cost_net": (cost_net_optimizer if cost_net_optimizer is not None else test_net_optimizer),
  }

  def init_energy(rng, batch):
    # Checked against the batch: a wrong-shaped energy fails here, in one line.
    x = batch["x"]
    y = jnp.zeros(batch["y"].shape, x.dtype)
    return flax.core.unfreeze(protocol.init_checked(model, rng, x, y))

  def make_state(energy_params, net_params):
    state = {"energy": base.init_group(energy_params, optimizers["energy"])}
    for name, params in net_params.items():
      state[name] = base.init_group(params, optimizers[name])
    return state

  def init(rng, batch):
    energy_rng, nets_rng = jax.random.split(rng)
    return make_state(init_energy(energy_rng, batch), losses.init_nets(nets_rng, batch))

  def init_from(prev_state, rng, batch):
    energy_rng, nets_rng = jax.random.split(rng)
    energy_params, net_params, sources = carry_params(
      prev_state,
      init_energy(energy_rng, batch),
      losses.init_nets(nets_rng, batch),
      architecture,
      carry_energy,
    )
    logging.info(
      "infnet init_from: %s", ", ".join(f"{k} <- {v}" for k, v in sorted(sources.items()))
    )
    return make_state(energy_params, net_params)

  def update(state, batch, rng):
    inner_rng, energy_rng = jax.random.split(rng)
    net_names = [k for k in ("test_net", "cost_net") if k in state]
    # The energy is a fixed critic for all k I steps: encode x once.
    energy_params = jax.lax.stop_gradient(state["energy"].params)
    energy_of = energy_evaluator(model, energy_params, batch["x"])

    def inference_step(groups, step_rng):
      params = {k: g.params for k, g in groups.items()}
      metrics, grads = base.metrics_and_grads(
        losses.inference_loss, params, energy_of, batch, step_rng
      )
      groups = {k: base.apply_gradients(groups[k], grads[k], optimizers[k]) for k in groups}
      return groups, metrics

    # Unrolled: XLA:CPU ran the loop around the taggers' BiLSTMs 7.5x slower than the
    # unrolled body (Twitter POS, k = 5: 2.5 s vs 0.33 s per update); k is small.
    groups, inner_metrics = jax.lax.scan(
      inference_step,
      {k: state[k] for k in net_names},
      jax.random.split(inner_rng, num_inner_steps),
      unroll=True,
    )

    net_params = {k: g.params for k, g in groups.items()}
    test_logits, cost_logits = losses.net_logits(net_params, batch["x"], batch["y"])
    y_test = losses.structure.link(test_logits)
    y_cost = None if cost_logits is None else losses.structure.link(cost_logits)
    energy_group, metrics = base.minimize_step(
      losses.energy_loss, optimizers["energy"], state["energy"], batch, y_cost, y_test, energy_rng
    )
    metrics.update({f"infnet_{k}": v[-1] for k, v in inner_metrics.items()})
    return dict(groups, energy=energy_group), metrics

  def predict(state, x):
    logits = net.apply({"params": state["test_net"].params}, x, train=False)
    return losses.structure.link(logits)

  return base.Objective(init, update, predict, init_from)
