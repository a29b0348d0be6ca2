"""SEAL's names: a config's `seal` block -> `SealOptions` and a loss-net objective value.

The block is flat, as the configs write it (experiments/configs/seal_dynamic.py starts
from `block()`: `SealOptions()`' and the loss-net objectives' defaults, by name):

- `objective`: the loss-net objective, `'margin'`, `'regression'`, `'regression_s'` or
  `'nce'` (`LOSS_NET_OBJECTIVES`), and the objectives' keys (`OBJECTIVE_KEYS`):
  `margin_cost` (a task surrogate's name or `'score'`) with `surrogate_eps` (the clip of
  `'log'`); `dvn_samples` / `extra_samples` (DVN sample sources' names) with
  `dvn_sample_weights` / `extra_sample_weights`, lists written as strings separated by
  `,` or `+` (`''` for none); `num_samples`; `noise_std`. A key of another objective
  than the chosen one must keep its default (it would be ignored).
- `SealOptions`' keys: `phase` (`PHASES`: `'dynamic'`, `'loss_net'`, `'task_net'`: which
  networks train), `energy_term` (`ENERGY_TERMS`: `'energy'`, `'neg_value'`), `score`
  (`'soft_f1'`, `'soft_iou'`), `predict` (`PREDICTIONS`: `'task_net'`, or `'gbi'` with
  config.predict_gbi), `predict_init` (`PREDICT_INITS`: `'uniform'`, `'task_net'`),
  `task_net_init` (`TASK_NET_INITS`: `'carry'`, `'fresh'`), and `energy_weight`,
  `bce_weight`, `score_weight`, `train_mode`, `loss_net_steps`, `rounds` as they are.
"""

from collections.abc import Mapping
import re
from typing import Any

import ml_collections

from energynets.inference.gbi import GBIConfig
from energynets.objectives import seal
from energynets.objectives import task_losses
from experiments.choices import config_block
from experiments.choices import field_names
from experiments.choices import list_text
from experiments.choices import lookup
from experiments.choices import name_of
from experiments.choices import objectives as objective_choices

# config.seal.objective -> the loss-net objective's dataclass.
LOSS_NET_OBJECTIVES: dict[str, type] = {
  "margin": seal.SealMargin,
  "regression": seal.SealRegression,
  "regression_s": seal.SealRegressionS,
  "nce": seal.SealNCE,
}
# The block's keys each loss-net objective reads (its GBI comes from config.gbi).
OBJECTIVE_KEYS: dict[str, tuple[str, ...]] = {
  "margin": ("margin_cost", "surrogate_eps"),
  "regression": ("dvn_samples", "dvn_sample_weights", "extra_samples", "extra_sample_weights"),
  "regression_s": ("num_samples", "noise_std", "extra_samples", "extra_sample_weights"),
  "nce": ("num_samples",),
}

# config.seal.phase -> which networks a SEAL update trains.
PHASES: dict[str, dict[str, bool]] = {
  "dynamic": dict(train_loss_net=True, train_task_net=True),
  "loss_net": dict(train_loss_net=True, train_task_net=False),
  "task_net": dict(train_loss_net=False, train_task_net=True),
}
# config.seal.energy_term -> SealOptions.neg_value_term.
ENERGY_TERMS = {"energy": False, "neg_value": True}
# config.seal.predict -> whether to predict by GBI (with config.predict_gbi).
PREDICTIONS = {"task_net": False, "gbi": True}
# config.seal.predict_init -> SealOptions.predict_from_task_net.
PREDICT_INITS = {"uniform": False, "task_net": True}
# config.seal.task_net_init -> SealOptions.fresh_task_net.
TASK_NET_INITS = {"carry": False, "fresh": True}


def seal_config_defaults() -> dict[str, Any]:
  """The `seal` block with every key at its default (what configs start from).

  Returns:
    `{key: default}`: `objective='nce'`, the names and numbers of `SealOptions()` and of
    each loss-net objective's defaults; lists as comma-separated strings (`''`: none).
  """
  return dict(_DEFAULTS)


def block(**overrides: Any) -> ml_collections.ConfigDict:
  """`config.seal`: every key at its default (`seal_config_defaults`), with `overrides`
  (e.g. `objective='regression', score='soft_iou'`).

  Raises:
    ValueError: one line naming an unknown key.
  """
  return config_block("SEAL", _DEFAULTS, overrides)


def margin_cost(name: str, eps: float = task_losses.DEFAULT_SURROGATE_EPS) -> Any:
  """Δ of the margin loss-net called `name`: `'score'` (1 − the task score) or a task
  surrogate's name (`'log'` clipped at `eps`)."""
  if name == "score":
    return seal.OneMinusScore()
  return objective_choices.surrogate(name, eps)


