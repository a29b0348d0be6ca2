"""`ssvm_solvers`: the SSVM's two inference problems and the solvers that answer them.

Loss-augmented inference (SPEN Eq. 9, `ŷ ≈ argmin E − Δ`) inside training and prediction
at test time, each by a `Solver` value: `GBISolver()` (GBI over the relaxation) or
`ExhaustiveSolver()` (enumeration of {0, 1}^L on a small Box); the starts of
loss-augmented GBI (`GOLD`); and the test-time search statistics (SPEN §7.4). The
objectives that use them are in `energynets.objectives.ssvm`, which re-exports these names.
"""

from collections.abc import Sequence
import dataclasses
from typing import Any
from typing import Protocol

import jax
import jax.numpy as jnp

from energynets import domains
from energynets.energies import protocol
from energynets.inference import exhaustive
from energynets.inference import gbi as gbi_lib
from energynets.inference.gbi import GBIConfig
from energynets.inference.gbi import GBIResult
from energynets.objectives import task_losses

__all__ = [
  "check_solver",
  "exact_infer",
  "ExhaustiveSolver",
  "GBISolver",
  "GOLD",
  "infer",
  "loss_augmented_inference",
  "search_statistics",
  "Solver",
]

# Loss-augmented inference may also start at the gold label y (descent from y finds the
# violators nearest to it), the start this name adds to the energy's own (`Energy.inits`).
# Caveat: mirror steps from the clipped faces [eps, 1 − eps] move only once the
# accumulated η·g reaches |logit(eps)|, and the squared surrogate has zero gradient at y,
# so alone 'gold' mostly returns y itself (on the synthetic task: Δ ≈ 0); combine it with
# another start, or use projected GBI.
GOLD = "gold"


# ---------------------------------------------------------------------------------------
# The energy as GBI sees it, and the two inference problems.


def _loss_aug_starts(init, loss_aug_init, inits) -> tuple[str, ...]:
  """The loss-augmented GBI starts: `loss_aug_init` (a name or names), default `(init,)`;
  each a name of `inits` (the model's starts) or `'gold'`."""
  if loss_aug_init is None:
    starts = (init,)
  elif isinstance(loss_aug_init, str):
    starts = (loss_aug_init,)
  else:
    starts = tuple(loss_aug_init)
  allowed = tuple(inits) + (GOLD,)
  bad = [s for s in starts if s not in allowed]
  if bad or not starts:
    raise ValueError(f"unknown loss-augmented init {starts!r}; expected names from {allowed}")
  return starts


def _candidate_table(model) -> exhaustive.TableFn:
  """The model's energy of every (example, labeling) pair."""
  return model.candidate_energy or exhaustive.pairwise_table(model.energy)


def _augmented_objective(model, surrogate: task_losses.Surrogate) -> gbi_lib.EnergyFn:
  """`(params, (encoding, gold), ȳ) -> [B]`: E − Δ, the objective of Eq. 9."""

  def augmented(p, inputs_and_gold, y_bar):
    enc, gold = inputs_and_gold
    return model.energy(p, enc, y_bar) - task_losses.structured_task_loss(
      model.domain, y_bar, gold, surrogate
    )

  return augmented


class Solver(Protocol):
  """How the SSVM solves its two inference problems: loss-augmented inference (Eq. 9)
  inside training, and prediction at test time.

  Attributes:
    uses_gbi: whether it runs GBI by the options' `loss_aug_gbi` / `predict_gbi` (which
      are then required).
  """

  uses_gbi: bool

  def check(self, model: protocol.Energy) -> None:
    """Refuses (ValueError) an energy it cannot solve for."""

  def loss_augmented(
    self,
    model: protocol.Energy,
    params,
    inputs,
    x: jax.Array,
    y: jax.Array,
    config: GBIConfig | None,
    surrogate: task_losses.Surrogate,
    starts: Sequence[str],
    dtype,
  ) -> jax.Array:
    """ŷ ≈ argmin E − Δ given the encoded x (`inputs`) and gold `y` (both without a
    gradient path); `starts` are GBI starts, `dtype` that of the energy's outputs."""

  def predict(
    self, model: protocol.Energy, params, x: jax.Array, config: GBIConfig | None, init: str
  ) -> jax.Array:
    """The test-time prediction in the energy's domain."""


