"""The tuner's search: settings of a config tried on held-out training rows (each trial
trained and scored by `experiments.trials`), the best chosen and refit (`experiments.refit`).
`experiments.tune` is its command line and documents the protocol.
"""

import json
import os
import time
from typing import Any
from typing import TextIO

from absl import logging
import ml_collections

from energynets.train import storage
from experiments import cli
from experiments import configuration
from experiments import console
from experiments import search_spaces
from experiments import tasks
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
) -> TuneResult:
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
  search_dir = storage.workdir_path(workdir)
  refit_dir = search_dir / REFIT_DIR if refit_dir is None else storage.workdir_path(refit_dir)
  check_tunable(config, space)
  if tasks.task_for(config) is not tasks.MULTILABEL:
    raise cli.UserError(
      f"the tuner selects multi-label configs; {config.data.name!r} is "
      f"a {tasks.task_for(config).name} dataset"
    )
  if resume and (search_dir / CHOSEN_FILE).exists():
    return rerun_chosen(config, search_dir, refit_dir, started)
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
  settings = search_spaces.sample(space, trials, seed)
  logging.info(
    "tuning %d settings of %s on %s (%s)",
    len(settings),
    sorted(space),
    dataset.name,
    f"{folds}-fold on {num_train} training rows" if folds > 1 else "validation split",
  )
  search_dir.mkdir(parents=True, exist_ok=True)
  trials_path = search_dir / TRIALS_FILE
  trials_path.write_text("")
  records, lines = [], []
  trial_config = configuration.with_overrides(config, trial_overrides or {})
  progress = console.Items(len(settings), "trial", echo=echo)
  try:
    for record in run_trials(trial_config, dataset, held_out, settings, jobs):
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
    "overrides": chosen,
    "trial": best["trial"],
    "value": best["value"],
    "metric": selection_metric(config),
    "selected_step": best["selected_step"],
    "folds": folds,
    "num_train": num_train,
    "num_trials": len(records),
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
      "grid_size": len(search_spaces.grid(space)),
      "folds": folds,
      "jobs": jobs,
      "seed": seed,
      "trial_overrides": dict(trial_overrides or {}),
    },
    "search_seconds": time.time() - started,
    "config": config.to_dict(),
  }
  (search_dir / CHOSEN_FILE).write_text(
    json.dumps(evidence, indent=2, default=configuration.json_default)
  )
  return refit(config, evidence, records, search_dir, refit_dir, started)


def trial_line(records: list[dict], total: int, elapsed_s: float) -> str:
  """The report of the last of `records` (trial k of `total`), with the best so far
  and the time left at the mean time per trial."""
  record, best = records[-1], select(records)
  left = elapsed_s / len(records) * (total - len(records))
  return (
    f"trial {len(records)}/{total}: {record['params']} {record['metric']} "
    f"{record['value']:.4f} (best step {record['selected_step']}) | best "
    f"{best['value']:.4f} (trial {best['trial'] + 1}) | "
    f"{console.format_seconds(elapsed_s)} elapsed, ETA {console.format_seconds(left)}"
  )


def select(records: list[dict]) -> dict:
  """The trial with the highest held-out `value` (the first of equals); only the
  recorded held-out values are read."""
  return max(records, key=lambda r: (r["value"], -r["trial"]))


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
  for key, values in space.items():
    if problem := cli.unknown_config_key(config, key):
      raise cli.ConfigKeyError(f"search space: {problem}")
    if not values:
      raise cli.UserError(f"search space: {key} has no values")
    stages = configuration.name_list(config.get("stage_order", "")) or ()
    overridden = [
      name for name in stages if key in configuration.flatten_dict(config.stages[name].to_dict())
    ]
    if stages and len(overridden) == len(stages):
      raise cli.UserError(
        f"search space: every stage sets {key} itself, so searching it "
        f"changes nothing; search stages.<stage>.{key} "
        f"(stages {', '.join(stages)})"
      )
