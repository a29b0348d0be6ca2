r"""Model selection on validation only: a search over a config's settings, then one test.

  python -m experiments.tune --config=experiments/configs/br.py:mulan \
      --config.data.path=DIR --workdir=/tmp/tune_br --jobs=2

Every trial is one setting of the config's search space (`experiments/search_spaces.py`:
the config module's `get_search_space`, or `--search key=v1,v2`), trained and scored on
held-out *training* rows by the config's `train.select_metric`:

- fewer than `SMALL_TRAIN` training rows: k-fold cross-validation on the training split
  (`--folds`, default 5; folds from the training rows only). A trial's score is the
  best, over evaluation steps, of the mean held-out metric across folds, and that step
  is its step count (early stopping on the held-out folds). The chosen setting is
  refit on all training rows for its step count, without checkpoint selection.
- otherwise: the dataset's validation split, as a single run selects; the chosen
  setting is rerun as is (selecting its checkpoint on validation).

Every training run stops early as `fit` does (`train.early_stopping`); a fold that stops
ends the trial's mean curve there. A staged config (e.g. SPEN: pretrain, energy,
joint) trains its stages in turn on each fold, each selecting its checkpoint on the
held-out rows; its score is the best of the last stage's mean held-out curve, and the
chosen setting is rerun as a normal run (every stage selecting on the validation split),
since one step count does not describe several stages.

Test rows never reach a trial: trials see a dataset whose test split has no rows, and
only the refit, after every trial is written, evaluates test (once). Feature scaling is
fit on each trial's training rows. Writes, in --workdir: `trials.jsonl` (every trial:
settings, per-fold held-out metric and best step, selected step), `chosen.json` (the
chosen overrides and the evidence), `refit/` (the final run) and `results.json` (the
refit's results, test included, with the selection under `meta.tuning`). --workdir
may be a local path, a `file://` URL or an object-store URL (`gs://bucket/tune`, with
`pip install 'energynets[gcs]'`); every file goes there, trials.jsonl rewritten whole
after each trial (object stores cannot append). The trials' own runs train in local
temporary folders, removed when each ends; the XLA compilation cache stays local (kept
in a local --workdir only).

`experiments.main` runs the same search on a folder given by path (`run_experiment`,
within the config's `tune` block) and writes the final run at the workdir's root.
"""

import concurrent.futures
import contextlib
import dataclasses
import json
import multiprocessing
import os
import sys
import tempfile
import time
from typing import Any, TextIO

from absl import flags
from absl import logging
from etils import epath
import jax
import ml_collections
import numpy as np

from energynets import train as train_lib
from energynets.data import splits
from energynets.train import quiet_library_logs
from energynets.train import storage
from experiments import builders
from experiments import cli
from experiments import configuration
from experiments import console
from experiments import search_spaces
from experiments import tasks
from experiments import train
from experiments import workdirs

# Below this many training rows, selection cross-validates on the training split.
SMALL_TRAIN = 2000
DEFAULT_FOLDS = 5
TRIALS_FILE = "trials.jsonl"
CHOSEN_FILE = "chosen.json"
REFIT_DIR = "refit"


@dataclasses.dataclass
class TuneResult:
  """What `tune` returns.

  Attributes:
    chosen: the chosen trial's overrides (`key -> value`), the refit's step count
      (`train.steps`) included under k-fold selection.
    value: the chosen trial's held-out score (`metric`, mean over folds).
    metric: the selection metric (`config.train.select_metric`).
    folds: the number of folds (1: the validation split).
    trials: every trial's record, as in trials.jsonl.
    results: the refit's results (test metrics; results.json).
    seconds: wall time of the search and the refit.
  """
  chosen: dict[str, Any]
  value: float
  metric: str
  folds: int
  trials: list[dict]
  results: dict[str, Any]
  seconds: float


