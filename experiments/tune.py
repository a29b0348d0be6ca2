r"""Model selection on validation only: a search over a config's settings, then one test.

  python -m experiments.tune --config=experiments/configs/br.py:mulan \
      --config.data.path=DIR --workdir=/tmp/tune_br --jobs=2

Every trial is one setting of the config's search space (`experiments/search_spaces.py`:
the config module's `get_search_space`, or `--search key=v1,v2`), the config's own
setting first and the others drawn by optuna's TPE sampler (`experiments/search.py`),
trained and scored on held-out *training* rows by `validation/example_f1`, the metric
the run reports (every selecting stage of the final run selects on it too):

- fewer than `SMALL_TRAIN` training rows: k-fold cross-validation on the training split
  (`--folds`, default 5; folds from the training rows only). A trial's score is the
  best, over evaluation steps, of the mean held-out metric across folds, and that step
  is its step count (early stopping on the held-out folds). A trial trains its folds in
  rungs (1, 3, 9, ... folds) and stops after one where its score is outside the top
  third (successive halving; `--noprune`: never).
- otherwise: the dataset's validation split, as a single run selects.

Either way the chosen setting is then trained as a normal run on all training rows,
selecting its checkpoint on the validation split (a step count chosen on folds of the
training rows is too short for a run on all of them).

Every training run stops early as `fit` does (`train.early_stopping`); a fold that stops
ends the trial's mean curve there. A staged config (e.g. SPEN: pretrain, energy,
joint) trains its stages in turn on each fold, each selecting its checkpoint on the
held-out rows; its score is the best over its stages of each stage's mean held-out curve
(a continuing stage's starts at its starting state); its final run's every stage selects
on the validation split and the run reports its best stage. `--start_from=DIR` (config:
`tune.start_from`) continues a finished tuned run instead: the first stage takes its
chosen setting in every trial and its checkpoints in the final run, and the trials
search the later stages' keys (`experiments.stage_reuse.start_from_tuned`), e.g. dmf's
pairwise stage on top of the tuned MLP. `--stagewise` (config: `tune.stagewise`, the
by-path default) does both in one workdir: the first stage alone is searched and run
first, in WORKDIR/first_stage, and the later stages start from it.

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
within the config's `tune` block) and writes the final run at the workdir's root. A
trial's training and scoring is `experiments.trials`.
"""

import os
import sys
from typing import Any

from absl import flags
from etils import epath
import jax
import ml_collections

from energynets.train import quiet_library_logs
from energynets.train import storage
from experiments import cli
from experiments import console
from experiments import search_spaces
from experiments import train
from experiments.refit import CHOSEN_FILE
from experiments.refit import TRIALS_FILE
from experiments.refit import TuneResult
from experiments.search import DEFAULT_FOLDS
from experiments.search import REFIT_DIR
from experiments.search import SMALL_TRAIN
from experiments.search import check_tunable
from experiments.search import select
from experiments.search import trial_line
from experiments.search import tune
from experiments.trials import fit_held_out
from experiments.trials import fold_indices
from experiments.trials import is_staged
from experiments.trials import run_trial
from experiments.trials import selection_data
from experiments.trials import selection_metric
from experiments.trials import use_compilation_cache

__all__ = [
  "CHOSEN_FILE",
  "DEFAULT_FOLDS",
  "REFIT_DIR",
  "SMALL_TRAIN",
  "TRIALS_FILE",
  "TuneResult",
  "block_trial_overrides",
  "check_tunable",
  "fit_held_out",
  "fold_indices",
  "is_staged",
  "main",
  "run_experiment",
  "run_trial",
  "select",
  "selection_data",
  "selection_metric",
  "trial_line",
  "trial_overrides",
  "tune",
  "use_compilation_cache",
]


def run_experiment(
  config: ml_collections.ConfigDict,
  workdir: str | os.PathLike,
  *,
  config_file: str,
  allow_config_change: bool = False,
) -> dict[str, Any]:
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
  run_dir = storage.workdir_path(workdir)
  if jax.process_count() > 1 and not (run_dir / CHOSEN_FILE).exists():
    raise cli.UserError(
      f"config.tune.enabled: the search runs in one process and this run has "
      f"{jax.process_count()}; tune first on one host with the same --workdir (its "
      f"{CHOSEN_FILE} is then reused), or pass --config.tune.enabled=False"
    )
  if allow_config_change:
    raise cli.UserError("--allow_config_change needs --config.tune.enabled=False")
  space = search_spaces.for_run(config_file, config)
  result = tune(
    config,
    run_dir,
    space=space,
    trials=tuning.trials,
    folds=1 if tuning.folds == 1 else None,
    jobs=tuning.jobs,
    seed=tuning.seed,
    small_folds=tuning.folds or DEFAULT_FOLDS,
    refit_dir=run_dir,
    resume=True,
    trial_overrides=block_trial_overrides(tuning),
    start_from=tuning.get("start_from") or None,
    stagewise=tuning.get("stagewise", False),
  )
  return result.results


