"""Metric writers: JSONL in the workdir (the machine-readable log) and TensorBoard events."""

from collections.abc import Mapping
import json
import logging as logging_std
import os
import shutil
import tempfile
import time
import weakref

from etils import epath
import jax

from energynets.train import storage


class MetricWriter:
  """Writes `{"step": s, "<prefix>/<name>": value, ...}` records; only process 0 writes.

  Records go to `workdir/metrics.jsonl` and, with `tensorboard`, to TensorBoard event
  files under `workdir/tensorboard`. `workdir` may be local or any `etils.epath` URL
  (`gs://bucket/run`). Object stores cannot append to a file, so on a non-local
  workdir the writer keeps the records and rewrites metrics.jsonl whole at every
  `write` (a record is in the workdir when `write` returns, as locally). TensorBoard
  writes with local file APIs, so for a non-local workdir its events go to a local
  temporary folder, copied to `workdir/tensorboard` at most every `sync_every_s`
  seconds and at `close`. `close` removes that folder; for a run that raised before
  `close`, so does the writer's garbage collection or the interpreter's exit.

  Args:
    workdir: the run's directory (created if missing).
    tensorboard: also write TensorBoard event files.
    sync_every_s: on a non-local workdir, the longest time TensorBoard events written
      by `write` stay local before they are copied to the workdir.

  Attributes:
    path: the `metrics.jsonl` file (an `epath.Path`).
  """

  def __init__(
    self, workdir: str | os.PathLike, *, tensorboard: bool = True, sync_every_s: float = 60.0
  ):
    self._enabled = jax.process_index() == 0
    run_dir = storage.workdir_path(workdir)
    self.path: epath.Path = run_dir / "metrics.jsonl"
    self._local = storage.is_local(run_dir)
    self._records: list[str] | None = None  # a non-local workdir's records, once read
    self._tb = None
    # A non-local workdir's events: written to `_tb_local`, copied to `_tb_remote`.
    self._tb_local: str | None = None
    self._tb_remote: epath.Path | None = None
    self._sync_every_s, self._synced_at = sync_every_s, time.monotonic()
    if not self._enabled:
      return
    run_dir.mkdir(parents=True, exist_ok=True)
    if tensorboard:
      from tensorboardX import SummaryWriter  # pylint: disable=g-import-not-at-top

      events = run_dir / "tensorboard"
      if not self._local:
        self._tb_remote = events
        self._tb_local = tempfile.mkdtemp(prefix="energynets_tensorboard_")
        self._remove_local = weakref.finalize(
          self, shutil.rmtree, self._tb_local, ignore_errors=True
        )
        events = self._tb_local
      self._tb = SummaryWriter(os.fspath(events))

  def _read_records(self) -> list[str]:
    if self._records is None:
      text = self.path.read_text() if self.path.exists() else ""
      self._records = [line + "\n" for line in text.splitlines() if line.strip()]
    return self._records

  def truncate_after(self, step: int) -> None:
    """Drops records past `step`: after a resume they would be written again."""
    if not self._enabled or not self.path.exists():
      return
    kept = [line for line in self._read_records() if json.loads(line)["step"] <= step]
    self.path.write_text("".join(kept))
    self._records = None if self._local else kept

  def write(self, step: int, scalars: Mapping[str, float]) -> None:
    """Appends one record `{"step": step, **scalars}` (and the scalars to TensorBoard)."""
    if not self._enabled:
      return
    record = {"step": int(step), **{k: float(v) for k, v in scalars.items()}}
    line = json.dumps(record) + "\n"
    if self._local:
      with self.path.open("a") as f:
        f.write(line)
    else:
      records = self._read_records()
      records.append(line)
      self.path.write_text("".join(records))
    if self._tb is not None:
      for k, v in scalars.items():
        # TensorBoard tags may not contain '@' ("example_f1@0.5").
        self._tb.add_scalar(k.replace("@", "_at_"), float(v), int(step))
      if self._tb_remote is not None and (time.monotonic() - self._synced_at >= self._sync_every_s):
        self._sync_tensorboard()

  def _sync_tensorboard(self) -> None:
    """Copies the local event files of a non-local workdir to `workdir/tensorboard`."""
    assert self._tb is not None and self._tb_local is not None and self._tb_remote is not None
    self._tb.flush()
    self._tb_remote.mkdir(parents=True, exist_ok=True)
    for name in sorted(os.listdir(self._tb_local)):
      with open(os.path.join(self._tb_local, name), "rb") as f:
        (self._tb_remote / name).write_bytes(f.read())
    self._synced_at = time.monotonic()

  def close(self) -> None:
    """Flushes TensorBoard (copying its events to a non-local workdir) and closes it."""
    if self._tb is None:
      return
    if self._tb_remote is not None:
      self._sync_tensorboard()
    self._tb.close()
    self._tb = None
    if self._tb_local is not None:
      self._remove_local()


class _DropVerboseLibraryInfo(logging_std.Filter):
  def filter(self, record: logging_std.LogRecord) -> bool:
    return record.levelno >= logging_std.WARNING or not any(
      part in record.pathname for part in _VERBOSE_LIBRARIES
    )


_VERBOSE_LIBRARIES = (f"{os.sep}orbax{os.sep}", f"{os.sep}etils{os.sep}")


def quiet_library_logs() -> None:
  """Keeps INFO logs for the progress lines; drops orbax's per-save chatter below WARNING."""
  for handler in logging_std.getLogger().handlers + logging_std.getLogger("absl").handlers:
    if not any(isinstance(f, _DropVerboseLibraryInfo) for f in handler.filters):
      handler.addFilter(_DropVerboseLibraryInfo())
  logger = logging_std.getLogger("absl")
  if not any(isinstance(f, _DropVerboseLibraryInfo) for f in logger.filters):
    logger.addFilter(_DropVerboseLibraryInfo())
