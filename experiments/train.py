"""Importable experiment driver: config -> dataset, objective, training, results.json.

`train_and_evaluate(config, workdir)` is what `experiments/main.py` runs and what
`experiments/compare.py` loops over; notebooks can call it too. It trains a config's
stages in turn, selects on validation, evaluates on test and writes results.json,
test_predictions.npz and run.json. A staged run reports the best validation state over
all its stages (by the last stage's `train.select_metric`; `meta.selected_stage`).

The parts live in their own modules; import each name from there: `configuration`
(configs, overrides, stages), `builders` (config -> networks, energies, objective),
`workdirs` (lock, resume check, code revision), `runs` (run.json and
`objective_from_run`) and `diagnostics` (SPEN search statistics and the measurement
plot). Only `objective_from_run` is re-exported here: saved run.json files name it as
`experiments.train:objective_from_run` (`runs.RUN_BUILDER`).
"""

import contextlib
import json
import math
import os
import sys
import time
from typing import Any

from absl import logging
import jax
import ml_collections
import numpy as np

from energynets import train as train_lib
from energynets.train import process_rows as process_rows_lib
from energynets.train import selection
from energynets.train import storage
from experiments import builders
from experiments import choices
from experiments import cli
from experiments import configuration
from experiments import console
from experiments import diagnostics
from experiments import runs
from experiments import tasks
from experiments import workdirs

# Saved run.json files name their builder by the import path
# "experiments.train:objective_from_run" (`runs.RUN_BUILDER`), so that name has to stay
# importable from this module; it is the only re-export.
from experiments.runs import objective_from_run  # pylint: disable=unused-import

__all__ = [
  "PREDICTIONS_FILE",
  "initialize_distributed",
  "matmul_precision",
  "objective_from_run",
  "train_and_evaluate",
]


# How long a multi-process run's processes wait for a silent peer (one killed, or
# hung: JAX's heartbeats) and, at the end, for the others to reach JAX's shutdown
# barrier. JAX's own defaults (100 s, 300 s) leave the survivors of a lost process
# blocked for minutes.
HEARTBEAT_TIMEOUT_S = 20
SHUTDOWN_TIMEOUT_S = 60


def initialize_distributed(
  coordinator_address: str | None = None,
  num_processes: int | None = None,
  process_id: int | None = None,
  *,
  heartbeat_timeout_s: int = HEARTBEAT_TIMEOUT_S,
  shutdown_timeout_s: int = SHUTDOWN_TIMEOUT_S,
) -> None:
  """Joins this process to a multi-process (multi-host) run; call before any JAX work.

  `jax.distributed.initialize`: with all three arguments the process joins the
  coordinator at `coordinator_address` (`host:port` of process 0, which serves it);
  without them JAX detects the cluster itself (TPU pods, SLURM, Open MPI). Afterwards
  `jax.devices()` lists every process's devices, so `make_mesh` spans all hosts, and
  the loop feeds each process only its rows of every batch (`process_slice`,
  `shard_batch`). Every task keeps only each process's rows of every split
  (`config.data.num_shards`; evaluation gathers the predictions). Orbax writes each
  checkpoint once and only process 0 writes metrics and results.json.

  Args:
    coordinator_address: `host:port` of process 0 (None: detected).
    num_processes: the number of processes (None: detected).
    process_id: this process's index (None: detected).
    heartbeat_timeout_s: a process silent for this long (killed, hung) is lost, and
      JAX ends every other process.
    shutdown_timeout_s: how long a process that ends waits for the others at JAX's
      shutdown barrier.
  """
  for name, value in (
    ("heartbeat_timeout_s", heartbeat_timeout_s),
    ("shutdown_timeout_s", shutdown_timeout_s),
  ):
    if not (isinstance(value, int) and value >= 1):
      raise ValueError(f"{name} must be a whole number of seconds, 1 or more; got {value!r}")
  jax.distributed.initialize(
    coordinator_address=coordinator_address,
    num_processes=num_processes,
    process_id=process_id,
    heartbeat_timeout_seconds=heartbeat_timeout_s,
    shutdown_timeout_seconds=shutdown_timeout_s,
  )
  logging.info(
    "process %d of %d: %d local and %d global devices",
    jax.process_index(),
    jax.process_count(),
    jax.local_device_count(),
    jax.device_count(),
  )


