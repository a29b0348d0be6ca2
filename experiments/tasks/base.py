"""The `Task` of the experiment driver, and datasets that hold one process's rows.

A `Task` is what differs between task families (`experiments.tasks`); the functions
here read and cut any task's dataset where the data is sharded over processes
(`Task.keep_rows`, `Task.all_rows`).
"""

from collections.abc import Callable
import dataclasses
from typing import Any
from typing import NamedTuple

import ml_collections
import numpy as np

from energynets.data import batching

__all__ = [
  "Predictions",
  "Task",
  "gathered_rows",
  "held_rows_summary",
  "held_shards",
  "num_examples",
  "process_part",
  "replaced",
]

# predictions(split) -> the model's outputs on every row of that split's x.
Predictions = Callable[[Any], np.ndarray]


class Task(NamedTuple):
  """The task-specific part of an experiment.

  Attributes:
    name: 'multilabel', 'denoising', 'sequence' or 'segmentation'.
    load: `config -> dataset` with `train`, `validation`, `test` splits (`.x`, `.y`),
      `name` and `meta`.
    validation_metrics: `(split, predictions) -> {"validation/<metric>": value}`,
      computed at every evaluation of the loop (checkpoint selection).
    results: `(dataset, predictions) -> {"<split>/<metric>": value}` of a finished run.
    metric_definitions: written into every results.json.
    train_batches: `(config, dataset, batch_size, seed, num_shards=None) -> (step ->
      batch)`, the loop's training batches when the task needs its own (sequences:
      similar lengths, cropped; segmentation: augmented); None: uniform random rows.
      With `num_shards`, the batches are drawn shard by shard and each is this
      process's part of the global batch, from the rows it holds (`keep_rows`).
    predict_split: `(config, predict_rows, x) -> predictions of x`, where `predict_rows`
      runs the model on any rows; for tasks whose model sees other inputs than the
      split's rows (segmentation's test-time crops); None: `predict_rows(x)`.
    model_rows: `(config, a) -> the rows the model sees of a split's x or y` at
      evaluation (segmentation's crops); None: `a` itself.
    keep_rows: `(dataset, process_index, process_count) -> dataset` holding only that
      process's rows of every split (`batching.process_rows`; the rest freed), with
      `meta["process_rows"]` recording them (`num_examples` reads the totals); the
      dataset itself with one process. The driver requires it.
    all_rows: `(split, gather) -> split` as the metrics read it in a run whose data is
      sharded: the labels of every process's rows, `gather(this process's array)`
      (`gathered_rows`).
    eval_splits: the splits a finished run predicts and scores.
    load_rows: `(config, process_index, process_count) -> dataset`: `keep_rows(load(config),
      ...)` without ever holding the other rows (multi-label: MULAN files read line by
      line); None: `keep_rows(load(config), ...)` (`load_process_rows`).
  """

  name: str
  load: Callable[[ml_collections.ConfigDict], Any]
  validation_metrics: Callable[[Any, np.ndarray], dict[str, float]]
  results: Callable[[Any, Predictions], dict[str, float]]
  metric_definitions: dict[str, str]
  train_batches: Callable[..., Callable[[int], dict]] | None = None
  predict_split: Callable[..., np.ndarray] | None = None
  model_rows: Callable[..., np.ndarray] | None = None
  keep_rows: Callable[..., Any] | None = None
  all_rows: Callable[..., Any] | None = None
  eval_splits: tuple[str, ...] = ("validation", "test")
  load_rows: Callable[..., Any] | None = None

  def load_process_rows(
    self, config: ml_collections.ConfigDict, process_index: int, process_count: int
  ) -> Any:
    """The dataset holding process `process_index`'s rows of every split (`keep_rows`)."""
    if self.load_rows is not None:
      return self.load_rows(config, process_index, process_count)
    assert self.keep_rows is not None, "the driver requires every task's keep_rows"
    return self.keep_rows(self.load(config), process_index, process_count)

  def predict(
    self,
    config: ml_collections.ConfigDict,
    predict_rows: Callable[[np.ndarray], np.ndarray],
    x: np.ndarray,
  ) -> np.ndarray:
    """The predictions of every row of `x` (validation and test go through here)."""
    if self.predict_split is None:
      return predict_rows(x)
    return self.predict_split(config, predict_rows, x)

  def rows_for_model(self, config: ml_collections.ConfigDict, a: np.ndarray) -> np.ndarray:
    """A split's inputs or targets as the model sees them at evaluation."""
    return a if self.model_rows is None else self.model_rows(config, a)


