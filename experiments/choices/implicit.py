"""The implicit family's names: a config's `implicit` block -> `ImplicitOptions` and a
primary loss value, and its `inverse_hvp` block -> an inverse-HVP solver value.

The block is flat, as the configs write it (experiments/configs/implicit.py):

- `primary`: `'ssvm'`, `'cd'` or `'dvn'` (`PRIMARY_LOSSES`), and the primary losses'
  keys: `margin_cost` (SSVM; a surrogate's name or `'score'`, as SEAL's margin costs:
  `seal.margin_cost`), `num_samples`, `negatives` (`'straight_through'` or `'relaxed'`,
  `NEGATIVES`), `temperature` (of `'relaxed'`) and `include_net_output` (CD). A key of
  another primary loss is ignored: the block carries every loss's keys (CD's
  `num_samples` stays in it under `primary='ssvm'`).
- `ImplicitOptions`' keys: `energy_weight`, `inner_steps`, `l2`, `net_l2`, `max_residual`;
  `score` (a task score's name, `objectives.SCORES`); `gradient` (`'implicit'` or
  `'explicit'`, `GRADIENTS`) is its `implicit_term`; `inverse_hvp` is a block
  `{method, num_terms, alpha, damping, tol}` (`method` `'neumann'` or `'cg'`,
  `INVERSE_HVP_METHODS`; `inverse_hvp_from_config`).
"""

from collections.abc import Callable
from collections.abc import Mapping
import inspect
from typing import Any

import ml_collections

from energynets import diff
from energynets.objectives import implicit
from experiments.choices import config_block
from experiments.choices import lookup
from experiments.choices import name_of
from experiments.choices import objectives as objective_choices
from experiments.choices import seal as seal_choices

# config.implicit.inverse_hvp.method -> the solver value of a block's options.
INVERSE_HVP_METHODS: dict[str, Callable[..., diff.InverseHVPSolver]] = {
  "neumann": lambda num_terms, alpha, damping, tol: diff.Neumann(num_terms, alpha, damping),
  "cg": lambda num_terms, alpha, damping, tol: diff.ConjugateGradient(num_terms, tol, damping),
}


def inverse_hvp_block(solver: diff.InverseHVPSolver) -> dict[str, Any]:
  """The `inverse_hvp` block of a `Neumann` or `ConjugateGradient` solver value (the
  inverse of `inverse_hvp_from_config`); the other method's own option at its default.

  Raises:
    ValueError: one line for a solver that has no method name here.
  """
  neumann, cg = diff.Neumann(), diff.ConjugateGradient()
  if isinstance(solver, diff.Neumann):
    return dict(
      method="neumann",
      num_terms=solver.num_terms,
      alpha=solver.alpha,
      damping=solver.damping,
      tol=cg.tol,
    )
  if isinstance(solver, diff.ConjugateGradient):
    return dict(
      method="cg",
      num_terms=solver.max_iter,
      alpha=neumann.alpha,
      damping=solver.damping,
      tol=solver.tol,
    )
  known = tuple(INVERSE_HVP_METHODS)
  raise ValueError(f"inverse-HVP solver {solver!r} has no method name; known: {known}")


# The keys of an `inverse_hvp` block and the values a missing one takes (those of
# `ImplicitOptions()`' solver).
INVERSE_HVP_DEFAULTS = inverse_hvp_block(implicit.ImplicitOptions().inverse_hvp)

# config.implicit.negatives -> CD's sampler, given config.implicit.temperature.
NEGATIVES: dict[str, Callable[[float], implicit.NegativeSampler]] = {
  "straight_through": lambda temperature: implicit.StraightThroughNegatives(),
  "relaxed": lambda temperature: implicit.RelaxedNegatives(temperature),
}

# config.implicit.gradient -> ImplicitOptions.implicit_term.
GRADIENTS = {"implicit": True, "explicit": False}


# The primary losses' defaults as config values (the builders' keyword defaults below).
_CD = implicit.ImplicitCD()
_TEMPERATURE = implicit.RelaxedNegatives().temperature
_SAMPLERS = {name: make(_TEMPERATURE) for name, make in NEGATIVES.items()}
_NEGATIVES = name_of("negatives", _SAMPLERS, _CD.negatives)
_MARGIN_COST = seal_choices.margin_cost_name(implicit.ImplicitSSVM().margin_cost)[0]


