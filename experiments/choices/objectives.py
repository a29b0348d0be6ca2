"""The core objectives' names: config blocks -> `SSVMOptions`, `E2EOptions`, `DVNOptions`
and the DMF's features, with the tables of the values each name stands for.

- Task surrogates (`SURROGATES`, `surrogate`): `config.loss.surrogate` `'squared'`,
  `'log'` (clipped at `config.loss.surrogate_eps`) or `'l1'`; the SEAL and InfNet margin
  costs name them the same way.
- SSVM (`ssvm_options`): `config.loss` holds `SSVMOptions`' fields, `surrogate` /
  `surrogate_eps`, and `loss_aug_solver` / `predict_solver` (`SSVM_SOLVERS`: `'gbi'`,
  `'exhaustive'`); `trainable` and `loss_aug_init` are comma-separated names.
- E2E (`e2e_options`): `config.e2e` holds `E2EOptions`' fields; `loss` (`E2E_LOSSES`:
  `'bce'`, clipped at `loss_eps`, or `'squared'`), `loss_reduction` (`E2E_REDUCTIONS`:
  `'sum'`, `'mean'`) and `gradient` (`E2E_GRADIENTS`: `'scan'`, `'remat'`, `'adjoint'`).
- DVN (`dvn_options`): `config.dvn` holds `samples` (comma-separated `DVN_SOURCES`:
  `inference`, `adversarial`, `gold`, `random`, `other_gold`), `sample_weights`, `score`
  (`SCORES`: `'soft_f1'`, `'soft_iou'`), `adversarial_through_score` and
  `adversarial_init` (`ADVERSARIAL_INITS`: `'prediction'`, `'random'`).
- DMF (`dmf_features`): `config.dmf.features` (`DMF_FEATURES`: `'probs'`, `'logits'`,
  `'hidden'`, `'x'`).

`ssvm_block`, `e2e_block` and `dvn_block` write these blocks for the configs: the options
dataclasses' defaults as names, with the keys a config chooses.
"""

from collections.abc import Callable
from collections.abc import Mapping
import re
from typing import Any

import ml_collections

from energynets.inference import unrolled
from energynets.inference.gbi import GBIConfig
from energynets.objectives import dmf
from energynets.objectives import dvn
from energynets.objectives import e2e
from energynets.objectives import scores
from energynets.objectives import ssvm
from energynets.objectives import task_losses
from experiments.choices import config_block
from experiments.choices import field_defaults
from experiments.choices import field_names
from experiments.choices import list_text
from experiments.choices import lookup
from experiments.choices import name_of
from experiments.choices import options_from_config

# A surrogate's name -> its value, given the clip eps of `'log'`.
SURROGATES: dict[str, Callable[[float], task_losses.Surrogate]] = {
  "squared": lambda eps: task_losses.Squared(),
  "log": lambda eps: task_losses.Log(eps),
  "l1": lambda eps: task_losses.L1(),
}

# config.loss.loss_aug_solver / predict_solver -> the SSVM's solver.
SSVM_SOLVERS: dict[str, ssvm.Solver] = {
  "gbi": ssvm.GBISolver(),
  "exhaustive": ssvm.ExhaustiveSolver(),
}

# config.e2e.loss -> ℓ, given config.e2e.loss_eps (the clip of 'bce').
E2E_LOSSES: dict[str, Callable[[float], task_losses.Surrogate]] = {
  "bce": lambda eps: task_losses.Log(eps),
  "squared": lambda eps: task_losses.Squared(),
}
E2E_REDUCTIONS: dict[str, e2e.Reduction] = {"sum": e2e.Sum(), "mean": e2e.Mean()}
# config.e2e.gradient -> the strategy that differentiates the unroll.
E2E_GRADIENTS: dict[str, unrolled.GradientStrategy] = {
  "scan": unrolled.Unrolled(),
  "remat": unrolled.Rematerialized(),
  "adjoint": unrolled.HVPAdjoint(),
}

# A DVN sample source's name -> its value (`'adversarial'` as configured by
# `dvn_sources`' `adversarial`).
DVN_SOURCES: dict[str, dvn.Source] = {
  "inference": dvn.Inference(),
  "adversarial": dvn.Adversarial(),
  "gold": dvn.Gold(),
  "random": dvn.Random(),
  "other_gold": dvn.OtherGold(),
}
# config.dvn.adversarial_init -> `Adversarial.random_start`.
ADVERSARIAL_INITS = {"prediction": False, "random": True}
# The names of `dvn.DEFAULT_SAMPLES`.
DEFAULT_DVN_SOURCES = ("inference", "adversarial", "gold")

# A task score's name -> the score.
SCORES: dict[str, scores.Score] = {"soft_f1": scores.soft_f1, "soft_iou": scores.soft_iou}

# config.dmf.features -> the coupling coefficients' input.
DMF_FEATURES: dict[str, dmf.Features] = {
  "probs": dmf.Probs(),
  "logits": dmf.Logits(),
  "hidden": dmf.Hidden(),
  "x": dmf.RawInput(),
}


