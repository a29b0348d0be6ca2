"""InfNet's energy objectives: values that carry their own options and compute the
E-step loss of the energy from E at the gold output and at the nets' outputs.

The library's are `InfNetMargin`, `InfNetPerceptron` and `InfNetCompound`. Any value with
a `loss(InfNetEnergyInputs)` method (`InfNetEnergyObjective`) plugs into
`inference_network` the same way.
"""

from collections.abc import Callable
import dataclasses
from typing import ClassVar
from typing import NamedTuple
from typing import Protocol

import jax
import jax.numpy as jnp

from energynets.objectives import base
from energynets.objectives import outputs

EnergyOf = Callable[[jax.Array], jax.Array]  # ȳ [B, L] -> E(x, ȳ) [B] for a fixed x


class InfNetEnergyInputs(NamedTuple):
  """What an energy objective computes the E-step loss from, for one batch.

  Attributes:
    energy_of: `ȳ -> E(x, ȳ) [B]` at the energy's current parameters, the only thing the
      loss is differentiated in (training mode: x encoded once, one dropout mask for
      every ȳ).
    y: the gold outputs, as floats.
    energy_gold: `E(x, y) [B]`.
    y_cost: F_Φ(x), the cost-augmented network's outputs, without a gradient path; None
      for an objective that builds no F_Φ (`uses_cost_net = False`).
    y_test: A_Ψ(x), the test-time network's outputs, without a gradient path.
    delta: `Δ(y_cost, y) [B]` over real positions (`InfNetOptions.surrogate`); None when
      y_cost is.
    truncate: the hinge's zero truncation `[·]_+`, or the identity where
      `InfNetOptions.truncate` leaves the energy step untruncated.
    structure: the `outputs.OutputStructure` of the outputs (link, local loss, padding).
  """

  energy_of: EnergyOf
  y: jax.Array
  energy_gold: jax.Array
  y_cost: jax.Array | None
  y_test: jax.Array
  delta: jax.Array | None
  truncate: Callable[[jax.Array], jax.Array]
  structure: outputs.OutputStructure


class InfNetEnergyObjective(Protocol):
  """The energy's loss in the E step of `inference_network`: a value carrying its options.

  `loss(inputs)` returns `(scalar loss, metrics)` for one batch, differentiable through
  `inputs.energy_of` only (the nets' outputs carry no gradient). The library's are
  `InfNetMargin`, `InfNetPerceptron` and `InfNetCompound`; any value with this method
  plugs into `inference_network(..., energy_objective=...)`. Two optional attributes:
  `uses_cost_net` (default True) says whether the objective reads F_Φ's outputs (False
  builds no F_Φ: no `cost_net` in the state, no cost-augmented term in the I steps), and
  `default_energy_weight` (default 1) is λ_A, the weight of E(x, A_Ψ(x)) in A_Ψ's loss,
  where `InfNetOptions.energy_weight` is None.
  """

  def loss(self, inputs: InfNetEnergyInputs) -> tuple[jax.Array, base.Metrics]:
    """The E-step loss of one batch and its metrics."""


def _margin_hinge(inputs: InfNetEnergyInputs) -> tuple[jax.Array, base.Metrics]:
  """`mean [Δ(ŷ_F, y) − E(x, ŷ_F) + E(x, y)]_+` (Eq. 4) and its metrics."""
  # Margin objectives use the cost net, so both are set.
  assert inputs.y_cost is not None and inputs.delta is not None
  e_cost = inputs.energy_of(inputs.y_cost)
  margin = inputs.delta - e_cost + inputs.energy_gold
  hinge = jnp.mean(inputs.truncate(margin))
  return hinge, dict(
    hinge_margin=hinge,
    active_margin=_fraction(margin > 0),
    energy_cost=jnp.mean(e_cost),
    delta=jnp.mean(inputs.delta),
  )


def _perceptron_hinge(inputs: InfNetEnergyInputs) -> tuple[jax.Array, base.Metrics]:
  """`mean [E(x, y) − E(x, ŷ_A)]_+` (Eq. 5's second term) and its metrics."""
  e_test = inputs.energy_of(inputs.y_test)
  gap = inputs.energy_gold - e_test
  perceptron = jnp.mean(inputs.truncate(gap))
  return perceptron, dict(
    hinge_perceptron=perceptron, active_perceptron=_fraction(gap > 0), energy_test=jnp.mean(e_test)
  )


@dataclasses.dataclass(frozen=True)
class InfNetMargin:
  """The margin-rescaled hinge on F_Φ (Eq. 4): `mean [Δ(ŷ_F, y) − E(x, ŷ_F) + E(x, y)]_+`.

  A_Ψ does not enter this loss; it is trained alongside on Eq. 2 for the current energy
  (Tu & Gimpel 2018 fine-tuned it from Φ after training instead).
  """

  uses_cost_net: ClassVar[bool] = True

  def loss(self, inputs: InfNetEnergyInputs) -> tuple[jax.Array, base.Metrics]:
    """The batch-averaged hinge, its active fraction, E(x, ŷ_F) and Δ."""
    return _margin_hinge(inputs)


@dataclasses.dataclass(frozen=True)
class InfNetPerceptron:
  """The perceptron loss on A_Ψ: `mean [E(x, y) − E(x, ŷ_A)]_+`; builds no F_Φ."""

  uses_cost_net: ClassVar[bool] = False

  def loss(self, inputs: InfNetEnergyInputs) -> tuple[jax.Array, base.Metrics]:
    """The batch-averaged perceptron hinge, its active fraction and E(x, ŷ_A)."""
    return _perceptron_hinge(inputs)


@dataclasses.dataclass(frozen=True)
class InfNetCompound:
  """The compound loss (Eq. 6): the margin hinge on F_Φ plus λ_c times the perceptron's.

  Attributes:
    compound_weight: λ_c, the perceptron term's weight; also λ_A, the weight of
      E(x, A_Ψ(x)) in A_Ψ's loss, unless `InfNetOptions.energy_weight` sets it (the
      paper's minimax has one λ).
  """

  compound_weight: float = 1.0
  uses_cost_net: ClassVar[bool] = True

  def __post_init__(self):
    base.check_non_negative("compound_weight", self.compound_weight)

  @property
  def default_energy_weight(self) -> float:
    """λ_A where `InfNetOptions.energy_weight` is None: λ_c."""
    return self.compound_weight

  def loss(self, inputs: InfNetEnergyInputs) -> tuple[jax.Array, base.Metrics]:
    """Both hinges' sum and both terms' metrics."""
    hinge, metrics = _margin_hinge(inputs)
    perceptron, perceptron_metrics = _perceptron_hinge(inputs)
    return hinge + self.compound_weight * perceptron, dict(metrics, **perceptron_metrics)


def _fraction(mask: jax.Array) -> jax.Array:
  return jnp.mean(mask.astype(jnp.float32))
