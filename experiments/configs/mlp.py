"""MLP: the SPEN feature network (2 hidden layers) with a linear local head, BCE.

--config=experiments/configs/mlp.py:<dataset>
"""

from experiments.configs import base


def get_config(dataset: str = "synthetic"):
  config = base.get_base_config(dataset)
  config.model.hidden = (512, 512)
  config.model.dropout = 0.5
  config.loss.l2 = 1e-5
  config.optimizer.learning_rate = 1e-3
  config.optimizer.schedule = "cosine"
  config.train.steps = 3000
  return config
