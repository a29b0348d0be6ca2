"""The tuner's trials (`experiments.tune`): one setting of a config trained on each fold
of the training rows (or on train, scored on validation), and folds run in parallel.

`run_trial` trains one setting and records its held-out curve; `fit_held_out` trains a
config on given rows and scores other rows at every evaluation; `run_trials` runs
trials fold by fold, in rungs after which a search may stop a trial, in this process or
in `single_threaded_processes`, which share a compilation cache (`use_compilation_cache`).
Test rows never reach a trial (`selection_data`).
"""

from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Sequence
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
from energynets.train import selection
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
  "merge_folds",
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
  settings: Iterable[dict[str, Any]],
  jobs: int,
  *,
  rungs: Sequence[int] = (),
  keep_going: Callable[[dict], bool] | None = None,
) -> Iterator[dict]:
  """Yields each trial's record in order (`run_trial`'s, with `pruned`, `folds_trained`
  and `steps_trained`: the training steps of every fold and stage).

  `settings` is read lazily: the next setting is drawn after the previous trial's record
  is yielded, so that a search may choose it from the records so far. A trial trains its
  folds in rungs: the first `rungs[0]` folds, then up to `rungs[1]`, ..., then the rest;
  after each rung but the last, `keep_going(record of the folds so far)` says whether
  the trial goes on (False: it stops there, `pruned`). The folds of a rung train at once
  in `jobs` processes (sharing this process's compilation cache directory); a trial's
  record does not depend on `jobs`.
  """
  cache_dir = _compilation_cache_dir()
  base = config.to_dict()
  groups = _fold_groups(len(held_out) if held_out is not None else 0, rungs)
  with contextlib.ExitStack() as stack:
    pool = None
    if jobs > 1 and held_out is not None:
      pool = stack.enter_context(
        single_threaded_processes(jobs, initializer=use_compilation_cache, initargs=(cache_dir,))
      )
    for i, params in enumerate(settings):
      parts, pruned = [], False
      for g, group in enumerate(groups):
        if held_out is None:
          parts.append(run_trial(base, dataset, None, i, params))
        elif pool is None:
          parts += [run_trial(base, dataset, [held_out[k]], i, params) for k in group]
        else:
          futures = [pool.submit(run_trial, base, dataset, [held_out[k]], i, params) for k in group]
          parts += [future.result() for future in futures]
        record = merge_folds(parts)
        if g < len(groups) - 1 and keep_going is not None and not keep_going(record):
          pruned = True
          break
      yield {
        **record,
        "pruned": pruned,
        "folds_trained": len(record["folds"]),
        "steps_trained": sum(s["final_step"] for f in record["folds"] for s in f["stages"]),
      }


def _fold_groups(folds: int, rungs: Sequence[int]) -> list[list[int]]:
  """The folds of each rung: `[0, rungs[0])`, `[rungs[0], rungs[1])`, ..., the rest
  (validation split, `folds=0`: one group)."""
  if folds == 0:
    return [[0]]
  ends = sorted({r for r in rungs if 0 < r < folds} | {folds})
  return [list(range(start, end)) for start, end in zip([0, *ends[:-1]], ends)]


def merge_folds(parts: list[dict]) -> dict:
  """The record of a trial from records of its folds trained apart (`run_trial` on one
  fold each, in fold order): the same record `run_trial` gives for the folds together.

  Args:
    parts: `run_trial` records of the same trial, each over some of its folds.

  Returns:
    The trial's record over all of their folds (renumbered in order), its stages'
    curves averaged over every fold; `seconds` is the sum.
  """
  if len(parts) == 1:
    return parts[0]
  folds = [{**fold, "fold": k} for k, fold in enumerate(f for p in parts for f in p["folds"])]
  selectable = [stage["value"] is not None for stage in parts[0]["stages"]]
  return {
    **parts[0],
    **_best_stage(folds, selectable),
    "seconds": sum(p["seconds"] for p in parts),
  }


def _best_stage(folds: list[dict], selectable: list[bool]) -> dict:
  """`{"folds", "stages", "selected_stage", "selected_step", "value"}` of fold records:
  each stage's mean held-out curve over the folds at the steps every fold evaluated, its
  best step and value as `fit` selects (`selection.replaces_best`; None where the stage
  cannot be selected), and the best stage (`selection.selected_stage`: of equal values,
  the earlier)."""
  stages = []
  for i, can_select in enumerate(selectable):
    curves = [dict(zip(f["stages"][i]["steps"], f["stages"][i]["values"])) for f in folds]
    common = sorted(set.intersection(*(set(c) for c in curves)))
    means = [float(np.mean([c[s] for c in curves])) for s in common]
    peak = selection.selected_index(common, means) if means and can_select else None
    stages.append(
      {
        "stage": folds[0]["stages"][i]["stage"],
        "selected_step": common[peak] if peak is not None else None,
        "value": means[peak] if peak is not None else None,
      }
    )
  chosen = selection.selected_stage([s["value"] for s in stages])
  assert chosen is not None, "the last stage selects, and every fold evaluated it"
  return {
    "folds": folds,
    "stages": stages,
    "selected_stage": stages[chosen]["stage"],
    "selected_step": stages[chosen]["selected_step"],
    "value": stages[chosen]["value"],
  }


