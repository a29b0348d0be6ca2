"""The tuner's trials (`experiments.tune`): one setting of a config trained on each fold
of the training rows (or on train, scored on validation), and trials run in parallel.

`run_trial` trains one setting and records its held-out curve; `fit_held_out` trains a
config on given rows and scores other rows at every evaluation; `run_trials` runs
trials in this process or in `single_threaded_processes`, which share a compilation cache
(`use_compilation_cache`). Test rows never reach a trial (`selection_data`).
"""

from collections.abc import Iterator
import concurrent.futures
import contextlib
import dataclasses
import multiprocessing
import os
import tempfile
import time
from typing import Any

import jax
import ml_collections
import numpy as np

from energynets import train as train_lib
from energynets.data import splits
from experiments import builders
from experiments import choices
from experiments import configuration
from experiments import console
from experiments import tasks
from experiments import train

__all__ = [
  "fit_held_out",
  "fold_indices",
  "is_staged",
  "run_trial",
  "run_trials",
  "selection_data",
  "selection_metric",
  "single_threaded_processes",
  "use_compilation_cache",
]


def fold_indices(num_train: int, folds: int, seed: int) -> list[np.ndarray]:
  """The held-out rows of each of `folds` folds of the training split (they partition
  `range(num_train)`; `energynets.data.splits.training_folds`)."""
  return splits.training_folds(num_train, folds, seed=seed)


def is_staged(config: ml_collections.ConfigDict) -> bool:
  """Whether `config` trains several stages (`stage_order`)."""
  return bool(configuration.name_list(config.get("stage_order", "")))


def selection_metric(config: ml_collections.ConfigDict) -> str:
  """The metric a trial is scored by: the last stage's `train.select_metric`."""
  return configuration.stage_configs(config)[-1][1].train.select_metric


def selection_data(dataset: Any) -> Any:
  """`dataset` without test rows (an empty test split): what every trial sees."""
  empty = splits.Split(
    x=np.zeros((0, dataset.num_features), np.float32),
    y=np.zeros((0, dataset.num_labels), np.float32),
  )
  meta = {k: v for k, v in dataset.meta.items() if k != "num_examples"}
  return dataclasses.replace(dataset, test=empty, meta=meta)


def use_compilation_cache(directory: str | os.PathLike | None) -> None:
  """Keeps compiled XLA programs in `directory` (JAX's persistent cache; None: leave
  JAX's setting), so that the folds of a setting compile once. Call before compiling."""
  if directory is None or _compilation_cache_dir():
    return
  jax.config.update("jax_compilation_cache_dir", os.fspath(directory))
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
  jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)


def _compilation_cache_dir() -> str | None:
  """JAX's persistent compilation cache directory (None: none set)."""
  # jax.config's options are dynamic attributes, which mypy cannot see.
  return jax.config.jax_compilation_cache_dir  # type: ignore[attr-defined]


def run_trials(
  config: ml_collections.ConfigDict,
  dataset: Any,
  held_out: list[np.ndarray] | None,
  settings: list[dict[str, Any]],
  jobs: int,
) -> Iterator[dict]:
  """Yields each trial's record in order (in this process, or `jobs` processes, which
  share this process's compilation cache directory)."""
  cache_dir = _compilation_cache_dir()
  base = config.to_dict()
  if jobs <= 1:
    for i, params in enumerate(settings):
      yield run_trial(base, dataset, held_out, i, params)
    return
  with single_threaded_processes(
    jobs, initializer=use_compilation_cache, initargs=(cache_dir,)
  ) as pool:
    futures = [
      pool.submit(run_trial, base, dataset, held_out, i, params)
      for i, params in enumerate(settings)
    ]
    for future in futures:
      yield future.result()


@contextlib.contextmanager
def single_threaded_processes(jobs: int, initializer=None, initargs=()):
  """A pool of `jobs` spawned processes, each running its XLA computations on one thread
  so that the processes share the cores; XLA_FLAGS is restored on exit."""
  flags_before = os.environ.get("XLA_FLAGS")
  os.environ["XLA_FLAGS"] = (
    (flags_before or "") + " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
  ).strip()
  try:
    with concurrent.futures.ProcessPoolExecutor(
      jobs,
      mp_context=multiprocessing.get_context("spawn"),
      initializer=initializer,
      initargs=initargs,
    ) as pool:
      yield pool
  finally:
    if flags_before is None:
      os.environ.pop("XLA_FLAGS", None)
    else:
      os.environ["XLA_FLAGS"] = flags_before


