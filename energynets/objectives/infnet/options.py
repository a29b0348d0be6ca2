"""InfNet's options (`InfNetOptions`) and the flat config block they map from
(`infnet_options_from_config`: the options, `objective` and the energy objectives' fields).
"""

import dataclasses
from typing import Any, Mapping, Optional

from energynets.objectives import base
from energynets.objectives import outputs
from energynets.objectives import ssvm
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
    surrogate: Δ, a name of `ssvm.SURROGATES` (paper: `'l1'`).
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
                                 (self.surrogate, ssvm.SURROGATES, "surrogate")):
      base.check_choice(value, choices, what)
    for name in ("energy_weight", "ce_weight", "l2", "net_l2"):
      base.check_non_negative(name, getattr(self, name))
    if not isinstance(self.num_inner_steps, int) or self.num_inner_steps < 1:
      raise ValueError(f"num_inner_steps must be an integer >= 1, got "
                       f"{self.num_inner_steps!r}")


_OPTION_FIELDS = base.field_names(InfNetOptions)


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
  merged = {**config, **values}
  objective_fields = tuple(dict.fromkeys(
      f for cls in ENERGY_OBJECTIVES.values() for f in base.field_names(cls)))
  known = ("objective",) + _OPTION_FIELDS + objective_fields
  unknown = sorted(k for k in merged if k not in known)
  if unknown:
    raise ValueError(f"unknown InfNet options {unknown}; known: {known}")
  name = merged.get("objective", "compound")
  taken = base.field_names(ENERGY_OBJECTIVES[name]) if name in ENERGY_OBJECTIVES else ()
  objective = get_energy_objective(name, **{k: v for k, v in merged.items() if k in taken})
  options = InfNetOptions(**{k: v for k, v in merged.items() if k in _OPTION_FIELDS})
  return options, objective


def resolve(options: Optional[InfNetOptions],
             energy_objective: Optional[InfNetEnergyObjective],
             flat: dict) -> tuple[InfNetOptions, InfNetEnergyObjective]:
  """The options and objective of `infnet_losses` / `inference_network`, from values or
  from flat keywords (`infnet_options_from_config`'s `values`)."""
  if flat:
    if options is not None:
      raise ValueError(f"give InfNet's options either as options=InfNetOptions(...) or as "
                       f"keywords, not both; got options and {sorted(flat)}")
    for_objective = sorted(k for k in flat if k not in _OPTION_FIELDS)
    if energy_objective is not None and for_objective:
      raise ValueError(f"energy objective options {for_objective} given beside "
                       "energy_objective: set them on the objective value")
    options, named = infnet_options_from_config({}, **flat)
    energy_objective = named if energy_objective is None else energy_objective
  return (InfNetOptions() if options is None else options,
          InfNetCompound() if energy_objective is None else energy_objective)
