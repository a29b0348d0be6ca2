"""GBI's choices by name: a config's GBI block onto an `inference.GBIConfig`.

A config writes gradient-based inference as a flat block of names and numbers
(`config.gbi`, `config.predict_gbi`, `config.adversarial_gbi`):

    method: 'projected' | 'mirror' | 'logit'       -> GBIConfig.parametrization
    optimizer: 'sgd' | 'momentum' | 'adam'         -> GBIConfig.direction, with
      momentum (momentum), b1, b2, adam_eps, adam_eps_root (adam)
    pick: 'last' | 'best'                          -> GBIConfig.pick_best
    learning_rate, entropy_weight, num_steps, ...  -> the GBIConfig field of that name

`gbi_config` maps such a block (missing keys take the library defaults: mirror steps with
momentum 0.95, the last iterate) onto the values the library takes; `gbi_block` maps a
config of the library's values back to the names. `train_block` and `predict_block` write
the blocks of the configs: `GBIConfig()`'s defaults, with the keys a config chooses.
"""

from collections.abc import Callable
from collections.abc import Mapping
from typing import Any

import ml_collections

from energynets import inference
from experiments.choices import config_block
from experiments.choices import lookup

PARAMETRIZATIONS = {
  "projected": inference.Projected(),
  "mirror": inference.Mirror(),
  "logit": inference.Logit(),
}
"""`method` name -> parametrization value."""

DIRECTION_OPTIONS = {
  "momentum": inference.Momentum().momentum,
  "b1": inference.Adam().b1,
  "b2": inference.Adam().b2,
  "adam_eps": inference.Adam().eps,
  "adam_eps_root": inference.Adam().eps_root,
}
"""The block's direction constants and their defaults (those of the direction values)."""

DIRECTIONS: dict[str, Callable[[Mapping[str, Any]], Any]] = {
  "sgd": lambda o: inference.SGD(),
  "momentum": lambda o: inference.Momentum(o["momentum"]),
  "adam": lambda o: inference.Adam(o["b1"], o["b2"], o["adam_eps"], o["adam_eps_root"]),
}
"""`optimizer` name -> the direction value, built from the block's `DIRECTION_OPTIONS`."""

PICKS = {"last": False, "best": True}
"""`pick` name -> `GBIConfig.pick_best`."""

_VALUE_FIELDS = ("parametrization", "direction", "pick_best")
NUMBER_KEYS = tuple(f for f in inference.GBIConfig._fields if f not in _VALUE_FIELDS)
"""The block's keys that are `GBIConfig` fields as they are."""

KEYS = ("method", "optimizer", "pick", *DIRECTION_OPTIONS, *NUMBER_KEYS)
"""Every key a GBI block may hold."""


def gbi_config(block: Mapping[str, Any]) -> inference.GBIConfig:
  """The `GBIConfig` a config's GBI block stands for.

  Args:
    block: a dict or `ConfigDict` with keys among `KEYS` (`method`, `optimizer`, `pick`
      by name; the direction constants `momentum`, `b1`, `b2`, `adam_eps`,
      `adam_eps_root`; the other `GBIConfig` fields as numbers).

  Returns:
    An `inference.GBIConfig`.

  Raises:
    ValueError: one line naming an unknown key or an unknown name.
  """
  block = block.to_dict() if hasattr(block, "to_dict") else dict(block)
  unknown = sorted(k for k in block if k not in KEYS)
  if unknown:
    raise ValueError(f"unknown GBI options {unknown}; known: {KEYS}")
  options = {k: block.get(k, default) for k, default in DIRECTION_OPTIONS.items()}
  return inference.GBIConfig(
    parametrization=lookup("GBI method", PARAMETRIZATIONS, block.get("method", "mirror")),
    direction=lookup("GBI optimizer", DIRECTIONS, block.get("optimizer", "momentum"))(options),
    pick_best=lookup("GBI pick", PICKS, block.get("pick", "last")),
    **{k: v for k, v in block.items() if k in NUMBER_KEYS},
  )


