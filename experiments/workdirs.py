"""A run's directory: the lock against two runs in one workdir, the recorded config that
a resumed run is checked against, and the code revision results record.
"""

import contextlib
import fcntl
import json
import os
import subprocess
from typing import Any

from absl import logging
from etils import epath
import jax
import ml_collections

from energynets.train import storage
from experiments import cli
from experiments import configuration


def code_revision() -> str:
  """The checkout's git commit, with `+dirty` when tracked code differs from it;
  `unknown` outside a git checkout."""
  here = os.path.dirname(os.path.abspath(__file__))
  try:
    rev = subprocess.run(
      ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, check=True
    ).stdout.strip()
    # Untracked files, committed results (e.g. the table a benchmark is rewriting) and
    # markdown docs do not make the code dirty: none of them changes a number.
    dirty = subprocess.run(
      [
        "git",
        "status",
        "--porcelain",
        "--untracked-files=no",
        "--",
        ".",
        ":(exclude)results",
        ":(exclude)*.md",
      ],
      cwd=os.path.dirname(here),
      capture_output=True,
      text=True,
      check=True,
    ).stdout.strip()
    return rev + ("+dirty" if dirty else "")
  except (OSError, subprocess.CalledProcessError):
    return "unknown"


class WorkdirInUse(cli.UserError):
  """Another process holds the workdir's lock (`workdir_lock`): the binaries say so in
  one line."""


# Held (flock) by the process that runs in a local workdir; the OS drops it when that
# process ends, however it ends, so a killed run leaves no stale lock.
LOCK_FILE = ".lock"


@contextlib.contextmanager
def workdir_lock(workdir: str | os.PathLike):
  """Refuses a workdir that another process is training in: two runs in one directory
  would overwrite each other's checkpoints and results. Process 0 alone locks in a
  multi-process run (its processes share the workdir). Re-entrant within a process: a
  search holds its workdir while its refit trains there.

  A local (or mounted) workdir is locked by `fcntl.flock` on `LOCK_FILE`. A workdir
  on an object store (`gs://...`) has no lock that its holder's death releases, and a
  lock file left by a killed run would refuse its resume; it is used without a lock,
  with a warning (once per process) that two runs in it would overwrite each other.
  """
  if jax.process_index() != 0:
    yield
    return
  path = storage.workdir_path(workdir)
  if not storage.is_local(path):
    if not _warned_unlocked:
      logging.warning(
        "%s is not on a local or mounted file system: it cannot be locked, "
        "so make sure no other run uses it",
        path,
      )
      _warned_unlocked.append(path)
    yield
    return
  path.mkdir(parents=True, exist_ok=True)
  held = os.path.realpath(path)
  if held in _held:
    yield
    return
  lock = path / LOCK_FILE
  handle = lock.open("w")
  try:
    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except BlockingIOError:
    handle.close()
    raise WorkdirInUse(
      f"{workdir} is in use by another process (it holds {lock}): wait "
      "for that run to end or pick another workdir"
    ) from None
  _held.add(held)
  try:
    yield
  finally:
    _held.discard(held)
    fcntl.flock(handle, fcntl.LOCK_UN)
    handle.close()


# The workdirs whose lock this process holds: a second `flock` on a new handle of the
# same file conflicts with the first even within one process.
_held: set[str] = set()

# Non-empty once this process has warned that a non-local workdir is not locked.
_warned_unlocked: list[epath.Path] = []

# Folders a launcher may create in a workdir before the run starts (its worker logs).
_LAUNCHER_FOLDERS = ("logs",)


def _tree(path: epath.Path) -> tuple[set[str], set[str]]:
  """The files and the folders under `path`, as paths relative to it."""
  files, folders = set(), set()
  pending = [path]
  while pending:
    folder = pending.pop()
    for child in folder.iterdir():
      name = os.fspath(child.relative_to(path))
      if child.is_dir():
        folders.add(name)
        pending.append(child)
      else:
        files.add(name)
  return files, folders


def has_checkpoint(workdir: str | os.PathLike) -> bool:
  """Whether `workdir` holds a saved step of a run (`checkpoints/` or `best/`, its
  stages' too)."""
  run_dir = storage.workdir_path(workdir)
  dirs = [run_dir / "checkpoints", run_dir / "best"]
  stages = run_dir / "stages"
  if stages.is_dir():
    dirs += [stage / sub for stage in stages.iterdir() for sub in ("checkpoints", "best")]
  return any(d.is_dir() and any(p.name.isdigit() for p in d.iterdir()) for d in dirs)


