"""Workdirs on any storage `etils.epath` reaches, and the check that a run's processes share one.

A workdir may be a local or mounted folder or an object-store URL (`gs://bucket/run`,
any scheme epath and orbax support): every file of a run goes through `epath.Path`,
never through local file APIs, so `gs://...` never becomes a local folder of that name.
Object stores cannot append to or lock a file; the writers that need either
(`MetricWriter`, `experiments.workdirs.workdir_lock`) ask `is_local` and say in their
docstrings what they do instead.

`path` (and `workdir_path`) is where a path given by the user enters: a `file://` URL
becomes the local path it names, and a URL whose storage this installation cannot
reach (a `gs://` path without gcsfs: `pip install 'energynets[gcs]'`) is a
`StorageUnavailableError` with one line that says what to install, raised before
anything is read or written.

A multi-process run needs one workdir that every process reads and writes: orbax
writes each checkpoint from all of them and waits for the others' parts, so processes
with a folder each (per-worker local disks) would wait at the first save until orbax's
timeout. `check_shared_workdir` finds that out at the start, in seconds.
"""

import atexit
import os
import time
import uuid

from absl import logging
from etils import epath
import jax

from energynets.train import faults

__all__ = [
  "ARRIVAL_TIMEOUT_S",
  "check_available",
  "check_shared_workdir",
  "copy_tree",
  "FILE_URL_PREFIX",
  "is_local",
  "normalize",
  "path",
  "StorageUnavailableError",
  "TOKEN_PREFIX",
  "VISIBILITY_TIMEOUT_S",
  "workdir_path",
  "WorkdirNotSharedError",
]

# The token `check_shared_workdir` writes, `<prefix><random id>`, removed afterwards. A
# name never used before: no file system can answer from a cached lookup of it.
TOKEN_PREFIX = ".shared_workdir_token_"

# How long a process waits for the others to reach the check (they all reach it at the
# start of a run, within the time their data takes to load); a process that ends
# before it stops the wait at once (`_announce_exit`).
ARRIVAL_TIMEOUT_S = 600
# How long a process looks for process 0's token once process 0 has written it: some
# shared file systems show a new file to other machines a moment late.
VISIBILITY_TIMEOUT_S = 5.0
_POLL_S = 0.1

# The coordination-service keys: one folder per check, and the processes that ended.
_KEY_PREFIX = "energynets/shared_workdir"
_EXITED = f"{_KEY_PREFIX}/exited/"

# Each check gets its own keys: every process calls the check the same number of
# times, so this counter agrees between them.
_checks_done = 0

# The workdirs this process has found shared (`workdir_path` strings). The check is a
# collective that costs a round trip through storage, so a workdir (or a folder inside
# one, such as a training stage's) is checked once per process; every process skips
# the same calls, since each makes the same calls in the same order.
_checked: set[str] = set()


class WorkdirNotSharedError(RuntimeError):
  """The processes of a multi-process run do not share its workdir, or one of them did
  not reach the check. The message (one line, the same on every process that reached
  the check) names the processes that cannot see process 0's token and how to give a
  shared workdir."""


class StorageUnavailableError(ValueError):
  """A path this installation cannot read or write: a URL scheme `etils.epath` does not
  support, a `file://` URL naming another machine, or an object-store URL whose fsspec
  package is not installed (`gs://` without gcsfs). The message is one line that says
  what to give or install instead."""


FILE_URL_PREFIX = "file://"

# The URL schemes `etils.epath` supports, each with the fsspec protocol it reads them
# through and how to install the package fsspec needs for it.
_SCHEMES = {
  "gs": ("gcs", "gcsfs", "pip install 'energynets[gcs]'"),
  "s3": ("s3", "s3fs", "pip install s3fs"),
  "az": ("az", "adlfs", "pip install adlfs"),
  "hf": ("hf", "huggingface_hub", "pip install huggingface_hub"),
}


def normalize(path: str | os.PathLike) -> str:
  """`path` as the string `etils.epath` takes: a `file://` URL as the local path it
  names (`file:///data/run` -> `/data/run`, `file://localhost/x` -> `/x`, taken as
  written: no percent-decoding), anything else unchanged.

  Args:
    path: a local path or a URL.

  Returns:
    The path as a string.

  Raises:
    StorageUnavailableError: a `file://` URL naming another host, or no absolute path.
  """
  text = os.fspath(path)
  if not text.startswith(FILE_URL_PREFIX):
    return text
  rest = text[len(FILE_URL_PREFIX) :]
  if rest.startswith("localhost/"):
    rest = rest[len("localhost") :]
  if not rest.startswith("/"):
    raise StorageUnavailableError(
      f"{text}: a file:// URL names an absolute path on this machine, as in file:///data/run"
    )
  return rest


