"""SEAL's options as one value, `SealOptions` (the loss-net objective is another value)."""

import dataclasses

from energynets.inference import gbi as gbi_lib
from energynets.inference.gbi import GBIConfig
from energynets.objectives import scores as scores_lib


@dataclasses.dataclass(frozen=True)
class SealOptions:
  """SEAL's options other than the loss-net objective (defaults: the paper's SEAL-dynamic).

  Attributes:
    train_loss_net: the loss-net takes steps on L_E.
    train_task_net: the task-net takes steps on L_F. Both (the default): SEAL-dynamic
      (Eq. 4-5), the loss-net's samples drawn from the current task-net. The loss-net
      alone: SEAL-static stage 1 (the task-net frozen, the noise network Ψ); the task-net
      alone: stage 2, against a frozen, trained loss-net.
    energy_weight: λ1 of Eq. 1.
    bce_weight: λ2 of Eq. 1.
    score_weight: w ≥ 0; the task-net's loss also subtracts `w · mean score(ȳ, y)`, the
      task score used directly beside the loss-net (0, the default: Eq. 1 alone).
    neg_value_term: the task-net's loss-net term is λ1·(−σ(−E)), the loss-net's predicted
      value (SEAL's public code for regression loss-nets), instead of Eq. 1's λ1·E.
    score: the task score `(ȳ, y) -> [B]` (e.g. `scores.soft_f1`, `scores.soft_iou`) of the
      regression targets, of the `'score'` margin cost and of the alignment metric.
    train_mode: run both networks in training mode (dropout) wherever SEAL's public
      trainer does: the task-net that gives the loss-net's samples (and P_N) and the
      loss-net inside L_F. Default False: both deterministic there, our choice (a loss
      should not be noisy).
    predict_gbi: None: predict σ(F(x)) (SEAL); else `gbi_while` options of a prediction
      by GBI on the loss-net's energy.
    predict_from_task_net: start that GBI from σ(F(x)) instead of the domain's uniform
      point.
    fresh_task_net: in `init_from`, start a fresh task-net instead of carrying the
      previous one (or a `local_bce` net).
    loss_net_steps: s, loss-net updates per round (on the same batch).
    rounds: t, rounds per `update`; a round is s loss-net updates then one task-net
      update (a phase that trains one network takes only its updates). SEAL's public
      trainer does this per minibatch with s ∈ {3..12}, t ∈ {1, 5, 10}; the paper's
      Eq. 4-5 is s = t = 1 (the default).
  """

  train_loss_net: bool = True
  train_task_net: bool = True
  energy_weight: float = 1.0
  bce_weight: float = 1.0
  score_weight: float = 0.0
  neg_value_term: bool = False
  score: scores_lib.Score = scores_lib.soft_f1
  train_mode: bool = False
  predict_gbi: GBIConfig | None = None
  predict_from_task_net: bool = False
  fresh_task_net: bool = False
  loss_net_steps: int = 1
  rounds: int = 1

  def __post_init__(self):
    if not (self.train_loss_net or self.train_task_net):
      raise ValueError(
        "SEAL trains the loss-net, the task-net or both; "
        "train_loss_net and train_task_net are both False"
      )
    if not callable(self.score):
      raise TypeError(
        f"score is a function (ȳ, y) -> [B] such as scores.soft_f1; got {self.score!r}"
      )
    if min(self.energy_weight, self.bce_weight, self.score_weight) < 0:
      raise ValueError(
        f"energy_weight, bce_weight and score_weight must be non-negative; got "
        f"{self.energy_weight}, {self.bce_weight}, {self.score_weight}"
      )
    if self.loss_net_steps < 1 or self.rounds < 1:
      raise ValueError(
        f"SEAL loss_net_steps and rounds must be >= 1; got {self.loss_net_steps}, {self.rounds}"
      )
    if self.predict_gbi is not None:
      gbi_lib.validate_config(self.predict_gbi)

  @property
  def dynamic(self) -> bool:
    """Both networks train, alternating (SEAL-dynamic)."""
    return self.train_loss_net and self.train_task_net