@dataclasses.dataclass(frozen=True)
class GBISolver:
  """GBI over the relaxation: `gbi_scan` for `num_steps` on `E − Δ` from each start
  (per example the final iterate of lowest `E − Δ`), `gbi_while` for prediction."""

  uses_gbi = True

  def check(self, model: protocol.Energy) -> None:
    """Any energy: GBI runs on every domain."""
    del model

  def loss_augmented(self, model, params, inputs, x, y, config, surrogate, starts, dtype):
    """One `gbi_scan` per start; the final iterate of lowest `E − Δ` per example."""
    augmented = _augmented_objective(model, surrogate)
    best_y = best_obj = None
    for name in starts:
      y0 = jnp.asarray(y, dtype) if name == GOLD else model.start(inputs, x, name)
      y_hat, _ = gbi_lib.gbi_scan(augmented, params, (inputs, y), y0, model.domain, config)
      if len(starts) == 1:
        return y_hat
      obj = augmented(params, (inputs, y), y_hat)
      if best_y is None:
        best_y, best_obj = y_hat, obj
      else:
        better = (obj < best_obj).reshape(obj.shape + (1,) * (y_hat.ndim - 1))
        best_y = jnp.where(better, y_hat, best_y)
        best_obj = jnp.where(obj < best_obj, obj, best_obj)
    return best_y

  def predict(self, model, params, x, config, init):
    """`infer`'s relaxed output."""
    return infer(model, params, x, config, init=init).y


@dataclasses.dataclass(frozen=True)
class ExhaustiveSolver:
  """Exactly, by enumerating {0, 1}^L (Box domain, L ≤ `exhaustive.MAX_LABELS`): the
  classical discrete SSVM's vertex ŷ, and the energy's exact MAP (a binary prediction)."""

  uses_gbi = False

  def check(self, model: protocol.Energy) -> None:
    """Refuses an energy off the Box domain."""
    if not isinstance(model.domain, domains.Box):
      raise ValueError(
        f"the exhaustive solver enumerates {{0, 1}}^L and needs the Box "
        f"domain; this energy's domain is {type(model.domain).__name__}"
      )

  def loss_augmented(self, model, params, inputs, x, y, config, surrogate, starts, dtype):
    """The exact vertex argmin of `E − Δ` (`config` and `starts` unused)."""
    del x, config, starts
    energy_table = _candidate_table(model)

    def table(p, inputs_and_gold, candidates):
      enc, gold = inputs_and_gold
      return energy_table(p, enc, candidates) - task_losses.task_loss_table(
        candidates, gold, surrogate
      )

    y = jnp.asarray(y, dtype)
    return exhaustive.exhaustive_minimize(table, params, (inputs, y), y).y

  def predict(self, model, params, x, config, init):
    """`exact_infer`'s minimizer."""
    del config, init
    return exact_infer(model, params, x).y


def check_solver(solver: Solver, model) -> None:
  """TypeError for a solver that is no `Solver` value (e.g. a name); ValueError for an
  energy the solver cannot solve for (`ExhaustiveSolver` off the Box domain)."""
  if not (hasattr(solver, "loss_augmented") and hasattr(solver, "predict")):
    raise TypeError(
      f"an SSVM solver is a value such as GBISolver() or ExhaustiveSolver(), not {solver!r}"
    )
  solver.check(model)


