"""The public base of every experiment config (not itself a config file).

A config of your own starts from `get_base_config(dataset)` (multi-label data) or the
base of another task, or from any config here, and sets a handful of keys; docs/cli.md,
"Your own config", has a whole outside config file as the example.
"""

from collections.abc import Callable
from typing import Any

import ml_collections

from experiments.choices import optimizers
from experiments.configs.blocks import COMPUTE_DTYPE
from experiments.configs.blocks import EARLY_STOPPING
from experiments.configs.blocks import MATMUL_PRECISION
from experiments.configs.blocks import NO_SCORE
from experiments.configs.blocks import OUTSIDE_ENERGY
from experiments.configs.blocks import THROUGHPUT
from experiments.configs.blocks import cosine_adam
from experiments.configs.blocks import dropout_rates
from experiments.configs.blocks import train_block
from experiments.configs.task_bases import DENOISING_DATASETS
from experiments.configs.task_bases import SEGMENTATION_CROP
from experiments.configs.task_bases import SEGMENTATION_DATASETS
from experiments.configs.task_bases import SEQUENCE_DATASETS
from experiments.configs.task_bases import denoising_energy
from experiments.configs.task_bases import get_denoising_base_config
from experiments.configs.task_bases import get_segmentation_base_config
from experiments.configs.task_bases import get_sequence_base_config
from experiments.configs.task_bases import segmentation_energy
from experiments.configs.task_bases import segmentation_sgd
from experiments.configs.task_bases import sequence_energy
from experiments.configs.task_bases import sequence_pretrain_then
from experiments.configs.task_bases import use_denoising_energy

__all__ = [
  # The multi-label base and what covers every task (this module).
  "DATASETS",
  "TUNE",
  "get_base_config",
  "task_of",
  "config_for_task",
  "energy_like_model",
  "mlp_pretrain_then",
  "spen_stages",
  # What every config shares (experiments/configs/blocks.py).
  "MATMUL_PRECISION",
  "COMPUTE_DTYPE",
  "EARLY_STOPPING",
  "THROUGHPUT",
  "NO_SCORE",
  "OUTSIDE_ENERGY",
  "train_block",
  "dropout_rates",
  "cosine_adam",
  # The other tasks' bases (experiments/configs/task_bases.py).
  "DENOISING_DATASETS",
  "get_denoising_base_config",
  "denoising_energy",
  "use_denoising_energy",
  "SEQUENCE_DATASETS",
  "get_sequence_base_config",
  "sequence_energy",
  "sequence_pretrain_then",
  "SEGMENTATION_DATASETS",
  "SEGMENTATION_CROP",
  "get_segmentation_base_config",
  "segmentation_sgd",
  "segmentation_energy",
]

# Registered multi-label datasets a config variant may name; "mulan" means a MULAN
# dataset given by path (--config.data.path=DIR).
DATASETS = (
  "synthetic",
  "bibtex",
  "delicious",
  "yeast",
  "genbase",
  "cal500",
  "expr_fun",
  "spo_fun",
  "mulan",
)


