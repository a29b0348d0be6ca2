"""DMF (SPEN 2016 baseline): 5 unrolled mean-field sweeps of a pairwise CRF over labels.

--config=experiments/configs/dmf.py:<dataset>

Stage `pretrain` is the MLP baseline (experiments/configs/mlp.py); stage `pairwise`
clamps it as the unaries and trains data-dependent couplings through the unroll
(SPEN §7.1: without the pretrained unaries accuracy was about half). See
energynets/objectives/dmf.py for the coupling parametrization.
"""

import ml_collections

from experiments import search_spaces
from experiments.configs import mlp


def get_config(dataset: str = "synthetic"):
  config = mlp.get_config(dataset)
  # rank: learned L×L coupling bases; -1 is the full-rank affine map of the features.
  config.dmf = ml_collections.ConfigDict(
    dict(num_iters=5, rank=4, train_unary=False, features="probs", damping=0.0)
  )
  config.stage_order = "pretrain,pairwise"
  config.stages.pretrain = dict(
    method="local", train=dict(steps=3000), optimizer=dict(learning_rate=1e-3)
  )
  config.stages.pairwise = dict(
    method="dmf",
    train=dict(steps=1500, select_metric="validation/example_f1"),
    optimizer=dict(learning_rate=1e-3),
  )
  if dataset == "yeast":
    # SPEN Table 2: "The SPEN and DMF use linear feature networks" (spen_ssvm's yeast
    # variant has feature_hidden=() too).
    config.model.hidden = ()
    config.model.dropout = config.model.input_dropout = 0.0
  return config


def get_search_space(dataset: str = "synthetic"):
  """What `python -m experiments.tune` selects for DMF: the pretrained MLP's capacity and
  learning rate (mlp.py's space), the `pairwise` stage's learning rate, L2 and the feature
  scaling (`search_spaces.staged_network`); each stage selects its checkpoint on the
  held-out rows."""
  del dataset  # the same space everywhere
  return search_spaces.staged_network("pairwise", (1e-3, 1e-2))
