"""Training objectives: one file per method family, all implementing `Objective`."""

from energynets.objectives.base import (Objective, ParamGroup, apply_gradients, init_group,
                                        l2_penalty, metrics_and_grads, minimize_step,
                                        multilabel_bce, options_from_config)
from energynets.objectives.crf import crf_objective
from energynets.objectives.dmf import deep_mean_field
from energynets.objectives.dvn import DVNOptions, Sampler, deep_value_network
from energynets.objectives.e2e import E2EOptions, e2e_objective
from energynets.objectives.implicit import (ImplicitCD, ImplicitDVN, ImplicitOptions,
                                            ImplicitPrimary, ImplicitPrimaryInputs,
                                            ImplicitSSVM, contrastive_divergence_loss,
                                            get_primary_loss, implicit_objective,
                                            implicit_options_from_config)
from energynets.objectives.infnet import (InfNetCompound, InfNetEnergyInputs,
                                          InfNetEnergyObjective, InfNetMargin, InfNetOptions,
                                          InfNetPerceptron, get_energy_objective,
                                          inference_network, infnet_losses,
                                          infnet_options_from_config)
from energynets.objectives.local import local_bce, local_squared_error, local_token_ce
from energynets.objectives.seal import (LossNetInputs, LossNetObjective, SealMargin, SealNCE,
                                        SealOptions, SealRegression, SealRegressionS,
                                        get_loss_net_objective, seal_config_defaults,
                                        seal_losses, seal_objective,
                                        seal_options_from_config, task_net_ranking)
from energynets.objectives.ssvm import SSVMOptions, search_statistics, spen_pretrain, ssvm_hinge

__all__ = ["Objective", "ParamGroup", "apply_gradients", "contrastive_divergence_loss",
           "crf_objective", "deep_mean_field",
           "deep_value_network", "e2e_objective", "implicit_objective", "inference_network", "infnet_losses", "init_group",
           "l2_penalty", "local_bce", "local_squared_error", "local_token_ce", "metrics_and_grads",
           "minimize_step", "multilabel_bce", "seal_losses", "seal_objective",
           "LossNetInputs", "LossNetObjective", "SealMargin", "SealNCE", "SealOptions",
           "SealRegression", "SealRegressionS", "get_loss_net_objective",
           "seal_config_defaults", "seal_options_from_config",
           "search_statistics", "spen_pretrain", "ssvm_hinge", "task_net_ranking",
           "InfNetCompound", "InfNetEnergyInputs", "InfNetEnergyObjective", "InfNetMargin",
           "InfNetOptions", "InfNetPerceptron", "get_energy_objective",
           "infnet_options_from_config",
           "ImplicitCD", "ImplicitDVN", "ImplicitOptions", "ImplicitPrimary",
           "ImplicitPrimaryInputs", "ImplicitSSVM", "get_primary_loss",
           "implicit_options_from_config", "SSVMOptions", "E2EOptions", "DVNOptions",
           "Sampler", "options_from_config"]
