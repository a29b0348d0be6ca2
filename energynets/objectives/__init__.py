"""Training objectives: one file per method family, all implementing `Objective`."""

from energynets.objectives.base import (Objective, ParamGroup, apply_gradients, init_group,
                                        l2_penalty, minimize_step)
from energynets.objectives.local import local_bce
from energynets.objectives.ssvm import spen_pretrain, ssvm

__all__ = ["Objective", "ParamGroup", "apply_gradients", "init_group", "l2_penalty",
           "local_bce", "minimize_step", "spen_pretrain", "ssvm"]
