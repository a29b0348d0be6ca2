"""What the experiment binaries show: progress on stderr, the log in the workdir, results on stdout.

- Progress: tqdm bars on stderr while training (a bar per stage: step, loss, the best
  validation metric so far, ETA) and over the runs of `experiments.compare` or the
  trials of a search. Bars are drawn when stderr is a terminal (`--progress=on`: always);
  otherwise a run or a trial that ends is one plain line and training draws nothing
  (`--progress=off`: nothing at all). Processes that a command starts (trial workers)
  draw no bars.
- The log: absl's INFO stream (training steps, evaluations, what loads) goes to
  `WORKDIR/logs/<program>.log` (`log_to_workdir`); warnings and errors still reach
  stderr, and `--verbose` shows the INFO stream there too. JAX's report of the
  backends it did not find (`Unable to initialize backend 'tpu'`) stays in the file.
- Results: a few lines on stdout (`results_table`).
"""

from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Mapping
import contextlib
import logging as logging_std
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from typing import Any
from typing import TextIO

from absl import flags
from absl import logging
from etils import epath
import jax
import tqdm

from energynets.train import LoopOptions
from energynets.train import faults
from energynets.train import quiet_library_logs
from energynets.train import selection
from energynets.train import storage
from experiments import workdirs

PROGRESS_CHOICES = ("auto", "on", "off")
LOG_DIR = "logs"

# The binary's choice (`configure`); "auto" where no binary set one (a notebook, a test).
_progress = "auto"

# The titles of the work under way (`titled`), before each bar's own.
_titles: list[str] = []

# Loggers whose warnings about the platform (backends not found, a GPU without CUDA
# jaxlib) go to the log file only: they do not concern the run, whatever its devices.
_PLATFORM_LOGGERS = ("jax._src.xla_bridge",)


def define_flags() -> tuple[flags.FlagHolder, flags.FlagHolder]:
  """Defines `--verbose` and `--progress`; returns their holders in that order."""
  verbose = flags.DEFINE_bool(
    "verbose",
    False,
    "also print the INFO log (training steps, evaluations) on stderr; "
    f"it always goes to WORKDIR/{LOG_DIR}/<program>.log",
  )
  progress = flags.DEFINE_enum(
    "progress",
    "auto",
    PROGRESS_CHOICES,
    "progress bars on stderr: auto (when stderr is "
    "a terminal; otherwise a line per run or trial), on (always), off",
  )
  return verbose, progress


def configure(progress: str) -> None:
  """Sets how progress shows for the rest of the process.

  Args:
    progress: one of `PROGRESS_CHOICES` (`--progress`).
  """
  global _progress
  if progress not in PROGRESS_CHOICES:
    raise ValueError(f"progress must be one of {PROGRESS_CHOICES}, got {progress!r}")
  _progress = progress


def _mode() -> str:
  """`'bars'`, `'lines'` or `'off'` for this process."""
  if _progress == "off" or multiprocessing.parent_process() is not None:
    return "off"
  if _progress == "on":
    return "bars"
  isatty = getattr(sys.stderr, "isatty", None)
  return "bars" if isatty is not None and isatty() else "lines"


def _bar(**kwargs) -> tqdm.tqdm:
  # Nested under an open bar (compare's runs, a search's trials), a bar is cleared when it
  # closes; alone it stays, so each stage of a run leaves its last line.
  nested = bool(getattr(tqdm.tqdm, "_instances", ()))  # tqdm's open bars
  return tqdm.tqdm(file=sys.stderr, dynamic_ncols=True, leave=not nested, **kwargs)


class _TrainingBar:
  """`fit`'s progress callback drawing one tqdm bar."""

  def __init__(self, total: int, desc: str, select_metric: str | None, select_mode: str):
    self._bar = _bar(total=total, desc=desc, unit="step")
    self._metric, self._mode = select_metric, select_mode
    self._started = False
    self._loss: float | None = None
    self._best: tuple[float, int] | None = None

  def __call__(self, step: int, scalars: Mapping[str, float]) -> None:
    if not self._started:
      # The first call is the step training starts from (a resumed run's): the rate
      # and ETA count only the steps trained here.
      self._started = True
      self._bar.initial = self._bar.n = self._bar.last_print_n = step
      self._bar.refresh()
      return
    self._bar.update(step - self._bar.n)
    if not scalars:
      return
    self._loss = scalars.get("train/loss", self._loss)
    value = scalars.get(self._metric) if self._metric else None
    # The state `fit` would select: the same rule (`selection.replaces_best`).
    best_value, best_step = self._best if self._best is not None else (None, None)
    if value is not None and selection.replaces_best(value, best_value, best_step, self._mode):
      self._best = (value, step)
    postfix = [] if self._loss is None else [f"loss {self._loss:.4g}"]
    if self._best is not None and self._metric:  # a best needs a metric
      name = self._metric.split("/", 1)[-1]
      postfix.append(f"best {name} {self._best[0]:.4f} @{self._best[1]}")
    self._bar.set_postfix_str(", ".join(postfix), refresh=False)

  def close(self) -> None:
    self._bar.close()


