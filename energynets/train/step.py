"""The one step builder: jitted objective updates over a `('data',)` device mesh.

State is replicated, the batch is sharded along its leading axis, and the state
argument is donated. With a replicated state and a sharded batch, XLA's SPMD
partitioner inserts the gradient all-reduce itself, so objectives stay written for
a single device. Multi-host runs use the same code: each process hands in its own
slice of the global batch (`jax.make_array_from_process_local_data`).
"""

from typing import Any, Callable, Mapping

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from energynets.objectives.base import Objective

DATA_AXIS = "data"
"""The name of the mesh axis that batches are sharded along."""


def make_mesh(num_devices: int | None = None) -> Mesh:
  """A 1-D mesh over the first `num_devices` devices (all by default)."""
  devices = jax.devices()
  if num_devices is not None:
    if not 1 <= num_devices <= len(devices):
      raise ValueError(f"num_devices={num_devices} but {len(devices)} device(s) are visible")
    devices = devices[:num_devices]
  return Mesh(np.asarray(devices), (DATA_AXIS,))


def replicated(mesh: Mesh) -> NamedSharding:
  """The sharding of a state: a full copy on every device of `mesh`."""
  return NamedSharding(mesh, P())


def batch_sharded(mesh: Mesh) -> NamedSharding:
  """The sharding of a batch: its leading axis `[B, ...]` split over the `'data'` axis."""
  return NamedSharding(mesh, P(DATA_AXIS))


def check_batch_size(batch_size: int, mesh: Mesh) -> None:
  """Global batch sizes must split evenly over devices and processes."""
  if batch_size % mesh.size:
    raise ValueError(
        f"batch size {batch_size} is not divisible by the {mesh.size} devices of the "
        f"'{DATA_AXIS}' mesh axis; use a multiple of {mesh.size}")


def process_slice(global_batch_size: int) -> slice:
  """The rows of a global batch that this process loads."""
  per_process = global_batch_size // jax.process_count()
  start = jax.process_index() * per_process
  return slice(start, start + per_process)


def shard_batch(local_batch: Mapping[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
  """Process-local numpy rows -> global arrays sharded along the data axis.

  Every process passes the same number of rows (`process_slice`), so the global batch
  has `rows * process_count` rows, which must split evenly over the devices
  (`check_batch_size`: a `ValueError` naming the sizes, not XLA's tiling error).
  """
  sharding = batch_sharded(mesh)
  out = {}
  for k, v in local_batch.items():
    v = np.asarray(v)
    check_batch_size(len(v) * jax.process_count(), mesh)
    out[k] = jax.make_array_from_process_local_data(sharding, v)
  return out


def replicate(tree: Any, mesh: Mesh) -> Any:
  """`tree` (any pytree of arrays) placed on every device of `mesh` (`replicated`)."""
  return jax.device_put(tree, replicated(mesh))


def build_train_step(objective: Objective, mesh: Mesh) -> Callable:
  """`step(state, batch, rng) -> (state, metrics)`, jitted, state donated.

  `batch` is `{name: [B, ...]}` sharded along the `'data'` axis (`shard_batch`); the
  state is replicated and its buffers are reused for the new state.
  """
  repl, data = replicated(mesh), batch_sharded(mesh)
  return jax.jit(objective.update, in_shardings=(repl, data, repl),
                 out_shardings=(repl, repl), donate_argnums=(0,))


def build_predict(objective: Objective, mesh: Mesh) -> Callable:
  """`predict(state, x [B, ...]) -> y_soft [B, ...]`, jitted, with `x` and the output
  sharded by rows (`predict_in_batches` runs it over a whole split)."""
  repl, data = replicated(mesh), batch_sharded(mesh)
  return jax.jit(objective.predict, in_shardings=(repl, data), out_shardings=data)


def build_init(objective: Objective, mesh: Mesh) -> Callable:
  """`init(rng, example_batch) -> state` placed replicated on the mesh."""
  repl = replicated(mesh)
  return jax.jit(objective.init, out_shardings=repl)


def build_init_from(objective: Objective, mesh: Mesh) -> Callable:
  """`init_from(prev_state, rng, example_batch) -> state`: a stage continuing the last."""
  if objective.init_from is None:
    raise ValueError("this objective cannot continue a previous training stage: it has no "
                     "`init_from`; make it the first stage")
  repl = replicated(mesh)
  return jax.jit(objective.init_from, out_shardings=repl)