def tune(config: ml_collections.ConfigDict, workdir: str | os.PathLike, *,
         space: dict[str, tuple], trials: int = 0, folds: int | None = None, jobs: int = 1,
         seed: int = 0, small_folds: int = DEFAULT_FOLDS,
         refit_dir: str | os.PathLike | None = None, resume: bool = False,
         trial_overrides: dict[str, Any] | None = None,
         echo: TextIO | None = None) -> TuneResult:
  """Selects `config`'s settings from `space` on held-out training rows, refits, tests once.

  Args:
    config: a multi-label config (e.g. `experiments/configs/br.py:mulan`).
    workdir: where trials.jsonl, chosen.json, refit/ and results.json go: a local path,
      a `file://` URL or an object-store URL (`gs://bucket/tune`).
    space: config key -> candidate values (`search_spaces.for_config`).
    trials: how many settings to try: 0 or at least the grid's size: every grid point;
      fewer: that many distinct grid points drawn with `seed`.
    folds: k of the k-fold selection on the training split; 1: select on the
      validation split; None: `small_folds` below `SMALL_TRAIN` training rows, else 1.
    jobs: trials trained at once (processes); 1 trains them in this process.
    seed: seeds the trial draw and the folds.
    small_folds: the fold count `folds=None` means below `SMALL_TRAIN` training rows.
    refit_dir: where the final run trains (None: `workdir`/refit/); `workdir` itself
      puts it next to trials.jsonl, as `experiments.main` does.
    resume: if `workdir` holds a chosen.json, skip the search and (re)run its choice;
      a chosen.json selected for a config that trains differently is refused.
    trial_overrides: config overrides of the trials only, not of the final run (e.g.
      a denser `train.eval_every` and a shorter `train.early_stopping_patience`, so
      that a trial stops soon after its held-out best).
    echo: a stream that gets each trial's line as it ends (`trial_line`); progress shows
      on stderr either way (`console.Items`).

  Returns:
    The `TuneResult`.

  Raises:
    cli.UserError: a non-multi-label config, a key the config lacks, a bad fold count,
      a chosen.json from another config (with `resume`).
    storage.StorageUnavailableError: a `gs://` workdir without gcsfs installed (before
      any data loads).
  """
  started = time.time()
  workdir = storage.workdir_path(workdir)
  refit_dir = (workdir / REFIT_DIR if refit_dir is None
               else storage.workdir_path(refit_dir))
  _check_tunable(config, space)
  if tasks.task_for(config) is not tasks.MULTILABEL:
    raise cli.UserError(f"the tuner selects multi-label configs; {config.data.name!r} is "
                        f"a {tasks.task_for(config).name} dataset")
  if resume and (workdir / CHOSEN_FILE).exists():
    return _rerun_chosen(config, workdir, refit_dir, started)
  scaled_per_trial = "data.feature_scaling" in space
  load_config = _with(config, {"data.feature_scaling": "none"} if scaled_per_trial else {})
  dataset = _selection_data(tasks.task_for(load_config).load(load_config))
  num_train = dataset.train.num_examples
  if folds is None:
    folds = small_folds if num_train < SMALL_TRAIN else 1
  if folds != 1 and not 2 <= folds <= num_train:
    raise cli.UserError(f"--folds={folds}: use 1 (the validation split) or 2..{num_train}")
  held_out = fold_indices(num_train, folds, seed) if folds > 1 else None
  settings = search_spaces.sample(space, trials, seed)
  logging.info("tuning %d settings of %s on %s (%s)", len(settings), sorted(space),
               dataset.name, f"{folds}-fold on {num_train} training rows" if folds > 1
               else "validation split")
  workdir.mkdir(parents=True, exist_ok=True)
  trials_path = workdir / TRIALS_FILE
  trials_path.write_text("")
  records, lines = [], []
  trial_config = _with(config, trial_overrides or {})
  progress = console.Items(len(settings), "trial", echo=echo)
  try:
    for record in _run_trials(trial_config, dataset, held_out, settings, jobs):
      records.append(record)
      lines.append(json.dumps(record, default=configuration.json_default) + "\n")
      # Whole, not appended: an object store cannot append, and a trial takes far longer
      # than writing every record so far.
      trials_path.write_text("".join(lines))
      line = trial_line(records, len(settings), time.time() - started)
      logging.info("%s", line)
      progress.done(line, postfix=f"best {select(records)['value']:.4f}")
  finally:
    progress.close()
  best = select(records)
  chosen = dict(best["params"])
  staged = is_staged(config)
  refit_steps = folds > 1 and not staged
  if refit_steps:
    chosen["train.steps"] = best["selected_step"]
  evidence = {
      "overrides": chosen, "trial": best["trial"], "value": best["value"],
      "metric": selection_metric(config), "selected_step": best["selected_step"],
      "folds": folds, "num_train": num_train, "num_trials": len(records),
      "selection": (f"{folds}-fold cross-validation on the {num_train} training rows; "
                    "refit on all of them for the selected step count" if refit_steps else
                    f"{folds}-fold cross-validation on the {num_train} training rows, "
                    "each stage selecting on the held-out rows; the chosen setting rerun, "
                    "each stage selecting its checkpoint on validation" if folds > 1 else
                    "validation split; the chosen setting rerun, its checkpoint selected "
                    "on validation"),
      "search_space": space,
      "budget": {"trials": trials, "grid_size": len(search_spaces.grid(space)),
                 "folds": folds, "jobs": jobs, "seed": seed,
                 "trial_overrides": dict(trial_overrides or {})},
      "search_seconds": time.time() - started, "config": config.to_dict()}
  (workdir / CHOSEN_FILE).write_text(
      json.dumps(evidence, indent=2, default=configuration.json_default))
  return _refit(config, evidence, records, workdir, refit_dir, started)


