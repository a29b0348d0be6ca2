"""SEAL's options (`SealOptions`) and the flat config block they map from.

Configs write one flat block of options: `SealOptions`' fields, `objective` (the
loss-net objective's name) and the library loss-net objectives' fields.
`seal_options_from_config` maps it onto the two values, `seal_config_defaults` is that
block's defaults, read from the dataclasses.
"""

import dataclasses
from typing import Any, Mapping, Optional

from energynets.inference import gbi as gbi_lib
from energynets.inference.gbi import GBIConfig
from energynets.objectives import base
from energynets.objectives import scores as scores_lib
from energynets.objectives.seal.loss_net_objectives import get_loss_net_objective
from energynets.objectives.seal.loss_net_objectives import LOSS_NET_OBJECTIVES
from energynets.objectives.seal.loss_net_objectives import LossNetObjective
from energynets.objectives.seal.loss_net_objectives import OBJECTIVE_KIND
from energynets.objectives.seal.loss_net_objectives import SealNCE

PHASES = ("dynamic", "loss_net", "task_net")
PREDICTIONS = ("task_net", "gbi")
PREDICT_INITS = ("uniform", "task_net")
TASK_NET_INITS = ("carry", "fresh")
ENERGY_TERMS = ("energy", "neg_value")


@dataclasses.dataclass(frozen=True)
class SealOptions:
  """SEAL's options other than the loss-net objective (defaults: the paper's SEAL-dynamic).

  Attributes:
    phase: one of `PHASES`: `'dynamic'` (Eq. 4-5), `'loss_net'` (static stage 1) or
      `'task_net'` (static stage 2).
    energy_weight: λ1 of Eq. 1.
    bce_weight: λ2 of Eq. 1.
    energy_term: `'energy'` (Eq. 1, λ1·E) or `'neg_value'` (λ1·(−σ(−E)), SEAL's public
      code for regression loss-nets).
    score: the task score (a `scores.SCORES` name or a function `(ȳ, y) -> [B]`) of the
      regression targets, of Δ = `'score'` and of the alignment metric.
    train_mode: run both networks in training mode (dropout) wherever SEAL's public
      trainer does: the task-net that gives the loss-net's samples (and P_N) and the
      loss-net inside L_F. Default False: both deterministic there, our choice (a loss
      should not be noisy).
    predict: `'task_net'` (σ(F(x))) or `'gbi'` (GBI on the loss-net; needs `predict_gbi`).
    predict_gbi: `gbi_while` options of `predict='gbi'`.
    predict_init: start of that GBI: `'uniform'` or `'task_net'` (σ(F(x))).
    task_net_init: in `init_from`, `'carry'` the previous task-net (or `local_bce` net)
      or start a `'fresh'` one.
    loss_net_steps: s, loss-net updates per round (on the same batch).
    rounds: t, rounds per `update`; a round is s loss-net updates then one task-net
      update (phases that train one group take only its updates). SEAL's public trainer
      does this per minibatch with s ∈ {3..12}, t ∈ {1, 5, 10}; the paper's Eq. 4-5 is
      s = t = 1 (the default).
  """
  phase: str = "dynamic"
  energy_weight: float = 1.0
  bce_weight: float = 1.0
  energy_term: str = "energy"
  score: str | scores_lib.Score = "soft_f1"
  train_mode: bool = False
  predict: str = "task_net"
  predict_gbi: Optional[GBIConfig] = None
  predict_init: str = "uniform"
  task_net_init: str = "carry"
  loss_net_steps: int = 1
  rounds: int = 1

  def __post_init__(self):
    base.check_choice(self.phase, PHASES, "SEAL phase")
    base.check_choice(self.energy_term, ENERGY_TERMS, "SEAL energy_term")
    if isinstance(self.score, str):
      scores_lib.get_score(self.score)
    if self.energy_weight < 0 or self.bce_weight < 0:
      raise ValueError(f"energy_weight and bce_weight must be non-negative; got "
                       f"{self.energy_weight}, {self.bce_weight}")
    if self.loss_net_steps < 1 or self.rounds < 1:
      raise ValueError(f"SEAL loss_net_steps and rounds must be >= 1; got "
                       f"{self.loss_net_steps}, {self.rounds}")
    base.check_choice(self.predict, PREDICTIONS, "SEAL predict")
    base.check_choice(self.predict_init, PREDICT_INITS, "SEAL predict_init")
    base.check_choice(self.task_net_init, TASK_NET_INITS, "SEAL task_net_init")
    if self.predict == "gbi":
      if self.predict_gbi is None:
        raise ValueError("predict='gbi' needs predict_gbi")
      gbi_lib.validate_config(self.predict_gbi)

  def score_fn(self) -> scores_lib.Score:
    """The task score as a function."""
    return scores_lib.get_score(self.score) if isinstance(self.score, str) else self.score


# ---------------------------------------------------------------------------------------
# Configs: one flat block of options (SealOptions' fields, `objective` and the loss-net
# objectives' fields), written as ml_collections values.

