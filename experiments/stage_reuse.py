"""A training stage that starts from another run's checkpoints, where the stage is that run
(same method, data, model, optimizer and schedule).

`experiments.compare --reuse_stage=STAGE=METHOD`: a row's stage is another row's finished
run, checked for the whole plan before anything trains (`check_reuse_plan`) and again
against the finished run (`reuse_stage`).

`tune.start_from=DIR` (`experiments.tune --start_from`): a staged config's search starts
from a finished tuned run, e.g. an energy on top of the tuned MLP. Its first stage takes
that run's chosen setting, fixed in every trial (`start_from_tuned`), is checked to be
that run (`check_start`), and the final run's first stage is that run's checkpoints
(`reuse_stage`); the search spends its trials on the later stages' keys alone, and a
run that reports its best stage never ends, on validation, below the run it started from.

`tune.stagewise` (`experiments.tune --stagewise`): the same, with the source searched
first in the run's own workdir: the first stage alone (`first_stage_config`) over the
space keys that set it (`first_stage_space`), in `FIRST_STAGE_DIR`.
"""

import json
import os
import re
from typing import Any

from absl import app
from absl import logging
import ml_collections

from energynets.train import storage
from experiments import cli
from experiments import configuration
from experiments import search_spaces

__all__ = [
  "FIRST_STAGE_DIR",
  "check_reuse_plan",
  "check_start",
  "first_stage",
  "first_stage_config",
  "first_stage_space",
  "is_source",
  "reuse_stage",
  "source_spec",
  "stage_mismatch",
  "start_from_tuned",
]

# Blocks of a run's config that do not change what it trains: a stage may differ there.
NOT_TRAINED = ("stages", "stage_order", "tune")
# Where a stagewise search (`tune.stagewise`) tunes its first stage, inside its workdir.
FIRST_STAGE_DIR = "first_stage"


def stage_mismatch(stage_config, source_config) -> list[str]:
  """`key (stage's value vs source's value)` for every key of `source_config` (a run's
  config dict, its own stages and search budget aside) where the stage's config differs:
  empty when the stage is the source run."""
  source = {k: v for k, v in source_config.items() if k not in NOT_TRAINED}
  # Through JSON as results.json is written (tuples become lists).
  have = configuration.flatten_dict(json.loads(json.dumps(stage_config.to_dict(), default=str)))
  want = configuration.flatten_dict(json.loads(json.dumps(source, default=str)))
  return [
    f"{k} ({have.get(k, '<missing>')!r} vs {want[k]!r})"
    for k in sorted(want)
    if k not in have or have[k] != want[k]
  ]


def reuse_stage(
  config, run_dir: str | os.PathLike, stage: str, source_dir: str | os.PathLike
) -> bool:
  """Seeds `<run_dir>/stages/<stage>` with the checkpoints of the finished run in
  `source_dir`, so that the stage resumes at its last step instead of training.

  Allowed only when the stage's config agrees with the source run's config on every key
  the source defines (its own stages aside): the same method, data, model, optimizer and
  schedule, so the reused stage is the stage that would have been trained. Returns
  False (nothing done) for a config without that stage or a stage already present.
  """
  stages = dict(configuration.stage_configs(config))
  run_path, source_path = storage.workdir_path(run_dir), storage.workdir_path(source_dir)
  target = run_path / "stages" / stage
  if stage not in stages or target.exists():
    return False
  results_file = source_path / "results.json"
  if not results_file.exists():
    raise cli.UserError(
      f"--reuse_stage: {results_file} does not exist; list the source "
      "method before the rows that reuse it, on the same dataset"
    )
  differ = stage_mismatch(stages[stage], json.loads(results_file.read_text())["meta"]["config"])
  if differ:
    raise cli.UserError(
      f"--reuse_stage: stage {stage!r} of {run_path} is not the run in "
      f"{source_path}; they differ at " + ", ".join(differ)
    )
  for sub in ("checkpoints", "best"):
    if (source_path / sub).is_dir():
      storage.copy_tree(source_path / sub, target / sub)
  logging.info("stage %r of %s starts from the finished run %s", stage, run_path, source_path)
  return True