@contextlib.contextmanager
def removed_if_failed(workdir: str | os.PathLike, log_file: str | os.PathLike | None = None):
  """Undoes the start of a run that fails before its first checkpoint in a fresh workdir.

  (Also the start of a comparison or a search, in their root workdir.) A workdir is
  fresh when it does not exist or holds nothing but a launcher's `logs/`.
  If the block raises while such a workdir has no checkpoint (`has_checkpoint`), the
  `STARTUP_FILES` the run created are removed, then the run's log (`log_file`) unless
  something else the run wrote (e.g. the metrics of a diverged run) stays beside it, then
  the folders the run created that are left empty. A workdir that held anything else
  before (an earlier run, to resume) is never touched, nor one whose lock another
  process holds; in a multi-process run process 0 cleans up, and each other process
  removes only its own log.

  Args:
    workdir: the run's directory (local, `file://` or `gs://...`).
    log_file: the run's log in the workdir (`console.log_to_workdir`).
  """
  path = storage.workdir_path(workdir)
  before: tuple[set[str], set[str]] | None = None
  if not path.exists():
    before = (set(), set())
  elif all(child.name in _LAUNCHER_FOLDERS for child in path.iterdir()):
    before = _tree(path)
    before[1].add(".")
  try:
    yield
  except BaseException:
    if before is not None:
      if jax.process_index() == 0:
        _remove_started(path, before, log_file)
      else:
        _remove_own_log(path, before, log_file)
    raise


def _remove_own_log(
  path: epath.Path, before: tuple[set[str], set[str]], log_file: str | os.PathLike | None
) -> None:
  """`removed_if_failed` on a process other than 0: its own log (`main.<p>.log`), and
  then the folders left empty that were not there before. Process 0 may be removing the
  same folders meanwhile, so a folder already gone or not yet empty is left to it."""
  if log_file is None or not path.exists() or has_checkpoint(path):
    return
  log = epath.Path(log_file)
  try:
    if os.fspath(log.relative_to(path)) not in before[0] and log.exists():
      log.unlink()
    for folder in (log.parent, path):
      if os.fspath(folder.relative_to(path)) not in before[1] and not any(folder.iterdir()):
        folder.rmdir()
  except OSError:
    pass


def _remove_started(
  path: epath.Path, before: tuple[set[str], set[str]], log_file: str | os.PathLike | None
) -> None:
  """`removed_if_failed`'s cleanup of `path`, which held the files and folders `before`."""
  if not path.exists() or has_checkpoint(path):
    return
  handle = None
  if storage.is_local(path) and (path / LOCK_FILE).exists():
    handle = (path / LOCK_FILE).open("a")
    try:
      fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:  # another run started in it meanwhile: its files now
      handle.close()
      return
  try:
    for name in STARTUP_FILES:
      target = path / name
      if name in before[0] or name in before[1] or not target.exists():
        continue
      if target.is_dir():
        target.rmtree()
      else:
        target.unlink()
    files, _ = _tree(path)
    log = os.fspath(epath.Path(log_file).relative_to(path)) if log_file else None
    if log in files and log not in before[0] and not files - before[0] - {log}:
      (path / log).unlink()
    _, folders = _tree(path)
    for name in sorted(folders - before[1], key=lambda n: -n.count(os.sep)):
      if not any((path / name).iterdir()):
        (path / name).rmdir()
    if "." not in before[1] and not any(path.iterdir()):
      path.rmdir()
  finally:
    if handle is not None:
      handle.close()


# The config a workdir's run trains with, written at each start (`check_resumed_config`).
CONFIG_FILE = "config.json"

# What a run writes in a fresh workdir before its first checkpoint (the XLA cache of a
# search too), removed again when it fails by then (`removed_if_failed`).
STARTUP_FILES = (LOCK_FILE, CONFIG_FILE, CONFIG_FILE + ".partial", "xla_cache")

