"""SEAL-dynamic whose task-net also trains on the soft F1: an energy beside the exact score.

--config=experiments/configs/seal_f1.py:<dataset>

seal_dynamic.py's multi-label config (NCE loss-net, task-net = mlp.py's network) with
`seal.score_weight=w`: the task-net minimizes
λ1·E(x, σ(F(x))) + λ2·BCE − w · mean soft F1(σ(F(x)), y).

Why: with SEAL's own losses our loss-nets did not pass the score on to the task-net,
while BCE − w·soft F1 alone reached or passed SEAL's best number on every dataset
(docs/results.md, "seal_direct_score"). Here the energy only has to add what the score
misses (label interactions the per-example F1 does not see); mlp_soft_f1.py is the same
run without the loss-net, so the pair measures the energy's share. w is
mlp_soft_f1.py's per dataset, and searched the same way.
"""

from experiments import search_spaces
from experiments.configs import mlp_soft_f1
from experiments.configs import seal_dynamic


def get_config(dataset: str = "synthetic"):
  config = seal_dynamic.get_multilabel_config(dataset)
  config.seal.score_weight = mlp_soft_f1.score_weight(dataset)
  return config


def get_search_space(dataset: str = "synthetic"):
  """What `python -m experiments.tune` selects: seal_dynamic.py's space (the task-net's
  capacity, dropout, learning rate, L2, scaling) and the soft F1's weight
  `seal.score_weight`."""
  del dataset  # the same space everywhere
  return {
    **search_spaces.network(),
    "seal.score_weight": mlp_soft_f1.SEARCHED_SCORE_WEIGHTS,
  }
