"""InfNet's options as values: `InfNetOptions`, and where the hinge is zero-truncated
(`InfNetTruncation`)."""

import dataclasses

import jax

from energynets.objectives import base
from energynets.objectives import outputs
from energynets.objectives import task_losses
from energynets.objectives.infnet.architectures import InfNetArchitecture
from energynets.objectives.infnet.architectures import InfNetStacked
from energynets.objectives.infnet.architectures import check_architecture


@dataclasses.dataclass(frozen=True)
class InfNetTruncation:
  """Where the hinge is zero-truncated ([·]_+).

  The default truncates in the energy step only (§4.1, the paper); `InfNetTruncation(
  inference_step=True)` also truncates F_Φ's I-step term (the nets then maximize
  mean([h_F]_+), Tu & Gimpel 2018, Table 1's "zero trunc. yes" rows);
  `InfNetTruncation(energy_step=False)` truncates nothing. A_Ψ's term is never truncated:
  its problem, Eq. 2, has no hinge.

  Attributes:
    energy_step: truncate the energy objective's hinges (`InfNetEnergyInputs.truncate`
      is `[·]_+`, else the identity).
    inference_step: maximize F_Φ's truncated hinge `mean([Δ − E(x, ŷ_F) + E(x, y)]_+)`
      in the I steps instead of the untruncated `mean(Δ − E(x, ŷ_F))`.
  """

  energy_step: bool = True
  inference_step: bool = False

  def __post_init__(self):
    for name in ("energy_step", "inference_step"):
      if not isinstance(getattr(self, name), bool):
        raise TypeError(f"InfNetTruncation.{name} must be a bool, got {getattr(self, name)!r}")

  def energy_hinge(self, value: jax.Array) -> jax.Array:
    """The energy step's truncation of a hinge's argument."""
    return jax.nn.relu(value) if self.energy_step else value


@dataclasses.dataclass(frozen=True)
class InfNetOptions:
  """InfNet's options other than the energy objective (defaults: the paper's best setting).

  Attributes:
    architecture: how F_Φ is built beside A_Ψ, an `InfNetArchitecture` value:
      `InfNetSeparated()`, `InfNetShared()`, `InfNetStacked()` (F_Φ from [A_Ψ(x); y]; the
      default) or your own.
    energy_weight: λ_A, the weight of E(x, A_Ψ(x)) in A_Ψ's loss; None: the energy
      objective's `default_energy_weight` (λ_c under `InfNetCompound`, the paper's one
      λ), else 1.
    ce_weight: weight of the local CE of both nets (paper: 1; 0 for the ablation).
    num_inner_steps: k ≥ 1 I steps per E step (paper: 5).
    truncate: where the hinge is zero-truncated, an `InfNetTruncation` (default: the
      energy step only, the paper).
    surrogate: Δ, a `task_losses` surrogate value (paper: `L1()`).
    l2: weight of `½‖W‖²` on the energy's weight matrices.
    net_l2: weight of `½‖W‖²` on the inference nets' weight matrices.
    output: the `OutputStructure` (`outputs.MULTILABEL`, `outputs.SEQUENCE`); None:
      `outputs.for_domain` of the
      energy's domain, i.e. per-token softmax outputs on the Simplex (a
      `SequenceEnergy`), σ per label otherwise.
    carry_energy: whether `init_from` carries a previous stage into the energy (see the
      module docstring); False starts it fresh while the nets are still carried. A
      pretrained local term can make every margin inactive from the start: a
      token-CE tagger's confident logits put E(x, y) far below E(x, F_Φ(x)) − Δ
      (Twitter POS: −289 vs −217 with Δ = 19), so the hinge and its gradient stay zero.
  """

  architecture: InfNetArchitecture = InfNetStacked()
  energy_weight: float | None = None
  ce_weight: float = 1.0
  num_inner_steps: int = 5
  truncate: InfNetTruncation = InfNetTruncation()
  surrogate: task_losses.Surrogate = task_losses.L1()
  l2: float = 0.0
  net_l2: float = 0.0
  output: outputs.OutputStructure | None = None
  carry_energy: bool = True

  def __post_init__(self):
    check_architecture(self.architecture)
    if not isinstance(self.truncate, InfNetTruncation):
      raise TypeError(f"InfNetOptions.truncate must be an InfNetTruncation, not {self.truncate!r}")
    task_losses.check_surrogate(self.surrogate)
    for name in ("energy_weight", "ce_weight", "l2", "net_l2"):
      base.check_non_negative(name, getattr(self, name))
    if not isinstance(self.num_inner_steps, int) or self.num_inner_steps < 1:
      raise ValueError(f"num_inner_steps must be an integer >= 1, got {self.num_inner_steps!r}")