def is_source(method: str, source: str) -> bool:
  """Whether `method` is a run other rows reuse: `source`, or `source` with its seed set."""
  seeded = re.escape(source) + r":train\.seed=-?\d+"
  return method == source or re.fullmatch(seeded, method) is not None


def source_spec(config, source: str, listed) -> str:
  """The row whose finished run a row reuses: `source` trained with the row's own seed
  (`source:train.seed=N`) where that row is in `listed`, else `source` itself.

  Pairing seeds lets a multi-seed comparison continue each seed's own baseline run
  (e.g. fine-tune FCN seed 1 with SEAL) instead of training the baseline again.
  """
  seeded = f"{source}:train.seed={config.train.seed}"
  return seeded if seeded in listed else source


def check_reuse_plan(row_configs, stage: str, source: str) -> None:
  """Fails before anything trains if a row's `stage` cannot start from `source`'s run.

  `row_configs`: `(dataset, method, config)` of every row, in order. The source's config
  is the one its own row builds, so a row whose stage differs from it (e.g. spen_ssvm's
  `spen_pretrain` against mlp's `local`) is named now, not after the rows before it have
  trained. `reuse_stage` checks again against the finished run's results.json.
  """
  configs = {(dataset, method): config for dataset, method, config in row_configs}
  listed = {method for _, method in configs}
  bad = []
  for dataset, method, config in row_configs:
    stages = dict(configuration.stage_configs(config))
    if is_source(method, source) or stage not in stages:
      continue
    spec = source_spec(config, source, listed)
    if (dataset, spec) not in configs:
      raise app.UsageError(
        f"--reuse_stage: {method} on {dataset} reuses {spec!r}, which "
        "is not a row on that dataset; list it in --methods first"
      )
    differ = stage_mismatch(stages[stage], configs[dataset, spec].to_dict())
    if differ:
      bad.append(f"{method} on {dataset}: {_first(differ, 4)}")
  if bad:
    raise app.UsageError(
      f"--reuse_stage={stage}={source}: the {stage!r} stage of these rows is not "
      f"{source}'s run (run them in a compare without --reuse_stage): " + "; ".join(bad)
    )


def first_stage(config) -> str:
  """The name of `config`'s first training stage.

  Raises:
    cli.UserError: a config of one stage, which has no later stage to start.
  """
  order = configuration.name_list(config.get("stage_order", "")) or ()
  if len(order) < 2:
    raise cli.UserError(
      "start_from: the config trains one stage; starting from a tuned run needs a staged "
      "config (stage_order of two stages or more) whose first stage is that run"
    )
  return order[0]


def first_stage_config(config) -> ml_collections.ConfigDict:
  """`config`'s first stage as a run of its own: the config that stage trains, with no
  stages (what `check_start` compares a first stage against).

  Raises:
    cli.UserError: a config of one stage.
  """
  stage = dict(configuration.stage_configs(config))[first_stage(config)]
  with stage.unlocked():
    stage.stage_order = ""
    stage.stages = ml_collections.ConfigDict()
  return stage


def first_stage_space(config, space: dict[str, tuple]) -> dict[str, tuple]:
  """The keys of `space` that set `config`'s first stage, as keys of
  `first_stage_config`: `stages.<first>.<key>` becomes `<key>`; another stage's key is
  left out, and so is a top-level key the first stage sets itself where a later stage
  takes the top-level value (dvn's `dvn` stage its learning rate). The rest (the network,
  L2, the feature scaling) stays, with the keys tied to it.

  Args:
    config: a staged config.
    space: its search space (space key -> candidates).

  Returns:
    The first stage's space, in `space`'s order.

  Raises:
    cli.UserError: a config of one stage.
  """
  stage = first_stage(config)
  own = f"stages.{stage}."
  out: dict[str, tuple] = {}
  for key, values in space.items():
    kept = []
    for name in search_spaces.config_keys(key):
      if name.startswith(own):
        kept.append(name[len(own) :])
      elif name.startswith("stages."):
        continue
      elif stage not in configuration.stages_setting(config, name):
        kept.append(name)
      elif configuration.set_by_every_stage(config, name):
        # Every stage sets it itself: the single-stage form's key, the first stage's here
        # as `start_from_tuned` takes it.
        kept.append(name)
    if kept:
      out[search_spaces.TIED.join(kept)] = values
  return out


