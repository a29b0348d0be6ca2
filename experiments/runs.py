"""Run records of `experiments.main` runs: `run.json` and the objective it rebuilds.

`write_run` records a finished run's selected checkpoint and, as its builder,
`objective_from_run` with the run's config and a description of its dataset
(`run_dataset_metadata`); `energynets.load_run` calls that builder, which rebuilds the
objective on a data-free stand-in of the dataset (`run_dataset`).
"""

import json
import os
import types
from typing import Any

import ml_collections
import numpy as np

from energynets import data as data_lib
from energynets import objectives
from energynets.train import run as run_lib
from experiments import builders
from experiments import configuration
from experiments import tasks

# The builder every experiments.main run records in run.json (`objective_from_run`).
# Saved runs name it by this path, so `experiments.train` keeps exporting it.
RUN_BUILDER = "experiments.train:objective_from_run"

# How each task's outputs become labels: (decoding, threshold) of `Predictor.predict`;
# multi-label runs use the threshold tuned on validation instead.
_TASK_DECODING = {
  "multilabel": ("threshold", 0.5),
  "segmentation": ("threshold", 0.5),
  "sequence": ("argmax", 0.5),
  "denoising": ("identity", 0.5),
}


def write_run(workdir: str | os.PathLike, task, config, dataset, stage, result, results) -> None:
  """Writes `workdir/run.json` of a finished experiment: the selected stage's selected
  checkpoint, the model's input shapes and `objective_from_run` with the run's config
  (and, when the selected stage is not the last, its name).

  Args:
    workdir: the run's directory (local, or a URL such as `gs://bucket/run`).
    task: the run's `experiments.tasks.Task`.
    config: the run's (top-level) config.
    dataset: the task's dataset.
    stage: `(name, config)` of the training stage the run reports (`meta.selected_stage`).
    result: that stage's `energynets.train.FitResult`.
    results: the results map written to results.json.
  """
  name, stage_config = stage
  decoding, threshold = _TASK_DECODING[task.name]
  source = f"the {task.name} task's metric threshold"
  if "threshold" in results:
    threshold, source = float(results["threshold"]), "validation"
  # The rows the model sees (segmentation's test-time crops), one example each.
  x = task.rows_for_model(config, dataset.test.x[:1])
  y = task.rows_for_model(config, dataset.test.y[:1])
  as_json = json.dumps(config.to_dict(), default=configuration.json_default)
  kwargs = {"config": json.loads(as_json), "dataset": run_dataset_metadata(task, dataset)}
  if name != configuration.stage_configs(config)[-1][0]:
    kwargs["stage"] = name
  run_lib.write_run(
    workdir,
    arrays=run_lib.array_specs({"x": x, "y": y}),
    checkpoint=run_lib.checkpoint_record(
      result.selected_value, result.selected_step, f"stages/{name}" if name else ""
    ),
    init_batch_size=stage_config.train.batch_size,
    predict_batch_size=config.train.eval_batch_size,
    decoding=decoding,
    decoding_source=f"the {task.name} task",
    threshold=threshold,
    threshold_source=source,
    builder={"path": RUN_BUILDER, "kwargs": kwargs},
    metadata={
      "writer": "experiments.main",
      "task": task.name,
      "dataset": dataset.name,
      "method": stage_config.method,
      "stage": name,
      "selected_step": result.selected_step,
      "results": "results.json",
      "model_parallelism": int(config.train.get("model_parallelism", 1)),
    },
  )


def run_dataset_metadata(task, dataset) -> dict[str, Any]:
  """What the objective builders read from `dataset`, as JSON (`run_dataset` rebuilds a
  stand-in from it): sizes and vocabularies, never the data itself."""
  meta = {
    "task": task.name,
    "name": dataset.name,
    "num_train": tasks.num_examples(dataset, "train"),
    "train_shape": list(np.shape(dataset.train.x)[1:]),
  }
  if task.name == "multilabel":
    meta.update(
      num_labels=dataset.num_labels,
      num_features=dataset.num_features,
      label_names=list(dataset.label_names),
    )
  elif task.name == "sequence":
    size = lambda vocab: len(vocab) if vocab is not None else None
    source = dataset.source
    meta.update(
      num_tags=dataset.num_tags,
      word_vocab=size(source.word_vocab),
      char_vocab=size(source.char_vocab),
      pos_vocab=size(source.pos_vocab),
      chunk_vocab=size(source.chunk_vocab),
      tag_names=list(dataset.train.tag_names),
      scheme=dataset.train.scheme,
    )
  elif task.name == "denoising":
    # Where the dataset holds one process's rows it carries all training rows' numbers.
    statistics = getattr(dataset, "input_statistics", None)
    if statistics is None:
      images = np.asarray(dataset.train.x, np.float64)
      statistics = dict(input_mean=float(images.mean()), input_std=float(images.std()))
    meta["input_statistics"] = dict(statistics)
  return meta