def _ssvm(margin_cost: str = _MARGIN_COST) -> implicit.ImplicitSSVM:
  return implicit.ImplicitSSVM(margin_cost=seal_choices.margin_cost(margin_cost))


def _cd(
  num_samples: int = _CD.num_samples,
  negatives: str = _NEGATIVES,
  temperature: float = _TEMPERATURE,
  include_net_output: bool = _CD.include_net_output,
) -> implicit.ImplicitCD:
  sampler = lookup("negatives", NEGATIVES, negatives)(temperature)
  return implicit.ImplicitCD(
    num_samples=num_samples, negatives=sampler, include_net_output=include_net_output
  )


def _dvn() -> implicit.ImplicitDVN:
  return implicit.ImplicitDVN()


# config.implicit.primary -> the primary loss of the block's keys for it (config values).
PRIMARY_LOSSES: dict[str, Callable[..., implicit.ImplicitPrimary]] = {
  "ssvm": _ssvm,
  "cd": _cd,
  "dvn": _dvn,
}
PRIMARY_KEYS = {
  "ssvm": ("margin_cost",),
  "cd": ("num_samples", "negatives", "temperature", "include_net_output"),
  "dvn": (),
}
# The block's keys that are ImplicitOptions' own (config names: `gradient`).
OPTION_KEYS = (
  "energy_weight",
  "inner_steps",
  "inverse_hvp",
  "gradient",
  "score",
  "l2",
  "net_l2",
  "max_residual",
)


def inverse_hvp_from_config(block: Mapping[str, Any]) -> diff.InverseHVPSolver:
  """The solver value of an `inverse_hvp` block.

  Args:
    block: `{method, num_terms, alpha, damping, tol}` (any subset; `INVERSE_HVP_DEFAULTS`
      for the rest): `'neumann'` -> `diff.Neumann(num_terms, alpha, damping)`, `'cg'` ->
      `diff.ConjugateGradient(num_terms, tol, damping)`.

  Returns:
    The solver value.

  Raises:
    ValueError: one line naming an unknown key or method (or a bad option).
  """
  block = block.to_dict() if hasattr(block, "to_dict") else dict(block)
  unknown = sorted(k for k in block if k not in INVERSE_HVP_DEFAULTS)
  if unknown:
    raise ValueError(f"unknown inverse_hvp options {unknown}; known: {tuple(INVERSE_HVP_DEFAULTS)}")
  options = {**INVERSE_HVP_DEFAULTS, **block}
  method = lookup("inverse-HVP method", INVERSE_HVP_METHODS, options.pop("method"))
  return method(**options)


def get_primary_loss(name: str, **keys: Any) -> implicit.ImplicitPrimary:
  """The library's primary loss called `name`, from its config keys.

  Args:
    name: one of `PRIMARY_LOSSES` (`'ssvm'`, `'cd'`, `'dvn'`).
    **keys: that loss's keys (`PRIMARY_KEYS`), as a config writes them (e.g.
      `num_samples=4, negatives='relaxed', temperature=0.3` for `'cd'`).

  Returns:
    The primary loss value, e.g. `ImplicitCD(num_samples=4)`.

  Raises:
    ValueError: one line naming an unknown `name` and the known ones, or keys that
      `name` does not take.
  """
  build = lookup("primary loss", PRIMARY_LOSSES, name)
  unknown = sorted(k for k in keys if k not in PRIMARY_KEYS[name])
  if unknown:
    raise ValueError(
      f"primary loss {name!r} takes no options {unknown}; known: {PRIMARY_KEYS[name]}"
    )
  return build(**keys)