def _loss_augmented(
  model, params, inputs, x, y, config, surrogate, starts, solver: Solver = GBISolver()
):
  """ŷ from `solver` on `E − Δ` over `model.domain`, with no gradient path to anything.

  With GBI, one run per start in `starts` (names of the model's inits, or `'gold'`); per
  example, the final iterate with the lowest `E − Δ` is returned (the best available
  approximation of the argmin of Eq. 9; with one start, simply that run's final iterate).
  """
  params, inputs, y = jax.lax.stop_gradient((params, inputs, y))
  dtype = jax.eval_shape(lambda: model.start(inputs, x, model.inits[0])).dtype
  y_hat = solver.loss_augmented(model, params, inputs, x, y, config, surrogate, starts, dtype)
  return jax.lax.stop_gradient(y_hat)


def loss_augmented_inference(
  energy,
  params,
  x: jax.Array,
  y: jax.Array,
  config: GBIConfig,
  *,
  surrogate: task_losses.Surrogate = task_losses.Squared(),
  init: str = "uniform",
  loss_aug_init: Sequence[str] | str | None = None,
  solver: Solver = GBISolver(),
) -> jax.Array:
  """ŷ ≈ argmin E(x, ŷ) − Δ(ŷ, y) over the energy's domain (SPEN Eq. 9), not rounded.

  `energy`: any energy `protocol.as_energy` accepts. `surrogate`: Δ, a `task_losses`
  value. `loss_aug_init`: the start(s) of GBI, names of the energy's inits or `'gold'`
  (default `init`); with several, per example the final iterate of lowest `E − Δ` is
  returned. `solver=ExhaustiveSolver()`: the exact argmin over {0, 1}^L (`config` and
  the starts are then unused).
  """
  model = protocol.as_energy(energy)
  check_solver(solver, model)
  task_losses.check_surrogate(surrogate)
  inputs = model.encode(params, x)
  return _loss_augmented(
    model,
    params,
    inputs,
    x,
    y,
    config,
    surrogate,
    _loss_aug_starts(init, loss_aug_init, model.inits),
    solver,
  )


def infer(energy, params, x: jax.Array, config: GBIConfig, *, init: str = "uniform") -> GBIResult:
  """Test-time prediction: `gbi_while` on `E − τ·entropy` (τ = `config.entropy_weight`).

  Returns the whole `GBIResult` (y in the energy's domain, objective, per-example step
  counts).
  """
  model = protocol.as_energy(energy)
  inputs = jax.lax.stop_gradient(model.encode(params, x))
  return gbi_lib.gbi_while(
    model.energy, params, inputs, model.start(inputs, x, init), model.domain, config
  )


def exact_infer(energy, params, x: jax.Array) -> exhaustive.ExhaustiveResult:
  """Test-time prediction by enumeration: the energy's exact minimizer over {0, 1}^L
  (Box domain, L ≤ `exhaustive.MAX_LABELS`). Returns `ExhaustiveResult(y, objective)`,
  `objective` the minimum energy."""
  model = protocol.as_energy(energy)
  check_solver(ExhaustiveSolver(), model)
  inputs = jax.lax.stop_gradient(model.encode(params, x))
  return _exact_minimum(model, params, inputs, model.start(inputs, x, model.inits[0]))


def _exact_minimum(model, params, inputs, y_like) -> exhaustive.ExhaustiveResult:
  """The energy's minimum over {0, 1}^L given an encoded x (`y_like`: shape and dtype)."""
  return exhaustive.exhaustive_minimize(_candidate_table(model), params, inputs, y_like)