def run_dataset(meta: dict[str, Any]):
  """A stand-in for a run's dataset from `run_dataset_metadata`: the task's dataset type
  with the recorded sizes, its splits zero-filled views of the training shape (no memory,
  no files), so `build_objective` gives the run's objective without its data."""
  task, name = meta["task"], meta["name"]

  def zeros(*shape):
    return np.broadcast_to(np.zeros((), np.float32), shape)

  x = zeros(meta["num_train"], *meta["train_shape"])
  if task == "multilabel":
    split = data_lib.Split(x, zeros(meta["num_train"], meta["num_labels"]))
    return data_lib.MultiLabelDataset(
      name,
      split,
      split,
      split,
      label_names=tuple(meta["label_names"]),
      feature_names=tuple(f"x{i}" for i in range(meta["num_features"])),
      meta={},
    )
  if task == "segmentation":
    image_split = data_lib.SegmentationSplit(x, zeros(*x.shape[:3]))
    channels = x.shape[-1]
    return data_lib.SegmentationDataset(
      name, image_split, image_split, image_split, np.zeros(channels), np.ones(channels), meta={}
    )
  if task == "sequence":
    vocab = lambda n: range(n) if n is not None else None
    source = types.SimpleNamespace(
      word_vocab=vocab(meta["word_vocab"]),
      char_vocab=vocab(meta["char_vocab"]),
      pos_vocab=vocab(meta["pos_vocab"]),
      chunk_vocab=vocab(meta["chunk_vocab"]),
    )
    sentences = tasks.SequenceSplit(
      x,
      zeros(meta["num_train"], x.shape[1], meta["num_tags"]),
      zeros(*x.shape[:2]),
      tuple(meta["tag_names"]),
      meta["scheme"],
    )
    return tasks.SequenceData(name, sentences, sentences, sentences, meta["num_tags"], source, {})
  if task == "denoising":
    images = types.SimpleNamespace(x=x, y=x)
    return types.SimpleNamespace(
      name=name,
      train=images,
      validation=images,
      test=images,
      natural=images,
      meta={},
      input_statistics=meta["input_statistics"],
    )
  raise ValueError(f"unknown task {task!r} in a run's dataset record")


def objective_from_run(
  config: dict[str, Any], dataset: dict[str, Any], stage: str | None = None
) -> objectives.Objective:
  """The objective of an `experiments.main` run, rebuilt without its data files (the
  builder its run.json records; `energynets.load_run` calls it).

  Args:
    config: the run's config, as a dict (JSON lists read as tuples).
    dataset: `run_dataset_metadata` of the run's dataset.
    stage: the name of the stage the run reports (None: the last).

  Returns:
    That training stage's objective (`build_objective` on `run_dataset(dataset)`).
    In a staged run its `init` goes through every stage up to it (`init`, then each
    later stage's `init_from`), so it gives the state structure that stage trained
    even where it cannot start alone (SEAL's task-net phase).

  Raises:
    ValueError: `stage` is not one of the config's stages.
  """
  full = ml_collections.ConfigDict(configuration.json_to_config(config))
  if full.get("model", {}).get("glove_path", ""):
    # Pretrained embeddings only initialize parameters the checkpoint replaces.
    full.model.glove_path = ""
  stand_in = run_dataset(dataset)
  stages = configuration.stage_configs(full)
  names = [name for name, _ in stages]
  if stage is not None and stage not in names:
    raise ValueError(f"stage {stage!r} is not one of the run's stages {names}")
  stages = stages[: names.index(stage) + 1] if stage is not None else stages
  built = [builders.build_objective(stage_config, stand_in) for _, stage_config in stages]
  if len(built) == 1:
    return built[0]

  def init(rng, batch):
    state = built[0].init(rng, batch)
    for objective in built[1:]:
      state = objective.init_from(state, rng, batch)
    return state

  return built[-1]._replace(init=init)
