"""Device-mesh axis names and the label-axis sharding constraint used inside inference.

A training mesh has a `'data'` axis (batch rows) and, for energies whose label
dimension is too large for one device, a `'model'` axis that splits the label axis L
(`energynets.train.make_mesh(model_parallelism=M)`). The step builders trace their
functions under such a mesh (`jax.set_mesh`), so that code deep inside an objective
can ask for its `[B, L]` arrays to stay split by labels (`constrain_label_axis`)
without being handed the mesh.
"""

import jax
from jax.sharding import PartitionSpec as P

DATA_AXIS = "data"
"""The name of the mesh axis that batches are sharded along."""

MODEL_AXIS = "model"
"""The name of the mesh axis that the label dimension of an energy is sharded along."""


def constrain_label_axis(y: jax.Array) -> jax.Array:
  """`y [B, L]` constrained to rows over `'data'` and labels over `'model'`, when traced
  under a mesh with a `'model'` axis of size > 1; otherwise `y` itself.

  XLA's partitioner would mostly infer this layout from label-sharded parameters; the
  constraint pins it on the loop carries of gradient-based inference, where a wrong
  guess would hold a full `[B, L]` copy per device. Arrays of another rank, and a label
  axis that does not split evenly, are left alone; a batch axis that does not split
  evenly over `'data'` stays unsplit.

  Args:
    y: an array; only a rank-2 `[B, L]` one is constrained.

  Returns:
    `y`, with a sharding constraint when one applies.
  """
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty or MODEL_AXIS not in mesh.axis_names or y.ndim != 2:
    return y
  sizes = dict(zip(mesh.axis_names, mesh.axis_sizes))
  model = sizes[MODEL_AXIS]
  if model == 1 or y.shape[1] % model:
    return y
  rows = DATA_AXIS if DATA_AXIS in sizes and y.shape[0] % sizes[DATA_AXIS] == 0 else None
  return jax.lax.with_sharding_constraint(y, P(rows, MODEL_AXIS))
