"""Shared defaults of every experiment config (not itself a config file)."""

import ml_collections

# Registered multi-label datasets a config variant may name; "mulan" means a MULAN
# dataset given by path (--config.data.path=DIR).
DATASETS = ("synthetic", "bibtex", "delicious", "yeast", "genbase", "cal500", "expr_fun",
            "spo_fun", "mulan")


def get_base_config(dataset: str) -> ml_collections.ConfigDict:
  if dataset not in DATASETS:
    raise ValueError(f"unknown dataset variant {dataset!r}; expected one of {DATASETS}")
  config = ml_collections.ConfigDict()
  config.method = "local"
  # num_train: synthetic only, training examples (0: the default 15k; SPEN also uses 1.5k).
  config.data = ml_collections.ConfigDict(dict(
      name=dataset, path="", data_dir="", split_seed=0, fold=0, resplit=False, num_train=0))
  config.model = ml_collections.ConfigDict(dict(
      hidden=(), activation="relu", dropout=0.0, input_dropout=0.0))
  # l2 is the coefficient of ½‖W‖²; l2_c > 0 sets it to 1/(C·N_train) instead, the
  # scikit-learn LogisticRegression(C) regularization.
  config.loss = ml_collections.ConfigDict(dict(l2=0.0, l2_c=0.0))
  config.optimizer = ml_collections.ConfigDict(dict(
      name="adam", learning_rate=1e-3, schedule="constant", warmup_steps=0,
      weight_decay=0.0, momentum=0.9, clip_norm=0.0))
  config.train = ml_collections.ConfigDict(dict(
      steps=2000, batch_size=128, eval_batch_size=1024, seed=0, log_every=100,
      eval_every=250, checkpoint_every=1000, select_metric="validation/example_f1",
      select_mode="max", tensorboard=True, num_devices=0))
  # Staged training (see experiments/train.py:stage_configs): stage_order "a,b" runs
  # config.stages.a then config.stages.b, each overriding keys of this config and
  # continuing from the previous stage's selected state. Empty: one stage.
  config.stage_order = ""
  config.stages = ml_collections.ConfigDict()
  return config


def energy_like_model(model: ml_collections.ConfigDict, num_measurements: int,
                      activation: str = "softplus") -> ml_collections.ConfigDict:
  """`config.energy` of a SPENEnergy whose feature network and local head have the shape
  of the MLP `model` (so a pretrained `local` stage's network carries over into it)."""
  return ml_collections.ConfigDict(dict(
      feature_hidden=tuple(model.hidden), feature_activation=model.activation,
      num_measurements=num_measurements, activation=activation, num_conditional=0,
      dropout=model.dropout, input_dropout=model.input_dropout))
