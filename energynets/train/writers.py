"""Metric writers: JSONL in the workdir (the machine-readable log) and TensorBoard events."""

import json
import logging as logging_std
import os
from typing import Mapping

import jax


class MetricWriter:
  """Writes `{"step": s, "<prefix>/<name>": value, ...}` records; only process 0 writes."""

  def __init__(self, workdir: str, *, tensorboard: bool = True):
    self._enabled = jax.process_index() == 0
    self.path = os.path.join(workdir, "metrics.jsonl")
    self._tb = None
    if not self._enabled:
      return
    os.makedirs(workdir, exist_ok=True)
    if tensorboard:
      from tensorboardX import SummaryWriter  # pylint: disable=g-import-not-at-top
      self._tb = SummaryWriter(os.path.join(workdir, "tensorboard"))

  def truncate_after(self, step: int) -> None:
    """Drops records past `step`: after a resume they would be written again."""
    if not self._enabled or not os.path.exists(self.path):
      return
    with open(self.path) as f:
      kept = [line for line in f if line.strip() and json.loads(line)["step"] <= step]
    with open(self.path, "w") as f:
      f.writelines(kept)

  def write(self, step: int, scalars: Mapping[str, float]) -> None:
    if not self._enabled:
      return
    record = {"step": int(step), **{k: float(v) for k, v in scalars.items()}}
    with open(self.path, "a") as f:
      f.write(json.dumps(record) + "\n")
    if self._tb is not None:
      for k, v in scalars.items():
        # TensorBoard tags may not contain '@' ("example_f1@0.5").
        self._tb.add_scalar(k.replace("@", "_at_"), float(v), int(step))

  def close(self) -> None:
    if self._tb is not None:
      self._tb.close()


class _DropVerboseLibraryInfo(logging_std.Filter):

  def filter(self, record: logging_std.LogRecord) -> bool:
    return record.levelno >= logging_std.WARNING or not any(
        part in record.pathname for part in _VERBOSE_LIBRARIES)


_VERBOSE_LIBRARIES = (f"{os.sep}orbax{os.sep}", f"{os.sep}etils{os.sep}")


def quiet_library_logs() -> None:
  """Keeps INFO logs for the progress lines; drops orbax's per-save chatter below WARNING."""
  for handler in logging_std.getLogger().handlers + logging_std.getLogger("absl").handlers:
    if not any(isinstance(f, _DropVerboseLibraryInfo) for f in handler.filters):
      handler.addFilter(_DropVerboseLibraryInfo())
  logger = logging_std.getLogger("absl")
  if not any(isinstance(f, _DropVerboseLibraryInfo) for f in logger.filters):
    logger.addFilter(_DropVerboseLibraryInfo())
