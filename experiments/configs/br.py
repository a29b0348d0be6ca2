"""BR: one logistic regression per label (linear + BCE), L2 as scikit-learn's C=1.

--config=experiments/configs/br.py:<dataset>
"""

from experiments.configs import base


def get_config(dataset: str = "synthetic"):
  config = base.get_base_config(dataset)
  config.model.hidden = ()
  config.loss.l2_c = 1.0
  config.optimizer.learning_rate = 1e-2
  config.optimizer.schedule = "cosine"
  config.train.steps = 3000
  return config