def trial_line(records: list[dict], total: int, elapsed_s: float) -> str:
  """The report of the last of `records` (trial k of `total`), with the best so far
  and the time left at the mean time per trial."""
  record, best = records[-1], select(records)
  left = elapsed_s / len(records) * (total - len(records))
  return (f"trial {len(records)}/{total}: {record['params']} {record['metric']} "
          f"{record['value']:.4f} (best step {record['selected_step']}) | best "
          f"{best['value']:.4f} (trial {best['trial'] + 1}) | "
          f"{console.format_seconds(elapsed_s)} elapsed, ETA {console.format_seconds(left)}")


def _final_config(config: ml_collections.ConfigDict, evidence: dict
                  ) -> ml_collections.ConfigDict:
  """`config` with the chosen overrides; a k-fold refit of one stage trains for the
  selected step count and keeps its last step (no checkpoint selection)."""
  final = _with(config, evidence["overrides"])
  if evidence["folds"] > 1 and not is_staged(config):
    steps = evidence["overrides"]["train.steps"]
    final = _with(final, {"train.eval_every": steps, "train.checkpoint_every": steps})
  return final


def _refit(config, evidence, records, workdir, refit_dir, started) -> TuneResult:
  """Trains the chosen setting in `refit_dir`, writes results.json with the selection
  under `meta.tuning` (in `workdir` and, if elsewhere, in `refit_dir`)."""
  results = train.train_and_evaluate(_final_config(config, evidence), refit_dir)
  seconds = time.time() - started
  results["meta"]["tuning"] = {k: v for k, v in evidence.items() if k != "config"}
  results["meta"]["tuning"]["seconds"] = seconds
  text = json.dumps(results, indent=2, sort_keys=True, default=configuration.json_default)
  if jax.process_index() == 0:
    directories = {os.fspath(d): d for d in (workdir, storage.workdir_path(refit_dir))}
    for directory in directories.values():
      (directory / "results.json").write_text(text)
  return TuneResult(chosen=evidence["overrides"], value=evidence["value"],
                    metric=evidence["metric"], folds=evidence["folds"], trials=records,
                    results=results, seconds=seconds)