@contextlib.contextmanager
def titled(title: str) -> Iterator[None]:
  """Puts `title` before the title of each training bar opened inside the block.

  Args:
    title: e.g. `trial 3 fold 2`.
  """
  _titles.append(title)
  try:
    yield
  finally:
    _titles.pop()


@contextlib.contextmanager
def training_progress(
  options: LoopOptions, desc: str = ""
) -> Iterator[Callable[[int, Mapping[str, float]], None] | None]:
  """The progress callback of one `fit` (`fit(..., progress=...)`): a bar of
  `options.steps` steps titled `desc` that shows the best `options.select_metric` so
  far, or None where no bar is drawn (`_mode`).

  Args:
    options: the `fit`'s options.
    desc: the bar's title, e.g. the stage's name (after those of `titled`); empty:
      `train`.

  Yields:
    The callback, or None.
  """
  if _mode() != "bars":
    yield None
    return
  bar = _TrainingBar(
    options.steps, " ".join([*_titles, desc or "train"]), options.select_metric, options.select_mode
  )
  try:
    yield bar
  finally:
    bar.close()


class Items:
  """Progress over a known number of items: the runs of a comparison, a search's trials.

  Bars mode: one bar (item k/N, a postfix, ETA over the items), with each `done` line
  above it. Lines mode: `start` prints `<label> k/N: <what>` and `done` its line. Both
  on stderr.

  Args:
    total: the number of items.
    label: what an item is (`run`, `trial`), the bar's title.
    echo: the stream that gets the `done` lines instead of stderr, whatever the mode
      (experiments.tune lists its trials on stdout).
  """

  def __init__(self, total: int, label: str, echo: TextIO | None = None):
    self.total, self.label, self.echo = total, label, echo
    self.count = 0
    self._started = time.monotonic()
    mode = _mode()
    self._bar = _bar(total=total, desc=label, unit=label) if mode == "bars" else None
    self._lines = mode == "lines"

  def start(self, what: str) -> None:
    """Item `count + 1` starts: `what` (e.g. `mlp:synthetic`) titles it."""
    if self._bar is not None:
      self._bar.set_description_str(f"{self.label} {self.count + 1}/{self.total} {what}")
    elif self._lines and self.echo is None:
      print(f"{self.label} {self.count + 1}/{self.total}: {what}", file=sys.stderr, flush=True)

  def eta(self) -> str:
    """The time left at the mean time per item so far (`?` before the first)."""
    if not self.count:
      return "?"
    seconds = (time.monotonic() - self._started) / self.count * (self.total - self.count)
    return format_seconds(seconds)

  def done(self, line: str = "", postfix: str = "") -> None:
    """Item `count + 1` ended; `line` reports it, `postfix` goes on the bar."""
    self.count += 1
    if self._bar is not None:
      self._bar.update(1)
      if postfix:
        self._bar.set_postfix_str(postfix)
      if line:
        self._bar.write(line, file=self.echo or sys.stderr)
    elif line and (self.echo is not None or self._lines):
      print(line, file=self.echo or sys.stderr, flush=True)

  def close(self) -> None:
    if self._bar is not None:
      self._bar.close()


def note(line: str, echo: TextIO | None = None) -> None:
  """Prints `line` between items (no bar open): on `echo` where given, else on stderr
  unless progress is off."""
  if echo is not None or _mode() != "off":
    print(line, file=echo or sys.stderr, flush=True)


def format_seconds(seconds: float) -> str:
  """`1:02:03`, `2:03` or `5 s`."""
  seconds = int(max(seconds, 0))
  if seconds < 60:
    return f"{seconds} s"
  hours, rest = divmod(seconds, 3600)
  return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class _StderrHandler(logging_std.Handler):
  """Writes the records of `level` and above to stderr in absl's format, above the
  progress bars (`tqdm.write`), except the platform loggers' records below ERROR."""

  def __init__(self, level: int):
    super().__init__(level)
    self.setFormatter(logging.PythonFormatter())
    self.addFilter(_DropPlatformReports())

  def emit(self, record) -> None:
    try:
      tqdm.tqdm.write(self.format(record), file=sys.stderr)
    except Exception:  # pylint: disable=broad-except
      self.handleError(record)


class _DropPlatformReports(logging_std.Filter):
  def filter(self, record) -> bool:
    return record.levelno >= logging_std.ERROR or not record.name.startswith(_PLATFORM_LOGGERS)


def quiet_platform_logs() -> None:
  """Drops JAX's reports of the backends it did not find (`Unable to initialize backend
  'tpu'`, INFO and WARNING) from absl's log, for a command without a log file."""
  handler = logging.get_absl_handler()
  if not any(isinstance(f, _DropPlatformReports) for f in handler.filters):
    handler.addFilter(_DropPlatformReports())


