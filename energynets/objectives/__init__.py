"""Training objectives: one file per method family, all implementing `Objective`."""

from energynets.objectives.base import (Objective, ParamGroup, apply_gradients, init_group,
                                        l2_penalty, metrics_and_grads, minimize_step,
                                        multilabel_bce)
from energynets.objectives.dmf import deep_mean_field
from energynets.objectives.dvn import deep_value_network
from energynets.objectives.infnet import inference_network, infnet_losses
from energynets.objectives.local import local_bce
from energynets.objectives.seal import seal_losses, seal_objective, task_net_ranking
from energynets.objectives.ssvm import search_statistics, spen_pretrain, ssvm_hinge

__all__ = ["Objective", "ParamGroup", "apply_gradients", "deep_mean_field", "init_group",
           "inference_network", "infnet_losses", "l2_penalty", "local_bce", "metrics_and_grads",
           "minimize_step", "multilabel_bce",
           "search_statistics", "spen_pretrain", "ssvm_hinge",
           "deep_value_network", "seal_losses", "seal_objective", "task_net_ranking"]
