"""InfNet's names (Tu, Pang & Gimpel 2020): a config's `infnet` block -> `InfNetOptions`
and an energy objective value.

The block is flat. `objective` names the energy objective (`ENERGY_OBJECTIVES`,
default `'compound'`), `architecture` (`ARCHITECTURES`), `truncate` (`TRUNCATIONS`) and
`surrogate` (`objectives.SURROGATES`, as `config.loss.surrogate`) name values of
`InfNetOptions`' fields; every other key is a field of `InfNetOptions` or of a library
energy objective, taken as it is.
"""

from collections.abc import Callable
from collections.abc import Mapping
import dataclasses
import typing
from typing import Any

import ml_collections
from ml_collections import config_dict

from energynets.objectives import infnet
from experiments.choices import config_block
from experiments.choices import field_names
from experiments.choices import lookup
from experiments.choices import objectives as objectives_choices

ENERGY_OBJECTIVES: dict[str, type] = {
  "margin": infnet.InfNetMargin,
  "perceptron": infnet.InfNetPerceptron,
  "compound": infnet.InfNetCompound,
}
"""The library's energy objectives by name (`objective`), each built with its fields."""

ARCHITECTURES: dict[str, infnet.InfNetArchitecture] = {
  "separated": infnet.InfNetSeparated(),
  "shared": infnet.InfNetShared(),
  "stacked": infnet.InfNetStacked(),
}
"""`architecture` names -> `InfNetOptions.architecture` values."""

TRUNCATIONS: dict[str, infnet.InfNetTruncation] = {
  "energy": infnet.InfNetTruncation(),
  "both": infnet.InfNetTruncation(inference_step=True),
  "none": infnet.InfNetTruncation(energy_step=False),
}
"""`truncate` names -> `InfNetOptions.truncate` values: the energy step only (the paper),
also F_Φ's I-step term (Tu & Gimpel 2018), or nowhere."""

OBJECTIVE_KEY, DEFAULT_OBJECTIVE = "objective", "compound"


def _architecture(name: str) -> infnet.InfNetArchitecture:
  return lookup("InfNet architecture", ARCHITECTURES, name)


def _truncation(name: str) -> infnet.InfNetTruncation:
  return lookup("InfNet truncation", TRUNCATIONS, name)


# The `InfNetOptions` fields a config names: field -> (the names, name -> value). Δ is
# named as everywhere (`config.loss.surrogate`), `'log'` at its default clip.
_NAMED_OPTIONS: dict[str, tuple[tuple[str, ...], Callable[[str], Any]]] = {
  "architecture": (tuple(ARCHITECTURES), _architecture),
  "truncate": (tuple(TRUNCATIONS), _truncation),
  "surrogate": (tuple(objectives_choices.SURROGATES), objectives_choices.surrogate),
}


def get_energy_objective(name: str, **options: Any) -> infnet.InfNetEnergyObjective:
  """The library's energy objective called `name`, built with `options`.

  Args:
    name: a key of `ENERGY_OBJECTIVES` (`'margin'`, `'perceptron'`, `'compound'`).
    **options: fields of that objective (e.g. `compound_weight=0.5` for `'compound'`).

  Returns:
    The objective value, e.g. `InfNetCompound(compound_weight=0.5)`.

  Raises:
    ValueError: one line naming an unknown `name` and the known ones, or options that
      `name` does not take and the ones it does.
  """
  cls = lookup("InfNet energy objective", ENERGY_OBJECTIVES, name)
  fields = field_names(cls)
  foreign = sorted(set(options) - set(fields))
  if foreign:
    raise ValueError(
      f"options {foreign} do not apply to the InfNet energy objective "
      f"{name!r} (its options: {fields})"
    )
  return cls(**options)


def config_name(field: str, value: Any) -> Any:
  """How a config writes `value` of the `InfNetOptions` field `field`: its name for a
  named field (`architecture`, `truncate`, `surrogate`), else `value` itself."""
  if field not in _NAMED_OPTIONS:
    return value
  names, value_of = _NAMED_OPTIONS[field]
  for name in names:
    if value_of(name) == value:
      return name
  raise ValueError(f"InfNet {field} {value!r} has no config name; known: {names}")