# `config.tune` of the `mulan` variant (a MULAN folder given by path): experiments.main
# first selects the config's search space (`get_search_space`) on held-out training rows
# (experiments/tune.py), then trains the chosen setting in the workdir. `trials`: settings
# tried, the config's own first (0: the whole grid; fewer: drawn by optuna's TPE sampler
# seeded with `seed`); `folds`: k of the k-fold selection below 2,000 training rows (0:
# the tuner's 5; 1: the validation split; from 2,000 rows the validation split); a trial
# outside the top third after its first fold stops there, so a trial mostly costs one
# fold and 12 settings cost about what 7 unpruned ones would (mlp, 500 yeast rows: 22
# fold fits of 36, 8.7 min on 2 loaded cores); `jobs`: folds trained at
# once, each in its own process; `trial_eval_every`, `trial_patience`: the trials'
# evaluation interval and early-stopping patience (0: the config's), so that a trial
# stops 250 steps after its held-out best instead of running the config's steps
# (docs/tuning.md, "Budget", has the measurements). br tries its whole grid (br.py).
# `start_from`: the workdir of a finished tuned run that a staged config's first stage
# continues ("": search every stage; `experiments.stage_reuse.start_from_tuned`).
# `stagewise`: a staged config without `start_from` searches its first stage alone, then
# its later stages from that run (`workdir/first_stage`); False: every stage at once.
# Stagewise because a search of every stage at once draws its first stage anew (two
# points either way at this budget), while one from the tuned first stage ends, pooled,
# no more than a hundredth below it, in less time (docs/tuning.md, "Stagewise search").
# `enabled=False` trains the committed settings once.
TUNE = dict(
  enabled=True,
  trials=12,
  folds=3,
  jobs=1,
  seed=0,
  trial_eval_every=50,
  trial_patience=5,
  start_from="",
  stagewise=True,
)


def get_base_config(dataset: str) -> ml_collections.ConfigDict:
  if dataset not in DATASETS:
    raise ValueError(f"unknown dataset variant {dataset!r}; expected one of {DATASETS}")
  config = ml_collections.ConfigDict()
  config.method = "local"
  # num_train: training rows (0: all). Synthetic: the generator's count (default 15k;
  # SPEN also uses 1.5k); other datasets: a seeded random subset of the training split
  # (nested across sizes; scaling fit on it; `registry.keep_train_rows`).
  # root_label: expr_fun/spo_fun only, add the FunCat root as a label (SEAL's 500 labels).
  # num_shards: each training batch takes batch_size/num_shards rows from each of that
  # many contiguous shards of the training rows, and each process holds only its shards
  # (0: one per process; a multiple of the process count). One process with
  # num_shards=S trains on the batches of an S-process run; 1 is the unsharded order.
  # feature_scaling: MULAN datasets, 'auto' (each dataset's rule: z-score real-valued
  # features, keep 0/1 ones), 'none', 'zscore' or 'maxabs', fit on the training rows.
  config.data = ml_collections.ConfigDict(
    dict(
      name=dataset,
      path="",
      data_dir="",
      split_seed=0,
      fold=0,
      resplit=False,
      num_train=0,
      root_label=False,
      num_shards=0,
      feature_scaling="auto",
    )
  )
  config.model = ml_collections.ConfigDict(
    dict(hidden=(), activation="relu", dropout=dropout_rates(0.0), input_dropout=0.0)
  )
  # l2 is the coefficient of ½‖W‖²; l2_c > 0 sets it to 1/(C·N_train) instead, the
  # scikit-learn LogisticRegression(C) regularization. score / score_weight: method
  # 'local' only (mlp.py).
  config.loss = ml_collections.ConfigDict(dict(l2=0.0, l2_c=0.0, **NO_SCORE))
  config.optimizer = optimizers.block()
  config.train = train_block(
    steps=2000,
    batch_size=128,
    eval_batch_size=1024,
    eval_every=250,
    select_metric="validation/example_f1",
  )
  # Staged training (see experiments/configuration.py:stage_configs): stage_order "a,b" runs
  # config.stages.a then config.stages.b, each overriding keys of this config and
  # continuing from the previous stage's selected state. Empty: one stage.
  config.stage_order = ""
  config.stages = ml_collections.ConfigDict()
  if dataset == "mulan":
    config.tune = ml_collections.ConfigDict(TUNE)
  return config


def task_of(dataset: str) -> str:
  """The task a dataset variant belongs to: 'denoising', 'segmentation', 'sequence', or
  'multilabel' (every other name, checked by `get_base_config`)."""
  for task, variants in (
    ("denoising", DENOISING_DATASETS),
    ("segmentation", SEGMENTATION_DATASETS),
    ("sequence", SEQUENCE_DATASETS),
  ):
    if dataset in variants:
      return task
  return "multilabel"