def run_trial(
  base: dict, dataset, held_out: list[np.ndarray] | None, trial: int, params: dict[str, Any]
) -> dict:
  """Trains one setting on each fold (or on train, scored on validation); its record.

  Args:
    base: the config as a dict.
    dataset: the selection dataset (no test rows); features unscaled when
      `data.feature_scaling` is among `params` (scaled here, per fold).
    held_out: each fold's held-out training rows; None: the validation split.
    trial: the trial's index.
    params: the trial's overrides.

  Returns:
    `{"trial", "params", "folds": [{"fold", "best_step", "best_value", "steps",
    "values", "final_step", "stop_reason", "stages"}], "selected_step", "value",
    "seconds"}`: `value` is the best mean over folds of the (last stage's) held-out
    metric at one evaluation step, over the steps every fold evaluated, `selected_step`
    that step; `final_step` and `stop_reason` say where a fold's (last stage's)
    training ended and why (early stopping), `stages` the same of every stage.
  """
  started = time.time()
  config = configuration.with_overrides(ml_collections.ConfigDict(base), params)
  config.train.tensorboard = False
  config.train.checkpoint_every = config.train.steps
  metric = selection_metric(config)
  scaling = params.get("data.feature_scaling")
  if held_out is None:
    parts = [(dataset.train, dataset.validation)]
  else:
    everything = np.arange(dataset.train.num_examples)
    parts = [
      (_rows(dataset.train, np.setdiff1d(everything, rows)), _rows(dataset.train, rows))
      for rows in held_out
    ]
  fold_records, curves = [], []
  for k, (fit_rows, scored_rows) in enumerate(parts):
    if scaling is not None:
      fit_rows, scored_rows = _scaled(scaling, fit_rows, scored_rows)
    data = dataclasses.replace(dataset, train=fit_rows, validation=scored_rows)
    with tempfile.TemporaryDirectory(prefix="trial") as fit_dir:
      with console.titled(f"trial {trial + 1}" + (f" fold {k + 1}" if len(parts) > 1 else "")):
        fits = fit_held_out(config, data, fit_dir)
    history = fits[-1][1].history
    steps = [int(r["step"]) for r in history]
    values = [float(r[metric]) for r in history]
    best = int(np.argmax(values))
    fold_records.append(
      {
        "fold": k,
        "num_fit": fit_rows.num_examples,
        "num_held_out": scored_rows.num_examples,
        "best_step": steps[best],
        "best_value": values[best],
        "steps": steps,
        "values": values,
        "final_step": fits[-1][1].final_step,
        "stop_reason": fits[-1][1].stop_reason,
        "stages": [
          {
            "stage": name,
            "selected_step": fit.selected_step,
            "final_step": fit.final_step,
            "stop_reason": fit.stop_reason,
          }
          for name, fit in fits
        ],
      }
    )
    curves.append(dict(zip(steps, values)))
  common = sorted(set.intersection(*(set(c) for c in curves)))
  means = [float(np.mean([c[s] for c in curves])) for s in common]
  best = int(np.argmax(means))
  return {
    "trial": trial,
    "params": params,
    "metric": metric,
    "folds": fold_records,
    "selected_step": common[best],
    "value": means[best],
    "seconds": time.time() - started,
  }


def _rows(split, rows):
  return splits.Split(x=split.x[rows], y=split.y[rows])


def _scaled(scaling, fit_rows, scored_rows):
  fx, sx = splits.scale_features(scaling, fit_rows.x, scored_rows.x)
  return splits.Split(fx, fit_rows.y), splits.Split(sx, scored_rows.y)


def fit_held_out(
  config: ml_collections.ConfigDict, dataset, workdir: str
) -> list[tuple[str, train_lib.FitResult]]:
  """Trains `config` on `dataset.train`, evaluating `dataset.validation` (the held-out
  rows) every `train.eval_every` steps; nothing else is read.

  Args:
    config: the trial's config; a staged one trains its stages in turn, each
      continuing from the previous stage's selected state.
    dataset: the rows to train on (`train`) and to score (`validation`).
    workdir: a scratch directory (a subdirectory per stage).

  Returns:
    `[(stage name, FitResult)]` in stage order (one unnamed stage for a single-stage
    config); the last stage's history is the trial's curve.
  """
  task = tasks.task_for(config)
  fits, state = [], None
  with train.matmul_precision(config):
    mesh = train_lib.make_mesh(
      config.train.num_devices or None, config.train.get("model_parallelism", 1)
    )
    num_train = dataset.train.num_examples
    held_out = dataset.validation
    for name, stage in configuration.stage_configs(config):
      if stage.train.batch_size > num_train:  # full batch, as the experiment driver does
        stage = configuration.with_overrides(
          stage, {"train.batch_size": num_train - num_train % mesh.size}
        )
      objective = builders.build_objective(stage, dataset)
      predict = train_lib.build_predict(objective, mesh)
      eval_bs = stage.train.eval_batch_size

      def evaluate(state, predict=predict, eval_bs=eval_bs):
        rows = lambda x: train_lib.predict_in_batches(predict, state, x, eval_bs, mesh)
        return task.validation_metrics(held_out, task.predict(config, rows, held_out.x))

      options = choices.loop_options(stage.train)
      with console.training_progress(options, name) as progress:
        result = train_lib.fit(
          objective,
          {"x": dataset.train.x, "y": dataset.train.y},
          options,
          os.path.join(workdir, name),
          validation=train_lib.Validation(evaluate),
          mesh=mesh,
          previous_state=state,
          progress=progress,
        )
      state = result.state
      fits.append((name, result))
  return fits
