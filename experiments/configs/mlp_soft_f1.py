"""The MLP on BCE − w·soft F1: the task score SEAL's loss-nets stand for, used directly.

--config=experiments/configs/mlp_soft_f1.py:<dataset>

mlp.py's network and training with `loss.score='soft_f1'`: the loss is
BCE − w · mean soft F1(σ(F(x)), y), no loss-net. It is the control of seal_f1.py (the
same task score with a loss-net beside it): what the score alone gives.

w: chosen on validation with seed 0 (results/seal/seal_direct_score_<dataset>.md):
bibtex 30, delicious 1000, expr_fun 3000, cal500 and spo_fun 3·10⁴ (genbase is
saturated); 1000 elsewhere. The search (`get_search_space`) adds w over 10 ... 10⁴ to
mlp.py's space.
"""

from experiments import search_spaces
from experiments.configs import mlp

# The weight of the soft F1 chosen on each dataset's validation split (seed 0).
SCORE_WEIGHTS = {"bibtex": 30.0, "delicious": 1e3, "expr_fun": 3e3, "cal500": 3e4, "spo_fun": 3e4}
# Its default where none was chosen, and the candidates of a search.
DEFAULT_SCORE_WEIGHT = 1e3
SEARCHED_SCORE_WEIGHTS = (10.0, 100.0, 1e3, 1e4)


def score_weight(dataset: str) -> float:
  """The soft F1's weight w on `dataset` (`SCORE_WEIGHTS`, else `DEFAULT_SCORE_WEIGHT`)."""
  return SCORE_WEIGHTS.get(dataset, DEFAULT_SCORE_WEIGHT)


def get_config(dataset: str = "synthetic"):
  config = mlp.get_config(dataset)
  config.loss.score = "soft_f1"
  config.loss.score_weight = score_weight(dataset)
  return config


def get_search_space(dataset: str = "synthetic"):
  """What `python -m experiments.tune` selects: mlp.py's space (capacity, dropout,
  learning rate, L2, scaling) and the soft F1's weight `loss.score_weight`."""
  del dataset  # the same space everywhere
  return {**search_spaces.network(), "loss.score_weight": SEARCHED_SCORE_WEIGHTS}
