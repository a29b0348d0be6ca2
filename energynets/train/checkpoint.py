"""Orbax checkpoints of the training state plus the trainer's JSON bookkeeping."""

import os
from typing import Any

from etils import epath
import jax
import orbax.checkpoint as ocp

from energynets.train import storage


class Checkpointer:
  """Saves `(state pytree, meta dict)` under `directory/<step>`; keeps the newest `max_to_keep`.

  Checkpoints are written by every process (orbax coordinates multi-host writes so
  the files exist once) and restore onto whatever sharding the target carries, so a
  run may resume on a different device count.

  Attributes:
    directory: the checkpoint directory, an absolute `epath.Path` (local, mounted, or
      a URL such as `gs://bucket/run/checkpoints`).
  """

  def __init__(self, directory: str | os.PathLike, max_to_keep: int = 1):
    self.directory: epath.Path = storage.workdir_path(directory)
    self._manager = ocp.CheckpointManager(
        self.directory,
        options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True),
        item_names=("state", "meta"))

  def latest_step(self) -> int | None:
    return self._manager.latest_step()

  def save(self, step: int, state: Any, meta: dict) -> None:
    self._manager.save(step, args=ocp.args.Composite(
        state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)), force=True)
    # Waiting keeps "the checkpoint exists" true when the call returns, which the
    # kill-and-resume guarantee relies on.
    self._manager.wait_until_finished()

  def restore(self, step: int, target: Any) -> tuple[Any, dict]:
    abstract = jax.tree_util.tree_map(ocp.utils.to_shape_dtype_struct, target)
    restored = self._manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract), meta=ocp.args.JsonRestore()))
    return restored["state"], dict(restored["meta"])

  def close(self) -> None:
    self._manager.close()