def block_trial_overrides(tuning: Any) -> dict[str, Any]:
  """`trial_overrides` of a config's `tune` block (a mapping; absent keys: the config's)."""
  return trial_overrides(tuning.get("trial_eval_every", 0), tuning.get("trial_patience", 0))


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


def _define_flags() -> dict[str, Any]:
  """The command line's flags (defined only when this module is the program, so that
  importing it next to other binaries defines nothing)."""
  from ml_collections import config_flags  # pylint: disable=g-import-not-at-top

  defined = {
    "config": config_flags.DEFINE_config_file(
      "config", None, "experiment config file[:dataset]", lock_config=True
    ),
    "workdir": flags.DEFINE_string(
      "workdir", None, "where the trials, the chosen config and the refit's results go"
    ),
    "trials": flags.DEFINE_integer(
      "trials",
      0,
      "settings to try, the config's own first (0: the whole grid; fewer than the grid: "
      "the others drawn by optuna's TPE sampler seeded with --seed)",
    ),
    "jobs": flags.DEFINE_integer(
      "jobs", 1, "folds of a trial trained at once, each in its own process"
    ),
    "prune": flags.DEFINE_bool(
      "prune", True, "stop a trial after a rung of folds where it is outside the top third"
    ),
    "folds": flags.DEFINE_integer(
      "folds",
      0,
      f"k of k-fold selection on the training "
      f"split; 1: the validation split; 0: {DEFAULT_FOLDS} "
      f"below {SMALL_TRAIN} training rows, else 1",
    ),
    "seed": flags.DEFINE_integer("seed", 0, "seed of the sampler and of the folds"),
    "trial_eval_every": flags.DEFINE_integer(
      "trial_eval_every",
      0,
      "the trials' evaluation interval (0: the config's "
      "train.eval_every); the final run keeps the config's",
    ),
    "trial_patience": flags.DEFINE_integer(
      "trial_patience",
      0,
      "the trials' early-stopping patience in evaluations (0: "
      "the config's train.early_stopping_patience)",
    ),
    "search": flags.DEFINE_multi_string(
      "search", [], "key=v1,v2,...: search this key over these values (replaces the config's)"
    ),
    "start_from": flags.DEFINE_string(
      "start_from",
      None,
      "workdir of a finished tuned run that the config's first stage continues: its "
      "chosen setting is fixed and its checkpoints start the final run",
    ),
    "stagewise": flags.DEFINE_bool(
      "stagewise",
      False,
      "a staged config searches its first stage alone first (in WORKDIR/first_stage), "
      "then its later stages starting from it, as --start_from does",
    ),
    "only_search_flags": flags.DEFINE_bool(
      "only_search_flags", False, "search only the --search keys, not the config's space"
    ),
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
  space = {} if value("only_search_flags") else search_spaces.for_run(config_file, config)
  space.update(given)
  result = tune(
    config,
    value("workdir"),
    space=space,
    trials=value("trials"),
    folds=value("folds") or None,
    jobs=value("jobs"),
    seed=value("seed"),
    trial_overrides=trial_overrides(value("trial_eval_every"), value("trial_patience")),
    echo=sys.stdout,
    prune=value("prune"),
    start_from=value("start_from"),
    stagewise=value("stagewise"),
  )
  held_out = f"{result.folds}-fold" if result.folds > 1 else "validation split"
  score = (
    "no trials: one setting" if result.value is None else f"{result.metric} {result.value:.4f}"
  )
  print(
    f"chosen: {' '.join(f'{k}={v}' for k, v in result.chosen.items())} "
    f"({score}, {held_out}; {len(result.trials)} trials, "
    f"{console.format_seconds(result.seconds)})"
  )
  print(console.results_table(result.results, workdir / "results.json"))


if __name__ == "__main__":
  _FLAGS = _define_flags()
  cli.run(lambda argv: main(argv, _FLAGS))
