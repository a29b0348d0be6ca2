"""An optimizer's config block and the optax transformation it names: `config.optimizer`
and every other parameter group's optimizer (`loss_net_optimizer`, `step_size_optimizer`,
`inner_optimizer`, ...).

    name: 'adam' | 'adamw' | 'sgd' | 'momentum'
    learning_rate, schedule ('constant' | 'cosine'), warmup_steps, weight_decay,
    momentum ('momentum' only), clip_norm (0: off)

The library takes the optax transformation; this module is where a config's names
become one.
"""

from collections.abc import Mapping
from typing import Any

import ml_collections
import optax

from experiments.choices import config_block

DEFAULTS: dict[str, Any] = dict(
  name="adam",
  learning_rate=1e-3,
  schedule="constant",
  warmup_steps=0,
  weight_decay=0.0,
  momentum=0.9,
  clip_norm=0.0,
)
"""Every key of an optimizer block and its default; `make_optimizer` requires `name` and
`learning_rate` and fills the other keys a block leaves out from here."""


def block(**overrides: Any) -> ml_collections.ConfigDict:
  """An optimizer block: every key of `DEFAULTS`, with `overrides`.

  Args:
    **overrides: keys of the block and their values (e.g. `learning_rate=1e-2`,
      `schedule='cosine'`).

  Returns:
    The block as a `ConfigDict`.

  Raises:
    ValueError: one line naming an unknown key.
  """
  return config_block("optimizer", DEFAULTS, overrides)


def make_optimizer(cfg: Mapping[str, Any], total_steps: int) -> optax.GradientTransformation:
  """The optax transformation an optimizer block names.

  `weight_decay` is AdamW's decoupled decay for 'adamw'; for 'sgd' and 'momentum' it is
  PyTorch SGD's `weight_decay` (`wd·w` added to the clipped gradient of every parameter
  before the momentum), so configs ported from PyTorch keep their numbers; 'adam' has
  none (a nonzero value is an error rather than silently ignored).

  Args:
    cfg: the block (`name` and `learning_rate` required; other keys default to
      `DEFAULTS`).
    total_steps: the steps the schedule spans (cosine decay ends there).

  Returns:
    `clip_by_global_norm` (when `clip_norm` > 0), then the optimizer on the schedule.

  Raises:
    ValueError: an unknown name or schedule, or `weight_decay` with 'adam' (one line).
  """
  value = lambda key: cfg[key] if key in cfg else DEFAULTS[key]
  lr = float(cfg["learning_rate"])
  warmup = int(value("warmup_steps"))
  schedule_name = value("schedule")
  if schedule_name == "constant":
    schedule = (
      optax.join_schedules(
        [optax.linear_schedule(0.0, lr, warmup), optax.constant_schedule(lr)], [warmup]
      )
      if warmup
      else optax.constant_schedule(lr)
    )
  elif schedule_name == "cosine":
    schedule = (
      optax.warmup_cosine_decay_schedule(0.0, lr, warmup, max(total_steps, warmup + 1))
      if warmup
      else optax.cosine_decay_schedule(lr, max(total_steps, 1))
    )
  else:
    raise ValueError(f"unknown schedule {schedule_name!r}; expected 'constant' or 'cosine'")

  name = cfg["name"]
  weight_decay = float(value("weight_decay"))
  if name == "adam":
    if weight_decay:
      raise ValueError(
        f"optimizer 'adam' has no weight_decay (got {weight_decay}); use "
        "'adamw' for decoupled decay or loss.l2 for an L2 penalty"
      )
    opt = optax.adam(schedule)
  elif name == "adamw":
    opt = optax.adamw(schedule, weight_decay=weight_decay)
  elif name in ("sgd", "momentum"):
    momentum = float(value("momentum")) if name == "momentum" else None
    opt = optax.sgd(schedule, momentum=momentum)
    if weight_decay:
      opt = optax.chain(optax.add_decayed_weights(weight_decay), opt)
  else:
    raise ValueError(f"unknown optimizer {name!r}; expected adam, adamw, sgd or momentum")
  clip = float(value("clip_norm"))
  return optax.chain(optax.clip_by_global_norm(clip), opt) if clip else opt


__all__ = ["DEFAULTS", "block", "make_optimizer"]
