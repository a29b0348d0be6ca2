"""SEAL-static (Lee et al. 2022, §2.1): pretrain the loss-net, freeze it, train the task-net.

--config=experiments/configs/seal_static.py:<dataset>
--config.seal.objective=nce|margin|regression|regression_s   (the loss-net's loss)

Stages (one `seal` objective, `seal.phase` switching what is trained):
1. `pretrain`: the task-net architecture trained with BCE (the cross-entropy baseline,
   experiments/configs/mlp.py, unclipped as it is). It is the fixed pretrained
   feed-forward noise network Ψ of static NCE (and the perturbed net of regression-s);
   margin and regression do not use it.
2. `loss_net` (`seal.phase=loss_net`): the loss-net trained alone, the network of stage 1
   frozen. Samples: NCE, Bernoulli draws of Ψ; margin, loss-augmented GBI (SPEN's SSVM);
   regression, DVN's samples (GBI prediction, adversarial sample, gold). Its validation
   numbers are the energy network used as a GBI predictor (`seal.predict=gbi`, the
   "energy network with GBI" rows of Table 1); the stage keeps its final state
   (`select_metric=None`), since the loss-net is not chosen for its GBI accuracy.
   `--config.stage_order=pretrain,loss_net` reports that predictor as the result.
3. `task_net` (`seal.phase=task_net`): a fresh task-net (`task_net_init=fresh`, as in
   SEAL's public static runs) trained on λ1·E + λ2·BCE against the frozen loss-net.

A SEAL-static margin loss-net can also come from an SSVM-trained SPEN with the same
`energy` shape: the `task_net` stage's `init_from` accepts a SPEN state.
Other choices as in seal_dynamic.py.
"""

import ml_collections

from experiments import search_spaces
from experiments.configs import base
from experiments.configs import mlp
from experiments.configs import seal_dynamic

TASKS = ("multilabel", "segmentation")  # weizmann_horse: seal_dynamic's horse options


def get_config(dataset: str = "synthetic"):
  config = seal_dynamic.get_config(dataset)
  steps = config.train.steps
  select = config.train.select_metric
  config.stage_order = "pretrain,loss_net,task_net"
  # Its own three stages only: seal_dynamic's fine-tuning stages do not apply here.
  config.stages = ml_collections.ConfigDict()
  config.stages.pretrain = dict(method="local", train=dict(steps=steps, select_metric=select))
  if base.task_of(dataset) == "multilabel":
    # Unclipped, as the MLP trains, so that a finished mlp run can be this stage
    # (`tune.start_from`, `--reuse_stage=pretrain=mlp`); its learning rate follows the
    # config's, which the search selects.
    config.stages.pretrain.optimizer = dict(clip_norm=mlp.get_config(dataset).optimizer.clip_norm)
  config.stages.loss_net = dict(
    method="seal",
    seal=dict(phase="loss_net", predict="gbi"),
    train=dict(steps=steps, select_metric=None),
  )
  config.stages.task_net = dict(
    method="seal",
    seal=dict(phase="task_net", task_net_init="fresh"),
    train=dict(steps=steps, select_metric=select),
  )
  if dataset == "weizmann_horse":
    # The regression loss-net's samples take 2 × 20 GBI steps each: a third of the
    # task-net's steps keeps the run within the CPU budget (an assumption).
    config.stages.loss_net.train.steps = 2000
    # The stage keeps its final state, so its validation (GBI on the loss-net over 36
    # crops of 40 images, ~500 training steps' worth of compute) is only a report:
    # once, at the end.
    config.stages.loss_net.train.eval_every = config.stages.loss_net.train.steps
  if dataset == "synthetic":  # three stages, still well under a minute on CPU
    config.stages.pretrain.train.steps = 1500
    config.stages.loss_net.train.steps = 500
    config.stages.task_net.train.steps = 1500
  return config


def get_search_space(dataset: str = "synthetic"):
  """What `python -m experiments.tune` selects for SEAL-static: the task-net's capacity
  (hidden layers, input and hidden dropout; its `pretrain` stage is the MLP), the
  learning rate of every stage, L2 and the feature scaling (`search_spaces.network`)."""
  del dataset  # the same space everywhere
  return search_spaces.network()
