"""Optimizers from config: one place that turns `config.optimizer` into optax."""

from collections.abc import Mapping
from typing import Any

import optax

__all__ = ["make_optimizer"]


def make_optimizer(cfg: Mapping[str, Any], total_steps: int) -> optax.GradientTransformation:
  """`cfg`: name (adam | adamw | sgd | momentum), learning_rate, schedule (constant | cosine),
  warmup_steps, weight_decay, momentum (momentum), clip_norm (0 = off).

  `weight_decay` is AdamW's decoupled decay for 'adamw'; for 'sgd' and 'momentum' it is
  PyTorch SGD's `weight_decay` (`wd·w` added to the clipped gradient of every parameter
  before the momentum), so configs ported from PyTorch keep their numbers; 'adam' has
  none (a nonzero value is an error rather than silently ignored).
  """
  lr = float(cfg["learning_rate"])
  warmup = int(cfg.get("warmup_steps", 0))
  schedule_name = cfg.get("schedule", "constant")
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
  weight_decay = float(cfg.get("weight_decay", 0.0))
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
    momentum = float(cfg.get("momentum", 0.9)) if name == "momentum" else None
    opt = optax.sgd(schedule, momentum=momentum)
    if weight_decay:
      opt = optax.chain(optax.add_decayed_weights(weight_decay), opt)
  else:
    raise ValueError(f"unknown optimizer {name!r}; expected adam, adamw, sgd or momentum")
  clip = float(cfg.get("clip_norm", 0.0))
  return optax.chain(optax.clip_by_global_norm(clip), opt) if clip else opt
