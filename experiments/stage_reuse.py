"""`experiments.compare --reuse_stage=STAGE=METHOD`: a row's training stage starts from the
checkpoints of another row's finished run, where the stage is that run (same method,
data, model, optimizer and schedule), checked for the whole plan before anything trains
(`check_reuse_plan`) and again against the finished run (`reuse_stage`)."""

import json
import os
import re

from absl import app
from absl import logging

from energynets.train import storage
from experiments import cli
from experiments import configuration

__all__ = ["check_reuse_plan", "is_source", "reuse_stage", "source_spec", "stage_mismatch"]


def stage_mismatch(stage_config, source_config) -> list[str]:
  """`key (stage's value vs source's value)` for every key of `source_config` (a run's
  config dict, its own stages aside) where the stage's config differs: empty when the
  stage is the source run."""
  source = {k: v for k, v in source_config.items() if k not in ("stages", "stage_order")}
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
      bad.append(
        f"{method} on {dataset}: "
        + ", ".join(differ[:4])
        + (f" and {len(differ) - 4} more" if len(differ) > 4 else "")
      )
  if bad:
    raise app.UsageError(
      f"--reuse_stage={stage}={source}: the {stage!r} stage of these rows is not "
      f"{source}'s run (run them in a compare without --reuse_stage): " + "; ".join(bad)
    )
