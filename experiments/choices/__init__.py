"""Names at the command line -> values in the library: the one registry of choices.

The library (`energynets`) takes values: GBI parametrizations and search directions,
task surrogates, inverse-HVP solvers, loss-net and energy objectives, samplers and
scores. A config names them with strings; the tables here map each name to the value
it stands for, and the `*_options` functions map a flat config block onto an options
dataclass. Each family's table and parser lives in its own module of this package
(`gbi`, `objectives`, `seal`, `infnet`, `implicit`, `optimizers`); this module holds what
they share.

Each family also writes its config block (`gbi.train_block`, `objectives.e2e_block`,
`implicit.block`, ...): the library's defaults as config names and values, read from the
options dataclasses through the inverse of the tables (`name_of`, `list_text`), so that a
config states only the keys whose values differ (`config_block`).
"""

from collections.abc import Mapping
from collections.abc import Sequence
import dataclasses
import re
import typing
from typing import Any

import ml_collections

from energynets import train


def field_names(cls) -> tuple[str, ...]:
  """The field names of an options dataclass (or NamedTuple), in declaration order."""
  if dataclasses.is_dataclass(cls):
    return tuple(f.name for f in dataclasses.fields(cls))
  return tuple(cls._fields)


def field_defaults(cls) -> dict[str, Any]:
  """The defaults of an options dataclass's (or NamedTuple's) fields, in declaration
  order; a field without a default is left out."""
  if dataclasses.is_dataclass(cls):
    return {
      f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING
    }
  return dict(cls._field_defaults)


def name_of(kind: str, table: Mapping[str, Any], value: Any) -> str:
  """The name under which `table` holds `value`: the inverse of `lookup`.

  Raises:
    ValueError: one line naming `kind`, the value and the known names, where no entry
      equals `value` (e.g. a user's own value).
  """
  for name, entry in table.items():
    if entry == value:
      return name
  raise ValueError(f"{kind} {value!r} has no config name; known: {tuple(table)}")


def list_text(value: Sequence[Any] | None) -> str:
  """A tuple field's value as a config writes it: items joined by `,`; None is `''` (the
  inverse of `config_value`)."""
  return "" if value is None else ",".join(str(item) for item in value)


def config_block(
  kind: str,
  defaults: Mapping[str, Any],
  overrides: Mapping[str, Any],
  *,
  keys: Sequence[str] | None = None,
) -> ml_collections.ConfigDict:
  """A config block: `defaults` with `overrides` applied.

  Args:
    kind: what the block configures, for the message (e.g. `'GBI'`).
    defaults: every key the block may hold, at the library's default.
    overrides: the keys whose values the config chooses.
    keys: the keys the block always holds (None: all of `defaults`); an overridden key
      is held too, even at its default value.

  Returns:
    The block as a `ConfigDict`.

  Raises:
    ValueError: one line naming the unknown override keys and the known keys.
  """
  unknown = sorted(k for k in overrides if k not in defaults)
  if unknown:
    raise ValueError(f"unknown {kind} keys {unknown}; known: {tuple(defaults)}")
  held = set(defaults if keys is None else keys) | set(overrides)
  return ml_collections.ConfigDict(
    {k: overrides.get(k, v) for k, v in defaults.items() if k in held}
  )


def lookup(kind: str, table: Mapping[str, Any], name: str) -> Any:
  """The entry of `table` called `name`.

  Args:
    kind: what the table holds, for the message (e.g. `'GBI direction'`).
    table: `{name: entry}`.
    name: the name asked for.

  Returns:
    `table[name]`.

  Raises:
    ValueError: one line naming `kind`, the unknown name and the known names.
  """
  if name not in table:
    raise ValueError(f"unknown {kind} {name!r}; known: {tuple(table)}")
  return table[name]


def sequence_element_type(classes: Sequence[type], field: str) -> type | None:
  """The element type of `field` where the first of `classes` that has it types it as a
  tuple (a list in a config), else None."""
  for cls in classes:
    hints = typing.get_type_hints(cls)
    if field in hints:
      for arg in (hints[field], *typing.get_args(hints[field])):
        if typing.get_origin(arg) is tuple:
          return typing.get_args(arg)[0]
      return None
  return None


def config_value(classes: Sequence[type], field: str, value: Any) -> Any:
  """A config value as the field's value: a tuple field takes a string of names or
  numbers separated by `,` or `+` (`+` lets a list ride inside a comma-separated list
  of runs, as compare's --methods); the empty string is None."""
  element = sequence_element_type(classes, field)
  if element is None or not isinstance(value, str):
    return value
  items = [item.strip() for item in re.split(r"[,+]", value) if item.strip()]
  return tuple(element(item) for item in items) if items else None


def options_from_config(
  cls: type, block: Mapping[str, Any], *, strict: bool = True, **values: Any
) -> Any:
  """An options dataclass from a config block and Python values.

  Args:
    cls: the options dataclass (`SSVMOptions`, `E2EOptions`, `DVNOptions`, ...).
    block: a config block (a dict or a `ConfigDict`); its keys that are fields of `cls`
      are taken, tuple fields from comma-separated strings (`config_value`).
    strict: refuse a key of `block` that is not a field (False for blocks that several
      methods share, e.g. `config.loss`).
    **values: field values (e.g. `GBIConfig`s, or config values of other blocks) that
      override `block`.

  Returns:
    `cls(**fields)`.

  Raises:
    ValueError: one line naming an unknown key and the known fields.
  """
  block = block.to_dict() if hasattr(block, "to_dict") else dict(block)
  fields = field_names(cls)
  unknown = sorted(
    k for k in set(block) | set(values) if k not in fields and (strict or k in values)
  )
  if unknown:
    raise ValueError(f"unknown {cls.__name__} options {unknown}; known: {fields}")
  kwargs = {k: v for k, v in block.items() if k in fields}
  kwargs.update(values)
  return cls(**{k: config_value((cls,), k, v) for k, v in kwargs.items()})


# Keys of `config.train` that the experiment runner reads itself (devices, precision,
# dtype, evaluation batches, the schedules' span): every other key is a `LoopOptions` field.
RUNNER_TRAIN_KEYS = (
  "schedule_steps",
  "eval_batch_size",
  "num_devices",
  "model_parallelism",
  "matmul_precision",
  "compute_dtype",
)


def loop_options(block: Mapping[str, Any]) -> train.LoopOptions:
  """The `LoopOptions` of a config's `train` block.

  Args:
    block: `config.train` (a dict or a `ConfigDict`).

  Returns:
    `LoopOptions` of its fields; the runner's own keys (`RUNNER_TRAIN_KEYS`) are left out.

  Raises:
    ValueError: one line naming a key that is neither, and the known fields.
  """
  block = block.to_dict() if hasattr(block, "to_dict") else dict(block)
  names = set(field_names(train.LoopOptions))
  unknown = set(block) - names - set(RUNNER_TRAIN_KEYS)
  if unknown:
    raise ValueError(f"unknown train options {sorted(unknown)}; known: {sorted(names)}")
  return train.LoopOptions(**{k: v for k, v in block.items() if k in names})


__all__ = [
  "RUNNER_TRAIN_KEYS",
  "loop_options",
  "config_block",
  "config_value",
  "field_defaults",
  "field_names",
  "list_text",
  "lookup",
  "name_of",
  "options_from_config",
  "sequence_element_type",
]