# The selected model's soft test predictions, next to results.json.
PREDICTIONS_FILE = "test_predictions.npz"


def train_and_evaluate(
  config: ml_collections.ConfigDict,
  workdir: str | os.PathLike,
  *,
  allow_config_change: bool = False,
) -> dict[str, Any]:
  """Trains (stage by stage), selects on validation, evaluates on test; writes results.json.

  Each stage continues from the previous stage's selected state and may select that
  starting state (`fit`'s step 0); the run then reports the stage whose selected state is
  best on validation by the last stage's `train.select_metric` (of equal ones, the
  earlier: `selection.selected_stage`), recorded as `meta.selected_stage`, with each
  stage's value as `meta.stages[i].best_value`. A stage with `select_metric=None` is never reported.

  A run in `workdir` resumes at its last step (a finished one only re-evaluates). A
  workdir another process is using is refused (`workdir_lock`), and so is one whose run
  was trained with a config that differs from `config` in what it trains
  (`check_resumed_config`), unless `allow_config_change`. `workdir` is a local path or
  a URL `etils.epath` supports (`gs://bucket/run`); the processes of a multi-process
  run must all reach it (`storage.check_shared_workdir` stops them all otherwise).
  """
  # First: processes with a workdir each stop here, before the data loads.
  storage.check_shared_workdir(workdir)
  with workdirs.workdir_lock(workdir), matmul_precision(config):
    workdirs.check_resumed_config(config, workdir, allow_config_change)
    return _train_and_evaluate(config, workdir)


def matmul_precision(config: ml_collections.ConfigDict):
  """`jax.default_matmul_precision(config.train.matmul_precision)` ('' or absent: JAX's
  own setting is left alone); an unknown name is a ValueError naming the key."""
  name = config.train.get("matmul_precision", "")
  if not name:
    return contextlib.nullcontext()
  try:
    with jax.default_matmul_precision(name):  # JAX checks the name on entry only
      pass
  except ValueError as e:
    raise ValueError(f"config.train.matmul_precision={name!r}: {e}") from None
  return jax.default_matmul_precision(name)


def _loop_options(train_config: ml_collections.ConfigDict) -> train_lib.LoopOptions:
  """`choices.loop_options(train_config)`, a bad value (an unknown key, a malformed
  `profile_steps`) raised as the command line's mistake: `cli.UserError`, one line."""
  try:
    return choices.loop_options(train_config)
  except ValueError as e:
    raise cli.UserError(f"config.train: {e}") from None


def _training_mesh(config: ml_collections.ConfigDict) -> jax.sharding.Mesh:
  """`make_mesh` of `config.train`'s `num_devices` and `model_parallelism`; a count the
  devices (of every process) cannot take is the command line's mistake, `cli.UserError`."""
  try:
    return train_lib.make_mesh(
      config.train.num_devices or None, config.train.get("model_parallelism", 1)
    )
  except ValueError as e:
    raise cli.UserError(f"config.train: {e}") from None


