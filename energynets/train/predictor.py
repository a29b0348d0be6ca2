"""A run restored: `load_run(workdir)` -> a `Predictor` of soft outputs and labels.

`load_run` reads `<workdir>/run.json` (`energynets.train.run`), rebuilds the objective
(its recorded builder, or the one passed) and restores the checkpoint run.json names
onto a mesh of the devices here, split over a `'model'` axis as in training where the
devices allow.
"""

from collections.abc import Mapping
import math
from typing import Any

from etils import epath
import jax
import numpy as np

from energynets.objectives.base import Objective
from energynets.train import process_rows as process_rows_lib
from energynets.train import step as step_lib
from energynets.train import storage
from energynets.train.checkpoint import Checkpointer
from energynets.train.run import BuilderError
from energynets.train.run import RunNotFoundError
from energynets.train.run import abstract_state
from energynets.train.run import build_objective
from energynets.train.run import read_run

__all__ = ["decode", "load_run", "Predictor"]


class Predictor:
  """A trained run, restored: soft outputs (`predict`) and decoded labels (`labels`).

  It runs the objective's `predict` on rows as the model saw them in training; a task
  that evaluates other rows than a split's (segmentation's test-time crops) predicts
  whole splits through `experiments.predict.soft_predictions`.

  Attributes:
    objective: the run's `Objective`.
    state: the restored training state on `mesh`: replicated, or on a `('data',
      'model')` mesh with its label axes split (`step.label_axis_shardings`).
    mesh: the device mesh predictions run on (`load_run`).
    threshold: the decision threshold of `'threshold'` decoding.
    decoding: `'threshold'`, `'argmax'` or `'identity'` (`DECODINGS`).
    metadata: the whole run description (run.json).
  """

  def __init__(
    self, objective: Objective, state: Any, mesh: jax.sharding.Mesh, record: Mapping[str, Any]
  ):
    self.objective, self.state, self.mesh = objective, state, mesh
    self.metadata = dict(record)
    self.threshold = float(record["threshold"])
    self.decoding = record["decoding"]
    self._x_spec = record["arrays"]["x"]
    self._batch_size = int(record["predict_batch_size"])
    self._predict = step_lib.build_predict(objective, mesh)

  def predict(self, x: Any, batch_size: int | None = None) -> np.ndarray:
    """Soft outputs `[N, ...]` of inputs `x [N, ...]` (e.g. `[N, L]` in [0, 1]), as
    `Objective.predict` gives them.

    Args:
      x: rows shaped like the run's training inputs (the run's per-example shape; a
        packed sequence may have another length T).
      batch_size: rows per device batch call (default: the run's prediction batch),
        rounded up to a multiple of the number of devices.

    Returns:
      float numpy outputs, one row per row of `x`.
    """
    x = np.asarray(x, dtype=self._x_spec["dtype"])
    want = tuple(self._x_spec["shape"])
    if x.ndim != len(want) + 1 or (want and x.shape[-1] != want[-1]):
      raise ValueError(
        f"x has per-example shape {tuple(x.shape[1:])}; the run was trained on {want}"
      )
    if len(x) == 0:
      raise ValueError("x has no rows")
    # A multiple of the (global) device count, no larger than x needs.
    size = min(batch_size or self._batch_size, len(x))
    size = -(-size // self.mesh.size) * self.mesh.size
    return process_rows_lib.predict_in_batches(self._predict, self.state, x, size, self.mesh)

  def labels(self, x: Any, batch_size: int | None = None) -> np.ndarray:
    """Decoded labels of `x [N, ...]` (`decode` of `predict(x)`): `'threshold'`: int32 0/1
    of `y_soft >= threshold`; `'argmax'`: int32 class indices of the last axis (`[N, T]`
    per token); `'identity'`: the soft outputs themselves."""
    return decode(self.predict(x, batch_size), self.decoding, self.threshold)


def decode(y_soft: np.ndarray, decoding: str, threshold: float = 0.5) -> np.ndarray:
  """Labels of soft outputs by `decoding` (see `Predictor.labels`)."""
  if decoding == "threshold":
    return (y_soft >= threshold).astype(np.int32)
  if decoding == "argmax":
    return np.argmax(y_soft, axis=-1).astype(np.int32)
  return y_soft


def load_run(
  workdir: str | epath.PathLike,
  objective: Objective | None = None,
  num_devices: int | None = None,
  model_parallelism: int | None = None,
) -> Predictor:
  """Restores the run in `workdir` (written by `fit` or `experiments.main`) as a predictor.

  The checkpoint restores onto any mesh: a run trained with its label dimension split
  over M devices (`make_mesh(model_parallelism=M)`) loads on however many devices are
  here, split the same way where they allow it.

  Args:
    workdir: the run's directory, holding run.json and its checkpoints.
    objective: the run's objective; default: rebuilt by calling the builder run.json
      records (`fit(builder=...)`; every `experiments.main` run records one).
    num_devices: devices to predict on (default: all); any count gives the same
      outputs, to float32 rounding.
    model_parallelism: how many of those devices split the state's label axes (a
      `('data', 'model')` mesh, as in training); default: the largest that divides the
      run's training M, the device count and each host's device count (1, a
      replicated state, for a run trained without a split).

  Returns:
    A `Predictor` holding the state the run reports results from.

  Raises:
    RunNotFoundError: no run.json in `workdir`, or its checkpoint is missing.
    RunFormatError: run.json of another format version.
    BuilderError: no builder recorded and no `objective` given, or the recorded
      builder does not import.
  """
  record = read_run(workdir)
  checkpoint = record["checkpoint"]
  directory = storage.workdir_path(workdir) / checkpoint["directory"]
  step = int(checkpoint["step"])
  if not (directory / str(step)).exists():
    raise RunNotFoundError(f"run in {workdir}: checkpoint step {step} is missing from {directory}")
  if objective is None:
    builder = record.get("builder")
    if not builder:
      raise BuilderError(
        f"the run in {workdir} records no builder: pass "
        "load_run(workdir, objective=...) or train with "
        "fit(..., builder='package.module:function')"
      )
    objective = build_objective(builder)
  metadata = record.get("metadata") or {}
  if model_parallelism is None:
    devices = len(jax.devices()) if num_devices is None else num_devices
    model_parallelism = math.gcd(
      int(metadata.get("model_parallelism", 1)), devices, jax.local_device_count()
    )
  mesh = step_lib.make_mesh(num_devices, model_parallelism)
  abstract = abstract_state(objective, record["arrays"], record["init_batch_size"])
  if step_lib.model_parallelism(mesh) > 1:
    # fit's default: the labels are the last axis of y.
    label_dim = (
      metadata.get("label_dim") or (record["arrays"].get("y", {}).get("shape") or [None])[-1]
    )
    if not label_dim:
      raise ValueError(
        f"the run in {workdir} records no label dimension to split over "
        f"model_parallelism={model_parallelism}: pass model_parallelism=1"
      )
    shardings = step_lib.label_axis_shardings(abstract, mesh, int(label_dim))
  else:
    shardings = jax.tree.map(lambda _: step_lib.replicated(mesh), abstract)
  abstract = jax.tree.map(
    lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, shardings
  )
  checkpointer = Checkpointer(str(directory))
  try:
    state, _ = checkpointer.restore(step, abstract)
  finally:
    checkpointer.close()
  return Predictor(objective, state, mesh, record)
