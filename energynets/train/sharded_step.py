"""The sharded step of `fit`: every step's batch on the mesh, the first state, the update.

Batches are pure functions of `(seed, step)` (or of the step alone, for a caller's
`train_batch`), so a resumed run trains on the same batches as an uninterrupted one.
"""

from collections.abc import Callable
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from energynets.data.batching import process_rows
from energynets.data.batching import process_shards
from energynets.data.batching import sharded_batch_indices
from energynets.data.batching import train_batch_indices
from energynets.objectives.base import Objective
from energynets.train import step as step_lib
from energynets.train.process_rows import process_row_counts

__all__ = ["batch_source", "first_state"]


def batch_source(
  train_arrays: Mapping[str, np.ndarray],
  batch_size: int,
  seed: int,
  mesh: jax.sharding.Mesh,
  train_batch: Callable[[int], Mapping[str, np.ndarray]] | None = None,
  num_shards: int | None = None,
) -> Callable[[int], dict[str, jax.Array]]:
  """`step -> the global batch of that step, sharded over `mesh`'s data axis`.

  Args:
    train_arrays: the training rows `{name: [N, ...]}` (this process's, with `num_shards`).
    batch_size: the global batch size.
    seed: seeds the batch order.
    mesh: the device mesh.
    train_batch: `step -> {name: [batch_size, ...]}`, the global batch of a step (with
      `num_shards`: this process's part of it); default: `train_batch_indices` rows of
      `train_arrays` (with `num_shards`: `sharded_batch_indices`).
    num_shards: the shards the N training rows are cut into (`fit`'s `num_shards`).
  """
  if num_shards is not None:
    local_batch = train_batch or _process_batches(train_arrays, num_shards, batch_size, seed)
    return lambda step: step_lib.shard_batch(local_batch(step), mesh)
  num_examples = len(next(iter(train_arrays.values())))
  if train_batch is None:

    def train_batch(step: int) -> dict[str, np.ndarray]:
      idx = train_batch_indices(num_examples, batch_size, seed, step)
      return {k: v[idx] for k, v in train_arrays.items()}

  rows = step_lib.process_slice(batch_size)
  return lambda step: step_lib.shard_batch({k: v[rows] for k, v in train_batch(step).items()}, mesh)


def _process_batches(
  train_arrays: Mapping[str, np.ndarray], num_shards: int, batch_size: int, seed: int
) -> Callable[[int], dict[str, np.ndarray]]:
  """`step -> this process's part of the global batch` (`batching.sharded_batch_indices`
  over its shards), from the training rows it holds (`fit`'s `num_shards`)."""
  num_held = len(next(iter(train_arrays.values())))
  index, count = jax.process_index(), jax.process_count()
  shards = process_shards(num_shards, index, count)
  counts = process_row_counts(num_held)
  num_rows = sum(counts)
  held = process_rows(num_rows, index, count)
  for p, n in enumerate(counts):
    expected = process_rows(num_rows, p, count)
    if n != expected.stop - expected.start:
      raise ValueError(
        f"process {p} of {count} holds {n} training rows, but its part of "
        f"the {num_rows} is rows {expected.start}:{expected.stop} "
        "(batching.process_rows)"
      )

  def local_batch(step: int) -> dict[str, np.ndarray]:
    idx = sharded_batch_indices(num_rows, batch_size, seed, step, num_shards, shards) - held.start
    return {k: v[idx] for k, v in train_arrays.items()}

  return local_batch


def first_state(
  objective: Objective,
  mesh: jax.sharding.Mesh,
  example: Mapping[str, jax.Array],
  init_key: jax.Array,
  label_dim: int | None = None,
  previous_state: Any = None,
) -> tuple[Any, Callable[..., tuple[Any, dict]]]:
  """The state before step 1 and the jitted update `(state, batch, key) -> (state, metrics)`.

  Args:
    objective: what is trained.
    mesh: the device mesh; with a `'model'` axis, state leaves with an axis of size
      `label_dim` are split over it (`step.label_axis_shardings`).
    example: a sharded batch (shapes only).
    init_key: the key of `objective.init` (or `init_from`).
    label_dim: the label axis size split over `'model'`.
    previous_state: the selected state of a previous stage: the state is then
      `objective.init_from(previous_state, ...)`.
  """
  sharding = step_lib.state_sharding_for(objective, mesh, example, label_dim, previous_state)
  if previous_state is None:
    state = step_lib.build_init(objective, mesh, sharding)(init_key, example)
  else:
    state = step_lib.build_init_from(objective, mesh, sharding)(previous_state, init_key, example)
  return state, step_lib.build_train_step(objective, mesh, sharding)