def search_statistics(
  energy: Any, params: Any, x: jax.Array, y: jax.Array, config: GBIConfig, *, init: str = "uniform"
) -> dict[str, jax.Array]:
  """How test-time GBI behaves on a batch (SPEN §7.4): steps taken and search error.

  Runs exactly the test-time prediction, `infer(energy, params, x, config, init=init)`
  (`gbi_while` on the Box from `init`, deterministic forward pass), and measures, with
  ŷ the final *relaxed* iterate and E the energy (`SPENEnergy`, without the
  `config.entropy_weight` term GBI may subtract):

  - `gbi_steps_mean`: mean over examples of the update steps `gbi_while` took for the
    example before it was frozen (it converged, the batch met `stop_fraction`, or
    `max_steps` was hit);
  - `gbi_steps_max`: the largest of those counts, which is also the number of
    while-loop iterations the batch ran (the batch's cost, SPEN's "last reducer");
  - `gbi_converged_fraction`: fraction of examples that met `rel_tol`/`abs_tol`
    within the loop (below 1 when `stop_fraction < 1` or `max_steps` cut it short);
  - `search_error`: fraction of examples with `E(x, ŷ) > E(x, y)`, y the gold label
    vector; a strict float comparison with no tolerance. This is SPEN §7.4's upper
    bound on optimization failures ("the energy returned by our optimization is
    greater than the value of the energy evaluated at the ground truth", 8% on
    Bibtex). Note that mirror/logit iterates never reach a face exactly (the Box
    clips logits at `eps`), so an example whose gold vertex is the minimizer still
    counts when ŷ only approaches it;
  - `search_error_rounded`: the same with ŷ rounded at 0.5 (`ŷ ≥ 0.5`, the decoded
    prediction);
  - `energy_gap_mean`: mean of `E(x, ŷ) − E(x, y)` (negative: GBI beats the gold on
    average);
  - on a Box with `L ≤ exhaustive.MAX_LABELS` labels, also the *exact* search error,
    against the energy's true minimum E* over {0, 1}^L (`exact_infer`):
    `exact_search_error`, the fraction of examples whose rounded output has
    `E(x, round(ŷ)) > E* + 1e-4·max(1, |E*|)` (GBI missed the minimizer; the
    tolerance absorbs the two formulas' float rounding), and `exact_gap_mean`, the mean
    of `E(x, round(ŷ)) − E*` (≥ 0).

  Pure and jit-compatible (`energy` and `init` static; `config` static or a pytree);
  returns 0-d arrays. `float(v)` each value for reporting.

  Args:
    energy: the energy (an `Energy` or a library energy).
    params: its parameters.
    x: `[B, D]` inputs.
    y: `[B, L]` gold labels in {0, 1}.
    config: the test-time `GBIConfig` (e.g. the objective's `predict_gbi`).
    init: GBI start, `'uniform'` (0.5) or `'local'` (sigmoid of the local logits).

  Returns:
    `{"gbi_steps_mean", "gbi_steps_max", "gbi_converged_fraction", "search_error",
    "search_error_rounded", "energy_gap_mean"}` (+ `"exact_search_error",
    "exact_gap_mean"` on small label spaces), all 0-d (`gbi_steps_max` int32, the rest
    floating).
  """
  model = protocol.as_energy(energy)
  result = infer(model, params, x, config, init=init)
  inputs = jax.lax.stop_gradient(model.encode(params, x))
  y = jnp.asarray(y, result.y.dtype)
  e_gold = model.energy(params, inputs, y)
  e_pred = model.energy(params, inputs, result.y)
  e_rounded = model.energy(params, inputs, model.domain.decode(result.y, 0.5))
  fraction = lambda mask: jnp.mean(mask.astype(result.y.dtype))
  stats = {
    "gbi_steps_mean": jnp.mean(result.steps.astype(result.y.dtype)),
    "gbi_steps_max": jnp.max(result.steps),
    "gbi_converged_fraction": fraction(result.converged),
    "search_error": fraction(e_pred > e_gold),
    "search_error_rounded": fraction(e_rounded > e_gold),
    "energy_gap_mean": jnp.mean(e_pred - e_gold),
  }
  if (
    isinstance(model.domain, domains.Box)
    and result.y.ndim == 2
    and result.y.shape[-1] <= exhaustive.MAX_LABELS
  ):
    e_min = _exact_minimum(model, params, inputs, result.y).objective
    stats["exact_search_error"] = fraction(
      e_rounded > e_min + 1e-4 * jnp.maximum(1.0, jnp.abs(e_min))
    )
    stats["exact_gap_mean"] = jnp.mean(e_rounded - e_min)
  return stats
