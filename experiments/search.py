"""The tuner's search: settings of a config tried on held-out training rows (each trial
trained and scored by `experiments.trials`), the best chosen and refit (`experiments.refit`).
`experiments.tune` is its command line and documents the protocol.

The first trial is the config's own setting; the others are drawn by optuna's TPE sampler
(seeded) from the space's grid, or are the whole grid when the budget covers it. Under
k-fold selection a trial trains its folds in rungs of 1, 3, 9, ... folds and stops after
a rung where its held-out value is outside the top third of the values of the trials
that reached that rung (optuna's successive-halving pruner), so that a bad setting costs
one fold. Every trial and the chosen setting's run select on `REPORTED_METRIC`.
"""

import json
import os
import time
from typing import Any
from typing import TextIO

from absl import logging
from etils import epath
import ml_collections

from energynets.train import storage
from experiments import cli
from experiments import configuration
from experiments import console
from experiments import search_spaces
from experiments import stage_reuse
from experiments import tasks
from experiments import workdirs
from experiments.refit import CHOSEN_FILE
from experiments.refit import TRIALS_FILE
from experiments.refit import TuneResult
from experiments.refit import refit
from experiments.refit import rerun_chosen
from experiments.sampler import PRUNE_FACTOR
from experiments.sampler import Search
from experiments.trials import fold_indices
from experiments.trials import is_staged
from experiments.trials import run_trials
from experiments.trials import selection_data
from experiments.trials import selection_metric

# Below this many training rows, selection cross-validates on the training split.
SMALL_TRAIN = 2000
DEFAULT_FOLDS = 5
REFIT_DIR = "refit"
# What a multi-label run reports first, results.json's test/example_f1 (example-F1 at
# the threshold tuned on validation), measured on held-out rows: the trials select on it,
# and every selecting stage of the chosen setting's run selects its checkpoint on it.
REPORTED_METRIC = "validation/example_f1"


def tune(
  config: ml_collections.ConfigDict,
  workdir: str | os.PathLike,
  *,
  space: dict[str, tuple],
  trials: int = 0,
  folds: int | None = None,
  jobs: int = 1,
  seed: int = 0,
  small_folds: int = DEFAULT_FOLDS,
  refit_dir: str | os.PathLike | None = None,
  resume: bool = False,
  trial_overrides: dict[str, Any] | None = None,
  echo: TextIO | None = None,
  prune: bool = True,
  start_from: str | os.PathLike | None = None,
  stagewise: bool = False,
) -> TuneResult:
  """Selects `config`'s settings from `space` on held-out training rows, refits, tests once.

  Args:
    config: a multi-label config (e.g. `experiments/configs/br.py:mulan`).
    workdir: where trials.jsonl, chosen.json, refit/ and results.json go: a local path,
      a `file://` URL or an object-store URL (`gs://bucket/tune`).
    space: space key -> candidate values (`search_spaces.for_config`).
    trials: how many settings to try, the config's own first: 0 or at least the grid's
      size: every grid point; fewer: the config's setting, then settings drawn by
      optuna's TPE sampler seeded with `seed` (distinct ones). A space of one setting
      (every key pinned, the config's own value) trains no trial: the final run alone.
    folds: k of the k-fold selection on the training split; 1: select on the
      validation split; None: `small_folds` below `SMALL_TRAIN` training rows, else 1.
    jobs: folds trained at once (processes); 1 trains them in this process. The
      trials and the choice do not depend on it.
    seed: seeds the sampler and the folds.
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
    prune: under k-fold selection, stop a trial after a rung of folds where it is outside
      the top 1/`PRUNE_FACTOR` (the config's own setting is never stopped); False:
      every trial trains every fold.
    start_from: the workdir of a finished tuned run that `config`'s first stage is
      (`stage_reuse.start_from_tuned`): its chosen setting is fixed in every trial, and
      the final run's first stage is its checkpoints; None: the whole space is searched.
    stagewise: a staged config without `start_from` searches its first stage alone
      first (the keys of `space` that set it, `stage_reuse.first_stage_space`), as a
      tuned run of its own in `workdir`/`stage_reuse.FIRST_STAGE_DIR` with this budget,
      then the later stages' keys starting from it (`start_from` that run). False, or a
      single-stage config: one search over the whole space.

  Returns:
    The `TuneResult`.

  Raises:
    cli.UserError: a non-multi-label config, a key the config lacks, a bad fold count,
      a chosen.json from another config (with `resume`), a `start_from` run the first
      stage is not.
    storage.StorageUnavailableError: a `gs://` workdir without gcsfs installed (before
      any data loads).
    workdirs.WorkdirInUse: another process holds `workdir` (`workdirs.workdir_lock`).
  """
  started = time.time()
  search_dir = storage.workdir_path(workdir)
  refit_dir = search_dir / REFIT_DIR if refit_dir is None else storage.workdir_path(refit_dir)
  budget: dict[str, Any] = dict(
    trials=trials,
    folds=folds,
    jobs=jobs,
    seed=seed,
    small_folds=small_folds,
    trial_overrides=trial_overrides,
    prune=prune,
  )
  if stagewise and start_from is None and is_staged(config):
    # A bad key is refused before the first stage's search, not after it; a key every
    # stage sets itself is the first stage's there (`stage_reuse.first_stage_space`).
    check_tunable(config, space, first_stage_takes_shared=True)
    start_from = search_dir / stage_reuse.FIRST_STAGE_DIR
    _tune_first_stage(config, start_from, space, resume=resume, echo=echo, **budget)
    if not (resume and (search_dir / CHOSEN_FILE).exists()):
      first = stage_reuse.first_stage(config)
      console.note(f"stagewise search: the stages after {first!r}, from its chosen run", echo)
  if start_from is not None:
    config, space = stage_reuse.start_from_tuned(config, space, start_from)
  check_tunable(config, space)
  if start_from is not None:
    stage_reuse.check_start(
      configuration.with_overrides(config, final_run_overrides(config, trial_overrides)),
      start_from,
    )
  if tasks.task_for(config) is not tasks.MULTILABEL:
    raise cli.UserError(
      f"the tuner selects multi-label configs; {config.data.name!r} is "
      f"a {tasks.task_for(config).name} dataset"
    )
  # Held over the search and the refit (which trains in `search_dir` or below it).
  with workdirs.workdir_lock(search_dir):
    if resume and (search_dir / CHOSEN_FILE).exists():
      return rerun_chosen(config, search_dir, refit_dir, started)
    evidence, records = _search(
      config,
      search_dir,
      space=space,
      echo=echo,
      started=started,
      start_from=start_from,
      **budget,
    )
    return refit(config, evidence, records, search_dir, refit_dir, started)


