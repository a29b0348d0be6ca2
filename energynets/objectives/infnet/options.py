"""InfNet's options (`InfNetOptions`) and the flat config block they map from
(`infnet_options_from_config`: the options, `objective` and the energy objectives' fields).
"""

import dataclasses
from typing import Any, Mapping, Optional

from energynets.objectives import base
from energynets.objectives import outputs
from energynets.objectives import task_losses
from energynets.objectives.infnet.energy_objectives import ENERGY_OBJECTIVES
from energynets.objectives.infnet.energy_objectives import get_energy_objective
from energynets.objectives.infnet.energy_objectives import InfNetCompound
from energynets.objectives.infnet.energy_objectives import InfNetEnergyObjective

ARCHITECTURES = ("separated", "shared", "stacked")
TRUNCATIONS = ("energy", "both", "none")


@dataclasses.dataclass(frozen=True)
class InfNetOptions:
  """InfNet's options other than the energy objective (defaults: the paper's best setting).

  Attributes:
    architecture: `'separated'`, `'shared'` or `'stacked'` (F_Φ from [A_Ψ(x); y]; see
      the module docstring).
    energy_weight: λ_A, the weight of E(x, A_Ψ(x)) in A_Ψ's loss; None: the energy
      objective's `default_energy_weight` (λ_c under `InfNetCompound`, the paper's one
      λ), else 1.
    ce_weight: weight of the local CE of both nets (paper: 1; 0 for the ablation).
    num_inner_steps: k ≥ 1 I steps per E step (paper: 5).
    truncate: where the hinge is zero-truncated: `'energy'` (the E step only; the
      paper), `'both'` (also F_Φ's I-step term; Tu & Gimpel 2018) or `'none'`.
    surrogate: Δ, a name of `task_losses.SURROGATES` (paper: `'l1'`).
    l2: weight of `½‖W‖²` on the energy's weight matrices.
    net_l2: weight of `½‖W‖²` on the inference nets' weight matrices.
    output: the `OutputStructure` (or its name); None: `outputs.for_domain` of the
      energy's domain, i.e. per-token softmax outputs on the Simplex (a
      `SequenceEnergy`), σ per label otherwise.
    carry_energy: whether `init_from` carries a previous stage into the energy (see the
      module docstring); False starts it fresh while the nets are still carried. A
      pretrained local term can make every margin inactive from the start: a
      token-CE tagger's confident logits put E(x, y) far below E(x, F_Φ(x)) − Δ
      (Twitter POS: −289 vs −217 with Δ = 19), so the hinge and its gradient stay zero.
  """
  architecture: str = "stacked"
  energy_weight: Optional[float] = None
  ce_weight: float = 1.0
  num_inner_steps: int = 5
  truncate: str = "energy"
  surrogate: str = "l1"
  l2: float = 0.0
  net_l2: float = 0.0
  output: str | outputs.OutputStructure | None = None
  carry_energy: bool = True

  def __post_init__(self):
    for value, choices, what in ((self.architecture, ARCHITECTURES, "architecture"),
                                 (self.truncate, TRUNCATIONS, "truncate"),
                                 (self.surrogate, task_losses.SURROGATES, "surrogate")):
      base.check_choice(value, choices, what)
    for name in ("energy_weight", "ce_weight", "l2", "net_l2"):
      base.check_non_negative(name, getattr(self, name))
    if not isinstance(self.num_inner_steps, int) or self.num_inner_steps < 1:
      raise ValueError(f"num_inner_steps must be an integer >= 1, got "
                       f"{self.num_inner_steps!r}")


def infnet_options_from_config(config: Mapping[str, Any], **values: Any
                               ) -> tuple[InfNetOptions, InfNetEnergyObjective]:
  """InfNet's options and energy objective from a flat block of options.

  `objective` names the energy objective (`get_energy_objective`, default
  `'compound'`); the keys that are `InfNetOptions` fields go to the options, the chosen
  objective's fields to it. A key of another library objective is ignored: a config
  block carries every objective's options (`compound_weight` stays in it under
  `objective='margin'`).

  Args:
    config: a config's `infnet` block.
    **values: Python values (e.g. `l2`, or a whole flat set of options given as
      keywords); they override `config`.

  Returns:
    `(InfNetOptions, energy objective)`.

  Raises:
    ValueError: one line naming an unknown key and the known ones (or a bad value).
  """
  return base.options_and_named_from_config(
      "InfNet", InfNetOptions, ENERGY_OBJECTIVES, "objective", "compound",
      get_energy_objective, {**config, **values})


def resolve(options: Optional[InfNetOptions],
             energy_objective: Optional[InfNetEnergyObjective],
             flat: dict) -> tuple[InfNetOptions, InfNetEnergyObjective]:
  """The options and objective of `infnet_losses` / `inference_network`, from values or
  from flat keywords (`infnet_options_from_config`'s `values`)."""
  return base.resolve_options_and_named(
      options, energy_objective, flat, options_cls=InfNetOptions,
      from_flat=lambda **keywords: infnet_options_from_config({}, **keywords),
      default_named=InfNetCompound, owner="InfNet's", named_kind="energy objective",
      beside="energy_objective", set_on="the objective value")
