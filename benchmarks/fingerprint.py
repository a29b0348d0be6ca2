"""Fingerprints of every config and of short training runs, to compare two trees.

A refactor that must not change any number runs this in the tree before and after it
and compares the two files (`json.load` both; the dicts must be equal):

  PYTHONPATH=OLD_TREE python -m benchmarks.fingerprint --what=configs --out=/tmp/old.json
  PYTHONPATH=NEW_TREE python -m benchmarks.fingerprint --what=configs --out=/tmp/new.json

`--what=configs` dumps every config of experiments/configs for every dataset variant
(a refused pair records its error type). `--what=train` trains every config a few
steps per stage (multi-label on synthetic, denoising on 16x16 scenes, sequence on
Twitter POS, which needs the data) and records the results, every logged loss and
gradient norm, and a hash of every saved array; floats are written in hex, so any
change of a bit shows.
"""

from collections.abc import Sequence
import glob
import hashlib
import importlib
import json
import math
import os
import pkgutil
import tempfile
from typing import Any

from absl import flags

from experiments import cli

# The modules of experiments/configs that are not configs.
NOT_CONFIGS = ("base", "blocks", "task_bases")
DATASETS = (
  "synthetic",
  "bibtex",
  "yeast",
  "delicious",
  "depth_scenes",
  "depth_scenes_32",
  "twitter_pos",
  "conll2003",
  "conll2003_plus",
  "weizmann_horse",
  "mulan",
)
# Keys whose values differ between two runs of the same tree (times, paths, revisions).
VOLATILE = (
  "time",
  "sec",
  "wall",
  "steps_per",
  "date",
  "host",
  "workdir",
  "path",
  "dir",
  "code_revision",
)
RUNS = {
  "multilabel": (
    "synthetic",
    ["train.steps=6", "train.eval_every=3", "train.log_every=3", "train.tensorboard=False"],
  ),
  "denoising": (
    "depth_scenes",
    [
      "train.steps=4",
      "train.eval_every=2",
      "train.log_every=2",
      "train.tensorboard=False",
      "train.batch_size=4",
      "train.eval_batch_size=4",
      "data.num_train=8",
      "data.num_validation=4",
      "data.num_test=4",
      "data.height=16",
      "data.width=16",
    ],
  ),
  "sequence": (
    "twitter_pos",
    [
      "train.steps=4",
      "train.eval_every=2",
      "train.log_every=2",
      "train.tensorboard=False",
      "train.batch_size=8",
      "model.hidden=8",
      "model.word_dim=8",
      "model.char_filters=4",
    ],
  ),
}


def config_names() -> list[str]:
  """The config modules of experiments/configs."""
  import experiments.configs as package  # pylint: disable=g-import-not-at-top

  return sorted(m.name for m in pkgutil.iter_modules(package.__path__) if m.name not in NOT_CONFIGS)


def configs() -> dict[str, Any]:
  """`{"config:dataset": the config as sorted JSON, or "ERROR <type>"}`."""
  from experiments import configuration  # pylint: disable=g-import-not-at-top

  result: dict[str, Any] = {}
  for name in config_names():
    for dataset in DATASETS:
      try:
        config = configuration.get_config(name, dataset)
      except Exception as e:  # a refused pair is part of the fingerprint
        result[f"{name}:{dataset}"] = f"ERROR {type(e).__name__}"
        continue
      result[f"{name}:{dataset}"] = json.loads(config.to_json_best_effort(sort_keys=True))
  return result


def exact(value: Any) -> Any:
  """`value` with floats in hex and volatile keys left out."""
  if isinstance(value, float):
    return value.hex() if math.isfinite(value) else str(value)
  if isinstance(value, dict):
    return {k: exact(v) for k, v in value.items() if not any(t in k for t in VOLATILE)}
  if isinstance(value, (list, tuple)):
    return [exact(v) for v in value]
  return value


def run_files(workdir: str) -> dict[str, Any]:
  """Hashes of every saved array and the losses of every `metrics.jsonl` in `workdir`."""
  import numpy as np  # pylint: disable=g-import-not-at-top

  files: dict[str, Any] = {}
  for path in sorted(glob.glob(os.path.join(workdir, "**", "*.npz"), recursive=True)):
    arrays = np.load(path)
    files[os.path.relpath(path, workdir)] = {
      k: hashlib.sha256(np.ascontiguousarray(arrays[k]).tobytes()).hexdigest()[:16]
      for k in sorted(arrays.files)
    }
  for path in sorted(glob.glob(os.path.join(workdir, "**", "metrics.jsonl"), recursive=True)):
    with open(path) as f:
      rows = [json.loads(line) for line in f]
    files[os.path.relpath(path, workdir)] = [
      {k: v for k, v in row.items() if "loss" in k or "grad" in k or k == "step"} for row in rows
    ]
  return files


def train(tasks: Sequence[str]) -> dict[str, Any]:
  """`{"config:dataset": results, losses and array hashes of a short run}`."""
  from experiments import configuration  # pylint: disable=g-import-not-at-top
  from experiments import train as train_lib  # pylint: disable=g-import-not-at-top

  result: dict[str, Any] = {}
  for task in tasks:
    dataset, overrides = RUNS[task]
    for name in config_names():
      module = importlib.import_module(f"experiments.configs.{name}")
      if task not in getattr(module, "TASKS", ("multilabel",)):
        continue
      config = configuration.get_config(name, dataset, list(overrides))
      for stage in config.get("stages", {}).keys():
        config.stages[stage].train.steps = 4
      if "energy" in config and "tlm_hidden" in config.energy:
        config.energy.tlm_hidden = 8
      with tempfile.TemporaryDirectory() as workdir:
        results = dict(train_lib.train_and_evaluate(config, workdir))
        results["files"] = run_files(workdir)
      result[f"{name}:{dataset}"] = exact(results)
      print(f"{name}:{dataset}", flush=True)
  return result


def main(argv: Sequence[str]) -> None:
  del argv
  what, out, tasks = flags.FLAGS.what, flags.FLAGS.out, flags.FLAGS.tasks
  fingerprint = configs() if what == "configs" else train(tasks)
  with open(out, "w") as f:
    json.dump(fingerprint, f, indent=1, sort_keys=True)


def define_flags() -> None:
  """The command line; defined only when run, so the module imports beside any binary."""
  flags.DEFINE_enum("what", "configs", ["configs", "train"], "what to fingerprint")
  flags.DEFINE_string("out", None, "the JSON file to write", required=True)
  flags.DEFINE_list("tasks", ["multilabel", "denoising", "sequence"], "train: tasks")


if __name__ == "__main__":
  define_flags()
  cli.run(main)