_OPTION_FIELDS = base.field_names(SealOptions)


def _objective_fields() -> dict[str, tuple[str, ...]]:
  """`{field: names of the library objectives that take it}`."""
  owners: dict[str, tuple[str, ...]] = {}
  for name, cls in LOSS_NET_OBJECTIVES.items():
    for field in base.field_names(cls):
      owners[field] = owners.get(field, ()) + (name,)
  return owners


def _field(field: str) -> dataclasses.Field:
  """The dataclass field called `field` (SealOptions first, then the objectives)."""
  for cls in (SealOptions, *LOSS_NET_OBJECTIVES.values()):
    for f in dataclasses.fields(cls):
      if f.name == field:
        return f
  raise KeyError(field)


_CLASSES = (SealOptions, *LOSS_NET_OBJECTIVES.values())


def _from_config_value(field: str, value: Any) -> Any:
  return base.config_value(_CLASSES, field, value)


def seal_config_defaults() -> dict[str, Any]:
  """The flat config block of SEAL's options, from the dataclasses' defaults.

  `objective` (the loss-net objective's name, `'nce'`), every field of `SealOptions`
  and of the library's loss-net objectives whose value a config can hold (lists as
  comma-separated strings, None lists as `''`). The GBI options (`predict_gbi`,
  `loss_aug_gbi`) are left out: configs keep them in their own blocks and pass them to
  `seal_options_from_config`.

  Returns:
    `{key: default}`, what a config's `seal` block starts from.
  """
  defaults: dict[str, Any] = {"objective": "nce"}
  for cls in (SealOptions, *LOSS_NET_OBJECTIVES.values()):
    for f in dataclasses.fields(cls):
      value = f.default
      if isinstance(value, tuple):
        value = ",".join(str(v) for v in value)
      elif value is None and base.sequence_element_type(_CLASSES, f.name) is not None:
        value = ""
      elif not isinstance(value, (bool, int, float, str)):
        continue
      defaults.setdefault(f.name, value)
  return defaults


def seal_options_from_config(config: Mapping[str, Any], **values: Any
                             ) -> tuple[SealOptions, LossNetObjective]:
  """SEAL's options and loss-net objective from a flat block of options.

  `objective` names the loss-net objective (`get_loss_net_objective`); the keys that
  are `SealOptions` fields go to the options, the chosen objective's fields to it.

  Args:
    config: a config's `seal` block (strict): every key must be `objective`, a
      `SealOptions` field or a field of a library loss-net objective; a key of another
      objective than the chosen one must keep its default (it would be ignored).
      List fields may be strings of comma- (or `+`-) separated items.
    **values: Python values (e.g. `GBIConfig`s, tuples, or a whole flat set of options
      given as keywords), each passed to whichever of the options and the chosen
      objective has a field of its name, and dropped otherwise; they override `config`.

  Returns:
    `(SealOptions, loss-net objective)`.

  Raises:
    ValueError: one line, naming an unknown key and the known ones, or an option set for
      an objective other than the chosen one.
  """
  owners = _objective_fields()
  known = ("objective",) + _OPTION_FIELDS + tuple(f for f in owners if f not in _OPTION_FIELDS)
  unknown = [k for k in sorted(set(config) | set(values)) if k not in known]
  if unknown:
    raise ValueError(f"unknown SEAL options {unknown}; known: {known}")
  name = values.get("objective", config.get("objective", "nce"))
  taken = base.field_names(base.lookup(OBJECTIVE_KIND, LOSS_NET_OBJECTIVES, name))
  option_kwargs, objective_kwargs = {}, {}
  for key, raw in config.items():
    if key == "objective":
      continue
    value = _from_config_value(key, raw)
    if key in _OPTION_FIELDS:
      option_kwargs[key] = value
    elif key in taken:
      objective_kwargs[key] = value
    elif value != _field(key).default:
      raise ValueError(f"SEAL option {key}={raw!r} applies to the loss-net objectives "
                       f"{owners[key]}, not to {name!r}")
  for key, value in values.items():
    if key in _OPTION_FIELDS:
      option_kwargs[key] = value
    elif key in taken:
      objective_kwargs[key] = value
  return SealOptions(**option_kwargs), get_loss_net_objective(name, **objective_kwargs)


def resolve(options: Optional[SealOptions], loss_net_objective: Optional[LossNetObjective],
            flat: dict) -> tuple[SealOptions, LossNetObjective]:
  """The options and objective of `seal_losses` / `seal_objective`, from values or from
  flat keywords (`seal_options_from_config`'s `values`)."""
  return base.resolve_options_and_named(
      options, loss_net_objective, flat, options_cls=SealOptions,
      from_flat=lambda **keywords: seal_options_from_config({}, **keywords),
      default_named=SealNCE, owner="SEAL's", named_kind="loss-net objective",
      beside="loss_net_objective", set_on="the objective value")