# InfNetOptions' fields a config's block leaves out: the energy's L2 is `config.loss.l2`,
# and the output structure follows the energy's domain.
_NOT_IN_BLOCK = ("l2", "output")


def block_defaults() -> dict[str, Any]:
  """Every key of an `infnet` block at the library's defaults: `objective` (the energy
  objective's name), the library energy objectives' fields and `InfNetOptions`' fields,
  a value by its name (`config_name`). A None default (energy_weight: λ_A, unset ties it
  to compound_weight under the compound objective, the paper's one λ) is a typed
  placeholder, so that --config.infnet.energy_weight=0.5 can set it."""
  defaults: dict[str, Any] = {OBJECTIVE_KEY: DEFAULT_OBJECTIVE}
  for cls in (*ENERGY_OBJECTIVES.values(), infnet.InfNetOptions):
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
      if field.name in _NOT_IN_BLOCK:
        continue
      value = config_name(field.name, field.default)
      if value is None:
        value = config_dict.placeholder(
          next(t for t in typing.get_args(hints[field.name]) if t is not type(None))
        )
      defaults.setdefault(field.name, value)
  return defaults


def block(**overrides: Any) -> ml_collections.ConfigDict:
  """`config.infnet`: every key at the library's defaults (`block_defaults`), with
  `overrides` (e.g. `net_l2=1e-5`), so a new option is one dataclass field.

  Raises:
    ValueError: one line naming an unknown key.
  """
  return config_block("InfNet", block_defaults(), overrides)


def infnet_options_from_config(
  block: Mapping[str, Any], **values: Any
) -> tuple[infnet.InfNetOptions, infnet.InfNetEnergyObjective]:
  """InfNet's options and energy objective from a config's `infnet` block.

  The keys that are `InfNetOptions` fields go to the options (`architecture`,
  `truncate` and `surrogate` by name), `objective` names the energy objective and the
  chosen objective's fields go to it. A field of another library energy objective is
  ignored: a config block carries every objective's options (`compound_weight` stays in
  it under `objective='margin'`).

  Args:
    block: a config's `infnet` block (a dict or a `ConfigDict`).
    **values: config values from other blocks (e.g. `l2` from `loss.l2`); they
      override `block`.

  Returns:
    `(InfNetOptions, energy objective)`.

  Raises:
    ValueError: one line naming an unknown key and the known ones, or an unknown name.
  """
  block = block.to_dict() if hasattr(block, "to_dict") else dict(block)
  merged = {**block, **values}
  option_fields = field_names(infnet.InfNetOptions)
  objective_fields = tuple(
    dict.fromkeys(f for cls in ENERGY_OBJECTIVES.values() for f in field_names(cls))
  )
  known = (OBJECTIVE_KEY,) + option_fields + objective_fields
  unknown = sorted(k for k in merged if k not in known)
  if unknown:
    raise ValueError(f"unknown InfNet options {unknown}; known: {known}")
  name = merged.get(OBJECTIVE_KEY, DEFAULT_OBJECTIVE)
  cls = lookup("InfNet energy objective", ENERGY_OBJECTIVES, name)
  objective = cls(**{k: v for k, v in merged.items() if k in field_names(cls)})
  options = {k: v for k, v in merged.items() if k in option_fields}
  for field, (_, value_of) in _NAMED_OPTIONS.items():
    if field in options:
      options[field] = value_of(options[field])
  return infnet.InfNetOptions(**options), objective


__all__ = [
  "ARCHITECTURES",
  "DEFAULT_OBJECTIVE",
  "ENERGY_OBJECTIVES",
  "OBJECTIVE_KEY",
  "TRUNCATIONS",
  "block",
  "block_defaults",
  "config_name",
  "get_energy_objective",
  "infnet_options_from_config",
]
