"""Orbax checkpoints of the training state plus the trainer's JSON bookkeeping."""

import json
import os
import re
import threading
from typing import Any

from absl import logging
from etils import epath
import jax
import orbax.checkpoint as ocp

from energynets.train import storage

# The orbax manager of each directory with a save of this process that may be in
# flight, so that a new Checkpointer there first waits for it: a `fit` that raised is
# often resumed in the same process, after its own Checkpointer was dropped.
_IN_FLIGHT: dict[str, ocp.CheckpointManager] = {}
_IN_FLIGHT_LOCK = threading.Lock()


class Checkpointer:
  """Saves `(state pytree, meta dict)` under `directory/<step>`; keeps the newest `max_to_keep`.

  Checkpoints are written by every process (orbax coordinates multi-host writes so
  the files exist once) and restore onto whatever sharding the target carries, so a
  run may resume on a different device count.

  A checkpoint is committed atomically (written under `<step>.orbax-checkpoint-tmp-*`,
  then renamed; on GCS marked by a commit file), and a step older than the newest
  `max_to_keep` is deleted only after the newer one is committed, so a process killed
  at any moment leaves the previous complete checkpoint or the new complete one, and
  `latest_step` in a later process ignores the unfinished folder.

  Attributes:
    directory: the checkpoint directory, an absolute `epath.Path` (local, mounted, or
      a URL such as `gs://bucket/run/checkpoints`).
  """

  def __init__(self, directory: str | os.PathLike, max_to_keep: int = 1, async_save: bool = False):
    """Opens (and creates) the checkpoint directory.

    Args:
      directory: where the checkpoints are, a local path or a URL.
      max_to_keep: how many of the newest checkpoints to keep.
      async_save: `save` returns once the state is copied to host memory and writes
        it in the background; the next `save`, `restore`, `latest_step`, `wait` and
        `close` wait for that write. False: `save` returns once the checkpoint is
        committed.
    """
    self.directory: epath.Path = storage.workdir_path(directory)
    self._async_save = async_save
    with _IN_FLIGHT_LOCK:
      other = _IN_FLIGHT.pop(str(self.directory), None)
    if other is not None:
      try:
        other.wait_until_finished()
      except Exception as e:  # pylint: disable=broad-except
        # That save's own caller was told (or died); this one reads what was committed.
        logging.warning("an earlier save to %s failed: %s", self.directory, e)
    # Orbax names its multi-process barriers by step alone, so two directories saving
    # the same step (the latest and the best state) would meet at one barrier; every
    # process derives the same prefix from the directory's last folders.
    prefix = re.sub(r"[^A-Za-z0-9]+", "_", "/".join(self.directory.parts[-3:]))
    self._manager = ocp.CheckpointManager(
      self.directory,
      options=ocp.CheckpointManagerOptions(
        max_to_keep=max_to_keep,
        create=True,
        enable_async_checkpointing=True,
        multiprocessing_options=ocp.options.MultiprocessingOptions(barrier_sync_key_prefix=prefix),
      ),
      item_names=("state", "meta"),
    )

  def latest_step(self) -> int | None:
    """The newest committed step, or None without one."""
    self.wait()
    return self._manager.latest_step()

  def save(self, step: int, state: Any, meta: dict) -> None:
    """Saves `state` and `meta` (JSON-serializable) as `step`, after any save in flight.

    Args:
      step: the checkpoint's step.
      state: a pytree of arrays; with `async_save` it may be donated or changed once
        this returns (the device-to-host copy is done by then).
      meta: the trainer's bookkeeping; copied, so the caller may change it afterwards.

    Returns:
      None; with `async_save` the checkpoint is committed later (`wait`).
    """
    # A copy: the background write serializes `meta` after the caller has moved on.
    meta = json.loads(json.dumps(meta))
    args = ocp.args.Composite(state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta))
    try:
      self._manager.save(step, args=args, force=True)
    except ocp.checkpoint_manager.StepAlreadyExistsError:
      # A run resumed from an earlier checkpoint replays the steps a killed run had
      # saved; the replay's state replaces that one.
      self._manager.delete(step)
      self._manager.save(step, args=args, force=True)
    if self._async_save:
      with _IN_FLIGHT_LOCK:
        _IN_FLIGHT[str(self.directory)] = self._manager
    else:
      self.wait()

  def wait(self) -> None:
    """Returns once the last save is committed (at once without one in flight); a
    failed background write raises here."""
    self._manager.wait_until_finished()
    self._manager.check_for_errors()

  def restore(self, step: int, target: Any) -> tuple[Any, dict]:
    """The state and meta of `step`, the state laid out like `target` (its shapes,
    dtypes and shardings)."""
    self.wait()
    abstract = jax.tree_util.tree_map(ocp.utils.to_shape_dtype_struct, target)
    restored = self._manager.restore(
      step,
      args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract), meta=ocp.args.JsonRestore()
      ),
    )
    return restored["state"], dict(restored["meta"])

  def meta(self, step: int) -> dict:
    """The meta saved with `step`, without restoring its state."""
    self.wait()
    restored = self._manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
    return dict(restored["meta"])

  def close(self) -> None:
    """Waits for the save in flight, then releases orbax's resources."""
    self.wait()
    self._manager.close()
    with _IN_FLIGHT_LOCK:
      if _IN_FLIGHT.get(str(self.directory)) is self._manager:
        del _IN_FLIGHT[str(self.directory)]