def _rerun_chosen(config, workdir, refit_dir, started) -> TuneResult:
  """`tune`'s result from the chosen.json in `workdir`: the search is skipped, the
  chosen setting (re)run (a finished run only re-evaluates)."""
  evidence = json.loads((workdir / CHOSEN_FILE).read_text())
  recorded = evidence.get("config")
  changes = workdirs.config_changes(recorded, config.to_dict()) if recorded else []
  if changes:
    raise cli.UserError(
        f"{workdir / CHOSEN_FILE} was selected for another config; it differs in "
        f"{', '.join(changes[:8])}. Use a fresh --workdir, or delete {CHOSEN_FILE} to "
        "search again")
  logging.info("%s exists: skipping the search, running its choice %s",
               workdir / CHOSEN_FILE, evidence["overrides"])
  trials_path = workdir / TRIALS_FILE
  records = ([json.loads(line) for line in trials_path.read_text().splitlines() if line]
             if trials_path.exists() else [])
  return _refit(config, evidence, records, workdir, refit_dir, started)


def run_experiment(config: ml_collections.ConfigDict, workdir: str | os.PathLike, *,
                   config_file: str, allow_config_change: bool = False) -> dict[str, Any]:
  """What `experiments.main` runs: `config.tune` enabled (the `mulan` variant's default),
  the search of `tune` first, then the chosen setting trained in `workdir` itself (the
  layout of a plain run, with trials.jsonl and chosen.json beside it); otherwise
  `train.train_and_evaluate`. A workdir with a chosen.json skips the search (a
  multi-process run needs one).

  Args:
    config: the experiment config; its `tune` block (if any) sets the budget.
    workdir: the run's directory (local, `file://` or `gs://...`).
    config_file: the config's file (`path.py[:dataset]`), whose `get_search_space`
      gives the space (`search_spaces.for_config`).
    allow_config_change: as in `train.train_and_evaluate`.

  Returns:
    The results (results.json); with tuning, the selection under `meta.tuning`.

  Raises:
    cli.UserError: a search in a multi-process run, `allow_config_change` with tuning,
      or as `tune` raises.
  """
  tuning = config.get("tune")
  if tuning is None or not tuning.enabled:
    return train.train_and_evaluate(config, workdir, allow_config_change=allow_config_change)
  workdir = storage.workdir_path(workdir)
  if jax.process_count() > 1 and not (workdir / CHOSEN_FILE).exists():
    raise cli.UserError(
        f"config.tune.enabled: the search runs in one process and this run has "
        f"{jax.process_count()}; tune first on one host with the same --workdir (its "
        f"{CHOSEN_FILE} is then reused), or pass --config.tune.enabled=False")
  if allow_config_change:
    raise cli.UserError("--allow_config_change needs --config.tune.enabled=False")
  space = search_spaces.for_config(config_file, config.data.name)
  result = tune(config, workdir, space=space, trials=tuning.trials,
                folds=1 if tuning.folds == 1 else None, jobs=tuning.jobs, seed=tuning.seed,
                small_folds=tuning.folds or DEFAULT_FOLDS, refit_dir=workdir, resume=True,
                trial_overrides=trial_overrides(tuning.get("trial_eval_every", 0),
                                                tuning.get("trial_patience", 0)))
  return result.results


def trial_overrides(eval_every: int, patience: int) -> dict[str, Any]:
  """The config overrides that give the trials their own evaluation interval and
  early-stopping patience (`tune.trial_eval_every`, `tune.trial_patience`; 0: the
  config's)."""
  overrides = {}
  if eval_every:
    overrides["train.eval_every"] = eval_every
  if patience:
    overrides["train.early_stopping_patience"] = patience
  return overrides


def fold_indices(num_train: int, folds: int, seed: int) -> list[np.ndarray]:
  """The held-out rows of each of `folds` folds of the training split (they partition
  `range(num_train)`; `energynets.data.splits.training_folds`)."""
  return splits.training_folds(num_train, folds, seed=seed)