# Keys (the last two parts of a dotted key, a stage's too) that a resumed run may change:
# how it logs, evaluates and checkpoints, on how many devices and how they split the
# model, and where the data files live. `train.steps` may grow (train on); any other
# change alters what the saved checkpoints are the training of. `data.num_shards` is
# among the former, like the process count it defaults to: both pick the order of the
# batches still to come, not what the checkpoints hold. The early-stopping keys only
# decide when training ends (a run from before them resumes with them). The `tune` keys
# set the search that chose the run's settings (the settings themselves are compared).
# The throughput keys (prefetch, asynchronous saves, profiling) change how fast a run
# trains, not what.
RESUMABLE_CHANGES = (
  "train.log_every",
  "train.eval_every",
  "train.checkpoint_every",
  "train.tensorboard",
  "train.eval_batch_size",
  "train.num_devices",
  "train.model_parallelism",
  "data.data_dir",
  "data.num_shards",
  "train.early_stopping",
  "train.early_stopping_patience",
  "train.early_stopping_min_delta",
  "tune.enabled",
  "tune.trials",
  "tune.folds",
  "tune.jobs",
  "tune.seed",
  "train.prefetch",
  "train.async_checkpoint",
  "train.profile_steps",
)


# Keys added to the configs after runs were recorded, with the value every run recorded
# without them trained with: such a run resumes under that value as unchanged.
ADDED_KEY_DEFAULTS = {"train.compute_dtype": "float32", "train.schedule_steps": 0}


def config_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
  """`key (old -> new)` for every key where config dict `new` trains differently from
  `old`: any changed key but `RESUMABLE_CHANGES` and a raised `train.steps` (a key of
  `ADDED_KEY_DEFAULTS` that one side lacks has its default there)."""
  # Through JSON as the config is recorded (tuples become lists).
  before = configuration.flatten_dict(
    json.loads(json.dumps(old, default=configuration.json_default))
  )
  after = configuration.flatten_dict(
    json.loads(json.dumps(new, default=configuration.json_default))
  )
  changes = []
  for key in sorted(set(before) | set(after)):
    tail = ".".join(key.split(".")[-2:])
    missing = ADDED_KEY_DEFAULTS.get(tail, "<missing>")
    a, b = before.get(key, missing), after.get(key, missing)
    if a == b or tail in RESUMABLE_CHANGES:
      continue
    if tail == "train.steps" and isinstance(a, int) and isinstance(b, int) and b >= a:
      continue
    changes.append(f"{key} ({a!r} -> {b!r})")
  return changes


def _recorded_config(workdir: str | os.PathLike) -> dict[str, Any] | None:
  """The config of the run in `workdir`: `CONFIG_FILE`, else results.json's (a run from
  before that file), else None; None as well for a workdir without checkpoints, whose
  first attempt failed before saving any and so starts afresh."""
  run_dir = storage.workdir_path(workdir)
  dirs = [run_dir / "checkpoints"]
  stages = run_dir / "stages"
  if stages.is_dir():
    dirs += [stage / "checkpoints" for stage in stages.iterdir()]
  if not any(d.is_dir() and any(p.name.isdigit() for p in d.iterdir()) for d in dirs):
    return None
  for name, read in (
    (CONFIG_FILE, lambda record: record),
    ("results.json", lambda record: record["meta"]["config"]),
  ):
    try:
      return read(json.loads((run_dir / name).read_text()))
    except (OSError, ValueError, KeyError, TypeError):
      continue
  return None


def check_resumed_config(
  config: ml_collections.ConfigDict, workdir: str | os.PathLike, allow_config_change: bool = False
) -> None:
  """Refuses to resume the run in `workdir` with a config that trains differently, then
  records `config` as the workdir's (`CONFIG_FILE`).

  Args:
    config: the config about to train in `workdir`.
    workdir: the run's directory.
    allow_config_change: resume even so (the changes are logged as a warning).

  Raises:
    cli.UserError: `config_changes` of the recorded config and `config` is not empty and
      `allow_config_change` is False; one line listing the keys (old -> new).
  """
  new = config.to_dict()
  old = _recorded_config(workdir)
  changes = config_changes(old, new) if old is not None else []
  if changes and not allow_config_change:
    shown = changes[:8] + ([f"and {len(changes) - 8} more"] if len(changes) > 8 else [])
    raise cli.UserError(
      f"{workdir} holds a run trained with another config; it differs in "
      f"{', '.join(shown)}. Use a fresh --workdir, or pass --allow_config_change to "
      "continue that run with the new config"
    )
  if changes:
    logging.warning(
      "continuing the run in %s with a changed config: %s", workdir, ", ".join(changes)
    )
  if jax.process_index() == 0:  # the other processes of a multi-process run read it
    directory = storage.workdir_path(workdir)
    directory.mkdir(parents=True, exist_ok=True)
    partial = directory / (CONFIG_FILE + ".partial")
    partial.write_text(
      json.dumps(new, indent=2, sort_keys=True, default=configuration.json_default)
    )
    partial.replace(directory / CONFIG_FILE)
