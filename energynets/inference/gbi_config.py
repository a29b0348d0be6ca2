"""`GBIConfig`: the options of gradient-based inference (`energynets.inference.gbi`).

The two algorithmic choices are values (`energynets.inference.parametrizations`,
`energynets.inference.directions`); the rest are numbers. `GBIConfig` is a NamedTuple
registered as a pytree whose only leaf is `step_sizes`, so that learned step sizes can be
traced while everything else stays static (and hashable) under jit.
"""

from typing import Any
from typing import NamedTuple

import jax
import jax.numpy as jnp

from energynets.inference import directions
from energynets.inference import parametrizations

__all__ = ["GBIConfig", "check_step_sizes", "validate_config"]


class GBIConfig(NamedTuple):
  """Options of gradient-based inference.

  Attributes:
    parametrization: the optimized coordinates and their update, a value:
      `Projected()`, `Mirror()`, `Logit()` (`energynets.inference.parametrizations`)
      or a user's own.
    direction: the search direction, a value: `SGD()`, `Momentum(momentum)` (SPEN A.5:
      μ = 0.95), `Adam(b1, b2, eps, eps_root)` (`energynets.inference.directions`) or a
      user's own.
    learning_rate: η, used for every step unless `step_sizes` is given.
    entropy_weight: τ ≥ 0; the objective is `energy − τ · entropy` (E2E-SPEN §4.2
      smoothing; SPEN A.4 "temperature"). Pair it with `Mirror()` or `Logit()`: the
      entropy's gradient is unbounded at the faces, so projected iterates that reach
      a face are kicked back (with heavy momentum this can cycle).
    entropy_anneal_init, entropy_anneal_steps: entropy annealing (continuation). With
      `entropy_anneal_steps = A > 0`, the objective evaluated after step t (t = 0 at
      y0) uses `τ_t = max(τ_0 · 1000^(−t/A), entropy_weight)` for t < A and
      `entropy_weight` from then on, `τ_0 = entropy_anneal_init`: a geometric decay by
      a factor 1000 over A steps. `gbi_while` tests convergence only once annealing is
      over (every example runs at least A steps). A = 0 (the default) is plain GBI.
    num_steps: T of `gbi_scan`.
    rel_tol: per-example convergence when `|E_t − E_{t−1}| / max(|E_{t−1}|, tiny) < rel_tol`.
    abs_tol: ... or when `max |y_t − y_{t−1}| < abs_tol` (l∞ over the example's y).
    max_steps: hard cap of `gbi_while`.
    stop_fraction: `gbi_while` stops once this fraction of the batch has converged.
    step_sizes: optional `[T]` per-step learning rates (learned step sizes, E2E-SPEN
      §6.1; the caller keeps them positive, e.g. via softplus). They replace
      `learning_rate`. `gbi_while` uses `step_sizes[min(t, T−1)]`.
    remat: `jax.checkpoint` each `gbi_scan` step (recompute the energy's internals in
      the backward pass instead of storing them; E2E-SPEN §4.3).
    pick_best: the drivers return, per example, the visited iterate (`y_0` included) of
      lowest objective instead of the final one. Needs a fixed temperature (no
      annealing): objectives at different τ do not compare.
  """

  parametrization: parametrizations.Parametrization = parametrizations.Mirror()
  direction: directions.Direction = directions.Momentum(0.95)
  learning_rate: float = 0.1
  entropy_weight: float = 0.0
  entropy_anneal_init: float = 0.0
  entropy_anneal_steps: int = 0
  num_steps: int = 20
  # Tolerances are not given in SPEN; these are assumptions, tune per task.
  rel_tol: float = 1e-4
  abs_tol: float = 1e-4
  max_steps: int = 100
  stop_fraction: float = 1.0
  step_sizes: jax.Array | None = None
  remat: bool = False
  pick_best: bool = False


def _config_flatten(config: GBIConfig):
  return (config.step_sizes,), config._replace(step_sizes=None)


def _config_unflatten(static: GBIConfig, children) -> GBIConfig:
  return static._replace(step_sizes=children[0])


# Only step_sizes is a leaf: the choice values and Python numbers stay static under
# jit/vmap/grad.
jax.tree_util.register_pytree_node(GBIConfig, _config_flatten, _config_unflatten)


def _check_value(kind: str, value: Any, methods: tuple[str, ...], examples: str) -> None:
  """TypeError unless `value` is a hashable instance with `methods` (not a name, not a
  class)."""
  if isinstance(value, (str, type)) or not all(callable(getattr(value, m, None)) for m in methods):
    raise TypeError(
      f"GBIConfig.{kind} must be a value with {', '.join(methods)} "
      f"({examples}, or your own); got {value!r}"
    )
  try:
    hash(value)
  except TypeError:
    raise TypeError(
      f"GBIConfig.{kind} must be hashable (e.g. a frozen dataclass): it is "
      f"static under jit; got {value!r}"
    ) from None


def validate_config(config: GBIConfig) -> None:
  """Refuses a choice that is not a value, or an out-of-range option.

  Raises:
    TypeError: `parametrization` or `direction` is not a hashable value with the
      methods GBI calls (e.g. a name, or a class instead of an instance).
    ValueError: an out-of-range option.
  """
  _check_value(
    "parametrization",
    config.parametrization,
    ("to_z", "to_y", "update"),
    "Projected(), Mirror(), Logit()",
  )
  _check_value("direction", config.direction, ("init", "update"), "SGD(), Momentum(0.95), Adam()")
  if not 0.0 <= config.stop_fraction <= 1.0:
    raise ValueError(f"stop_fraction must be in [0, 1]; got {config.stop_fraction}")
  if config.num_steps < 0 or config.max_steps < 0:
    raise ValueError("num_steps and max_steps must be non-negative")
  if config.entropy_weight < 0:
    raise ValueError(f"entropy_weight must be non-negative; got {config.entropy_weight}")
  if config.entropy_anneal_steps < 0:
    raise ValueError(
      f"entropy_anneal_steps must be non-negative; got {config.entropy_anneal_steps}"
    )
  if config.pick_best and config.entropy_anneal_steps:
    raise ValueError(
      "pick_best compares objectives along the trajectory, which entropy "
      f"annealing (entropy_anneal_steps={config.entropy_anneal_steps}) "
      "evaluates at different temperatures; use pick_best=False"
    )
  if config.entropy_anneal_steps and config.entropy_anneal_init <= config.entropy_weight:
    raise ValueError(
      f"entropy annealing starts above the final temperature: entropy_anneal_init="
      f"{config.entropy_anneal_init} must exceed entropy_weight={config.entropy_weight} "
      f"when entropy_anneal_steps={config.entropy_anneal_steps}"
    )


def check_step_sizes(config: GBIConfig) -> None:
  """`validate_config`, and that `config.step_sizes`, if given, has shape `[num_steps]`."""
  validate_config(config)
  num_steps = config.num_steps
  if config.step_sizes is not None and jnp.shape(config.step_sizes) != (num_steps,):
    raise ValueError(
      f"step_sizes must have shape ({num_steps},) = (num_steps,); got "
      f"{jnp.shape(config.step_sizes)}"
    )
