"""Search spaces of the tuner (`experiments/tune.py`): config key -> candidate values.

A config module declares its own with `get_search_space(dataset) -> dict`; configs
without one get `DEFAULT`. Every trial is one value per key, applied as config overrides;
the first trial is always the config's own setting (`default_setting`), even where its
values are not among the candidates. Values may be tuples
(`model.hidden=(256,)`): `parse` reads `--search model.hidden=(),(256,),(1024,1024)`. A
key may name several config keys joined by `|` (`model.hidden|energy.feature_hidden`),
which take the same value (`overrides`): a network and its copy searched together.

Capacity is searched with the rest: the hidden layers of the network (none is a linear
head), its input and hidden dropout. The step count is not a key: every trial
evaluates its held-out rows every `train.eval_every` steps and stops early, and its best
step scores the setting; the final run selects its own step on validation the same way,
so `train.steps` is the cap of both.
"""

import ast
import importlib
import importlib.util
import itertools
import os
from typing import Any

import ml_collections
import numpy as np

# Scalings the tuner compares (`data.feature_scaling`; statistics from the rows a trial
# trains on).
FEATURE_SCALINGS = ("none", "zscore", "maxabs")
# Hidden layers of a searched network: none (a linear head on the features), one of
# 256 or 1024 units, two of 1024.
HIDDEN_LAYERS = ((), (256,), (1024,), (1024, 1024))
# Dropout rates of a network's input and of its hidden layers.
DROPOUTS = (0.0, 0.25, 0.5)
# Adam learning rates of a network trained from scratch (or pretrained alone).
LEARNING_RATES = (3e-4, 1e-3, 3e-3)
# L2: the coefficient of ½‖W‖² on the mean loss. It reaches 0.1, scikit-learn's C of
# 0.04 at 250 rows (l2 = 1 / (C · rows)), which a few hundred rows can need: a linear
# model's folds choose C = 0.01 on yeast and cal500 at 250 rows.
L2 = (0.0, 1e-4, 1e-3, 1e-2, 1e-1)

# Joins the config keys of one space key.
TIED = "|"

# Any single-stage multi-label config without a space of its own: learning rate,
# L2 and the feature scaling.
DEFAULT = {
  "optimizer.learning_rate": (1e-3, 3e-3),
  "loss.l2": (1e-5, 1e-3),
  "data.feature_scaling": FEATURE_SCALINGS,
}


def network(
  group: str = "model",
  hidden: str = "hidden",
  learning_rates: dict[str, tuple] | None = None,
  energy_copy: bool = False,
  l2_copies: tuple[str, ...] = (),
) -> dict[str, tuple]:
  """The space of a config with a feed-forward network: its capacity (hidden layers,
  input dropout, hidden dropout), each learning rate, L2 and the feature scaling.

  Args:
    group: the config group of the network (`model`, or `energy` for a SPEN or DVN
      energy's feature network), holding `dropout` and `input_dropout`.
    hidden: that group's key of the hidden layer sizes (`hidden`, `feature_hidden`).
    learning_rates: learning-rate key -> candidates (None: `optimizer.learning_rate`
      over `LEARNING_RATES`). A staged config names each stage whose rate matters (e.g.
      `stages.pretrain.optimizer.learning_rate` and
      `stages.energy.optimizer.learning_rate`), since a stage's own optimizer
      overrides the top-level one; searching the pretrain stage's rate with the network
      lets the search reach the MLP's own tuned setting.
    energy_copy: whether the config's energy has a feature network shaped as `model`
      (`base.energy_like_model`, whose parameters a continuing stage carries over from
      the MLP): its `energy.feature_hidden`, `energy.input_dropout` and `energy.dropout`
      are tied to the model's.
    l2_copies: config keys the config copies `loss.l2` into when it is built (e.g.
      `infnet.net_l2`), searched as one key with it so that a trial's L2 reaches them.

  Returns:
    config key -> candidate values.
  """
  tie = lambda key, energy_key: key + (f"{TIED}energy.{energy_key}" if energy_copy else "")
  space: dict[str, tuple] = {
    tie(f"{group}.{hidden}", "feature_hidden"): HIDDEN_LAYERS,
    tie(f"{group}.input_dropout", "input_dropout"): DROPOUTS,
    tie(f"{group}.dropout", "dropout"): DROPOUTS,
  }
  space.update(learning_rates or {"optimizer.learning_rate": LEARNING_RATES})
  space[TIED.join(("loss.l2", *l2_copies))] = L2
  space["data.feature_scaling"] = FEATURE_SCALINGS
  return space


def staged_network(
  stage: str,
  stage_learning_rates: tuple,
  group: str = "model",
  hidden: str = "hidden",
  energy_copy: bool = False,
  l2_copies: tuple[str, ...] = (),
) -> dict[str, tuple]:
  """`network` of a config that pretrains its network in a `pretrain` stage and then
  trains `stage`: the pretrain stage's learning rate over `LEARNING_RATES` and
  `stage`'s over `stage_learning_rates`."""
  learning_rates = {
    "stages.pretrain.optimizer.learning_rate": LEARNING_RATES,
    f"stages.{stage}.optimizer.learning_rate": tuple(stage_learning_rates),
  }
  return network(group, hidden, learning_rates, energy_copy, l2_copies)


def config_keys(key: str) -> list[str]:
  """The config keys a space key sets (several joined by `TIED`)."""
  return key.split(TIED)


def overrides(setting: dict[str, Any]) -> dict[str, Any]:
  """A setting (space key -> value) as config overrides (config key -> value)."""
  return {name: value for key, value in setting.items() for name in config_keys(key)}