def num_examples(dataset, split: str = "train") -> int:
  """The rows of `dataset`'s `split` in all processes together (a sharded dataset holds
  only its process's, `Task.keep_rows`)."""
  held = getattr(dataset, "meta", {}).get("process_rows")
  return held[split]["of"] if held else len(getattr(dataset, split).x)


def held_rows_summary(dataset) -> str:
  """'rows a:b of train (n of N), ...' of what a dataset holds (`Task.keep_rows`)."""
  held = getattr(dataset, "meta", {}).get("process_rows")
  if not held:
    return "all rows"
  return ", ".join(
    f"rows {r['start']}:{r['stop']} of {s} ({r['stop'] - r['start']} of {r['of']})"
    for s, r in held.items()
    if isinstance(r, dict)
  )


def held_shards(dataset, num_shards: int) -> tuple[range | None, int]:
  """The training shards this process draws from and the first training row it holds:
  `(batching.process_shards(...), start)` for a dataset holding one process's rows
  (`Task.keep_rows`), `(None, 0)` (every shard, from row 0) for a whole one."""
  held = getattr(dataset, "meta", {}).get("process_rows")
  if not held:
    return None, 0
  return (
    batching.process_shards(num_shards, held["process"], held["processes"]),
    held["train"]["start"],
  )


def replaced(value, **changes):
  """A copy of a dataset or split (a dataclass or a NamedTuple) with `changes`."""
  if hasattr(value, "_replace"):
    return value._replace(**changes)
  return dataclasses.replace(value, **changes)


def _row_arrays(split) -> dict[str, np.ndarray]:
  """The per-row arrays of a split: its array fields with one entry per row of `x`."""
  fields = (
    split._asdict()
    if hasattr(split, "_asdict")
    else {f.name: getattr(split, f.name) for f in dataclasses.fields(split)}
  )
  return {
    k: v
    for k, v in fields.items()
    if isinstance(v, np.ndarray) and v.ndim and len(v) == len(split.x)
  }


def _split_rows(split, rows: slice):
  """`split` holding copies of `rows` of its per-row arrays (copies, so that the whole
  arrays can be freed); its other fields kept."""
  return replaced(split, **{k: v[rows].copy() for k, v in _row_arrays(split).items()})


def process_part(
  dataset, process_index: int, process_count: int, splits: tuple[str, ...], **fields
):
  """`dataset` (a dataclass or NamedTuple with `meta`) holding only process
  `process_index`'s `batching.process_rows` of each of `splits`, `meta["process_rows"]`
  recording them, and `fields` replaced; with one process, `dataset` itself."""
  if process_count == 1:
    return dataset
  parts: dict[str, Any] = {}
  held: dict[str, Any] = {"process": process_index, "processes": process_count}
  for name in splits:
    split = getattr(dataset, name)
    rows = batching.process_rows(len(split.x), process_index, process_count)
    parts[name] = _split_rows(split, rows)
    held[name] = {"start": rows.start, "stop": rows.stop, "of": len(split.x)}
  return replaced(dataset, meta=dict(dataset.meta, process_rows=held), **parts, **fields)


def gathered_rows(split, gather: Callable[[np.ndarray], np.ndarray]):
  """`split` as the metrics read it in a run whose data is sharded: its per-row arrays
  but the inputs `gather`ed from every process (`Task.all_rows`); `x` a zero stand-in
  of the whole split's shape that takes no memory."""
  changes = {k: gather(v) for k, v in _row_arrays(split).items() if k != "x"}
  total = len(next(iter(changes.values())))
  changes["x"] = np.broadcast_to(np.zeros((), split.x.dtype), (total,) + split.x.shape[1:])
  return replaced(split, **changes)