# Thread-count variables the BLAS and OpenMP runtimes read when they load: processes
# that share the cores must not each start a thread per core, or their threads wait on
# one another (scikit-learn's fits in the verdict's linear-model cells slowed severalfold).
HOST_THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
# For processes that share one accelerator: each takes device memory as it needs it, not
# JAX's default of 75 % of the device at start, which leaves the second process none.
SHARED_ACCELERATOR = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}


@contextlib.contextmanager
def single_threaded_processes(jobs: int, initializer=None, initargs=()):
  """A pool of `jobs` spawned processes, each running its XLA computations and its BLAS /
  OpenMP calls on one thread so that the processes share the cores, and taking accelerator
  memory as it needs it (`SHARED_ACCELERATOR`); the environment is restored on exit."""
  settings = {
    "XLA_FLAGS": (
      os.environ.get("XLA_FLAGS", "")
      + " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    ).strip(),
    **{name: "1" for name in HOST_THREAD_VARIABLES},
    **SHARED_ACCELERATOR,
  }
  before = {name: os.environ.get(name) for name in settings}
  os.environ.update(settings)
  try:
    with concurrent.futures.ProcessPoolExecutor(
      jobs,
      mp_context=multiprocessing.get_context("spawn"),
      initializer=initializer,
      initargs=initargs,
    ) as pool:
      yield pool
  finally:
    for name, value in before.items():
      if value is None:
        os.environ.pop(name, None)
      else:
        os.environ[name] = value


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
    `{"trial", "params", "metric", "folds": [{"fold", "best_step", "best_value", "steps",
    "values", "final_step", "stop_reason", "stages"}], "stages", "selected_stage",
    "selected_step", "value", "seconds"}`. Each stage's curve is the mean over folds of
    the held-out metric (the last stage's `select_metric`) at the steps every fold
    evaluated (a continuing stage's step 0 is its starting state); `stages` holds each
    stage's best mean `value` and its `selected_step` (None for a stage with
    `select_metric=None`, which is never selected). `value` is the best of them (of
    equal ones, the earlier stage's), `selected_stage` and `selected_step` where it is.
    A fold's `best_step`, `best_value` (the state its last stage's fit selected),
    `steps`, `values`, `final_step` and `stop_reason` are its last stage's (where
    training ended and why: early stopping), its `stages` each stage's fit with its
    `steps` and `values`.
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
  fold_records = []
  for k, (fit_rows, scored_rows) in enumerate(parts):
    if scaling is not None:
      fit_rows, scored_rows = _scaled(scaling, fit_rows, scored_rows)
    data = dataclasses.replace(dataset, train=fit_rows, validation=scored_rows)
    with tempfile.TemporaryDirectory(prefix="trial") as fit_dir:
      with console.titled(f"trial {trial + 1}" + (f" fold {k + 1}" if len(parts) > 1 else "")):
        fits = fit_held_out(config, data, fit_dir)
    stage_curves = [_curve(fit.history, metric) for _, fit in fits]
    last = fits[-1][1]
    fold_records.append(
      {
        "fold": k,
        "num_fit": fit_rows.num_examples,
        "num_held_out": scored_rows.num_examples,
        "best_step": last.selected_step,
        "best_value": last.selected_value,
        "steps": list(stage_curves[-1]),
        "values": list(stage_curves[-1].values()),
        "final_step": last.final_step,
        "stop_reason": last.stop_reason,
        "stages": [
          {
            "stage": name,
            "selected_step": fit.selected_step,
            "final_step": fit.final_step,
            "stop_reason": fit.stop_reason,
            "steps": list(curve),
            "values": list(curve.values()),
          }
          for (name, fit), curve in zip(fits, stage_curves)
        ],
      }
    )
  stages = configuration.stage_configs(config)
  selectable = [
    i == len(stages) - 1 or stage.train.select_metric is not None
    for i, (_, stage) in enumerate(stages)
  ]
  return {
    "trial": trial,
    "params": params,
    "metric": metric,
    **_best_stage(fold_records, selectable),
    "seconds": time.time() - started,
  }


def _curve(history: list[dict], metric: str) -> dict[int, float]:
  """`{step: metric}` of a fit's evaluation records that hold `metric`."""
  return {int(r["step"]): float(r[metric]) for r in history if metric in r}


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
    config); each stage's history is one of the trial's curves (`run_trial`).
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
