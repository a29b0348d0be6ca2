"""Builds the training batches of the coming steps while the current step runs."""

from collections.abc import Callable
import queue
import threading
from typing import Any
import weakref

# How often a producer blocked on a full queue checks whether it should stop (seconds).
_POLL_SECONDS = 0.1


class Prefetcher:
  """`batch_at(step)` for the steps `start, start + 1, ..., stop - 1`, asked for in that
  order, built up to `depth` steps ahead by a background thread.

  The thread calls `batch_at` for each step in turn, so the batches are those of
  calling it in the loop, bit for bit; building one (gathering its rows on the host,
  `step.shard_batch`'s transfer to the devices) overlaps the steps still running.
  An error of `batch_at(s)` is raised by the call for step s, as without prefetching.

  Attributes:
    depth: the batches built ahead (0: each is built when it is asked for, no thread).
  """

  def __init__(self, batch_at: Callable[[int], Any], start: int, stop: int, depth: int):
    """Starts building the batch of step `start` (with `depth` > 0).

    Args:
      batch_at: `step -> batch`, a pure function of the step.
      start: the first step to be asked for.
      stop: one past the last step.
      depth: how many batches to build ahead; 0 builds each one on request.
    """
    if depth < 0:
      raise ValueError(f"prefetch depth must be 0 or more, got {depth}")
    self.depth = depth
    self._batch_at = batch_at
    self._next = start
    self._stop = stop
    self._thread = None
    if depth == 0 or start >= stop:
      return
    self._queue: queue.Queue = queue.Queue(maxsize=depth)
    self._stopping = threading.Event()
    # The thread holds no reference to the prefetcher, so one dropped without `close`
    # (its loop raised) is collected, and that stops the thread.
    weakref.finalize(self, self._stopping.set)
    self._thread = threading.Thread(
      target=_produce,
      args=(batch_at, start, stop, self._queue, self._stopping),
      name="energynets-prefetch",
      daemon=True,
    )
    self._thread.start()

  def __call__(self, step: int) -> Any:
    """The batch of `step`, which must be the step after the previous call's.

    Args:
      step: the step whose batch to return.

    Returns:
      `batch_at(step)`.
    """
    if step != self._next or step >= self._stop:
      raise ValueError(
        f"prefetched batches go in order: asked for step {step}, the next "
        f"is {self._next} (of the steps before {self._stop})"
      )
    self._next += 1
    if self._thread is None:
      return self._batch_at(step)
    got_step, batch, error = self._queue.get()
    if error is not None:
      self.close()
      raise error
    assert got_step == step, (got_step, step)
    return batch

  def close(self) -> None:
    """Stops building batches; the ones built ahead are dropped."""
    if self._thread is None:
      return
    self._stopping.set()
    self._thread.join()
    self._thread = None


def _produce(
  batch_at: Callable[[int], Any], start: int, stop: int, out: queue.Queue, stopping: threading.Event
) -> None:
  """`Prefetcher`'s thread: puts `(step, batch, None)` for each step in turn, or
  `(step, None, error)` and ends, until `stopping` is set."""
  for step in range(start, stop):
    item: tuple[int, Any, BaseException | None]
    try:
      item = (step, batch_at(step), None)
    except BaseException as e:  # pylint: disable=broad-except
      item = (step, None, e)  # raised where the step asks for its batch
    while not stopping.is_set():
      try:
        out.put(item, timeout=_POLL_SECONDS)
        break
      except queue.Full:
        continue
    if stopping.is_set() or item[2] is not None:
      return
