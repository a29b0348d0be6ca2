"""A `jax.profiler` trace of chosen training steps, written into the run's workdir."""

from collections.abc import Sequence
import os
import shutil
import tempfile
from typing import Any
import weakref

from absl import logging
from etils import epath
import jax

from energynets.train import storage

# The folder of a workdir that holds the traces (TensorBoard's profile plugin reads it:
# `tensorboard --logdir=WORKDIR/profile`).
PROFILE_DIR = "profile"


def parse_profile_steps(value: str | Sequence[int] | None) -> tuple[int, int] | None:
  """`LoopOptions.profile_steps` as `(start, stop)`, or None when off.

  Args:
    value: `"start:stop"`, a pair `(start, stop)`, or `""` / None (off); steps are the
      run's step counts, `0 <= start < stop`.

  Returns:
    `(start, stop)` or None.

  Raises:
    ValueError: one line naming the value and the expected form.
  """
  if value is None or value == "":
    return None
  expected = f"profile_steps must be 'start:stop' with 0 <= start < stop, got {value!r}"
  if isinstance(value, str):
    parts = value.split(":")
  elif isinstance(value, (list, tuple)):
    parts = list(value)
  else:
    raise ValueError(expected)
  if len(parts) != 2:
    raise ValueError(expected)
  try:
    start, stop = (int(str(p).strip()) for p in parts)
  except ValueError:
    raise ValueError(expected) from None
  if not 0 <= start < stop:
    raise ValueError(expected)
  return start, stop


class StepProfiler:
  """Traces the steps from `start` to `stop` of a training loop with `jax.profiler`.

  The loop calls `before(step)` before it dispatches the update that takes the step
  count from `step` to `step + 1`, and `after(step + 1, outputs)` once it has; the trace
  starts at the first update in the range (also after a resume inside it) and stops
  when the count reaches `stop`, after `outputs` are computed, so the last step's
  device work is in it. It goes to `workdir/profile` (`workdir/profile/process_<p>` in
  a multi-process run), in the `plugins/profile/<time>/` layout TensorBoard reads; for
  a workdir that is a URL, to a local temporary folder first, then copied.
  """

  def __init__(self, steps: tuple[int, int] | None, workdir: str | os.PathLike):
    """Traces nothing until `before` reaches the first step to trace.

    Args:
      steps: `(start, stop)` (`parse_profile_steps`), or None to trace nothing.
      workdir: the run's workdir, a local path or a URL.
    """
    self._steps = steps
    self._target = storage.workdir_path(workdir) / PROFILE_DIR
    if jax.process_count() > 1:
      self._target = self._target / f"process_{jax.process_index()}"
    self._local: str | None = None
    self._state = {"tracing": False}

  def before(self, step: int) -> None:
    """Starts the trace if the update from `step` is the first one to trace."""
    if self._steps is None or self._state["tracing"] or self._local is not None:
      return
    start, stop = self._steps
    if not start <= step < stop:
      return
    if storage.is_local(os.fspath(self._target)):
      self._local = os.fspath(self._target)
    else:
      self._local = tempfile.mkdtemp(prefix="energynets-profile-")
    jax.profiler.start_trace(self._local)
    self._state["tracing"] = True
    # A loop that raised leaves no trace running once this profiler is collected.
    weakref.finalize(self, _stop_if_tracing, self._state)
    logging.info("profiling steps %d to %d into %s", step, stop, self._target)

  def after(self, done: int, outputs: Any) -> None:
    """Stops and writes the trace once `done` (the step count now) reaches `stop`.

    Args:
      done: the number of updates run so far.
      outputs: what the update returned; waited for before the trace stops.
    """
    if self._state["tracing"] and self._steps is not None and done >= self._steps[1]:
      jax.block_until_ready(outputs)
      self.close()

  def close(self) -> None:
    """Stops a trace in progress (the loop ended inside the range) and writes it."""
    if not self._state["tracing"]:
      return
    _stop_if_tracing(self._state)
    assert self._local is not None, "set where the trace started"
    if self._local != os.fspath(self._target):
      _copy_runs(epath.Path(self._local), self._target)
      shutil.rmtree(self._local, ignore_errors=True)
    logging.info("wrote the profile to %s", self._target)


def _stop_if_tracing(state: dict) -> None:
  if state["tracing"]:
    state["tracing"] = False
    jax.profiler.stop_trace()


def _copy_runs(local: epath.Path, target: epath.Path) -> None:
  """Copies each trace folder `plugins/profile/<time>` of `local` into `target`, next to
  the traces an earlier attempt of the run wrote there."""
  runs = local / "plugins" / "profile"
  for run in runs.iterdir():
    storage.copy_tree(run, target / "plugins" / "profile" / run.name)
