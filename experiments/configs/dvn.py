"""DVN (Gygli et al. 2017): a value network σ(−E) regressed to the soft F1, GBI at test.

--config=experiments/configs/dvn.py:<dataset>

Each step regresses σ(−E(x, ȳ)) onto soft-F1(ȳ, y) for the GBI prediction (20 Adam
steps from uniform), an adversarial sample (20 steps of ascent on the regression loss
from the prediction) and the gold output (`dvn.samples`, comma-separated from
inference, adversarial, gold, random; `dvn.sample_weights` their weights). Test-time
GBI: Adam + clamp from uniform, at most 30 steps (SEAL's public DVN configs: 20
training and 30 test steps, Adam learning rate 0.04); convergence tolerances 1e-4 are
an assumption. The energy is the SEAL loss-net (seal_dynamic.py); trained from scratch
in one stage, as Gygli et al. and SEAL's DVN baseline do. Selection and the headline
number: example-F1 at 0.5 (SEAL's protocol).
"""

import ml_collections

from experiments.configs import base
from experiments.configs import seal_dynamic


def get_config(dataset: str = "synthetic"):
  config = base.get_base_config(dataset)
  config.method = "dvn"
  reference = seal_dynamic.get_config(dataset)
  config.energy = reference.energy
  # init: GBI start at training and test time, uniform or local (the energy's local head).
  config.loss = ml_collections.ConfigDict(dict(l2=0.0, l2_c=0.0, init="uniform"))
  config.dvn = ml_collections.ConfigDict(dict(
      samples="inference,adversarial,gold", sample_weights="", score="soft_f1",
      adversarial_through_score=True))
  config.gbi = ml_collections.ConfigDict(dict(
      method="projected", optimizer="adam", learning_rate=0.05, num_steps=20,
      entropy_weight=0.0))
  config.adversarial_gbi = ml_collections.ConfigDict(config.gbi.to_dict())
  config.predict_gbi = ml_collections.ConfigDict(dict(
      method="projected", optimizer="adam", learning_rate=0.05, max_steps=30, rel_tol=1e-4,
      abs_tol=1e-4, stop_fraction=1.0, entropy_weight=0.0))
  config.optimizer.learning_rate = 1e-3
  config.optimizer.clip_norm = 10.0
  config.train.steps = reference.train.steps
  config.train.eval_every = reference.train.eval_every
  config.train.select_metric = "validation/example_f1@0.5"
  if dataset == "synthetic":
    config.train.steps = 1500
  return config
