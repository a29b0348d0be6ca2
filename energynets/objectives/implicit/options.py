"""The implicit objective's options other than the primary loss (`ImplicitOptions`)."""

import dataclasses

from energynets import diff
from energynets.objectives import scores as scores_lib


@dataclasses.dataclass(frozen=True)
class ImplicitOptions:
  """The implicit objective's options other than the primary loss.

  Attributes:
    energy_weight: λ of L_aux.
    inner_steps: T_inner ≥ 1, inner steps on θ per update.
    inverse_hvp: the inverse-HVP solver of the implicit term: `diff.Neumann(...)` (the
      default `Neumann()`: K = 10, α = 0.01), `diff.ConjugateGradient(...)` or any object
      with `solve(hvp_fn, v)` (`diff.InverseHVPSolver`).
    implicit_term: the outer gradient includes the implicit term (Eq. 4); False steps on
      ∂_φ L_prim only, the alternating training the paper argues is biased (the
      method's ablation).
    score: the task score, a function `(ȳ, y) -> [B]` (`scores.soft_f1`, ...): CD's
      cost is 1 − score, DVN's target, SSVM's Δ under `margin_cost=OneMinusScore()`.
    l2: ½‖W‖² weight on the energy (in L_prim).
    net_l2: ½‖W‖² weight on the net (in L_aux).
    max_residual: a step whose inverse-HVP relative residual exceeds this drops the
      implicit term and steps on the explicit one (a residual above 1 is a worse solve
      of `H w = ∂_θ L_prim` than w = 0: a diverging Neumann series, αλ_max(H) > 2).
  """

  energy_weight: float = 1.0
  inner_steps: int = 5
  inverse_hvp: diff.InverseHVPSolver = diff.Neumann()
  implicit_term: bool = True
  score: scores_lib.Score = scores_lib.soft_f1
  l2: float = 0.0
  net_l2: float = 0.0
  max_residual: float = float("inf")

  def __post_init__(self):
    diff.check_solver(self.inverse_hvp)
    if not isinstance(self.implicit_term, bool):
      raise TypeError(f"implicit_term must be a bool; got {self.implicit_term!r}")
    if self.inner_steps < 1:
      raise ValueError(f"inner_steps must be >= 1; got {self.inner_steps}")
    if not self.max_residual > 0:
      raise ValueError(f"max_residual must be > 0; got {self.max_residual}")
    if not callable(self.score):
      raise TypeError(f"score is a function (y_soft, y) -> [B], not {self.score!r}")

  def score_fn(self) -> scores_lib.Score:
    """The task score as a function."""
    return self.score