def select(records: list[dict]) -> dict:
  """The trial with the highest held-out `value` (the first of equals); only the
  recorded held-out values are read."""
  return max(records, key=lambda r: (r["value"], -r["trial"]))


def is_staged(config: ml_collections.ConfigDict) -> bool:
  """Whether `config` trains several stages (`stage_order`)."""
  return bool(configuration.name_list(config.get("stage_order", "")))


def selection_metric(config: ml_collections.ConfigDict) -> str:
  """The metric a trial is scored by: the last stage's `train.select_metric`."""
  return configuration.stage_configs(config)[-1][1].train.select_metric


def _check_tunable(config: ml_collections.ConfigDict, space: dict[str, tuple]) -> None:
  last = configuration.stage_configs(config)[-1][1]
  if not last.train.select_metric:
    raise cli.UserError("the tuner scores train.select_metric of the last stage; it is unset")
  if last.train.select_mode != "max":
    raise cli.UserError("the tuner maximizes train.select_metric; select_mode must be 'max'")
  if not space:
    raise cli.UserError("the search space is empty")
  for key, values in space.items():
    if problem := cli.unknown_config_key(config, key):
      raise cli.ConfigKeyError(f"search space: {problem}")
    if not values:
      raise cli.UserError(f"search space: {key} has no values")
    stages = configuration.name_list(config.get("stage_order", "")) or ()
    overridden = [name for name in stages
                  if key in configuration.flatten_dict(config.stages[name].to_dict())]
    if stages and len(overridden) == len(stages):
      raise cli.UserError(f"search space: every stage sets {key} itself, so searching it "
                          f"changes nothing; search stages.<stage>.{key} "
                          f"(stages {', '.join(stages)})")


def _with(config: ml_collections.ConfigDict, overrides: dict[str, Any]
          ) -> ml_collections.ConfigDict:
  copy = ml_collections.ConfigDict(config.to_dict())
  copy.lock()
  return configuration.apply_overrides(copy, [f"{k}={v!r}" for k, v in overrides.items()])


def _selection_data(dataset):
  """`dataset` without test rows (an empty test split): what every trial sees."""
  empty = splits.Split(x=np.zeros((0, dataset.num_features), np.float32),
                       y=np.zeros((0, dataset.num_labels), np.float32))
  meta = {k: v for k, v in dataset.meta.items() if k != "num_examples"}
  return dataclasses.replace(dataset, test=empty, meta=meta)


def use_compilation_cache(directory: str | os.PathLike | None) -> None:
  """Keeps compiled XLA programs in `directory` (JAX's persistent cache; None: leave
  JAX's setting), so that the folds of a setting compile once. Call before compiling."""
  if directory is None or jax.config.jax_compilation_cache_dir:
    return
  jax.config.update("jax_compilation_cache_dir", os.fspath(directory))
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
  jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)


def _run_trials(config, dataset, held_out, settings, jobs):
  """Yields each trial's record in order (in this process, or `jobs` processes, which
  share this process's compilation cache directory)."""
  cache_dir = jax.config.jax_compilation_cache_dir
  base = config.to_dict()
  if jobs <= 1:
    for i, params in enumerate(settings):
      yield run_trial(base, dataset, held_out, i, params)
    return
  with single_threaded_processes(jobs, initializer=use_compilation_cache,
                                 initargs=(cache_dir,)) as pool:
    futures = [pool.submit(run_trial, base, dataset, held_out, i, params)
               for i, params in enumerate(settings)]
    for future in futures:
      yield future.result()