def _train_and_evaluate(
  config: ml_collections.ConfigDict, workdir: str | os.PathLike
) -> dict[str, Any]:
  started = time.time()
  run_dir = storage.workdir_path(workdir)
  builders.check_builders(config)
  for _, stage_config in configuration.stage_configs(config):
    _loop_options(stage_config.train)  # a bad train option stops the run before the data loads
  # Before the data and any collective: a mesh the processes cannot share is refused
  # by every process alike.
  mesh = _training_mesh(config)
  task = tasks.task_for(config)
  dataset, num_shards = _load_process_data(task, config)
  sharded = num_shards is not None
  logging.info(
    "%s dataset %s: train %s, validation %s, test %s",
    task.name,
    dataset.name,
    dataset.train.x.shape,
    dataset.validation.x.shape,
    dataset.test.x.shape,
  )
  eval_bs = config.train.eval_batch_size
  stages = configuration.stage_configs(config)
  state, stage_meta, trained = None, [], []
  num_train = tasks.num_examples(dataset, "train")
  for name, stage_config in stages:
    if stage_config.train.batch_size > num_train:
      # Full-batch training on a small dataset (e.g. br's 512 on genbase's 417 rows): as
      # many rows as every shard has, split evenly over devices and shards.
      shards = num_shards or 1
      full = shards * (num_train // shards)
      full -= full % math.lcm(mesh.size, shards)
      logging.warning(
        "batch size %d exceeds the %d training examples of %s: using %d (full batch)",
        stage_config.train.batch_size,
        num_train,
        dataset.name,
        full,
      )
      stage_config = ml_collections.ConfigDict(stage_config.to_dict())
      stage_config.train.batch_size = full
    try:
      train_lib.check_batch_size(stage_config.train.batch_size, mesh)
    except ValueError as e:
      raise cli.UserError(f"config.train.batch_size: {e}") from None
    objective = builders.build_objective(stage_config, dataset)
    predict = train_lib.build_predict(objective, mesh)
    validation = _validation(task, config, predict, dataset.validation, eval_bs, mesh, sharded)
    stage_dir = run_dir / "stages" / name if name else run_dir
    if name:
      logging.info(
        "=== stage %r: method %s, %d steps", name, stage_config.method, stage_config.train.steps
      )
    train_batch = None
    if task.train_batches is not None:
      train_batch = task.train_batches(
        config, dataset, stage_config.train.batch_size, stage_config.train.seed, num_shards
      )
    options = _loop_options(stage_config.train)
    with console.training_progress(options, name) as progress:
      result = train_lib.fit(
        objective,
        {"x": dataset.train.x, "y": dataset.train.y},
        options,
        stage_dir,
        validation=validation,
        mesh=mesh,
        previous_state=state,
        train_batch=train_batch,
        num_shards=num_shards,
        progress=progress,
      )
    state = result.state
    trained.append(((name, stage_config), predict, result, options.select_metric))
    stage_meta.append(
      {
        "stage": name,
        "method": stage_config.method,
        "batch_size": stage_config.train.batch_size,
        "selected_step": result.selected_step,
        "final_step": result.final_step,
        "stop_reason": result.stop_reason,
      }
    )
  selected, best_values = _selected_stage(trained, _loop_options(stages[-1][1].train))
  for entry, value in zip(stage_meta, best_values):
    entry["best_value"] = value
  (selected_name, selected_config), predict, selected_result, _ = trained[selected]
  state = selected_result.state

  test_outputs = {}
  # The metrics read every row's labels; with sharded data, the gathered ones.
  scored, held = dataset, {}
  if sharded:
    assert task.all_rows is not None, "every task that shards its data has all_rows"
    gathered = {
      name: task.all_rows(getattr(dataset, name), process_rows_lib.gather_process_rows)
      for name in task.eval_splits
    }
    held = {id(split): getattr(dataset, name) for name, split in gathered.items()}
    scored = tasks.replaced(dataset, **gathered)

  def soft_predictions(split):
    split = held.get(id(split), split)
    outputs = _split_predictions(task, config, predict, state, split.x, eval_bs, mesh, sharded)
    if split is dataset.test:
      test_outputs["test"] = outputs
    return outputs

  results: dict[str, Any] = task.results(scored, soft_predictions)
  results.update(diagnostics.test_diagnostics(selected_config, dataset, state))
  results["meta"] = {
    "dataset": dataset.name,
    "split": dataset.meta.get("split_rule"),
    "split_seed": config.data.split_seed,
    "fold": config.data.get("fold", 0),
    "seed": config.train.seed,
    "selected_stage": selected_name,
    "selected_step": stage_meta[selected]["selected_step"],
    "final_step": stage_meta[selected]["final_step"],
    "stop_reason": stage_meta[selected]["stop_reason"],
    "stages": stage_meta,
    # Wall time of this invocation: a resumed run counts only its own part.
    "train_seconds": time.time() - started,
    "num_devices": mesh.size,
    "code_revision": workdirs.code_revision(),
    "task": task.name,
    "metric_definitions": task.metric_definitions,
    "dataset_meta": dataset.meta,
    "config": config.to_dict(),
  }
  if jax.process_index() == 0:
    figures = diagnostics.write_measurement_figure(config, dataset, state, run_dir)
    if figures:
      results["meta"]["figures"] = figures
    if isinstance(test_outputs.get("test"), np.ndarray):
      # The selected model's soft test outputs, for figures and significance tests
      # without retraining; float32 as computed, since outputs near 0.5 (an untrained
      # DVN's) would cross the threshold when rounded.
      with (run_dir / PREDICTIONS_FILE).open("wb") as f:
        np.savez_compressed(f, test=np.asarray(test_outputs["test"], np.float32))
    (run_dir / "results.json").write_text(
      json.dumps(results, indent=2, sort_keys=True, default=configuration.json_default)
    )
    runs.write_run(
      run_dir, task, config, dataset, (selected_name, selected_config), selected_result, results
    )
  return results


def _selected_stage(trained, last_options) -> tuple[int, list[float | None]]:
  """The stage whose selected state the run reports, and each stage's best validation
  value of the last stage's `select_metric` (None: the stage selects nothing).

  Args:
    trained: per stage, `((name, config), predict, FitResult, select_metric)`.
    last_options: the last stage's `LoopOptions` (`select_metric`, `select_mode`).

  Returns:
    `(index, values)`: the stage with the best value (`selection.selected_stage`: of
    equal ones, the earlier; the last stage when none has a value) and every stage's
    value. A stage that selects on another
    metric is compared by the record of its selected step, which holds every validation
    metric, since every stage evaluates the same rows.
  """
  metric = last_options.select_metric
  values: list[float | None] = []
  for _, _, result, stage_metric in trained:
    value = None
    if metric is not None and stage_metric is not None and result.selected_value is not None:
      record = next(r for r in result.history if r["step"] == result.selected_step)
      value = record.get(metric)
    values.append(value)
  chosen = selection.selected_stage(values, last_options.select_mode)
  return (len(trained) - 1 if chosen is None else chosen), values


def _load_process_data(task, config):
  """The task's dataset as this process holds it, and the number of training shards.

  The task (`Task.keep_rows`) keeps this process's rows of every split and frees the
  rest; the training rows form `config.data.num_shards` shards (0: one per process), a
  multiple of the process count.
  """
  num_shards = config.data.get("num_shards", 0)
  index, count = jax.process_index(), jax.process_count()
  num_shards = num_shards or count
  if num_shards < 1 or num_shards % count:
    raise ValueError(
      f"config.data.num_shards={num_shards} is not a multiple of the {count} processes"
    )
  dataset = task.load_process_rows(config, index, count)
  logging.info(
    "process %d of %d holds %s; the training rows form %d shards",
    index,
    count,
    tasks.held_rows_summary(dataset),
    num_shards,
  )
  return dataset, num_shards


def _validation(task, config, predict, validation, eval_bs, mesh, sharded):
  """`fit`'s `Validation`: the task's validation metrics (on every row's predictions and
  labels, gathered where each process holds its rows: `sharded`)."""

  def evaluate(state):
    outputs = _split_predictions(task, config, predict, state, validation.x, eval_bs, mesh, sharded)
    scored = (
      task.all_rows(validation, process_rows_lib.gather_process_rows) if sharded else validation
    )
    return task.validation_metrics(scored, outputs)

  return train_lib.Validation(evaluate)


def _split_predictions(task, config, predict, state, x, eval_bs, mesh, sharded=False) -> np.ndarray:
  """The task's predictions of a split's rows `x`, the model run in eval batches; with
  `sharded`, `x` is this process's rows and the predictions are all processes'."""
  if not sharded:
    rows = lambda model_x: train_lib.predict_in_batches(predict, state, model_x, eval_bs, mesh)
    return task.predict(config, rows, x)
  if task.predict_split is None:
    return process_rows_lib.predict_process_rows(predict, state, x, eval_bs, mesh)

  # The task combines the model's rows of each of its rows (segmentation's crops and
  # mirrors) where those rows are: on this process. So the model's outputs stay this
  # process's, and the combined predictions are gathered.
  def own_rows(model_x):
    outputs = process_rows_lib.predict_process_rows(predict, state, model_x, eval_bs, mesh)
    counts = process_rows_lib.process_row_counts(len(model_x))
    start = sum(counts[: jax.process_index()])
    return outputs[start : start + len(model_x)]

  return process_rows_lib.gather_process_rows(task.predict(config, own_rows, x))


if __name__ == "__main__":
  # Flax examples run train.py's caller, main.py; say so rather than exit silently.
  print(
    "experiments.train: error: this is the importable training library; run "
    "python -m experiments.main --config=experiments/configs/<method>.py "
    "--workdir=DIR",
    file=sys.stderr,
  )
  sys.exit(2)
