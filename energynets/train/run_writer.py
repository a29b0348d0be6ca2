"""The run writer of `fit`: `workdir/run.json` of a finished fit (`run.write_run`).

Outside the training loop: it reads only what training returned (the selected state,
its step, where and why training ended) and the data's shapes, and for 0/1 labels
tunes the decision threshold on the validation rows.
"""

from collections.abc import Mapping
import os
from typing import Any

import jax
from jax.experimental import multihost_utils
import numpy as np

from energynets import metrics as metrics_lib
from energynets.objectives.base import Objective
from energynets.train import run as run_lib
from energynets.train import step as step_lib
from energynets.train.process_rows import gather_process_rows
from energynets.train.process_rows import predict_in_batches
from energynets.train.process_rows import predict_process_rows

__all__ = ["write_fit_run"]


def write_fit_run(
  workdir: str | os.PathLike,
  objective: Objective,
  mesh: jax.sharding.Mesh,
  state: Any,
  train_arrays: Mapping[str, np.ndarray],
  *,
  batch_size: int,
  seed: int,
  validation: Mapping[str, np.ndarray] | None,
  builder: dict | None,
  checkpoint: dict,
  selected_step: int,
  final_step: int,
  stop_reason: str | None,
  sharded: bool = False,
  label_dim: int | None = None,
) -> None:
  """Writes `workdir/run.json` of a finished `fit`.

  Args:
    workdir: the fit's workdir.
    objective: the trained objective; `mesh`: the training mesh.
    state: the selected state (`FitResult.state`).
    train_arrays: the training rows; their shapes, and the decoding `y` implies.
    batch_size: the training batch size (the init and prediction batch of run.json).
    seed: the training seed (metadata).
    validation: `{"x", "y"}` rows whose predictions tune the decision threshold of 0/1
      labels (None: 0.5).
    builder: `run.builder_record(...)` or None.
    checkpoint: `run.checkpoint_record(...)` of the selected state.
    selected_step: the step of `state`.
    final_step: the number of steps trained; `stop_reason`: why before the last
      (`FitResult`).
    sharded: each process holds only its rows of `train_arrays` and `validation`.
    label_dim: the size of the axes split over the mesh's `'model'` axis (recorded with
      the split, for `load_run`).
  """
  decoding = run_lib.infer_decoding(train_arrays["y"]) if "y" in train_arrays else "identity"
  if sharded and jax.process_count() > 1:
    # Inferred from each process's own rows: all follow process 0, which writes the file.
    names = ("identity", "threshold", "argmax")
    decoding = names[int(multihost_utils.broadcast_one_to_all(np.int32(names.index(decoding))))]
  threshold, source = 0.5, "default"
  if decoding == "threshold" and validation is not None:
    # Every process takes part in the prediction; process 0 alone writes the file.
    predict = step_lib.build_predict(objective, mesh)
    predict_rows = predict_process_rows if sharded else predict_in_batches
    probs = predict_rows(predict, state, np.asarray(validation["x"]), batch_size, mesh)
    y = gather_process_rows(validation["y"]) if sharded else np.asarray(validation["y"])
    threshold = metrics_lib.tune_threshold(y.reshape(len(y), -1), probs.reshape(len(y), -1))
    source = "validation"
  if jax.process_index() != 0:
    return
  run_lib.write_run(
    workdir,
    arrays=run_lib.array_specs(train_arrays),
    checkpoint=checkpoint,
    init_batch_size=batch_size,
    predict_batch_size=batch_size,
    decoding=decoding,
    decoding_source="inferred from the training labels y",
    threshold=threshold,
    threshold_source=source,
    builder=builder,
    metadata={
      "writer": "energynets.fit",
      "selected_step": int(selected_step),
      "seed": seed,
      "final_step": final_step,
      "stop_reason": stop_reason,
      **run_lib.mesh_record(mesh, label_dim),
    },
  )