def gbi_block(config: inference.GBIConfig) -> dict[str, Any]:
  """The GBI block a `GBIConfig` of the library's choice values stands for: the inverse of
  `gbi_config` (for reports, and for code that speaks the configs' names).

  Args:
    config: a `GBIConfig` whose parametrization is one of `PARAMETRIZATIONS` and whose
      direction is an `SGD`, `Momentum` or `Adam`.

  Returns:
    `{method, optimizer, <the direction's constants>, pick, <the other fields>}`
    (`step_sizes` left out).

  Raises:
    ValueError: a choice that has no name here (e.g. a user's own value).
  """
  method = next((k for k, v in PARAMETRIZATIONS.items() if v == config.parametrization), None)
  if method is None:
    raise ValueError(
      f"no GBI method name for {config.parametrization!r}; known: {tuple(PARAMETRIZATIONS)}"
    )
  d = config.direction
  if isinstance(d, inference.SGD):
    optimizer, options = "sgd", {}
  elif isinstance(d, inference.Momentum):
    optimizer, options = "momentum", {"momentum": d.momentum}
  elif isinstance(d, inference.Adam):
    optimizer, options = (
      "adam",
      {"b1": d.b1, "b2": d.b2, "adam_eps": d.eps, "adam_eps_root": d.eps_root},
    )
  else:
    raise ValueError(f"no GBI optimizer name for {d!r}; known: {tuple(DIRECTIONS)}")
  numbers = {k: getattr(config, k) for k in NUMBER_KEYS if k != "step_sizes"}
  return dict(
    method=method,
    optimizer=optimizer,
    **options,
    pick="best" if config.pick_best else "last",
    **numbers,
  )


# The keys of a config's GBI block with `GBIConfig()`'s defaults (as names), in the order
# the blocks hold them; `TRAIN_KEYS` / `PREDICT_KEYS`: those every training (`gbi_scan`,
# `num_steps`) / test-time (`gbi_while`, to convergence) block holds, with `momentum`
# where the optimizer is `'momentum'`.
_BLOCK_ORDER = (
  "method",
  "optimizer",
  "learning_rate",
  *DIRECTION_OPTIONS,
  "num_steps",
  "max_steps",
  "rel_tol",
  "abs_tol",
  "stop_fraction",
  "entropy_weight",
  "entropy_anneal_init",
  "entropy_anneal_steps",
  "pick",
  "remat",
)
TRAIN_KEYS = ("method", "optimizer", "learning_rate", "num_steps", "entropy_weight")
PREDICT_KEYS = (
  "method",
  "optimizer",
  "learning_rate",
  "max_steps",
  "rel_tol",
  "abs_tol",
  "stop_fraction",
  "entropy_weight",
)


def block_defaults() -> dict[str, Any]:
  """Every key of a GBI block at `GBIConfig()`'s default (`gbi_block`), the direction
  constants at those of the direction values (`DIRECTION_OPTIONS`)."""
  values = {**DIRECTION_OPTIONS, **gbi_block(inference.GBIConfig())}
  return {k: values[k] for k in _BLOCK_ORDER}


def _block(keys: tuple[str, ...], overrides: dict[str, Any]) -> ml_collections.ConfigDict:
  defaults = block_defaults()
  if overrides.get("optimizer", defaults["optimizer"]) == "momentum":
    keys += ("momentum",)
  return config_block("GBI", defaults, overrides, keys=keys)


def train_block(**overrides: Any) -> ml_collections.ConfigDict:
  """A training GBI block (`config.gbi`, `config.adversarial_gbi`): `TRAIN_KEYS` (and
  `momentum` for the `'momentum'` optimizer) at `GBIConfig()`'s defaults, with `overrides`.

  Args:
    **overrides: keys of the block (`KEYS`) and their values, as a config writes them
      (e.g. `method='projected', optimizer='adam', learning_rate=0.05`); a key passed is
      held even at its default.

  Returns:
    The block as a `ConfigDict`.

  Raises:
    ValueError: one line naming an unknown key.
  """
  return _block(TRAIN_KEYS, overrides)


def predict_block(**overrides: Any) -> ml_collections.ConfigDict:
  """A test-time GBI block (`config.predict_gbi`, run to convergence): `PREDICT_KEYS` (and
  `momentum` for the `'momentum'` optimizer) at `GBIConfig()`'s defaults, with
  `overrides` (as `train_block`'s).

  Raises:
    ValueError: one line naming an unknown key.
  """
  return _block(PREDICT_KEYS, overrides)


__all__ = [
  "DIRECTIONS",
  "DIRECTION_OPTIONS",
  "KEYS",
  "NUMBER_KEYS",
  "PARAMETRIZATIONS",
  "PICKS",
  "PREDICT_KEYS",
  "TRAIN_KEYS",
  "block_defaults",
  "gbi_block",
  "gbi_config",
  "predict_block",
  "train_block",
]