def log_path(workdir: str | os.PathLike, name: str) -> epath.Path:
  """`workdir/logs/<name>.log`, the log `log_to_workdir` writes; `<name>.<p>.log` on
  process p > 0 of a multi-process run."""
  # Asked only of a process that joined one: JAX's backends start at the first question.
  index = jax.process_index() if faults.joined() else 0
  return (
    storage.workdir_path(workdir)
    / LOG_DIR
    / (f"{name}.log" if index == 0 else f"{name}.{index}.log")
  )


@contextlib.contextmanager
def log_to_workdir(
  workdir: str | os.PathLike, name: str, *, verbose: bool = False
) -> Iterator[epath.Path | None]:
  """Sends absl's log to `log_path(workdir, name)` (appended to) for the block.

  Warnings and errors also go to stderr (with `verbose`, every record); the platform
  loggers' warnings only to the file. A non-local workdir's log is written to a local
  temporary file and copied there when the block ends (after an earlier run's log). An
  exception leaving the block is the log's last line. With absl's `--logtostderr`
  nothing changes.

  Args:
    workdir: the run's directory (local, `file://` or `gs://...`).
    name: the log's name, e.g. the program's (`main`).
    verbose: also print the INFO records on stderr.

  Yields:
    The log file in the workdir (None with `--logtostderr`).
  """
  python_handler = logging.get_absl_handler().python_handler
  if flags.FLAGS.is_parsed() and flags.FLAGS["logtostderr"].value:
    yield None
    return
  target = log_path(workdir, name)
  directory = target.parent
  local = storage.is_local(directory)
  scratch = None
  if local:
    directory.mkdir(parents=True, exist_ok=True)
    written = target
  else:
    scratch = tempfile.mkdtemp(prefix="energynets_log_")
    written = epath.Path(scratch) / target.name
    written.write_text(target.read_text() if target.exists() else "")
  stream = open(os.fspath(written), "a", encoding="utf-8")  # pylint: disable=consider-using-with
  stderr_handler = _StderrHandler(logging_std.INFO if verbose else logging_std.WARNING)
  previous = python_handler.stream
  python_handler.stream = stream
  root = logging_std.getLogger()
  root.addHandler(stderr_handler)
  quiet_library_logs()  # its filter on the new handler too
  try:
    yield target
  except BaseException as e:
    logging.flush()
    stream.write(f"{type(e).__name__}: {' '.join(str(e).split())}\n")
    raise
  finally:
    root.removeHandler(stderr_handler)
    python_handler.stream = previous
    stream.close()
    if scratch is not None:
      directory.mkdir(parents=True, exist_ok=True)
      written.copy(target, overwrite=True)
      shutil.rmtree(scratch, ignore_errors=True)


@contextlib.contextmanager
def logged_run(workdir: str | os.PathLike, name: str, *, verbose: bool = False) -> Iterator[None]:
  """A binary's work in `workdir`: absl's log in `workdir/logs/<name>.log`
  (`log_to_workdir`), and what the work created there removed if it fails at its start
  (`workdirs.removed_if_failed`).

  Args:
    workdir: the run's directory (local, `file://` or `gs://...`).
    name: the log's name, the program's (`main`, `tune`, `compare`).
    verbose: also print the INFO records on stderr.
  """
  # The log inside: closed (and copied to a gs:// workdir) before it may be removed.
  with workdirs.removed_if_failed(workdir, log_path(workdir, name)):
    with log_to_workdir(workdir, name, verbose=verbose):
      yield


def results_table(results: Mapping[str, Any], results_file: str | os.PathLike | None = None) -> str:
  """The selected model's test metrics in a few lines, for stdout.

  A row per test metric (`test/...`, and other evaluated splits but validation) in
  results.json's order, at the threshold tuned on validation and, in a second column,
  at 0.5 (its `@0.5` variant); then that threshold, the selected step and
  `results_file`.

  Args:
    results: results.json's content.
    results_file: where results.json is (its line is left out when None).

  Returns:
    The table, without a final newline.
  """
  keys = [
    k
    for k in results
    if "/" in k and not k.startswith("validation/") and isinstance(results[k], (int, float))
  ]
  base = list(dict.fromkeys(k.split("@")[0] for k in keys))
  width = max([len(k) for k in base] + [len("metric")])
  fixed = any("@0.5" in k for k in keys)
  lines = [
    f"{'metric':<{width}}  {'tuned' if fixed else 'value':>8}" + (f"  {'@0.5':>8}" if fixed else "")
  ]
  for key in base:
    row = f"{key:<{width}}  {results[key]:>8.4f}" if key in results else f"{key:<{width}}  {'':>8}"
    if fixed and f"{key}@0.5" in results:
      row += f"  {results[key + '@0.5']:>8.4f}"
    lines.append(row)
  notes = []
  if isinstance(results.get("threshold"), (int, float)):
    notes.append(f"threshold {results['threshold']:.2f} (tuned on validation)")
  meta = results.get("meta") or {}
  if "selected_step" in meta:
    notes.append(f"selected step {meta['selected_step']} of {meta.get('final_step')}")
  if notes:
    lines.append("; ".join(notes))
  if results_file is not None:
    lines.append(f"results: {results_file}")
  return "\n".join(lines)
