"""The one step builder: jitted objective updates over a `('data',)` device mesh.

State is replicated, the batch is sharded along its leading axis, and the state
argument is donated. With a replicated state and a sharded batch, XLA's SPMD
partitioner inserts the gradient all-reduce itself, so objectives stay written for
a single device. Multi-host runs use the same code: each process hands in its own
slice of the global batch (`jax.make_array_from_process_local_data`).

For label spaces too large for one device, `make_mesh(model_parallelism=M)` gives a
`('data', 'model')` mesh: `label_axis_shardings` splits every state leaf with an axis
of the label dimension L over `'model'` (an energy's output layer, its measurement
matrix, their optimizer moments), the builders take it as the state's sharding and
trace under the mesh, and gradient-based inference keeps its `[B, L]` iterates split
by labels (`energynets.sharding.constrain_label_axis`). XLA partitions the rest.
"""

from collections.abc import Callable
from collections.abc import Mapping
from typing import Any
from typing import Protocol

import jax
from jax.sharding import Mesh
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
import numpy as np

from energynets.objectives.base import Objective
from energynets.sharding import DATA_AXIS
from energynets.sharding import MODEL_AXIS


def make_mesh(num_devices: int | None = None, model_parallelism: int = 1) -> Mesh:
  """The training mesh over the first `num_devices` devices (all by default).

  Args:
    num_devices: how many of `jax.devices()` to use (None: all); in a multi-process
      run all of them, since each process feeds its own devices.
    model_parallelism: M, the devices that share one copy of the model by splitting
      its label dimension. 1 gives the 1-D `('data',)` mesh; M > 1 a
      `('data', 'model')` mesh of shape `(num_devices / M, M)`, whose model groups
      are consecutive devices (so, on several hosts, M must divide each host's
      device count and a group never spans hosts).

  Returns:
    A `Mesh` with axes `(DATA_AXIS,)` or `(DATA_AXIS, MODEL_AXIS)`.
  """
  devices = jax.devices()
  if num_devices is not None:
    if not 1 <= num_devices <= len(devices):
      raise ValueError(f"num_devices={num_devices} but {len(devices)} device(s) are visible")
    if jax.process_count() > 1 and num_devices != len(devices):
      # Every process feeds its rows of each batch to its own devices: a mesh without
      # some process's devices has nowhere to put them.
      raise ValueError(
        f"num_devices={num_devices} leaves out devices of the {jax.process_count()} "
        f"processes ({len(devices)} devices in all): a multi-process run trains on every "
        f"device; use num_devices={len(devices)} or all (None, 0 in a config)"
      )
    devices = devices[:num_devices]
  if model_parallelism == 1:
    return Mesh(np.asarray(devices), (DATA_AXIS,))
  if model_parallelism < 1 or len(devices) % model_parallelism:
    raise ValueError(
      f"model_parallelism={model_parallelism} must be a positive divisor of "
      f"the {len(devices)} devices used"
    )
  if jax.process_count() > 1 and jax.local_device_count() % model_parallelism:
    raise ValueError(
      f"model_parallelism={model_parallelism} must divide the "
      f"{jax.local_device_count()} devices of each host"
    )
  grid = np.asarray(devices).reshape(len(devices) // model_parallelism, model_parallelism)
  return Mesh(grid, (DATA_AXIS, MODEL_AXIS))


def data_parallelism(mesh: Mesh) -> int:
  """The size of `mesh`'s `'data'` axis: how many ways a batch is split."""
  return mesh.shape[DATA_AXIS]


def model_parallelism(mesh: Mesh) -> int:
  """The size of `mesh`'s `'model'` axis (1 without one): how many ways the label
  dimension of the state is split."""
  return mesh.shape.get(MODEL_AXIS, 1)


def replicated(mesh: Mesh) -> NamedSharding:
  """The sharding of a state: a full copy on every device of `mesh`."""
  return NamedSharding(mesh, P())


def batch_sharded(mesh: Mesh) -> NamedSharding:
  """The sharding of a batch: its leading axis `[B, ...]` split over the `'data'` axis."""
  return NamedSharding(mesh, P(DATA_AXIS))


def check_batch_size(batch_size: int, mesh: Mesh) -> None:
  """Global batch sizes must split evenly over devices and processes."""
  ways = data_parallelism(mesh)
  if batch_size % ways:
    raise ValueError(
      f"batch size {batch_size} is not divisible by the {ways} devices of the "
      f"'{DATA_AXIS}' mesh axis; use a multiple of {ways}"
    )


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


def label_axis_shardings(state: Any, mesh: Mesh, label_dim: int) -> Any:
  """The shardings of a state whose label dimension is split over the `'model'` axis.

  Every leaf with an axis of size `label_dim` is split along it (the last such axis),
  e.g. an output kernel `[H, L]`, its bias `[L]`, a measurement matrix `[L, K]` and the
  optimizer moments shaped like them; every other leaf is replicated. The rule goes by
  size only, so a hidden width or input dimension that happens to equal L is split
  too, which changes the layout and not the results.

  Args:
    state: the state or its abstract shapes (`jax.eval_shape(objective.init, ...)`).
    mesh: the training mesh; without a `'model'` axis of size > 1 every leaf is
      replicated.
    label_dim: L.

  Returns:
    A pytree of `NamedSharding`s shaped like `state`.
  """
  ways = model_parallelism(mesh)
  if ways > 1 and label_dim % ways:
    raise ValueError(
      f"the label dimension {label_dim} is not divisible by model_parallelism={ways}"
    )

  def sharding(leaf):
    shape = np.shape(leaf)
    axes = [i for i, size in enumerate(shape) if size == label_dim]
    if ways == 1 or not axes:
      return replicated(mesh)
    spec = [None] * len(shape)
    spec[axes[-1]] = MODEL_AXIS
    return NamedSharding(mesh, P(*spec))

  return jax.tree.map(sharding, state)


class Jitted(Protocol):
  """What the `build_*` functions return: a jitted function, which can also be lowered
  ahead of time (`step.lower(*args).compile()`)."""

  def __call__(self, *args: Any, **kwargs: Any) -> Any: ...

  def lower(self, *args: Any, **kwargs: Any) -> Any: ...


class _TracedOnMesh:
  """A jitted function called (and lowered) under `jax.set_mesh(mesh)`, so that the
  sharding constraints inside it (`energynets.sharding.constrain_label_axis`) see the
  mesh's axes."""

  def __init__(self, jitted: Jitted, mesh: Mesh):
    self._jitted, self._mesh = jitted, mesh

  def __call__(self, *args, **kwargs):
    with jax.set_mesh(self._mesh):
      return self._jitted(*args, **kwargs)

  def lower(self, *args, **kwargs):
    with jax.set_mesh(self._mesh):
      return self._jitted.lower(*args, **kwargs)


def _on_mesh(jitted: Jitted, mesh: Mesh) -> Jitted:
  return _TracedOnMesh(jitted, mesh) if MODEL_AXIS in mesh.axis_names else jitted


def build_train_step(objective: Objective, mesh: Mesh, state_sharding: Any = None) -> Jitted:
  """`step(state, batch, rng) -> (state, metrics)`, jitted, state donated.

  `batch` is `{name: [B, ...]}` sharded along the `'data'` axis (`shard_batch`); the
  state's buffers are reused for the new state.

  Args:
    objective: the method.
    mesh: the training mesh (`make_mesh`).
    state_sharding: the state's sharding, one for all leaves or a pytree of them
      (`label_axis_shardings`); default: replicated.

  Returns:
    The jitted step.
  """
  repl, data = replicated(mesh), batch_sharded(mesh)
  state = repl if state_sharding is None else state_sharding
  return _on_mesh(
    jax.jit(
      objective.update,
      in_shardings=(state, data, repl),
      out_shardings=(state, repl),
      donate_argnums=(0,),
    ),
    mesh,
  )


def build_predict(objective: Objective, mesh: Mesh, state_sharding: Any = None) -> Jitted:
  """`predict(state, x [B, ...]) -> y_soft [B, ...]`, jitted, with `x` and the output
  sharded by rows (`predict_in_batches` runs it over a whole split).

  `state_sharding` as in `build_train_step`; default: replicated on a `('data',)` mesh,
  and on a mesh with a `'model'` axis wherever the state passed in lies.
  """
  repl, data = replicated(mesh), batch_sharded(mesh)
  state = state_sharding
  if state is None and MODEL_AXIS not in mesh.axis_names:
    state = repl
  return _on_mesh(jax.jit(objective.predict, in_shardings=(state, data), out_shardings=data), mesh)


def build_init(objective: Objective, mesh: Mesh, state_sharding: Any = None) -> Jitted:
  """`init(rng, example_batch) -> state` placed on the mesh by `state_sharding` (as in
  `build_train_step`; default: replicated)."""
  state = replicated(mesh) if state_sharding is None else state_sharding
  return _on_mesh(jax.jit(objective.init, out_shardings=state), mesh)


def build_init_from(objective: Objective, mesh: Mesh, state_sharding: Any = None) -> Jitted:
  """`init_from(prev_state, rng, example_batch) -> state`: a stage continuing the last,
  placed by `state_sharding` (as in `build_init`)."""
  init_from = _init_from(objective)
  state = replicated(mesh) if state_sharding is None else state_sharding
  return _on_mesh(jax.jit(init_from, out_shardings=state), mesh)


def _init_from(objective: Objective) -> Callable:
  if objective.init_from is None:
    raise ValueError(
      "this objective cannot continue a previous training stage: it has no "
      "`init_from`; make it the first stage"
    )
  return objective.init_from


def state_sharding_for(
  objective: Objective,
  mesh: Mesh,
  example_batch: Mapping[str, Any],
  label_dim: int | None,
  previous_state: Any = None,
) -> Any:
  """`label_axis_shardings` of the state that `build_init` (or, given `previous_state`,
  `build_init_from`) makes from `example_batch`; None (replicated) on a mesh without a
  `'model'` axis of size > 1, where no state needs to be traced."""
  if model_parallelism(mesh) == 1:
    return None
  if label_dim is None:
    raise ValueError("a mesh whose 'model' axis splits the state needs label_dim")
  key = jax.random.PRNGKey(0)
  if previous_state is None:
    shapes = jax.eval_shape(objective.init, key, example_batch)
  else:
    shapes = jax.eval_shape(_init_from(objective), previous_state, key, example_batch)
  return label_axis_shardings(shapes, mesh, label_dim)