def is_local(path: str | os.PathLike) -> bool:
  """Whether `path` is a local (or mounted) path or a `file://` URL rather than a URL
  such as `gs://b/run`."""
  return "://" not in normalize(path)


def check_available(path: str | os.PathLike) -> None:
  """Stops, with one line, a path whose storage this installation cannot reach.

  Local paths and `file://` URLs always pass. A URL passes when `etils.epath` supports
  its scheme and the file system it reads it through is installed (or registered, as
  `energynets.testing.fake_gcs` registers one for `gs://`). Cheap: nothing is read.

  Args:
    path: a local path or a URL.

  Raises:
    StorageUnavailableError: an unsupported scheme, or a `gs://` path without gcsfs
      (`pip install 'energynets[gcs]'`), an `s3://` one without s3fs, ...
  """
  text = normalize(path)
  if "://" not in text:
    return
  scheme = text.split("://", 1)[0]
  if scheme not in _SCHEMES:
    raise StorageUnavailableError(
      f"{text}: unsupported URL scheme {scheme}://; give a local path, a file:// URL "
      f"or one of {', '.join(f'{s}://' for s in _SCHEMES)}"
    )
  protocol, package, install = _SCHEMES[scheme]
  if not _reads_through_fsspec(text):
    return  # epath's TensorFlow backend (TensorFlow installed) needs no fsspec package
  import fsspec  # pylint: disable=g-import-not-at-top

  try:
    fsspec.get_filesystem_class(protocol)
  except ImportError:
    raise StorageUnavailableError(
      f"{text}: {scheme}:// paths need {package}, which is not installed: {install}"
    ) from None


def _reads_through_fsspec(url: str) -> bool:
  """Whether `etils.epath` reads `url` through fsspec (rather than TensorFlow's gfile)."""
  from etils.epath import backend  # pylint: disable=g-import-not-at-top

  chosen = getattr(epath.Path(url), "_backend", backend.fsspec_backend)
  return chosen is backend.fsspec_backend


def path(name: str | os.PathLike) -> epath.Path:
  """The `epath.Path` of a file or folder the user named (a flag's value), checked.

  Args:
    name: a local path, a `file://` URL (made the local path) or a URL epath supports
      (`gs://bucket/f.npz`, ...).

  Returns:
    The path; a relative local path stays relative.

  Raises:
    StorageUnavailableError: as `check_available`.
  """
  check_available(name)
  return epath.Path(normalize(name))


def workdir_path(workdir: str | os.PathLike) -> epath.Path:
  """`workdir` as an `epath.Path`: a URL unchanged, a relative local path made absolute.

  Args:
    workdir: a local path, a `file://` URL or a URL epath supports
      (`gs://bucket/run`, ...).

  Returns:
    The path, absolute (orbax requires absolute checkpoint directories).

  Raises:
    StorageUnavailableError: as `check_available` (e.g. `gs://` without gcsfs).
  """
  result = path(workdir)
  return result if result.is_absolute() else result.absolute()


def copy_tree(source: str | os.PathLike, target: str | os.PathLike) -> None:
  """Copies the folder `source` with everything in it to `target` (which must not exist
  yet), through `epath`: either may be local or a URL, the two on different storage.

  Args:
    source: the folder to copy.
    target: the new folder.

  Raises:
    FileExistsError: `target` exists.
  """
  source_dir, target_dir = path(source), path(target)
  if target_dir.exists():
    raise FileExistsError(f"cannot copy {source_dir} to {target_dir}: {target_dir} exists")
  target_dir.mkdir(parents=True)
  for entry in source_dir.iterdir():
    if entry.is_dir():
      copy_tree(entry, target_dir / entry.name)
    else:
      entry.copy(target_dir / entry.name)


def check_shared_workdir(workdir: str | os.PathLike) -> None:
  """Stops every process of a multi-process run, with one message, unless all share `workdir`.

  Process 0 creates `workdir` and writes a token file named by a random id that it
  sends to the others through JAX's coordination service; each process then looks for
  that file (for up to `VISIBILITY_TIMEOUT_S`), and the findings are exchanged, so
  every process raises the same error or none does. A single-process run returns at
  once. Call it on every process, in the same order, before anything else writes to
  the workdir. Once `workdir` passed, a later call with it or a folder inside it
  returns at once (the experiment driver checks the run's workdir, then `fit` each
  stage's).

  Args:
    workdir: the run's directory, as this process names it.

  Raises:
    WorkdirNotSharedError: some process cannot see the token (its workdir is another
      folder: a local disk per machine), or another process ended before the check
      (it failed or was stopped) or did not reach it within `ARRIVAL_TIMEOUT_S`.
  """
  if jax.process_count() == 1:
    return
  name = os.fspath(workdir_path(workdir)).rstrip("/")
  if any(name == done or name.startswith(done + "/") for done in _checked):
    return
  if _handshake(workdir):
    _checked.add(name)


