"""The implicit objective's options (`ImplicitOptions`) and the flat config block they
map from (`implicit_options_from_config`: the options, `primary` and the primary losses'
fields).
"""

import dataclasses
from typing import Any, Mapping, Optional

from energynets import diff
from energynets.objectives import base
from energynets.objectives import scores as scores_lib
from energynets.objectives.implicit.primary_losses import get_primary_loss
from energynets.objectives.implicit.primary_losses import ImplicitCD
from energynets.objectives.implicit.primary_losses import ImplicitPrimary
from energynets.objectives.implicit.primary_losses import PRIMARIES

GRADIENTS = ("implicit", "explicit")


@dataclasses.dataclass(frozen=True)
class ImplicitOptions:
  """The implicit objective's options other than the primary loss.

  Attributes:
    energy_weight: λ of L_aux.
    inner_steps: T_inner ≥ 1, inner steps on θ per update.
    inverse_hvp: the inverse-HVP solver of the implicit term: `diff.Neumann(...)` (the
      default `Neumann()`: K = 10, α = 0.01), `diff.ConjugateGradient(...)`, any object
      with `solve(hvp_fn, v)`, or an `InverseHVP` record (`diff.get_solver`).
    gradient: `'implicit'` (Eq. 4) or `'explicit'` (∂_φ L_prim only, the ablation).
    score: the task score (a `scores.SCORES` name or a function `(ȳ, y) -> [B]`): CD's
      cost is 1 − score, DVN's target, SSVM's Δ under `margin_cost='score'`.
    l2: ½‖W‖² weight on the energy (in L_prim).
    net_l2: ½‖W‖² weight on the net (in L_aux).
    max_residual: a step whose inverse-HVP relative residual exceeds this drops the
      implicit term and steps on the explicit one (a residual above 1 is a worse solve
      of `H w = ∂_θ L_prim` than w = 0: a diverging Neumann series, αλ_max(H) > 2).
  """
  energy_weight: float = 1.0
  inner_steps: int = 5
  inverse_hvp: diff.implicit.SolverLike = diff.Neumann()
  gradient: str = "implicit"
  score: str | scores_lib.Score = "soft_f1"
  l2: float = 0.0
  net_l2: float = 0.0
  max_residual: float = float("inf")

  def __post_init__(self):
    base.check_choice(self.gradient, GRADIENTS, "gradient")
    diff.get_solver(self.inverse_hvp)  # ValueError / TypeError on a bad solver
    if self.inner_steps < 1:
      raise ValueError(f"inner_steps must be >= 1; got {self.inner_steps}")
    if not self.max_residual > 0:
      raise ValueError(f"max_residual must be > 0; got {self.max_residual}")
    if isinstance(self.score, str):
      scores_lib.get_score(self.score)

  def score_fn(self) -> scores_lib.Score:
    """The task score as a function."""
    return scores_lib.get_score(self.score) if isinstance(self.score, str) else self.score


def implicit_options_from_config(config: Mapping[str, Any], **values: Any
                                 ) -> tuple[ImplicitOptions, ImplicitPrimary]:
  """The implicit objective's options and primary loss from a flat block of options.

  `primary` names the primary loss (`get_primary_loss`, default `'cd'`); the keys that
  are `ImplicitOptions` fields go to the options, the chosen loss's fields to it. A key
  of another library primary loss is ignored: a config block carries every loss's
  options (CD's `num_samples` stays in it under `primary='ssvm'`).

  Args:
    config: a config's `implicit` block.
    **values: Python values (e.g. `inverse_hvp=diff.InverseHVP(...)`, `l2`, or a whole
      flat set of options given as keywords); they override `config`.

  Returns:
    `(ImplicitOptions, primary loss)`.

  Raises:
    ValueError: one line naming an unknown key and the known ones (or a bad value).
  """
  return base.options_and_named_from_config(
      "implicit", ImplicitOptions, PRIMARIES, "primary", "cd", get_primary_loss,
      {**config, **values})


def resolve(options: Optional[ImplicitOptions], primary: ImplicitPrimary | str | None,
             flat: dict) -> tuple[ImplicitOptions, ImplicitPrimary]:
  """The options and primary loss of `implicit_objective` / `ImplicitLosses`, from values
  or from flat keywords (`implicit_options_from_config`'s `values`); a `primary` given by
  name is one of those keywords."""
  if isinstance(primary, str):
    flat, primary = dict(flat, primary=primary), None
  return base.resolve_options_and_named(
      options, primary, flat, options_cls=ImplicitOptions,
      from_flat=lambda **keywords: implicit_options_from_config({}, **keywords),
      default_named=ImplicitCD, owner="the implicit objective's",
      named_kind="primary loss", beside="a primary loss value", set_on="the value")
