"""Search spaces of the tuner (`experiments/tune.py`): config key -> candidate values.

A config module declares its own with `get_search_space(dataset) -> dict`; configs
without one get `DEFAULT`. A space holds a handful of keys; every trial is one value per
key (grid or seeded random draws), applied as config overrides. The step count is not
a key: every trial evaluates on its held-out rows every `train.eval_every` steps, and the
best step (early stopping on the held-out metric) is selected with the other settings.
"""

import importlib
import importlib.util
import itertools
import os
from typing import Any

import numpy as np

# Scalings the tuner compares (`data.feature_scaling`; statistics from the rows a trial
# trains on).
FEATURE_SCALINGS = ("none", "zscore", "maxabs")

# Any single-stage multi-label config without a space of its own: learning rate,
# L2 (coefficient of ½‖W‖² on the mean loss) and the feature scaling.
DEFAULT = {
  "optimizer.learning_rate": (1e-3, 3e-3),
  "loss.l2": (1e-5, 1e-3),
  "data.feature_scaling": FEATURE_SCALINGS,
}


def network(
  learning_rate_key: str = "optimizer.learning_rate",
  learning_rates: tuple = (1e-3, 3e-3),
  dropout_key: str = "model.dropout",
  hidden_layers: bool = True,
) -> dict[str, tuple]:
  """The space of a config with a neural network: 2 learning rates × L2 (1e-5, 1e-3) ×
  dropout (0, 0.5) × the feature scalings, 24 settings.

  Args:
    learning_rate_key: the learning rate searched; a staged config names the stage
      whose rate matters (e.g. `stages.energy.optimizer.learning_rate`), since a
      stage's own optimizer overrides the top-level one.
    learning_rates: its two candidates.
    dropout_key: the network's dropout rate (`model.dropout`, or `energy.dropout` for
      a SPEN energy).
    hidden_layers: whether that network has hidden layers. Dropout acts on hidden
      layers only, so without them it is left out (12 settings) rather than drawn as
      a value that changes nothing.

  Returns:
    config key -> candidate values.
  """
  space = {learning_rate_key: tuple(learning_rates), "loss.l2": (1e-5, 1e-3)}
  if hidden_layers:
    space[dropout_key] = (0.0, 0.5)
  space["data.feature_scaling"] = FEATURE_SCALINGS
  return space


def for_config(config_name: str, dataset: str) -> dict[str, tuple]:
  """The search space that `experiments/configs/<config_name>.py` (or a config module by
  import path, or a config file path with or without `:dataset`) declares for
  `dataset`, else `DEFAULT`."""
  module = _config_module(config_name)
  declared = getattr(module, "get_search_space", None) if module is not None else None
  space = declared(dataset) if declared is not None else DEFAULT
  return {key: tuple(values) for key, values in space.items()}


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
  """`key=v1,v2,...` strings (values Python literals, else strings) as a space."""
  import ast  # pylint: disable=g-import-not-at-top

  space = {}
  for item in items:
    key, sep, values = item.partition("=")
    if not sep or not values:
      raise ValueError(f"a search key must be key=v1,v2,..., got {item!r}")
    parsed = []
    for text in values.split(","):
      try:
        parsed.append(ast.literal_eval(text.strip()))
      except (ValueError, SyntaxError):
        parsed.append(text.strip())
    space[key.strip()] = tuple(parsed)
  return space


def grid(space: dict[str, tuple]) -> list[dict[str, Any]]:
  """Every combination of the space's values, in the declared order."""
  keys = list(space)
  return [dict(zip(keys, values)) for values in itertools.product(*space.values())]


def sample(space: dict[str, tuple], trials: int, seed: int) -> list[dict[str, Any]]:
  """`trials` settings: the whole grid when it has at most that many points, else that
  many distinct grid points drawn at random (seeded), in grid order."""
  points = grid(space)
  if trials <= 0 or trials >= len(points):
    return points
  keep = np.sort(np.random.default_rng(seed).choice(len(points), trials, replace=False))
  return [points[i] for i in keep]
