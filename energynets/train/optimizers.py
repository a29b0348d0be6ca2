"""Optimizers from config: one place that turns `config.optimizer` into optax."""

from typing import Any, Mapping

import optax


def make_optimizer(cfg: Mapping[str, Any], total_steps: int) -> optax.GradientTransformation:
  """`cfg`: name (adam | adamw | sgd | momentum), learning_rate, schedule (constant | cosine),
  warmup_steps, weight_decay (adamw only), momentum (sgd), clip_norm (0 = off)."""
  lr = float(cfg["learning_rate"])
  warmup = int(cfg.get("warmup_steps", 0))
  schedule_name = cfg.get("schedule", "constant")
  if schedule_name == "constant":
    schedule = optax.join_schedules(
        [optax.linear_schedule(0.0, lr, warmup), optax.constant_schedule(lr)],
        [warmup]) if warmup else optax.constant_schedule(lr)
  elif schedule_name == "cosine":
    schedule = (optax.warmup_cosine_decay_schedule(0.0, lr, warmup, max(total_steps, warmup + 1))
                if warmup else optax.cosine_decay_schedule(lr, max(total_steps, 1)))
  else:
    raise ValueError(f"unknown schedule {schedule_name!r}; expected 'constant' or 'cosine'")

  name = cfg["name"]
  if name == "adam":
    opt = optax.adam(schedule)
  elif name == "adamw":
    opt = optax.adamw(schedule, weight_decay=float(cfg.get("weight_decay", 0.0)))
  elif name == "sgd":
    opt = optax.sgd(schedule)
  elif name == "momentum":
    opt = optax.sgd(schedule, momentum=float(cfg.get("momentum", 0.9)))
  else:
    raise ValueError(f"unknown optimizer {name!r}; expected adam, adamw, sgd or momentum")
  clip = float(cfg.get("clip_norm", 0.0))
  return optax.chain(optax.clip_by_global_norm(clip), opt) if clip else opt