def implicit_options_from_config(
  block: Mapping[str, Any], **values: Any
) -> tuple[implicit.ImplicitOptions, implicit.ImplicitPrimary]:
  """The implicit objective's options and primary loss from a config's `implicit` block.

  Args:
    block: the flat block (a dict or a `ConfigDict`; module docstring).
    **values: config values of other blocks (e.g. `l2=config.loss.l2`), under the
      block's own keys; they override `block`.

  Returns:
    `(ImplicitOptions, primary loss)`.

  Raises:
    ValueError: one line naming an unknown key, name or method and the known ones (or a
      bad value).
  """
  block = block.to_dict() if hasattr(block, "to_dict") else dict(block)
  merged = {**block, **values}
  primary_keys = tuple(dict.fromkeys(k for keys in PRIMARY_KEYS.values() for k in keys))
  known = ("primary",) + OPTION_KEYS + primary_keys
  unknown = sorted(k for k in merged if k not in known)
  if unknown:
    raise ValueError(f"unknown implicit options {unknown}; known: {known}")
  name = merged.get("primary", "cd")
  primary = get_primary_loss(
    name, **{k: v for k, v in merged.items() if k in PRIMARY_KEYS.get(name, ())}
  )
  options = {k: v for k, v in merged.items() if k in OPTION_KEYS}
  if "gradient" in options:
    options["implicit_term"] = lookup("gradient", GRADIENTS, options.pop("gradient"))
  if "inverse_hvp" in options:
    options["inverse_hvp"] = inverse_hvp_from_config(options["inverse_hvp"])
  if "score" in options:
    options["score"] = objective_choices.score(options["score"])
  return implicit.ImplicitOptions(**options), primary


def _default_keys(build: Callable[..., Any]) -> dict[str, Any]:
  """A primary loss builder's keys at their defaults (its keyword defaults)."""
  return {
    name: p.default
    for name, p in inspect.signature(build).parameters.items()
    if p.default is not inspect.Parameter.empty
  }


def block_defaults() -> dict[str, Any]:
  """Every key of an `implicit` block at the library's defaults, as a config writes them:
  `primary` names `implicit_objective`'s default primary loss, each primary loss's keys
  are its defaults, and `ImplicitOptions()`' fields are given by name (`gradient`,
  `score`, the `inverse_hvp` block)."""
  primary = inspect.signature(implicit.implicit_objective).parameters["primary"].default
  primary_name = name_of(
    "primary loss", {n: build() for n, build in PRIMARY_LOSSES.items()}, primary
  )
  keys: dict[str, Any] = {"primary": primary_name}
  for build in PRIMARY_LOSSES.values():
    keys.update(_default_keys(build))
  o = implicit.ImplicitOptions()
  options = dict(
    energy_weight=o.energy_weight,
    inner_steps=o.inner_steps,
    inverse_hvp=inverse_hvp_block(o.inverse_hvp),
    gradient=name_of("gradient", GRADIENTS, o.implicit_term),
    score=name_of("score", objective_choices.SCORES, o.score),
    net_l2=o.net_l2,
    max_residual=o.max_residual,
  )
  return {**keys, **options}


def block(**overrides: Any) -> ml_collections.ConfigDict:
  """`config.implicit`: every key at the library's defaults (`block_defaults`), with
  `overrides`; an `inverse_hvp` override is a dict of the keys it changes.

  Args:
    **overrides: keys of the block and their values, as a config writes them (e.g.
      `include_net_output=True, inverse_hvp=dict(alpha=0.002)`).

  Returns:
    The block as a `ConfigDict` (the energy's L2 is `config.loss.l2`).

  Raises:
    ValueError: one line naming an unknown key (of the block or of `inverse_hvp`).
  """
  defaults = block_defaults()
  if "inverse_hvp" in overrides:
    solver = dict(overrides["inverse_hvp"])
    unknown = sorted(k for k in solver if k not in INVERSE_HVP_DEFAULTS)
    if unknown:
      raise ValueError(f"unknown inverse_hvp keys {unknown}; known: {tuple(INVERSE_HVP_DEFAULTS)}")
    overrides = {**overrides, "inverse_hvp": {**defaults["inverse_hvp"], **solver}}
  return config_block("implicit", defaults, overrides)


__all__ = [
  "GRADIENTS",
  "INVERSE_HVP_DEFAULTS",
  "INVERSE_HVP_METHODS",
  "NEGATIVES",
  "OPTION_KEYS",
  "PRIMARY_KEYS",
  "PRIMARY_LOSSES",
  "block",
  "block_defaults",
  "get_primary_loss",
  "implicit_options_from_config",
  "inverse_hvp_block",
  "inverse_hvp_from_config",
]