def _as_dict(block: Mapping[str, Any]) -> dict[str, Any]:
  return block.to_dict() if hasattr(block, "to_dict") else dict(block)


def surrogate(name: str, eps: float = task_losses.DEFAULT_SURROGATE_EPS) -> task_losses.Surrogate:
  """The task surrogate called `name` (`SURROGATES`), `'log'` clipped at `eps`; a
  one-line ValueError for an unknown name."""
  return lookup("surrogate", SURROGATES, name)(eps)


def score(name: str) -> scores.Score:
  """The task score called `name` (`SCORES`); a one-line ValueError for an unknown name."""
  return lookup("score", SCORES, name)


def dmf_features(name: str) -> dmf.Features:
  """The DMF coefficients' input called `name` (`DMF_FEATURES`)."""
  return lookup("DMF features", DMF_FEATURES, name)


def dvn_sources(
  names: str | tuple[str, ...] | None, *, adversarial: dvn.Adversarial = dvn.Adversarial()
) -> tuple[dvn.Source, ...] | None:
  """The DVN sources named by `names` (a tuple, or a string separated by `,` or `+`);
  `'adversarial'` is `adversarial`. None or an empty string: None (the default sources).
  """
  if isinstance(names, str):
    source_names = [name.strip() for name in re.split(r"[,+]", names) if name.strip()]
  else:
    source_names = list(names or ())
  if not source_names:
    return None
  return tuple(
    adversarial if name == "adversarial" else lookup("DVN sample source", DVN_SOURCES, name)
    for name in source_names
  )


def ssvm_options(
  block: Mapping[str, Any], *, loss_aug_gbi: GBIConfig | None, predict_gbi: GBIConfig | None
) -> ssvm.SSVMOptions:
  """`SSVMOptions` from `config.loss` (a block several methods share: keys that are no
  SSVM option are ignored) and the two inferences' `GBIConfig`s."""
  block = _as_dict(block)
  values = dict(
    surrogate=surrogate(
      block.pop("surrogate", "squared"),
      block.pop("surrogate_eps", task_losses.DEFAULT_SURROGATE_EPS),
    ),
    loss_aug_gbi=loss_aug_gbi,
    predict_gbi=predict_gbi,
  )
  for key in ("loss_aug_solver", "predict_solver"):
    if key in block:
      values[key] = lookup("inference solver", SSVM_SOLVERS, block.pop(key))
  return options_from_config(ssvm.SSVMOptions, block, strict=False, **values)


def _refuse_unknown(cls: type, block: Mapping[str, Any], parsed: tuple[str, ...]) -> None:
  known = field_names(cls) + parsed
  unknown = sorted(k for k in block if k not in known)
  if unknown:
    raise ValueError(f"unknown {cls.__name__} options {unknown}; known: {known}")


def e2e_options(block: Mapping[str, Any], **values: Any) -> e2e.E2EOptions:
  """`E2EOptions` from `config.e2e` (`loss` with `loss_eps`, `loss_reduction` and
  `gradient` by name) and field values (`gbi`, and config.loss's `trainable`, `l2`)."""
  block = _as_dict(block)
  _refuse_unknown(e2e.E2EOptions, block, ("loss_eps",))
  eps = block.pop("loss_eps", e2e.DEFAULT_LOSS_EPS)
  if "loss" in block:
    block["loss"] = lookup("e2e loss", E2E_LOSSES, block["loss"])(eps)
  if "loss_reduction" in block:
    block["loss_reduction"] = lookup("e2e loss_reduction", E2E_REDUCTIONS, block["loss_reduction"])
  if "gradient" in block:
    block["gradient"] = lookup("gradient strategy", E2E_GRADIENTS, block["gradient"])
  return options_from_config(e2e.E2EOptions, block, **values)


def dvn_options(block: Mapping[str, Any], **values: Any) -> dvn.DVNOptions:
  """`DVNOptions` from `config.dvn` (`samples`, `sample_weights`, `score`, and the
  adversarial source's `adversarial_through_score` / `adversarial_init`) and field
  values (the GBI configs, and config.loss's `init`, `l2`)."""
  block = _as_dict(block)
  _refuse_unknown(dvn.DVNOptions, block, ("adversarial_through_score", "adversarial_init"))
  adversarial = dvn.Adversarial(
    through_score=block.pop("adversarial_through_score", True),
    random_start=lookup(
      "adversarial_init", ADVERSARIAL_INITS, block.pop("adversarial_init", "prediction")
    ),
  )
  block["samples"] = dvn_sources(
    block.get("samples") or DEFAULT_DVN_SOURCES, adversarial=adversarial
  )
  if isinstance(block.get("score"), str):
    block["score"] = score(block["score"])
  return options_from_config(dvn.DVNOptions, block, **values)