def _tuned_run_file(source_dir, name: str) -> dict:
  """The JSON file `name` (chosen.json or results.json) of the tuned run in `source_dir`,
  which must have finished (both files written)."""
  from experiments.refit import CHOSEN_FILE  # pylint: disable=g-import-not-at-top

  path = storage.workdir_path(source_dir)
  missing = [os.fspath(path / f) for f in (CHOSEN_FILE, "results.json") if not (path / f).exists()]
  if missing:
    raise cli.UserError(
      f"start_from: {path} is not a finished tuned run ({' and '.join(missing)} missing); "
      "tune it first (its workdir holds chosen.json and results.json when it ends)"
    )
  try:
    return json.loads((path / name).read_text())
  except json.JSONDecodeError as e:
    raise cli.UserError(f"start_from: {path / name} is not JSON ({e})") from None


def start_from_tuned(config, space: dict[str, tuple], source_dir) -> tuple[Any, dict[str, tuple]]:
  """`config` and `space` of a search that starts from the tuned run in `source_dir`: its
  chosen overrides set in `config`'s first stage, and every space key they set pinned to
  that one value.

  A chosen key goes to `stages.<first>.<key>` where the first stage sets that key
  itself (e.g. its own learning rate), else to the top level (the network, L2, the
  feature scaling), with the keys a space key ties to it (`model.hidden|
  energy.feature_hidden`). A space key `<key>` that the first stage sets itself (a space
  written for the config's single-stage form, such as seal_dynamic's with
  `stage_order=pretrain,seal`) becomes `stages.<first>.<key>` where every later stage
  sets it too; where a later stage takes the top-level key (dvn's `dvn` stage its
  learning rate), the key stays searched for it. Pinned keys stay in the
  space, so that per-trial work such as the feature scaling fit on each fold's rows is
  done as the source's search did it.

  Args:
    config: a staged config.
    space: its search space (space key -> candidates).
    source_dir: the workdir of a finished tuned run (chosen.json, results.json).

  Returns:
    `(config, space)`: a locked copy of `config` with the source's setting, the space
    with those keys pinned.

  Raises:
    cli.UserError: a single-stage config, an unfinished or unreadable source, a chosen
      key `config` lacks.
  """
  from experiments.refit import CHOSEN_FILE  # pylint: disable=g-import-not-at-top

  stage = first_stage(config)
  chosen = _tuned_run_file(source_dir, CHOSEN_FILE)
  overrides: dict[str, Any] = {}
  pinned = dict(space)
  for key, value in chosen["overrides"].items():
    if problem := cli.unknown_config_key(config, key):
      raise cli.UserError(f"start_from: {source_dir}'s chosen {key}: {problem}")
    setting = configuration.stages_setting(config, key)
    target = f"stages.{stage}.{key}" if stage in setting else key
    value = configuration.json_to_config(value)
    if target != key and key in pinned and configuration.set_by_every_stage(config, key):
      # A space written for the config's single-stage form searches the top-level key,
      # which every stage of the staged form sets itself: it is the first stage's now.
      # Where a later stage takes the top-level key, it stays searched for that stage.
      pinned[target] = pinned.pop(key)
    tied = [k for k in pinned if target in search_spaces.config_keys(k)]
    for space_key in tied:
      pinned[space_key] = (value,)
      overrides.update(dict.fromkeys(search_spaces.config_keys(space_key), value))
    overrides[target] = value
  return configuration.with_overrides(config, overrides), pinned


def check_start(config, source_dir) -> None:
  """Refuses, with a `cli.UserError` naming the keys, a final-run `config` whose first
  stage is not the tuned run in `source_dir` (`stage_mismatch` against its results.json)."""
  stage = first_stage(config)
  results = _tuned_run_file(source_dir, "results.json")
  differ = stage_mismatch(
    dict(configuration.stage_configs(config))[stage], results["meta"]["config"]
  )
  if differ:
    raise cli.UserError(
      f"start_from: stage {stage!r} would not be the run in {source_dir}; they differ at "
      + _first(differ, 6)
    )


def _first(keys: list[str], shown: int) -> str:
  """The first `shown` of `keys`, joined, and how many more there are."""
  more = f" and {len(keys) - shown} more" if len(keys) > shown else ""
  return ", ".join(keys[:shown]) + more
