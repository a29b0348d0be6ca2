"""The tuner's final run: the chosen setting trained on all training rows and tested once
(`refit`), or the choice of an earlier search run again (`rerun_chosen`). The search that
chooses is `experiments.search`.
"""

import dataclasses
import json
import os
import time
from typing import Any

from absl import logging
import jax
import ml_collections

from energynets.train import storage
from experiments import cli
from experiments import configuration
from experiments import stage_reuse
from experiments import train
from experiments import workdirs

TRIALS_FILE = "trials.jsonl"
CHOSEN_FILE = "chosen.json"


@dataclasses.dataclass
class TuneResult:
  """What `tune` returns.

  Attributes:
    chosen: the chosen trial's overrides (`key -> value`).
    value: the chosen trial's held-out score (`metric`, mean over folds); None where
      the space held one setting and no trial trained.
    metric: the selection metric (`search.REPORTED_METRIC`).
    folds: the number of folds (1: the validation split).
    trials: every trial's record, as in trials.jsonl.
    results: the refit's results (test metrics; results.json).
    seconds: wall time of the search and the refit.
  """

  chosen: dict[str, Any]
  value: float | None
  metric: str
  folds: int
  trials: list[dict]
  results: dict[str, Any]
  seconds: float


def final_config(config: ml_collections.ConfigDict, evidence: dict) -> ml_collections.ConfigDict:
  """`config` with the chosen overrides and the search's `selection_overrides` (every
  selecting stage selects its checkpoint on validation by the metric the trials were
  scored by, evaluating as often as they did: `search.final_run_overrides`).

  The final run is a normal run, whatever held out the trials' rows: a step count chosen
  on k-fold folds of the training rows is too short for a run on all of them (more rows
  keep improving for longer), so the run selects its own step on validation up to
  `train.steps`, as an untuned run of the same setting does.
  """
  return configuration.with_overrides(
    config, {**evidence.get("selection_overrides", {}), **evidence["overrides"]}
  )


def refit(config, evidence, records, workdir, refit_dir, started) -> TuneResult:
  """Trains the chosen setting in `refit_dir`, writes results.json with the selection
  under `meta.tuning` (in `workdir` and, if elsewhere, in `refit_dir`). A search that
  started from a tuned run (`evidence["start_from"]`) has its first stage's
  checkpoints copied from that run, so that the stage is not trained again."""
  final = final_config(config, evidence)
  if evidence.get("start_from"):
    source = evidence["start_from"]
    stage_reuse.reuse_stage(final, refit_dir, stage_reuse.first_stage(final), source)
  results = train.train_and_evaluate(final, refit_dir)
  seconds = time.time() - started
  results["meta"]["tuning"] = {k: v for k, v in evidence.items() if k != "config"}
  results["meta"]["tuning"]["seconds"] = seconds
  text = json.dumps(results, indent=2, sort_keys=True, default=configuration.json_default)
  if jax.process_index() == 0:
    directories = {os.fspath(d): d for d in (workdir, storage.workdir_path(refit_dir))}
    for directory in directories.values():
      (directory / "results.json").write_text(text)
  return TuneResult(
    chosen=evidence["overrides"],
    value=evidence["value"],
    metric=evidence["metric"],
    folds=evidence["folds"],
    trials=records,
    results=results,
    seconds=seconds,
  )


def rerun_chosen(config, workdir, refit_dir, started) -> TuneResult:
  """`tune`'s result from the chosen.json in `workdir`: the search is skipped, the
  chosen setting (re)run (a finished run only re-evaluates)."""
  evidence = json.loads((workdir / CHOSEN_FILE).read_text())
  recorded = evidence.get("config")
  changes = workdirs.config_changes(recorded, config.to_dict()) if recorded else []
  if changes:
    raise cli.UserError(
      f"{workdir / CHOSEN_FILE} was selected for another config; it differs in "
      f"{', '.join(changes[:8])}. Use a fresh --workdir, or delete {CHOSEN_FILE} to "
      "search again"
    )
  logging.info(
    "%s exists: skipping the search, running its choice %s",
    workdir / CHOSEN_FILE,
    evidence["overrides"],
  )
  trials_path = workdir / TRIALS_FILE
  records = (
    [json.loads(line) for line in trials_path.read_text().splitlines() if line]
    if trials_path.exists()
    else []
  )
  return refit(config, evidence, records, workdir, refit_dir, started)
