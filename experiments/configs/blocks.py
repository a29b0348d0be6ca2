"""What every experiment config shares (not itself a config file): the train block and
the keys each task's config has the same way. `experiments.configs.base` re-exports it.
"""

import ml_collections
from ml_collections import config_dict

from experiments.choices import optimizers

# train.matmul_precision of every config: JAX's default matmul precision for the whole
# run (`jax.default_matmul_precision`). GPUs and TPUs otherwise compute float32 matmuls
# and convolutions with TF32 / bfloat16 passes, which moves GBI iterates, HVPs and
# Neumann series by ~1e-3 relative: on an H200, 12 of 312 oracle tests failed at JAX's
# default and all passed at 'highest' (results/e2e/e2e.md). 'highest'
# makes a run reproduce across backends (on CPU it changes nothing); 'default',
# 'tensorfloat32' or 'bfloat16' trade that for accelerator speed; '' leaves JAX's
# setting (e.g. $JAX_DEFAULT_MATMUL_PRECISION) alone.
MATMUL_PRECISION = "highest"

# train.compute_dtype of every config: the dtype the networks compute in
# (experiments/networks.py:COMPUTE_DTYPES). 'bfloat16' runs their matmuls, convolutions
# and activations in bfloat16 on accelerators; parameters, optimizer state, GBI
# iterates, energies and losses stay float32 either way (docs/scaling.md).
COMPUTE_DTYPE = "float32"


# Early stopping of every config's train block (`LoopOptions`): training ends once
# train.select_metric has not improved (by more than `early_stopping_min_delta`) for
# `early_stopping_patience` evaluations in a row; the best checkpoint is the result, as
# without it. With 20, no committed bibtex run would have stopped before its selected
# step (docs/tuning.md, "Early stopping"). `early_stopping=False` trains every step.
EARLY_STOPPING = dict(early_stopping=True, early_stopping_patience=20, early_stopping_min_delta=0.0)


# Throughput options of every config's train block (`LoopOptions`); none changes what
# a run computes. `prefetch`: batches built ahead on a background thread (0: none);
# `async_checkpoint`: checkpoints are written while training goes on (a killed run
# still resumes from its last complete one); `profile_steps`: 'start:stop' writes a
# jax.profiler trace of those steps into WORKDIR/profile ('': none). docs/scaling.md.
THROUGHPUT = dict(prefetch=1, async_checkpoint=True, profile_steps="")


# `loss.score` / `loss.score_weight` of the feed-forward baselines (`method='local'`):
# off. In every base config so that a stage continuing an mlp / fcn run (--reuse_stage)
# has the same keys; build_objective rejects a score on any other method.
NO_SCORE = dict(score="", score_weight=0.0)


# `energy.module` of every energy config: '' builds the energy this config describes;
# an import path "package.module:function" builds the energy `function(config, dataset)`
# returns instead (experiments/networks.py:energy_module), so code outside this repository
# plugs its energy into any method from the command line.
OUTSIDE_ENERGY = dict(module="")


def train_block(
  *, steps: int, batch_size: int, eval_batch_size: int, eval_every: int, select_metric: str
) -> ml_collections.ConfigDict:
  """`config.train` of every task (`LoopOptions` plus the run's device, precision and
  dtype keys): what differs between tasks is given, the rest is written once here.

  Args:
    steps: training steps.
    batch_size: training rows per step (over all devices).
    eval_batch_size: rows per evaluation batch.
    eval_every: steps between evaluations on the validation split.
    select_metric: the validation metric that selects the checkpoint (maximized).

  Returns:
    The block, in the key order every run record has.
  """
  return ml_collections.ConfigDict(
    dict(
      steps=steps,
      # The steps the learning-rate schedules span (0: `steps`): a run stopped partway
      # through a longer schedule, as the tuner's k-fold final runs of earlier code were
      # (their recorded configs rerun as they trained).
      schedule_steps=0,
      batch_size=batch_size,
      eval_batch_size=eval_batch_size,
      seed=0,
      log_every=100,
      eval_every=eval_every,
      checkpoint_every=1000,
      select_metric=select_metric,
      select_mode="max",
      tensorboard=True,
      num_devices=0,
      model_parallelism=1,
      matmul_precision=MATMUL_PRECISION,
      compute_dtype=COMPUTE_DTYPE,
      **EARLY_STOPPING,
      **THROUGHPUT,
    )
  )


def dropout_rates(value) -> config_dict.FieldReference:
  """A dropout field that takes one rate or one per hidden layer (`nets.MLP.dropout`),
  e.g. `--config.model.dropout=0.5` or `--config.model.dropout="(0.5,0.0)"`: SEAL's
  public configs drop out after the first hidden layer only."""
  return config_dict.FieldReference(value, field_type=object)


def cosine_adam(learning_rate: float) -> ml_collections.ConfigDict:
  """An optimizer config (Adam, cosine decay): a second parameter group's optimizer
  (e.g. `config.test_net_optimizer`, `config.inner_optimizer`)."""
  return optimizers.block(learning_rate=learning_rate, schedule="cosine")
