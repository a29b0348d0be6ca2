"""Rows of a split spread over processes: batched prediction and gathering.

In a multi-process run with per-process data (`fit`'s `num_shards`), each process holds
only its `batching.process_rows` of a split. These helpers run a jitted prediction over
such a split and gather rows from all processes, in process order, so that every process
ends with the same full-split arrays (for metrics and the decision threshold).
"""

from collections.abc import Callable
from typing import Any

import jax
from jax.experimental import multihost_utils
import numpy as np

from energynets.data.batching import process_rows
from energynets.train import step as step_lib

__all__ = [
  "gather_process_rows",
  "predict_in_batches",
  "predict_process_rows",
  "process_batch",
  "process_row_counts",
  "rows_in_process_order",
]


def predict_in_batches(
  predict: Callable, state: Any, x: np.ndarray, batch_size: int, mesh: jax.sharding.Mesh
) -> np.ndarray:
  """Runs a jitted `predict(state, x)` over all rows of `x [N, ...]`; returns numpy `[N, ...]`.

  `batch_size` rows at a time (the last batch padded, the padding dropped);
  `predict` is typically `build_predict(objective, mesh)`. Every process passes all
  of `x` and predicts its `process_rows` of it (`predict_process_rows`).
  """
  held = process_rows(len(x), jax.process_index(), jax.process_count())
  return predict_process_rows(predict, state, x[held], batch_size, mesh)


def process_row_counts(num_rows: int) -> list[int]:
  """How many rows of a split each process holds, in process order, given this
  process's `num_rows` (a collective: every process calls it)."""
  if jax.process_count() == 1:
    return [int(num_rows)]
  counts = multihost_utils.process_allgather(np.asarray([num_rows], np.int64), tiled=True)
  return [int(n) for n in np.asarray(counts)]


def process_batch(rows: np.ndarray, index: int, rows_per_batch: int) -> np.ndarray:
  """Batch `index` of `rows_per_batch` of a process's rows `[N_p, ...]`, zero-padded to
  full size (also past the end: processes holding fewer rows run the same batches)."""
  chunk = np.asarray(rows[index * rows_per_batch : (index + 1) * rows_per_batch])
  if len(chunk) == rows_per_batch:
    return chunk
  pad = np.zeros((rows_per_batch - len(chunk),) + chunk.shape[1:], chunk.dtype)
  return np.concatenate([chunk, pad])


def rows_in_process_order(outputs: list[np.ndarray], counts: list[int]) -> np.ndarray:
  """All processes' rows, in process order, from gathered batches.

  Args:
    outputs: the gathered outputs of the batches in order, each `[P * b, ...]`: b rows
      of process 0, then b of process 1, ... (`process_batch` rows, the last padded).
    counts: the rows each process holds (`process_row_counts`).

  Returns:
    `[sum(counts), ...]`: process 0's rows, then process 1's, ..., the padding dropped.
  """
  count = len(counts)
  per_process = np.concatenate(
    [np.reshape(y, (count, -1) + np.shape(y)[1:]) for y in outputs], axis=1
  )
  return np.concatenate([per_process[p, :n] for p, n in enumerate(counts)])


def predict_process_rows(
  predict: Callable, state: Any, x: np.ndarray, batch_size: int, mesh: jax.sharding.Mesh
) -> np.ndarray:
  """Runs a jitted `predict(state, x)` over a split whose rows are spread over processes.

  Each process passes only the rows it holds (its `process_rows` of the split: process
  0 the first, process 1 the next, ...); the predictions are gathered, so every process
  returns those of all rows, in order. Every process runs the same number of batches of
  `batch_size` global rows, `batch_size / P` of them its own (the last zero-padded, the
  padding dropped). With one process this is `predict_in_batches(..., x, ...)`.

  Args:
    predict: typically `build_predict(objective, mesh)`.
    state: the state to predict with.
    x: this process's rows `[N_p, ...]`.
    batch_size: global rows per batch, a multiple of the mesh's data-parallel size.
    mesh: the mesh `predict` was built for.

  Returns:
    numpy `[N, ...]`, N the rows of all processes together.
  """
  step_lib.check_batch_size(batch_size, mesh)
  counts = process_row_counts(len(x))
  if not sum(counts):
    raise ValueError("no rows to predict: the split is empty on every process")
  rows_per_batch = batch_size // jax.process_count()
  outputs = []
  for index in range(-(-max(counts) // rows_per_batch)):
    local = {"x": process_batch(x, index, rows_per_batch)}
    y = predict(state, step_lib.shard_batch(local, mesh)["x"])
    if jax.process_count() > 1:
      y = multihost_utils.process_allgather(y, tiled=True)
    outputs.append(np.asarray(y))
  return rows_in_process_order(outputs, counts)


def gather_process_rows(rows: np.ndarray) -> np.ndarray:
  """A split's rows from all processes, in process order, given this process's `rows
  [N_p, ...]` (a collective: every process calls it; one process: `rows` itself)."""
  rows = np.asarray(rows)
  if jax.process_count() == 1:
    return rows
  counts = process_row_counts(len(rows))
  if not max(counts):
    return rows
  padded = process_batch(rows, 0, max(counts))
  gathered = np.asarray(multihost_utils.process_allgather(padded, tiled=True))
  return rows_in_process_order([gathered], counts)
