"""Training objectives: one file per method family, all implementing `Objective`."""

from energynets.objectives.base import Objective
from energynets.objectives.base import ParamGroup
from energynets.objectives.base import apply_gradients
from energynets.objectives.base import init_group
from energynets.objectives.base import l2_penalty
from energynets.objectives.base import metrics_and_grads
from energynets.objectives.base import minimize_step
from energynets.objectives.base import multilabel_bce
from energynets.objectives.crf import crf_objective
from energynets.objectives.dmf import deep_mean_field
from energynets.objectives.dvn import DVNOptions
from energynets.objectives.dvn import Sampler
from energynets.objectives.dvn import deep_value_network
from energynets.objectives.e2e import E2EOptions
from energynets.objectives.e2e import e2e_losses
from energynets.objectives.e2e import e2e_objective
from energynets.objectives.implicit import ImplicitCD
from energynets.objectives.implicit import ImplicitDVN
from energynets.objectives.implicit import ImplicitOptions
from energynets.objectives.implicit import ImplicitPrimary
from energynets.objectives.implicit import ImplicitPrimaryInputs
from energynets.objectives.implicit import ImplicitSSVM
from energynets.objectives.implicit import NegativeSampler
from energynets.objectives.implicit import RelaxedNegatives
from energynets.objectives.implicit import StraightThroughNegatives
from energynets.objectives.implicit import contrastive_divergence_loss
from energynets.objectives.implicit import implicit_objective
from energynets.objectives.infnet import InfNetArchitecture
from energynets.objectives.infnet import InfNetCompound
from energynets.objectives.infnet import InfNetEnergyInputs
from energynets.objectives.infnet import InfNetEnergyObjective
from energynets.objectives.infnet import InfNetMargin
from energynets.objectives.infnet import InfNetOptions
from energynets.objectives.infnet import InfNetPerceptron
from energynets.objectives.infnet import InfNetSeparated
from energynets.objectives.infnet import InfNetShared
from energynets.objectives.infnet import InfNetStacked
from energynets.objectives.infnet import InfNetTruncation
from energynets.objectives.infnet import inference_network
from energynets.objectives.infnet import infnet_losses
from energynets.objectives.local import local_bce
from energynets.objectives.local import local_squared_error
from energynets.objectives.local import local_token_ce
from energynets.objectives.seal import LossNetInputs
from energynets.objectives.seal import LossNetObjective
from energynets.objectives.seal import SealMargin
from energynets.objectives.seal import SealNCE
from energynets.objectives.seal import SealOptions
from energynets.objectives.seal import SealRegression
from energynets.objectives.seal import SealRegressionS
from energynets.objectives.seal import seal_losses
from energynets.objectives.seal import seal_objective
from energynets.objectives.seal import task_net_ranking
from energynets.objectives.ssvm import ExhaustiveSolver
from energynets.objectives.ssvm import GBISolver
from energynets.objectives.ssvm import SSVMOptions
from energynets.objectives.ssvm import search_statistics
from energynets.objectives.ssvm import spen_pretrain
from energynets.objectives.ssvm import ssvm_hinge
from energynets.objectives.task_losses import L1
from energynets.objectives.task_losses import Log
from energynets.objectives.task_losses import Squared

__all__ = [
  "Objective",
  "ParamGroup",
  "apply_gradients",
  "contrastive_divergence_loss",
  "crf_objective",
  "deep_mean_field",
  "deep_value_network",
  "e2e_losses",
  "e2e_objective",
  "implicit_objective",
  "inference_network",
  "infnet_losses",
  "init_group",
  "l2_penalty",
  "local_bce",
  "local_squared_error",
  "local_token_ce",
  "metrics_and_grads",
  "minimize_step",
  "multilabel_bce",
  "seal_losses",
  "seal_objective",
  "LossNetInputs",
  "LossNetObjective",
  "SealMargin",
  "SealNCE",
  "SealOptions",
  "SealRegression",
  "SealRegressionS",
  "search_statistics",
  "spen_pretrain",
  "ssvm_hinge",
  "task_net_ranking",
  "InfNetArchitecture",
  "InfNetCompound",
  "InfNetEnergyInputs",
  "InfNetEnergyObjective",
  "InfNetMargin",
  "InfNetOptions",
  "InfNetPerceptron",
  "InfNetSeparated",
  "InfNetShared",
  "InfNetStacked",
  "InfNetTruncation",
  "ImplicitCD",
  "ImplicitDVN",
  "ImplicitOptions",
  "ImplicitPrimary",
  "ImplicitPrimaryInputs",
  "ImplicitSSVM",
  "NegativeSampler",
  "RelaxedNegatives",
  "StraightThroughNegatives",
  "SSVMOptions",
  "E2EOptions",
  "DVNOptions",
  "Sampler",
  "ExhaustiveSolver",
  "GBISolver",
  "L1",
  "Log",
  "Squared",
]
