"""Experiment configs: loading by name, `key=value` overrides and training stages.

`get_config` reads `experiments/configs/<method>.py:<dataset>` (or a config module
outside this repository) and applies overrides; `stage_configs` expands a staged config
into one config per stage. The JSON helpers write and read configs as run records hold
them.
"""

import ast
import importlib
import os
from typing import Any

import ml_collections
import numpy as np

from experiments import cli


def get_config(
  method: str, dataset: str, overrides: tuple[str, ...] | list[str] = ()
) -> ml_collections.ConfigDict:
  """`experiments/configs/<method>.py:<dataset>` with `key=value` overrides applied.

  A `method` with a dot is the import path of a config module outside this repository
  (`my_pkg.configs.my_method`, with the same `get_config(dataset)`).

  Raises:
    cli.UserError (a ValueError): an unknown config name, a config module that does not
      import, a dataset variant the config rejects, or a bad override
      (`apply_overrides`), each in one line.
  """
  if "." not in method:
    try:
      module = importlib.import_module(f"experiments.configs.{method}")
    except ModuleNotFoundError as e:
      if e.name != f"experiments.configs.{method}":
        raise  # the config exists but imports something missing: a bug, keep its traceback
      here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs")
      known = sorted(
        n[:-3]
        for n in os.listdir(here)
        if n.endswith(".py") and n not in ("__init__.py", "base.py", "blocks.py", "task_bases.py")
      )
      raise cli.UserError(
        f"unknown config {method!r}; known: {', '.join(known)}, or the "
        "import path of a config module (my_pkg.configs.name)"
      ) from None
  else:
    try:
      module = importlib.import_module(method)
    except Exception as e:  # any failure while importing user code: name it in one line
      raise cli.UserError(
        f"config module {method!r} does not import: {type(e).__name__}: {' '.join(str(e).split())}"
      ) from None
  try:
    config = module.get_config(dataset)
  except ValueError as e:  # the config rejects the variant (`unknown dataset variant ...`)
    raise cli.UserError(f"config {method}:{dataset}: {e}") from None
  config.lock()  # an override of a key the config lacks (a typo) is an error
  return apply_overrides(config, overrides)


def apply_overrides(
  config: ml_collections.ConfigDict, overrides: tuple[str, ...] | list[str]
) -> ml_collections.ConfigDict:
  """`key=value` overrides (values parsed as Python literals, else strings), in place.

  Raises:
    cli.ConfigKeyError (a KeyError and a cli.UserError): a key that a locked config does
      not have, the closest key suggested (`unknown config key train.stepz; did you
      mean train.steps?`).
    cli.UserError: an override without `=`, or a value of a type the key does not take.
  """
  for item in overrides:
    key, sep, value = item.partition("=")
    if not sep:
      raise cli.UserError(f"a config override must be key=value, got {item!r}")
    try:
      parsed = ast.literal_eval(value)
    except (ValueError, SyntaxError):
      parsed = value  # a bare string such as optimizer.name=sgd
    if config.is_locked and (problem := cli.unknown_config_key(config, key)):
      raise cli.ConfigKeyError(problem)
    try:
      config.update_from_flattened_dict({key: parsed})
    except TypeError:  # ConfigDict keeps each field's type
      field = config
      for part in key.split("."):
        field = field[part]
      raise cli.UserError(
        f"config override {item}: {key} takes values of type {type(field).__name__}, not {value!r}"
      ) from None
  return config


def with_overrides(
  config: ml_collections.ConfigDict, overrides: dict[str, Any]
) -> ml_collections.ConfigDict:
  """A locked copy of `config` with `overrides` (`key -> value`) applied; `config` itself
  is left as it is.

  Raises:
    cli.ConfigKeyError, cli.UserError: as `apply_overrides`.
  """
  copy = ml_collections.ConfigDict(config.to_dict())
  copy.lock()
  return apply_overrides(copy, [f"{k}={v!r}" for k, v in overrides.items()])


def name_list(text: str) -> tuple[str, ...] | None:
  """A config string of names separated by commas or `+` as a tuple; None when empty
  (the default). `+` lets a name list ride in a comma-separated flag such as compare's
  --methods (`infnet:energy.tlm_variants=forward+backward`)."""
  return tuple(n.strip() for n in str(text).replace("+", ",").split(",") if n.strip()) or None


def flatten_dict(tree: dict, prefix: str = "") -> dict[str, Any]:
  """A nested dict as one level of dotted keys (`{'a': {'b': 1}}` -> `{'a.b': 1}`)."""
  flat = {}
  for key, value in tree.items():
    if isinstance(value, dict):
      flat.update(flatten_dict(value, f"{prefix}{key}."))
    else:
      flat[f"{prefix}{key}"] = value
  return flat


def stage_configs(config: ml_collections.ConfigDict) -> list[tuple[str, ml_collections.ConfigDict]]:
  """The training stages: `[(name, config)]`, one unnamed stage unless `stage_order` is set.

  `config.stages.<name>` holds a stage's overrides of the top-level config (same nested
  keys, e.g. `train.steps`, `optimizer.learning_rate`, `method`), applied in
  `config.stage_order` (comma-separated). Overriding a key the config does not have is
  an error, so a misspelled stage option cannot be silently ignored.
  """
  order = name_list(config.get("stage_order", "")) or ()
  if not order:
    return [("", config)]
  base = config.to_dict()
  stages = base.pop("stages", {})
  base.pop("stage_order")
  unknown = [n for n in order if n not in stages]
  if unknown:
    raise ValueError(
      f"stage_order names {unknown}, which config.stages does not define "
      f"(defined: {sorted(stages)})"
    )
  result = []
  for name in order:
    stage = ml_collections.ConfigDict(base)
    stage.lock()  # unknown keys raise instead of being added
    try:
      stage.update_from_flattened_dict(flatten_dict(stages[name]))
    except (KeyError, AttributeError) as e:
      raise ValueError(f"stage {name!r} overrides {e}, which the config does not have") from e
    result.append((name, stage))
  return result


def stages_setting(config: ml_collections.ConfigDict, key: str) -> list[str]:
  """The stages of `config.stage_order`, in order, whose own `stages.<name>` block sets
  the dotted `key` (for them the top-level value is not the one they train with)."""
  return [
    name
    for name in name_list(config.get("stage_order", "")) or ()
    if key in flatten_dict(config.stages[name].to_dict())
  ]


def set_by_every_stage(config: ml_collections.ConfigDict, key: str) -> bool:
  """Whether `config` trains in stages (`stage_order`) and every one of them sets the
  dotted `key` in its own `stages.<name>` block, so that the top-level value trains none."""
  stages = name_list(config.get("stage_order", "")) or ()
  return bool(stages) and len(stages_setting(config, key)) == len(stages)


def json_to_config(value):
  """A config dict read from JSON with its lists as the tuples the configs hold."""
  if isinstance(value, dict):
    return {k: json_to_config(v) for k, v in value.items()}
  if isinstance(value, list):
    return tuple(json_to_config(v) for v in value)
  return value


def json_default(value):
  """`json.dump`'s `default` for configs and results: numpy scalars as Python numbers,
  tuples and sets as lists, anything else as its `str`."""
  if isinstance(value, (np.integer, np.floating)):
    return value.item()
  if isinstance(value, (tuple, set)):
    return list(value)
  return str(value)