def _tune_first_stage(
  config: ml_collections.ConfigDict,
  first_dir: epath.Path,
  space: dict[str, tuple],
  *,
  resume: bool,
  echo: TextIO | None,
  **budget: Any,
) -> None:
  """A stagewise search's first step: `config`'s first stage alone, searched over its
  keys of `space` and run in `first_dir` with `budget` (`tune`'s keyword arguments);
  with `resume`, a finished run there is kept."""
  if resume and (first_dir / "results.json").exists():
    return
  first = stage_reuse.first_stage(config)
  console.note(f"stagewise search: stage {first!r} alone first, in {first_dir}", echo)
  tune(
    stage_reuse.first_stage_config(config),
    first_dir,
    space=stage_reuse.first_stage_space(config, space),
    refit_dir=first_dir,
    resume=resume,
    echo=echo,
    **budget,
  )


def _search(
  config: ml_collections.ConfigDict,
  search_dir: epath.Path,
  *,
  space: dict[str, tuple],
  trials: int,
  folds: int | None,
  jobs: int,
  seed: int,
  small_folds: int,
  trial_overrides: dict[str, Any] | None,
  echo: TextIO | None,
  prune: bool,
  started: float,
  start_from: str | os.PathLike | None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
  """`tune`'s search in `search_dir` (its trials.jsonl and chosen.json); the choice's
  evidence (chosen.json) and the trials' records."""
  scaled_per_trial = "data.feature_scaling" in space
  load_config = configuration.with_overrides(
    config, {"data.feature_scaling": "none"} if scaled_per_trial else {}
  )
  dataset = selection_data(tasks.task_for(load_config).load(load_config))
  num_train = dataset.train.num_examples
  if folds is None:
    folds = small_folds if num_train < SMALL_TRAIN else 1
  if folds != 1 and not 2 <= folds <= num_train:
    raise cli.UserError(f"--folds={folds}: use 1 (the validation split) or 2..{num_train}")
  held_out = fold_indices(num_train, folds, seed) if folds > 1 else None
  default = search_spaces.default_setting(config, space)
  if default.get("data.feature_scaling") == "auto":  # what 'auto' is for this dataset
    default["data.feature_scaling"] = dataset.meta["preprocessing"]["feature_scaling"]["auto"]
  search = Search(space, default, trials, seed)
  rungs = search.rungs(folds) if prune and folds > 1 else ()
  logging.info(
    "tuning %d settings of %s on %s (%s)",
    search.num_trials,
    sorted(space),
    dataset.name,
    f"{folds}-fold on {num_train} training rows" if folds > 1 else "validation split",
  )
  search_dir.mkdir(parents=True, exist_ok=True)
  trials_path = search_dir / TRIALS_FILE
  trials_path.write_text("")
  records, lines = [], []
  selecting = final_run_overrides(config, trial_overrides)
  trial_config = trials_config(config, trial_overrides)
  if search_spaces.grid_size(space) == search.num_trials == 1:
    # The space holds the config's own setting alone (a search started from a tuned run
    # can pin every key): whatever the budget, there is nothing to choose, so no trial
    # trains. (A budget of one trial in a larger space still scores its trial.)
    best: dict[str, Any] = {
      "params": search_spaces.overrides(default),
      "trial": None,
      "value": None,
      "selected_step": None,
    }
    logging.info("one setting in the space: no trials, the final run trains it")
  else:
    progress = console.Items(search.num_trials, "trial", echo=echo)
    try:
      settings = search.settings()
      for record in run_trials(
        trial_config, dataset, held_out, settings, jobs, rungs=rungs, keep_going=search.keep_going
      ):
        search.tell(record)
        records.append(record)
        lines.append(json.dumps(record, default=configuration.json_default) + "\n")
        # Whole, not appended: an object store cannot append, and a trial takes far longer
        # than writing every record so far.
        trials_path.write_text("".join(lines))
        line = trial_line(records, search.num_trials, time.time() - started)
        logging.info("%s", line)
        progress.done(line, postfix=f"best {select(records)['value']:.4f}")
    finally:
      progress.close()
    best = select(records)
  pruned = [r for r in records if r["pruned"]]
  evidence = {
    "overrides": dict(best["params"]),
    "selection_overrides": selecting,
    "trial": best["trial"],
    "value": best["value"],
    "metric": selection_metric(trial_config),
    "selected_step": best["selected_step"],
    "selected_stage": best.get("selected_stage"),
    "default": {"params": default, "value": records[0]["value"] if records else None},
    "folds": folds,
    "num_train": num_train,
    "num_trials": len(records),
    "pruned": {r["trial"]: r["folds_trained"] for r in pruned},
    "steps_trained": sum(r["steps_trained"] for r in records),
    "selection": (
      "the space's one setting, without trials"
      if not records
      else f"{folds}-fold cross-validation on the {num_train} training rows"
      if folds > 1
      else "the validation split"
    )
    + "; the chosen setting rerun on all training rows, its checkpoint (each stage's) "
    "selected on validation",
    "search_space": space,
    "budget": {
      "trials": trials,
      "grid_size": search_spaces.grid_size(space),
      "folds": folds,
      "jobs": jobs,
      "seed": seed,
      "trial_overrides": dict(trial_overrides or {}),
      "sampler": "grid" if search.exhaustive else "optuna TPESampler",
      "rungs": list(rungs),
      "prune_factor": PRUNE_FACTOR if rungs else None,
    },
    "search_seconds": time.time() - started,
    "config": config.to_dict(),
  }
  if start_from is not None:
    evidence["start_from"] = os.fspath(start_from)
  (search_dir / CHOSEN_FILE).write_text(
    json.dumps(evidence, indent=2, default=configuration.json_default)
  )
  return evidence, records


def trials_config(
  config: ml_collections.ConfigDict, trial_overrides: dict[str, Any] | None = None
) -> ml_collections.ConfigDict:
  """The config every trial of a search of `config` trains: it selects on
  `REPORTED_METRIC` (`selection_overrides`), with `trial_overrides` (e.g. the trials' own
  evaluation interval and patience, `tune.trial_overrides`)."""
  return configuration.with_overrides(
    config, {**selection_overrides(config), **(trial_overrides or {})}
  )


def final_run_overrides(
  config: ml_collections.ConfigDict, trial_overrides: dict[str, Any] | None = None
) -> dict[str, Any]:
  """The overrides of a search's final run: it selects on `REPORTED_METRIC`
  (`selection_overrides`) and, where the trials evaluated more often than the config
  does (`trial_overrides`' `train.eval_every`), at the trials' interval with its
  early-stopping patience kept in steps, so that it can select any step a trial could
  (a setting whose trials peaked at step 100 is lost to a run that first evaluates at
  step 250)."""
  overrides: dict[str, Any] = selection_overrides(config)
  every = (trial_overrides or {}).get("train.eval_every", 0)
  if every and every < config.train.eval_every:
    steps = config.train.early_stopping_patience * config.train.eval_every
    overrides["train.eval_every"] = every
    overrides["train.early_stopping_patience"] = -(-steps // every)
  return overrides


def selection_overrides(config: ml_collections.ConfigDict) -> dict[str, str]:
  """The overrides that make `config` select on `REPORTED_METRIC`: `train.select_metric`
  and that of every stage that selects on a metric of its own (a stage that selects
  nothing, `select_metric=None`, keeps its final state)."""
  overrides = {"train.select_metric": REPORTED_METRIC}
  for name in configuration.name_list(config.get("stage_order", "")) or ():
    stage = configuration.flatten_dict(config.stages[name].to_dict())
    if stage.get("train.select_metric") is not None:
      overrides[f"stages.{name}.train.select_metric"] = REPORTED_METRIC
  return overrides


def trial_line(records: list[dict], total: int, elapsed_s: float) -> str:
  """The report of the last of `records` (trial k of `total`), with the best so far
  and the time left at the mean time per trial."""
  record, best = records[-1], select(records)
  left = elapsed_s / len(records) * (total - len(records))
  ended = (
    f"pruned after {record['folds_trained']} fold(s)"
    if record.get("pruned")
    else f"best step {record['selected_step']}"
  )
  return (
    f"trial {len(records)}/{total}: {record['params']} {record['metric']} "
    f"{record['value']:.4f} ({ended}) | best "
    f"{best['value']:.4f} (trial {best['trial'] + 1}) | "
    f"{console.format_seconds(elapsed_s)} elapsed, ETA {console.format_seconds(left)}"
  )


def select(records: list[dict]) -> dict:
  """The trial with the highest held-out `value` (the first of equals, so the config's
  own setting, trial 0, unless another beats it) among those that trained every fold;
  only the recorded held-out values are read."""
  finished = [r for r in records if not r.get("pruned")]
  return max(finished, key=lambda r: (r["value"], -r["trial"]))


def check_tunable(
  config: ml_collections.ConfigDict,
  space: dict[str, tuple],
  *,
  first_stage_takes_shared: bool = False,
) -> None:
  """Refuses, with a `cli.UserError`, what the tuner cannot search: a last stage without
  a maximized `train.select_metric`, an empty space, a key the config lacks or with no
  values, or a key every stage sets itself (so searching it changes nothing), unless
  `first_stage_takes_shared` (a stagewise search, which searches such a key for the
  first stage alone)."""
  last = configuration.stage_configs(config)[-1][1]
  if not last.train.select_metric:
    raise cli.UserError("the tuner scores train.select_metric of the last stage; it is unset")
  if last.train.select_mode != "max":
    raise cli.UserError("the tuner maximizes train.select_metric; select_mode must be 'max'")
  if not space:
    raise cli.UserError("the search space is empty")
  stages = configuration.name_list(config.get("stage_order", "")) or ()
  for space_key, values in space.items():
    if not values:
      raise cli.UserError(f"search space: {space_key} has no values")
    for key in search_spaces.config_keys(space_key):
      _check_key(config, key, stages, first_stage_takes_shared)


def _check_key(
  config: ml_collections.ConfigDict, key: str, stages: tuple[str, ...], shared_ok: bool
) -> None:
  if problem := cli.unknown_config_key(config, key):
    raise cli.ConfigKeyError(f"search space: {problem}")
  if (stage := search_spaces.untrained_stage(key, set(stages))) is not None:
    raise cli.UserError(
      f"search space: {key} sets stage {stage!r}, which this run does not train "
      f"(stage_order {','.join(stages) or 'empty: one stage'})"
    )
  if not shared_ok and configuration.set_by_every_stage(config, key):
    raise cli.UserError(
      f"search space: every stage sets {key} itself, so searching it "
      f"changes nothing; search stages.<stage>.{key} "
      f"(stages {', '.join(stages)})"
    )