def margin_cost_name(value: Any) -> tuple[str, float]:
  """`(name, surrogate_eps)` of a margin cost value (`margin_cost`'s inverse; the eps of
  `'log'`, else the default clip)."""
  eps = getattr(value, "eps", task_losses.DEFAULT_SURROGATE_EPS)
  names = ("score", *objective_choices.SURROGATES)
  return name_of("margin_cost", {n: margin_cost(n, eps) for n in names}, value), eps


def _source_names(sources: tuple | None) -> str:
  """DVN sources as a config writes them (`objectives.dvn_sources`' inverse)."""
  if sources is None:
    return ""
  table = objective_choices.DVN_SOURCES
  return ",".join(name_of("DVN sample source", table, source) for source in sources)


# The loss-net objective of `seal_objective` when none is given (its `SealNCE()`).
DEFAULT_OBJECTIVE = "nce"


def _defaults() -> dict[str, Any]:
  """The block's keys and their defaults, in the order configs hold them: `SealOptions()`'
  and each loss-net objective's defaults, written as config values (the inverse of
  `seal_options_from_config`)."""
  o = seal.SealOptions()
  margin, regression = seal.SealMargin(), seal.SealRegression()
  regression_s, nce = seal.SealRegressionS(), seal.SealNCE()
  cost, eps = margin_cost_name(margin.margin_cost)
  phase = dict(train_loss_net=o.train_loss_net, train_task_net=o.train_task_net)
  return {
    "objective": DEFAULT_OBJECTIVE,
    "phase": name_of("SEAL phase", PHASES, phase),
    "energy_weight": o.energy_weight,
    "bce_weight": o.bce_weight,
    "score_weight": o.score_weight,
    "energy_term": name_of("SEAL energy_term", ENERGY_TERMS, o.neg_value_term),
    "score": name_of("score", objective_choices.SCORES, o.score),
    "train_mode": o.train_mode,
    "predict": name_of("SEAL predict", PREDICTIONS, o.predict_gbi is not None),
    "predict_init": name_of("SEAL predict_init", PREDICT_INITS, o.predict_from_task_net),
    "task_net_init": name_of("SEAL task_net_init", TASK_NET_INITS, o.fresh_task_net),
    "loss_net_steps": o.loss_net_steps,
    "rounds": o.rounds,
    "margin_cost": cost,
    "surrogate_eps": eps,
    "dvn_samples": _source_names(regression.dvn_samples),
    "dvn_sample_weights": list_text(regression.dvn_sample_weights),
    "extra_samples": _source_names(regression.extra_samples),
    "extra_sample_weights": list_text(regression.extra_sample_weights),
    "num_samples": nce.num_samples,
    "noise_std": regression_s.noise_std,
  }


_DEFAULTS = _defaults()
KEYS = tuple(_DEFAULTS)
_SOURCE_KEYS = ("dvn_samples", "extra_samples")  # lists of DVN sources' names
_WEIGHT_KEYS = ("dvn_sample_weights", "extra_sample_weights")  # lists of numbers
_OBJECTIVE_ONLY = tuple(dict.fromkeys(k for keys in OBJECTIVE_KEYS.values() for k in keys))


def _items(value: Any) -> tuple | None:
  """A config list: a string of items separated by `,` or `+` (`''`: None), or a
  sequence."""
  if isinstance(value, str):
    return tuple(item.strip() for item in re.split(r"[,+]", value) if item.strip()) or None
  return None if value is None else tuple(value)


def _weights(value: Any) -> tuple[float, ...] | None:
  items = _items(value)
  return None if items is None else tuple(float(item) for item in items)


def _objective_fields(name: str, block: Mapping[str, Any]) -> dict[str, Any]:
  """The objective `name`'s fields from the block's keys for it."""
  fields: dict[str, Any] = {}
  for key in OBJECTIVE_KEYS[name]:
    value = block[key]
    if key == "margin_cost":
      fields[key] = margin_cost(value, block["surrogate_eps"])
    elif key in _SOURCE_KEYS:
      fields[key] = objective_choices.dvn_sources(value)
    elif key in _WEIGHT_KEYS:
      fields[key] = _weights(value)
    elif key != "surrogate_eps":
      fields[key] = value
  return fields


def _same(key: str, value: Any, default: Any) -> bool:
  """Whether a config value of an objective's key is its default (lists compared as
  items, weights as numbers)."""
  if key in _SOURCE_KEYS:
    return _items(value) == _items(default)
  if key in _WEIGHT_KEYS:
    return _weights(value) == _weights(default)
  return value == default