@contextlib.contextmanager
def single_threaded_processes(jobs: int, initializer=None, initargs=()):
  """A pool of `jobs` spawned processes, each running its XLA computations on one thread
  so that the processes share the cores; XLA_FLAGS is restored on exit."""
  flags_before = os.environ.get("XLA_FLAGS")
  os.environ["XLA_FLAGS"] = ((flags_before or "") + " --xla_cpu_multi_thread_eigen=false "
                             "intra_op_parallelism_threads=1").strip()
  try:
    with concurrent.futures.ProcessPoolExecutor(
        jobs, mp_context=multiprocessing.get_context("spawn"),
        initializer=initializer, initargs=initargs) as pool:
      yield pool
  finally:
    if flags_before is None:
      os.environ.pop("XLA_FLAGS", None)
    else:
      os.environ["XLA_FLAGS"] = flags_before


def run_trial(base: dict, dataset, held_out: list[np.ndarray] | None, trial: int,
              params: dict[str, Any]) -> dict:
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
  config = _with(ml_collections.ConfigDict(base), params)
  config.train.tensorboard = False
  config.train.checkpoint_every = config.train.steps
  metric = selection_metric(config)
  scaling = params.get("data.feature_scaling")
  if held_out is None:
    parts = [(dataset.train, dataset.validation)]
  else:
    everything = np.arange(dataset.train.num_examples)
    parts = [(_rows(dataset.train, np.setdiff1d(everything, rows)), _rows(dataset.train, rows))
             for rows in held_out]
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
    fold_records.append({
        "fold": k, "num_fit": fit_rows.num_examples, "num_held_out": scored_rows.num_examples,
        "best_step": steps[best], "best_value": values[best], "steps": steps,
        "values": values, "final_step": fits[-1][1].final_step,
        "stop_reason": fits[-1][1].stop_reason,
        "stages": [{"stage": name, "selected_step": fit.selected_step,
                    "final_step": fit.final_step, "stop_reason": fit.stop_reason}
                   for name, fit in fits]})
    curves.append(dict(zip(steps, values)))
  common = sorted(set.intersection(*(set(c) for c in curves)))
  means = [float(np.mean([c[s] for c in curves])) for s in common]
  best = int(np.argmax(means))
  return {"trial": trial, "params": params, "metric": metric, "folds": fold_records,
          "selected_step": common[best], "value": means[best],
          "seconds": time.time() - started}


def _rows(split, rows):
  return splits.Split(x=split.x[rows], y=split.y[rows])


def _scaled(scaling, fit_rows, scored_rows):
  fx, sx = splits.scale_features(scaling, fit_rows.x, scored_rows.x)
  return splits.Split(fx, fit_rows.y), splits.Split(sx, scored_rows.y)


