"""SEAL ablation (§5): the NCE ranking loss on the task-net itself, without a loss-net.

--config=experiments/configs/seal_ranking.py:<dataset>

`s(y) = Σ_i log P(y_i | x; Φ)` replaces the loss-net's score in Eq. 8; noise samples are
the task-net's own Bernoulli draws; the loss is `seal.energy_weight · ranking +
seal.bce_weight · BCE` (energynets/objectives/seal/ranking.py: task_net_ranking). Everything
else as seal_dynamic.py, but by path (`:mulan`): there the default is staged,
`stage_order=pretrain,seal` (the MLP, then the ranking loss fine-tunes it; the run reports
the better stage on validation), where the ranking loss from scratch, searched, lost to
the tuned linear model on yeast at 250 rows (docs/verdict.md, "seal_ranking by path").
`--config.stage_order=` trains it from scratch in one stage, as SEAL's ablation does.
"""

from experiments.configs import seal_dynamic


def get_config(dataset: str = "synthetic"):
  config = seal_dynamic.get_config(dataset)
  config.method = "seal_ranking"
  if dataset == "mulan":
    config.stage_order = "pretrain,seal"
  return config


def get_search_space(dataset: str = "synthetic"):
  """seal_dynamic.py's search space: the ranking loss trains the same task-net."""
  return seal_dynamic.get_search_space(dataset)