def get_loss_net_objective(name: str, **options: Any) -> seal.LossNetObjective:
  """The library's loss-net objective called `name`, built with `options`.

  Args:
    name: `'margin'`, `'regression'`, `'regression_s'` or `'nce'` (`LOSS_NET_OBJECTIVES`).
    **options: fields of that objective, as values (e.g. `num_samples=20` for `'nce'`).

  Returns:
    The objective value, e.g. `SealNCE(num_samples=20)`.

  Raises:
    ValueError: one line naming an unknown `name` and the known ones, or options that
      `name` does not take and the ones it does.
  """
  cls = lookup("SEAL loss-net objective", LOSS_NET_OBJECTIVES, name)
  fields = field_names(cls)
  foreign = sorted(k for k in options if k not in fields)
  if foreign:
    raise ValueError(
      f"options {foreign} do not apply to the SEAL loss-net objective "
      f"{name!r} (its options: {fields})"
    )
  return cls(**options)


def seal_options_from_config(
  block: Mapping[str, Any],
  *,
  loss_aug_gbi: GBIConfig | None = None,
  predict_gbi: GBIConfig | None = None,
) -> tuple[seal.SealOptions, seal.LossNetObjective]:
  """SEAL's options and loss-net objective from a config's `seal` block.

  Args:
    block: the `seal` block (a dict or a `ConfigDict`; see the module docstring); a
      missing key takes its default (`seal_config_defaults`).
    loss_aug_gbi: the static loss-net's GBI (config.gbi), for the objectives that take
      one (`'margin'`, `'regression'`); dropped for the others.
    predict_gbi: the GBI of `predict='gbi'` (config.predict_gbi).

  Returns:
    `(SealOptions, loss-net objective)`.

  Raises:
    ValueError: one line naming an unknown key or name and the known ones, a key set
      for another loss-net objective than the chosen one, or `predict='gbi'` without
      `predict_gbi`.
  """
  block = block.to_dict() if hasattr(block, "to_dict") else dict(block)
  unknown = sorted(k for k in block if k not in _DEFAULTS)
  if unknown:
    raise ValueError(f"unknown SEAL options {unknown}; known: {KEYS}")
  values = {**_DEFAULTS, **block}
  name = values["objective"]
  cls = lookup("SEAL loss-net objective", LOSS_NET_OBJECTIVES, name)
  for key in _OBJECTIVE_ONLY:
    if key not in OBJECTIVE_KEYS[name] and not _same(key, values[key], _DEFAULTS[key]):
      owners = tuple(n for n, keys in OBJECTIVE_KEYS.items() if key in keys)
      raise ValueError(
        f"SEAL option {key}={values[key]!r} applies to the loss-net "
        f"objectives {owners}, not to {name!r}"
      )
  fields = _objective_fields(name, values)
  if "loss_aug_gbi" in field_names(cls):
    fields["loss_aug_gbi"] = loss_aug_gbi
  predict_by_gbi = lookup("SEAL predict", PREDICTIONS, values["predict"])
  if predict_by_gbi and predict_gbi is None:
    raise ValueError("seal.predict='gbi' needs predict_gbi (config.predict_gbi)")
  options = seal.SealOptions(
    **lookup("SEAL phase", PHASES, values["phase"]),
    energy_weight=values["energy_weight"],
    bce_weight=values["bce_weight"],
    score_weight=values["score_weight"],
    neg_value_term=lookup("SEAL energy_term", ENERGY_TERMS, values["energy_term"]),
    score=objective_choices.score(values["score"]),
    train_mode=values["train_mode"],
    predict_gbi=predict_gbi if predict_by_gbi else None,
    predict_from_task_net=lookup("SEAL predict_init", PREDICT_INITS, values["predict_init"]),
    fresh_task_net=lookup("SEAL task_net_init", TASK_NET_INITS, values["task_net_init"]),
    loss_net_steps=values["loss_net_steps"],
    rounds=values["rounds"],
  )
  return options, get_loss_net_objective(name, **fields)


__all__ = [
  "DEFAULT_OBJECTIVE",
  "ENERGY_TERMS",
  "KEYS",
  "LOSS_NET_OBJECTIVES",
  "OBJECTIVE_KEYS",
  "PHASES",
  "PREDICTIONS",
  "PREDICT_INITS",
  "TASK_NET_INITS",
  "block",
  "get_loss_net_objective",
  "margin_cost",
  "margin_cost_name",
  "seal_config_defaults",
  "seal_options_from_config",
]