def fit_held_out(config: ml_collections.ConfigDict, dataset, workdir: str
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
    mesh = train_lib.make_mesh(config.train.num_devices or None,
                               config.train.get("model_parallelism", 1))
    num_train = dataset.train.num_examples
    held_out = dataset.validation
    for name, stage in configuration.stage_configs(config):
      if stage.train.batch_size > num_train:  # full batch, as the experiment driver does
        stage = _with(stage, {"train.batch_size": num_train - num_train % mesh.size})
      objective = builders.build_objective(stage, dataset)
      predict = train_lib.build_predict(objective, mesh)
      eval_bs = stage.train.eval_batch_size

      def evaluate(state, predict=predict, eval_bs=eval_bs):
        rows = lambda x: train_lib.predict_in_batches(predict, state, x, eval_bs, mesh)
        return task.validation_metrics(held_out, task.predict(config, rows, held_out.x))

      options = train_lib.LoopOptions.from_config(stage.train)
      with console.training_progress(options, name) as progress:
        result = train_lib.fit(objective, {"x": dataset.train.x, "y": dataset.train.y},
                               options, os.path.join(workdir, name), evaluate=evaluate,
                               mesh=mesh, previous_state=state, progress=progress)
      state = result.state
      fits.append((name, result))
  return fits


def _define_flags() -> dict[str, Any]:
  """The command line's flags (defined only when this module is the program, so that
  importing it next to other binaries defines nothing)."""
  from ml_collections import config_flags  # pylint: disable=g-import-not-at-top
  defined = {
      "config": config_flags.DEFINE_config_file(
          "config", None, "experiment config file[:dataset]", lock_config=True),
      "workdir": flags.DEFINE_string("workdir", None, "where the trials, the chosen "
                                     "config and the refit's results go"),
      "trials": flags.DEFINE_integer("trials", 0, "settings to try (0: the whole grid; "
                                     "fewer than the grid: that many drawn with --seed)"),
      "jobs": flags.DEFINE_integer("jobs", 1, "trials trained at once, each in its own "
                                   "process"),
      "folds": flags.DEFINE_integer("folds", 0, f"k of k-fold selection on the training "
                                    f"split; 1: the validation split; 0: {DEFAULT_FOLDS} "
                                    f"below {SMALL_TRAIN} training rows, else 1"),
      "seed": flags.DEFINE_integer("seed", 0, "seed of the trial draw and of the folds"),
      "trial_eval_every": flags.DEFINE_integer(
          "trial_eval_every", 0, "the trials' evaluation interval (0: the config's "
          "train.eval_every); the final run keeps the config's"),
      "trial_patience": flags.DEFINE_integer(
          "trial_patience", 0, "the trials' early-stopping patience in evaluations (0: "
          "the config's train.early_stopping_patience)"),
      "search": flags.DEFINE_multi_string("search", [], "key=v1,v2,...: search this key "
                                          "over these values (replaces the config's)"),
      "only_search_flags": flags.DEFINE_bool("only_search_flags", False, "search only the "
                                             "--search keys, not the config's space"),
  }
  defined["verbose"], defined["progress"] = console.define_flags()
  flags.mark_flags_as_required(["config", "workdir"])
  return defined


def main(argv, flag_values: dict[str, Any]):
  """Tunes `--config`; prints each trial, the chosen overrides and the refit's test
  metrics on stdout."""
  if len(argv) > 1:
    raise cli.UserError(f"unexpected arguments: {' '.join(argv[1:])}")
  quiet_library_logs()
  value = lambda name: flag_values[name].value
  console.configure(value("progress"))
  workdir = storage.workdir_path(value("workdir"))
  # A search refused at its start (a bad flag or search key) leaves no workdir behind.
  with console.logged_run(workdir, "tune", verbose=value("verbose")):
    _main(value, workdir)


def _main(value, workdir: epath.Path):
  from experiments import tune as tune_lib  # pylint: disable=g-import-not-at-top,import-self
  from ml_collections import config_flags  # pylint: disable=g-import-not-at-top
  if storage.is_local(workdir):
    # The folds of a setting share compiled programs (kept on local disk only: an
    # object store would be slower than compiling again).
    use_compilation_cache(workdir / "xla_cache")
  config = value("config")
  config_file = config_flags.get_config_filename(flags.FLAGS["config"])
  try:
    given = search_spaces.parse(value("search"))
  except ValueError as e:
    raise cli.UserError(e) from None
  space = ({} if value("only_search_flags")
           else search_spaces.for_config(config_file, config.data.name))
  space.update(given)
  # Through the module (not __main__) so that the trial processes import it by name.
  result = tune_lib.tune(config, value("workdir"), space=space, trials=value("trials"),
                         folds=value("folds") or None, jobs=value("jobs"),
                         seed=value("seed"), trial_overrides=trial_overrides(
                             value("trial_eval_every"), value("trial_patience")),
                         echo=sys.stdout)
  held_out = f"{result.folds}-fold" if result.folds > 1 else "validation split"
  print(f"chosen: {' '.join(f'{k}={v}' for k, v in result.chosen.items())} "
        f"({result.metric} {result.value:.4f}, {held_out}; {len(result.trials)} trials, "
        f"{console.format_seconds(result.seconds)})")
  print(console.results_table(result.results, workdir / "results.json"))


if __name__ == "__main__":
  _FLAGS = _define_flags()
  cli.run(lambda argv: main(argv, _FLAGS))