def config_for_task(dataset: str, **get_config_of_task: Callable[[str], Any]) -> Any:
  """The config of `dataset` from the builder of its task: the one dispatch of every
  config that covers several tasks (`get_config_of_task`: `multilabel=`, `denoising=`,
  `sequence=`, `segmentation=`, each `dataset -> ConfigDict`).

  Raises:
    ValueError: one line naming a variant of a task the config does not cover, and the
      variants it does.
  """
  task = task_of(dataset)
  if task not in get_config_of_task:
    variants = dict(
      multilabel=DATASETS,
      denoising=DENOISING_DATASETS,
      sequence=SEQUENCE_DATASETS,
      segmentation=SEGMENTATION_DATASETS,
    )
    known = [v for t in get_config_of_task for v in variants[t]]
    raise ValueError(
      f"unknown dataset variant {dataset!r} (a {task} dataset); this config covers {tuple(known)}"
    )
  return get_config_of_task[task](dataset)


def energy_like_model(
  model: ml_collections.ConfigDict, num_measurements: int, activation: str = "softplus"
) -> ml_collections.ConfigDict:
  """`config.energy` of a SPENEnergy whose feature network and local head have the shape
  of the MLP `model` (so a pretrained `local` stage's network carries over into it)."""
  return ml_collections.ConfigDict(
    dict(
      feature_hidden=tuple(model.hidden),
      feature_activation=model.activation,
      num_measurements=num_measurements,
      activation=activation,
      num_conditional=0,
      dropout=dropout_rates(model.dropout),
      input_dropout=model.input_dropout,
      **OUTSIDE_ENERGY,
    )
  )


def mlp_pretrain_then(
  config: ml_collections.ConfigDict, method: str, steps: int, synthetic_steps: int
) -> None:
  """Two stages in place: `pretrain` (the MLP config's BCE training, `config.train.steps`
  steps; 3000 on synthetic) then `method` (`steps`; `synthetic_steps` on synthetic, small
  enough for a CPU run of about a minute), both Adam at 1e-3. Shared by the configs
  whose feed-forward network starts from the MLP (infnet, implicit)."""
  synthetic = config.data.name == "synthetic"
  config.stage_order = f"pretrain,{method}"
  config.stages.pretrain = dict(
    method="local",
    train=dict(steps=3000 if synthetic else config.train.steps),
    optimizer=dict(learning_rate=1e-3),
  )
  config.stages[method] = dict(
    method=method,
    train=dict(steps=synthetic_steps if synthetic else steps),
    optimizer=dict(learning_rate=1e-3),
  )
  if synthetic:
    config.train.eval_every = 500


def spen_stages(config: ml_collections.ConfigDict, method: str) -> None:
  """SPEN's staged training (§4, A.4) in place: `pretrain` features and local head with
  BCE (`spen_pretrain`), then `energy` (features clamped, the global term trained by
  `method`), then `joint` (everything, small learning rate). Shared by the SSVM and
  end-to-end configs, which differ only in `method`. Each stage names its steps and
  learning rate so both can be set from the command line
  (--config.stages.energy.train.steps=...)."""
  config.optimizer.learning_rate = 1e-3
  config.optimizer.schedule = "cosine"
  config.train.steps = 3000
  config.stage_order = "pretrain,energy,joint"
  config.stages.pretrain = dict(
    method="spen_pretrain",
    train=dict(steps=3000, select_metric="validation/example_f1@0.5"),
    optimizer=dict(name="adam", learning_rate=1e-3),
  )
  config.stages.energy = dict(
    method=method,
    loss=dict(trainable="global"),
    train=dict(steps=1500),
    optimizer=dict(name="adam", learning_rate=1e-3),
  )
  config.stages.joint = dict(
    method=method, train=dict(steps=1000), optimizer=dict(name="adam", learning_rate=1e-4)
  )