def default_setting(config: ml_collections.ConfigDict, space: dict[str, tuple]) -> dict[str, Any]:
  """The config's own value of every key of `space` (of a key's first config key where
  it names several; a stage key the stage does not set: the value the stage trains
  with); lists as tuples."""
  from experiments import configuration  # pylint: disable=g-import-not-at-top

  flat = configuration.flatten_dict(config.to_dict())
  stages = None
  setting = {}
  for space_key in space:
    key = config_keys(space_key)[0]
    if key in flat:
      value = flat[key]
    elif key.startswith("stages."):
      if stages is None:
        stages = {
          name: configuration.flatten_dict(stage.to_dict())
          for name, stage in configuration.stage_configs(config)
        }
      _, name, rest = key.split(".", 2)
      value = stages[name][rest]
    else:
      raise KeyError(key)
    setting[space_key] = _hashable(value)
  return setting


def _hashable(value):
  if isinstance(value, list | tuple):
    return tuple(_hashable(v) for v in value)
  return value


def for_config(config_name: str, dataset: str) -> dict[str, tuple]:
  """The search space that `experiments/configs/<config_name>.py` (or a config module by
  import path, or a config file path with or without `:dataset`) declares for
  `dataset`, else `DEFAULT`."""
  module = _config_module(config_name)
  declared = getattr(module, "get_search_space", None) if module is not None else None
  space = declared(dataset) if declared is not None else DEFAULT
  return {key: tuple(values) for key, values in space.items()}


def for_run(config_name: str, config: ml_collections.ConfigDict) -> dict[str, tuple]:
  """`for_config` of `config`'s dataset without the config keys `config` does not train
  with: those of stages outside `config.stage_order` (`stages.<name>.…`) and, where the
  space also names a stage's own key, a top-level key that every trained stage sets
  itself. One declared space thus serves a config's single-stage form and its staged one
  (`--config.stage_order`): seal_dynamic's `optimizer.learning_rate` trains its single
  stage, `stages.pretrain.optimizer.learning_rate` its staged form's MLP. A space key
  tying several config keys keeps those that are trained."""
  from experiments import configuration  # pylint: disable=g-import-not-at-top

  trained = set(configuration.name_list(config.get("stage_order", "")) or ())
  declared = for_config(config_name, config.data.name)
  stage_keys = {k for key in declared for k in config_keys(key) if k.startswith("stages.")}

  def shadowed(key: str) -> bool:
    return configuration.set_by_every_stage(config, key) and any(
      f"stages.{stage}.{key}" in stage_keys for stage in trained
    )

  space = {}
  for key, values in declared.items():
    kept = [k for k in config_keys(key) if untrained_stage(k, trained) is None and not shadowed(k)]
    if kept:
      space[TIED.join(kept)] = values
  return space


def untrained_stage(key: str, trained: set[str]) -> str | None:
  """The stage a `stages.<name>.…` config key belongs to when `<name>` is not in
  `trained`; None for any other key."""
  parts = key.split(".")
  if len(parts) > 2 and parts[0] == "stages" and parts[1] not in trained:
    return parts[1]
  return None


def _config_module(config_name: str):
  config_name = config_name.split(":")[0]  # a file's `:dataset` variant
  if config_name.endswith(".py") and os.path.isfile(config_name):
    stem = os.path.splitext(os.path.basename(config_name))[0]
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs")
    if os.path.abspath(os.path.dirname(config_name)) == here:
      return importlib.import_module(f"experiments.configs.{stem}")
    spec = importlib.util.spec_from_file_location(f"_tuned_config_{stem}", config_name)
    assert spec is not None and spec.loader is not None, "a .py file has a source loader"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
  name = config_name if "." in config_name else f"experiments.configs.{config_name}"
  try:
    return importlib.import_module(name)
  except ModuleNotFoundError:
    return None


def parse(items: list[str] | tuple[str, ...]) -> dict[str, tuple]:
  """`key=v1,v2,...` strings as a space: values are Python literals (tuples included:
  `model.hidden=(),(256,),(1024,1024)`), else strings.

  Raises:
    ValueError: an item without `=` or values, or with unbalanced brackets.
  """
  space = {}
  for item in items:
    key, sep, values = item.partition("=")
    if not sep or not values:
      raise ValueError(f"a search key must be key=v1,v2,..., got {item!r}")
    parsed = []
    for text in _top_level_parts(values, item):
      try:
        parsed.append(ast.literal_eval(text))
      except (ValueError, SyntaxError):
        parsed.append(text)
    space[key.strip()] = tuple(parsed)
  return space


def _top_level_parts(values: str, item: str) -> list[str]:
  """`values` split at the commas outside brackets and quotes, each part stripped."""
  parts, depth, quote, start = [], 0, "", 0
  for i, char in enumerate(values):
    if quote:
      quote = "" if char == quote else quote
    elif char in "'\"":
      quote = char
    elif char in "([{":
      depth += 1
    elif char in ")]}":
      depth -= 1
    elif char == "," and depth == 0:
      parts.append(values[start:i].strip())
      start = i + 1
    if depth < 0:
      break
  if depth or quote:
    raise ValueError(f"unbalanced brackets or quotes in search key {item!r}")
  parts.append(values[start:].strip())
  return parts


def grid(space: dict[str, tuple]) -> list[dict[str, Any]]:
  """Every combination of the space's values, in the declared order."""
  keys = list(space)
  return [dict(zip(keys, values)) for values in itertools.product(*space.values())]


def grid_size(space: dict[str, tuple]) -> int:
  """The number of points of `space`'s grid."""
  return int(np.prod([len(values) for values in space.values()], dtype=np.int64))