def _handshake(workdir: str | os.PathLike) -> bool:
  """The exchange of `check_shared_workdir`; True once every process saw the token,
  False when there is no coordination service to exchange through."""
  global _checks_done
  client = faults.coordination_client()
  if client is None:
    logging.warning(
      "no JAX coordination service (jax.distributed.initialize was not "
      "called): cannot check that the processes share %s",
      workdir,
    )
    return False
  _checks_done += 1
  key = f"{_KEY_PREFIX}/{_checks_done}"
  me, count = jax.process_index(), jax.process_count()
  directory = workdir_path(workdir)
  if me == 0:
    token_id = uuid.uuid4().hex
    try:
      directory.mkdir(parents=True, exist_ok=True)
      (directory / (TOKEN_PREFIX + token_id)).write_text(token_id)
      problem = ""
    except OSError as e:
      problem = _one_line(e)
    # Sent after the token is written (and even when writing failed).
    client.key_value_set(f"{key}/token", "\n".join([token_id, os.fspath(directory), problem]))
  token_id, shared, problem = _wait_for(client, [f"{key}/token"], directory)[0].split("\n", 2)
  token = directory / (TOKEN_PREFIX + token_id)
  finding = ""
  if not problem:
    deadline = time.monotonic() + VISIBILITY_TIMEOUT_S
    while not _holds(token, token_id) and time.monotonic() < deadline:
      time.sleep(_POLL_S)
    if not _holds(token, token_id):
      finding = f"process {me} (its workdir: {directory})"
  client.key_value_set(f"{key}/finding/{me}", finding)
  findings = _wait_for(client, [f"{key}/finding/{i}" for i in range(count)], directory)
  if me == 0 and not problem:
    try:
      token.unlink()
    except OSError:  # a token left behind is harmless: its name is unique
      pass
  if problem:
    raise WorkdirNotSharedError(
      f"process 0 cannot write to workdir {shared} ({problem}); give a workdir on "
      "storage every process can read and write: a gs:// bucket or a shared (NFS) mount"
    )
  blind = [f for f in findings if f]
  if blind:
    raise _not_shared(shared, count, f"{', '.join(blind)} cannot see the token process 0 wrote")
  return True


def _wait_for(client, keys: list[str], workdir: epath.Path) -> list[str]:
  """The values of `keys` in the coordination service, once all are set.

  Raises:
    WorkdirNotSharedError: a process ended before setting its key, or
      `ARRIVAL_TIMEOUT_S` passed.
  """
  deadline = time.monotonic() + ARRIVAL_TIMEOUT_S
  values = {}
  while True:
    for k in keys:
      if k not in values:
        try:
          values[k] = client.key_value_try_get(k)
        except Exception:  # pylint: disable=broad-except  (not set yet)
          pass
    if len(values) == len(keys):
      return [values[k] for k in keys]
    try:
      exited = sorted(int(k.rsplit("/", 1)[-1]) for k, _ in client.key_value_dir_get(_EXITED))
    except Exception as e:  # pylint: disable=broad-except  (the service is gone)
      raise WorkdirNotSharedError(
        f"lost JAX's coordination service (process 0) during the check that the "
        f"processes share workdir {workdir}: {_one_line(e)[:300]}"
      ) from None
    if exited:
      raise WorkdirNotSharedError(
        f"process {exited[0]} ended before the check that the processes share workdir "
        f"{workdir}; see its log for why"
      )
    if time.monotonic() > deadline:
      raise WorkdirNotSharedError(
        f"not every process reached the check that the processes share workdir "
        f"{workdir} within {ARRIVAL_TIMEOUT_S} s; see their logs for why"
      )
    time.sleep(_POLL_S)


@atexit.register
def _announce_exit() -> None:
  """Tells the other processes of a multi-process run that this one has ended, so that
  none waits for it at `check_shared_workdir`. Registered when this module is imported,
  after JAX registered its own exit handler, so it runs before JAX disconnects (exit
  handlers run last registered first)."""
  try:
    client = faults.coordination_client()
    if client is not None:
      client.key_value_set(f"{_EXITED}{jax.process_index()}", "1")
  except Exception:  # pylint: disable=broad-except  (the service may be gone already)
    pass


def _not_shared(workdir: str | os.PathLike, count: int, detail: str) -> WorkdirNotSharedError:
  return WorkdirNotSharedError(
    f"workdir {workdir} is not shared by the {count} processes: {detail}; give a workdir "
    "on storage every process can read and write: a gs:// bucket or a shared (NFS) mount"
  )


def _one_line(error: BaseException) -> str:
  return " ".join(str(error).split()) or type(error).__name__


def _holds(token: epath.Path, token_id: str) -> bool:
  try:
    return token.read_text() == token_id
  except OSError:  # not there (yet)
    return False