def _surrogate_name(value: task_losses.Surrogate) -> tuple[str, float]:
  """`(name, surrogate_eps)` of a surrogate value (`SURROGATES`' inverse)."""
  eps = getattr(value, "eps", task_losses.DEFAULT_SURROGATE_EPS)
  names = {name: make(eps) for name, make in SURROGATES.items()}
  return name_of("surrogate", names, value), eps


# `config.loss` is shared with the feed-forward stages: `l2_c` (> 0: l2 = 1/(C·N_train))
# is theirs, off.
_SHARED_LOSS_DEFAULTS = {"l2_c": 0.0}
SSVM_KEYS = ("l2", "surrogate", "surrogate_eps", "trainable", "init", "loss_aug_init")
"""The keys every SSVM `config.loss` block holds (`ssvm_block`)."""


def ssvm_block(**overrides: Any) -> ml_collections.ConfigDict:
  """An SSVM's `config.loss` block: `SSVM_KEYS` at `SSVMOptions()`'s defaults as a config
  writes them, with `overrides`.

  Args:
    **overrides: keys of the block and their values (`l2`, `l2_c`, `surrogate`,
      `surrogate_eps`, `trainable`, `init`, `loss_aug_init`, `loss_aug_solver`,
      `predict_solver`); a key passed is held even at its default.

  Returns:
    The block as a `ConfigDict`.

  Raises:
    ValueError: one line naming an unknown key.
  """
  d = field_defaults(ssvm.SSVMOptions)
  surrogate_name, surrogate_eps = _surrogate_name(d["surrogate"])
  defaults = dict(
    l2=d["l2"],
    **_SHARED_LOSS_DEFAULTS,
    surrogate=surrogate_name,
    surrogate_eps=surrogate_eps,
    trainable=list_text(d["trainable"]),
    init=d["init"],
    loss_aug_init=list_text(d["loss_aug_init"]),
    loss_aug_solver=name_of("inference solver", SSVM_SOLVERS, d["loss_aug_solver"]),
    predict_solver=name_of("inference solver", SSVM_SOLVERS, d["predict_solver"]),
  )
  return config_block("SSVM loss", defaults, overrides, keys=SSVM_KEYS)


def e2e_block(**overrides: Any) -> ml_collections.ConfigDict:
  """`config.e2e`: `E2EOptions`' defaults as a config writes them (`loss` with
  `loss_eps`, `gradient`, `loss_reduction` by name; `gbi`, `trainable` and `l2` come from
  other blocks), with `overrides`.

  Raises:
    ValueError: one line naming an unknown key.
  """
  d = field_defaults(e2e.E2EOptions)
  eps = getattr(d["loss"], "eps", e2e.DEFAULT_LOSS_EPS)
  losses = {name: make(eps) for name, make in E2E_LOSSES.items()}
  defaults = dict(
    loss=name_of("e2e loss", losses, d["loss"]),
    per_iterate=d["per_iterate"],
    gradient=name_of("gradient strategy", E2E_GRADIENTS, d["gradient"]),
    init=d["init"],
    learn_step_sizes=d["learn_step_sizes"],
    loss_eps=eps,
    loss_reduction=name_of("e2e loss_reduction", E2E_REDUCTIONS, d["loss_reduction"]),
  )
  return config_block("e2e", defaults, overrides)


def dvn_block(**overrides: Any) -> ml_collections.ConfigDict:
  """`config.dvn`: `DVNOptions`' defaults as a config writes them (the default samples'
  names, the adversarial source's options; the GBI configs, `init` and `l2` come from
  other blocks), with `overrides`.

  Raises:
    ValueError: one line naming an unknown key.
  """
  d = field_defaults(dvn.DVNOptions)
  samples = dvn.DEFAULT_SAMPLES if d["samples"] is None else d["samples"]
  adversarial = next(s for s in samples if isinstance(s, dvn.Adversarial))
  sources = {**DVN_SOURCES, "adversarial": adversarial}
  defaults = dict(
    samples=",".join(name_of("DVN sample source", sources, s) for s in samples),
    sample_weights=list_text(d["sample_weights"]),
    score=name_of("score", SCORES, d["score"]),
    adversarial_through_score=adversarial.through_score,
    adversarial_init=name_of("adversarial_init", ADVERSARIAL_INITS, adversarial.random_start),
  )
  return config_block("DVN", defaults, overrides)


__all__ = [
  "ADVERSARIAL_INITS",
  "DMF_FEATURES",
  "DVN_SOURCES",
  "E2E_GRADIENTS",
  "DEFAULT_DVN_SOURCES",
  "E2E_LOSSES",
  "E2E_REDUCTIONS",
  "SCORES",
  "SSVM_SOLVERS",
  "SURROGATES",
  "SSVM_KEYS",
  "dmf_features",
  "dvn_block",
  "dvn_options",
  "dvn_sources",
  "e2e_block",
  "e2e_options",
  "score",
  "ssvm_block",
  "ssvm_options",
  "surrogate",
]
