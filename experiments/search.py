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

from collections.abc import Iterator
import json
import os
import time
from typing import Any
from typing import TextIO

from absl import logging
from etils import epath
import ml_collections
import numpy as np
import optuna

from energynets.train import storage
from experiments import cli
from experiments import configuration
from experiments import console
from experiments import search_spaces
from experiments import tasks
from experiments import workdirs
from experiments.refit import CHOSEN_FILE
from experiments.refit import TRIALS_FILE
from experiments.refit import TuneResult
from experiments.refit import refit
from experiments.refit import rerun_chosen
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
# Successive halving over folds: a trial goes on past a rung of folds (1, 3, 9, ...)
# only if its held-out value is among the top 1/PRUNE_FACTOR at that rung.
PRUNE_FACTOR = 3


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
) -> TuneResult:
  """Selects `config`'s settings from `space` on held-out training rows, refits, tests once.

  Args:
    config: a multi-label config (e.g. `experiments/configs/br.py:mulan`).
    workdir: where trials.jsonl, chosen.json, refit/ and results.json go: a local path,
      a `file://` URL or an object-store URL (`gs://bucket/tune`).
    space: space key -> candidate values (`search_spaces.for_config`).
    trials: how many settings to try, the config's own first: 0 or at least the grid's
      size: every grid point; fewer: the config's setting, then settings drawn by
      optuna's TPE sampler seeded with `seed` (distinct ones).
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

  Returns:
    The `TuneResult`.

  Raises:
    cli.UserError: a non-multi-label config, a key the config lacks, a bad fold count,
      a chosen.json from another config (with `resume`).
    storage.StorageUnavailableError: a `gs://` workdir without gcsfs installed (before
      any data loads).
    workdirs.WorkdirInUse: another process holds `workdir` (`workdirs.workdir_lock`).
  """
  started = time.time()
  search_dir = storage.workdir_path(workdir)
  refit_dir = search_dir / REFIT_DIR if refit_dir is None else storage.workdir_path(refit_dir)
  check_tunable(config, space)
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
      trials=trials,
      folds=folds,
      jobs=jobs,
      seed=seed,
      small_folds=small_folds,
      trial_overrides=trial_overrides,
      echo=echo,
      prune=prune,
      started=started,
    )
    return refit(config, evidence, records, search_dir, refit_dir, started)


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
  selecting = selection_overrides(config)
  trial_config = trials_config(config, trial_overrides)
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
  staged = is_staged(config)
  refit_steps = folds > 1 and not staged
  chosen = (
    refit_overrides(trial_config, best["params"], best["selected_step"])
    if refit_steps
    else dict(best["params"])
  )
  pruned = [r for r in records if r["pruned"]]
  evidence = {
    "overrides": chosen,
    "selection_overrides": selecting,
    "trial": best["trial"],
    "value": best["value"],
    "metric": selection_metric(trial_config),
    "selected_step": best["selected_step"],
    "selected_stage": best.get("selected_stage"),
    "default": {"params": default, "value": records[0]["value"]},
    "folds": folds,
    "num_train": num_train,
    "num_trials": len(records),
    "pruned": {r["trial"]: r["folds_trained"] for r in pruned},
    "steps_trained": sum(r["steps_trained"] for r in records),
    "selection": (
      f"{folds}-fold cross-validation on the {num_train} training rows; "
      "refit on all of them for the selected step count"
      if refit_steps
      else f"{folds}-fold cross-validation on the {num_train} training rows, "
      "each stage selecting on the held-out rows; the chosen setting rerun, "
      "each stage selecting its checkpoint on validation"
      if folds > 1
      else "validation split; the chosen setting rerun, its checkpoint selected on validation"
    ),
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


def refit_overrides(
  trial_config: ml_collections.ConfigDict, params: dict[str, Any], selected_step: int
) -> dict[str, Any]:
  """The overrides of a k-fold refit: the chosen trial's `params`, its selected step count
  (`train.steps`) and the span of the learning-rate schedule its trials were scored on
  (`train.schedule_steps`: the trials' own, else their `train.steps`).

  A schedule spanning only the selected steps would decay the learning rate long before
  the step that was selected (a cosine over 200 steps instead of the first 200 of 3,000),
  so the refit would not retrace the trajectory whose held-out score chose it.
  """
  chosen = dict(params)
  if "schedule_steps" in trial_config.train:
    span = chosen.get("train.schedule_steps", trial_config.train.schedule_steps)
    chosen["train.schedule_steps"] = span or chosen.get("train.steps", trial_config.train.steps)
  chosen["train.steps"] = selected_step
  return chosen


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


class Search:
  """The settings of a search, and what it learns from their records.

  The first setting is the config's own (`default`, one trial even where its values are
  not among the space's); then every other grid point in order when `trials` is 0 or
  covers them, else settings drawn by optuna's TPE sampler seeded with `seed`, each
  distinct. The study's choices of a key are its candidates and the default's value, so
  that the config's own setting is a trial of the study, which learns from it and
  whose successive-halving pruner (`keep_going`) compares the other trials with it.
  """

  def __init__(self, space: dict[str, tuple], default: dict[str, Any], trials: int, seed: int):
    self.space = space
    self.default = default
    self._choices = {
      key: values if default[key] in values else (*values, default[key])
      for key, values in space.items()
    }
    in_grid = all(default[key] in values for key, values in space.items())
    size = search_spaces.grid_size(space) + (0 if in_grid else 1)
    self.exhaustive = trials <= 0 or trials >= size
    self.num_trials = size if self.exhaustive else trials
    self._distributions: dict[str, optuna.distributions.BaseDistribution] = {
      key: optuna.distributions.CategoricalDistribution(list(range(len(values))))
      for key, values in self._choices.items()
    }
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    self.study = optuna.create_study(
      direction="maximize",
      # Half the budget at random before the model, at most optuna's default of 10.
      sampler=optuna.samplers.TPESampler(
        seed=seed, n_startup_trials=min(10, max(1, self.num_trials // 2))
      ),
      pruner=optuna.pruners.SuccessiveHalvingPruner(
        min_resource=1, reduction_factor=PRUNE_FACTOR, min_early_stopping_rate=0
      ),
    )
    self._rng = np.random.default_rng(seed)
    self._trial: optuna.Trial | None = None

  @staticmethod
  def rungs(folds: int) -> tuple[int, ...]:
    """The fold counts after which a trial may stop: 1, 3, 9, ... below `folds`."""
    rungs, rung = [], 1
    while rung < folds:
      rungs.append(rung)
      rung *= PRUNE_FACTOR
    return tuple(rungs)

  def settings(self) -> Iterator[dict[str, Any]]:
    """Yields each trial's config overrides (`search_spaces.overrides`); the next is drawn
    after `tell` of the previous."""
    seen = {self._key(self.default)}
    self.study.enqueue_trial(self._indices(self.default))
    self._trial = self.study.ask(self._distributions)
    yield search_spaces.overrides(self.default)
    points = (
      (p for p in search_spaces.grid(self.space) if self._key(p) not in seen)
      if self.exhaustive
      else None
    )
    for _ in range(self.num_trials - 1):
      if points is not None:
        self.study.enqueue_trial(self._indices(next(points)))
      trial = self.study.ask(self._distributions)
      setting = self._setting(trial.params)
      if self._key(setting) in seen:
        # TPE proposes a setting already tried: one not yet seen, at random, instead.
        self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
        unseen = self._unseen(seen)
        if unseen is None:
          return
        setting = unseen
        self.study.enqueue_trial(self._indices(setting))
        trial = self.study.ask(self._distributions)
      seen.add(self._key(setting))
      self._trial = trial
      yield search_spaces.overrides(setting)

  def keep_going(self, record: dict) -> bool:
    """Whether the current trial goes on after the folds of `record` (its held-out value
    so far reported to the pruner); the config's own setting always does."""
    assert self._trial is not None, "keep_going follows a setting"
    self._trial.report(record["value"], step=len(record["folds"]))
    return not self._trial.should_prune() or record["trial"] == 0

  def tell(self, record: dict) -> None:
    """Ends the current trial with its record: its value, or pruned."""
    assert self._trial is not None, "tell follows a setting"
    if record["pruned"]:
      self.study.tell(self._trial, state=optuna.trial.TrialState.PRUNED)
    else:
      self.study.tell(self._trial, record["value"])

  def _setting(self, indices: dict[str, int]) -> dict[str, Any]:
    return {key: choices[indices[key]] for key, choices in self._choices.items()}

  def _indices(self, setting: dict[str, Any]) -> dict[str, int]:
    return {key: self._choices[key].index(value) for key, value in setting.items()}

  def _key(self, setting: dict[str, Any]) -> tuple[int, ...]:
    """What identifies a setting: its values' places among the choices (equal values,
    such as 1 and 1.0, are one choice)."""
    return tuple(self._indices(setting).values())

  def _unseen(self, seen: set, attempts: int = 1000) -> dict[str, Any] | None:
    for _ in range(attempts):
      setting = {key: values[self._rng.integers(len(values))] for key, values in self.space.items()}
      if self._key(setting) not in seen:
        return setting
    return None


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


def check_tunable(config: ml_collections.ConfigDict, space: dict[str, tuple]) -> None:
  """Refuses, with a `cli.UserError`, what the tuner cannot search: a last stage without
  a maximized `train.select_metric`, an empty space, a key the config lacks or with no
  values, or a key every stage sets itself (so searching it changes nothing)."""
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
      _check_key(config, key, stages)


def _check_key(config: ml_collections.ConfigDict, key: str, stages: tuple[str, ...]) -> None:
  if problem := cli.unknown_config_key(config, key):
    raise cli.ConfigKeyError(f"search space: {problem}")
  overridden = [
    name for name in stages if key in configuration.flatten_dict(config.stages[name].to_dict())
  ]
  if stages and len(overridden) == len(stages):
    raise cli.UserError(
      f"search space: every stage sets {key} itself, so searching it "
      f"changes nothing; search stages.<stage>.{key} "
      f"(stages {', '.join(stages)})"
    )
