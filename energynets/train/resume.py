"""The checkpoint/resume part of `fit`: the latest state in `workdir/checkpoints`.

A run killed at any point reruns with the same `fit` call: it restores the newest
committed checkpoint (the state and the selection's bookkeeping), drops the metrics
written after it, and goes on from its step with the same batches and keys.
"""

from typing import Any

from absl import logging

from energynets.train.checkpoint import Checkpointer
from energynets.train.writers import MetricWriter

__all__ = ["LatestCheckpoints"]


class LatestCheckpoints:
  """The latest checkpoints of one `fit`, saved every `every` steps and at the end.

  Args:
    directory: where they go (`workdir/checkpoints`).
    every: save every this many steps.
    async_save: write in the background (`Checkpointer`).
  """

  def __init__(self, directory: Any, every: int, async_save: bool = True):
    self.checkpointer = Checkpointer(directory, async_save=async_save)
    self.directory, self.every = self.checkpointer.directory, every

  def resume(self, state: Any, writer: MetricWriter) -> tuple[Any, dict | None, int | None]:
    """The newest checkpoint's state (laid out like `state`), its meta and its step, with
    the metrics after it dropped from `writer`; `(state, None, None)` without one, every
    metric dropped (those of a run killed before its first checkpoint, which starts
    again)."""
    step = self.checkpointer.latest_step()
    if step is None:
      writer.truncate_after(-1)
      return state, None, None
    state, meta = self.checkpointer.restore(step, state)
    writer.truncate_after(step)
    logging.info("resumed from %s at step %d", self.directory, step)
    return state, meta, step

  def due(self, step: int, is_last: bool) -> bool:
    """Whether the state after `step` is saved on schedule."""
    return step % self.every == 0 or is_last

  def save(self, step: int, state: Any, meta: dict) -> None:
    """Saves `state` and `meta` as `step`."""
    self.checkpointer.save(step, state, meta)

  def close(self) -> None:
    """Waits for the save in flight and releases the checkpointer."""
    self.checkpointer.close()
