"""What the experiment binaries share: a user's mistake ends the command in one line.

`run(main)` replaces `absl.app.run(main)`. A mistake in the command line (an unknown
flag, a misspelled config key, a value of the wrong type, a config file that does not
load) or an error the run raises about its input (`UserError`, a missing or malformed
dataset, a diverged loss, a workdir without a run or one that the processes of a
multi-process run do not share, a path on storage this installation cannot reach) is
printed as one line, `<program>: error: <message>`, on stderr, and the command exits
with status 2. Any other exception keeps its traceback: it is a bug, not a mistake.

Exit statuses: 0 done; 2 a user's mistake; 1 any other failure; 75 (`EXIT_PREEMPTED`)
stopped by a preemption notice (SIGTERM) after saving a checkpoint: the same command
resumes. In a multi-process run one process's failure ends every process at once,
each with the failed process's status and the line `<program>: error: process P
failed: <reason>` (`stop_run`, `stop_for_peer`).
"""

import ast
from collections.abc import Callable
import difflib
import os
import re
import sys
import threading
import traceback
from typing import Any
from typing import NoReturn

from absl import app
from absl import flags
import ml_collections
from ml_collections.config_flags import config_flags as _config_flags

EXIT_USER_ERROR = 2
# An exception that is not a user error: a bug, or a failure of the machine.
EXIT_FAILURE = 1
# A run stopped by a preemption notice (SIGTERM) after saving its checkpoint:
# `energynets.train.faults.EXIT_PREEMPTED` (sysexits.h's EX_TEMPFAIL); rerun to resume.
EXIT_PREEMPTED = 75
# How long a failing process of a multi-process run looks for another's announced
# failure first: an error in a collective is most often a peer that failed.
PEER_FAILURE_WAIT_S = 3.0


class UserError(ValueError):
  """A mistake in what the user asked for (a config name or key, a value, a workdir).

  The binaries print its message alone, without a traceback; a ValueError, so that
  callers of the library functions that raise it can catch it as before.
  """


class ConfigKeyError(UserError, KeyError):
  """An override of a config key the config does not have (a KeyError as well, as
  `ConfigDict` raises for one)."""

  def __str__(self) -> str:
    # KeyError's own str() is the quoted repr of the message.
    return str(self.args[0])


def one_line(text: Any) -> str:
  """`text` with every run of whitespace (newlines too) as one space."""
  return " ".join(str(text).split())


def program_name() -> str:
  """`experiments.main` for `python -m experiments.main`, else the script's name."""
  spec = getattr(sys.modules.get("__main__"), "__spec__", None)
  if spec is not None and spec.name:
    return spec.name
  return os.path.basename(sys.argv[0]) if sys.argv else "experiments"


def fail(message: Any) -> NoReturn:
  """Prints `<program>: error: <message>` (one line) to stderr and exits with status 2."""
  print(f"{program_name()}: error: {one_line(message)}", file=sys.stderr, flush=True)
  sys.exit(EXIT_USER_ERROR)


def unknown_config_key(config: ml_collections.ConfigDict, key: str) -> str | None:
  """Why the dotted `key` is not a key of `config`, with the closest key as a suggestion
  (`unknown config key train.stepz; did you mean train.steps?`); None when it is one."""
  node = config
  path: list[str] = []
  parts = key.split(".")
  for i, part in enumerate(parts):
    if not isinstance(node, ml_collections.ConfigDict):
      return (
        f"unknown config key {key}: {'.'.join(path)} is a value of type "
        f"{type(node).__name__}, not a block of keys"
      )
    if part in node:
      node = node[part]
      path.append(part)
      continue
    message = f"unknown config key {key}"
    close = difflib.get_close_matches(part, [str(k) for k in node.keys()], n=1)
    if close:
      message += f"; did you mean {'.'.join([*path, close[0], *parts[i + 1 :]])}?"
    return message
  return None


def data_dir_hint(message: str, flag: str) -> str:
  """A data loader's message with its data-directory hint in terms of `flag`.

  The library names its `data_dir=...` argument; on the command line that argument is
  `flag` (e.g. `--config.data.data_dir`), next to the environment variable.
  """
  message = message.replace("data_dir=... (--data_dir)", f"{flag}=DIR")
  message = message.replace("(set data_dir or", f"(pass {flag}=DIR or set")
  return message.replace("the data_dir argument", flag)


def _user_error_types() -> tuple[type[BaseException], ...]:
  # Imported here: the library's modules load JAX, which the flag errors do not need.
  from energynets.data import DataError  # pylint: disable=g-import-not-at-top
  from energynets.train import loop  # pylint: disable=g-import-not-at-top
  from energynets.train import run as run_lib  # pylint: disable=g-import-not-at-top
  from energynets.train import storage  # pylint: disable=g-import-not-at-top

  return (
    UserError,
    app.UsageError,
    DataError,
    loop.TrainingDivergedError,
    run_lib.RunNotFoundError,
    run_lib.RunFormatError,
    run_lib.BuilderError,
    storage.WorkdirNotSharedError,
    storage.StorageUnavailableError,
  )


def user_error_message(error: BaseException, data_dir_flag: str = "--data_dir") -> str:
  """The one-line message of a user error (`_user_error_types`)."""
  from energynets.data import DataError  # pylint: disable=g-import-not-at-top

  if isinstance(error, DataError):
    # Without a file, DataError's "<no file>: " prefix says nothing a user can act on.
    text = error.problem if error.path is None and error.line is None else str(error)
    return one_line(data_dir_hint(text, data_dir_flag))
  return one_line(error)


# ml_collections' message for a missing config key, e.g. `'stepz'` with the line
# `Did you mean "steps" instead of "stepz"?`, inside the repr KeyError adds.
_MISSING_KEY = re.compile(r"""^'(?P<key>[^'\s]+)'(\s*Did you mean "(?P<close>[^"]+)")?""")
_LOAD_FAILURE = "Configuration is not available because of an earlier failure to load"


def _config_overrides(argv: list[str]) -> list[str]:
  """The keys of the `--config.KEY=VALUE` flags in `argv`, in order."""
  keys = []
  for arg in argv[1:]:
    if arg == "--":
      break
    match = re.match(r"^--?config\.([^=]+)", arg)
    if match:
      keys.append(match.group(1))
  return keys


def _config_key_message(error: BaseException, argv: list[str]) -> str | None:
  """The one-line message of ml_collections' error for a misspelled override key, or
  None when `error` is not one."""
  text = str(error)
  try:
    text = ast.literal_eval(text) if text.startswith(("'", '"')) else text
  except (ValueError, SyntaxError):
    pass
  match = _MISSING_KEY.match(str(text))
  if match is None:
    lookup = re.search(r"Attempting to lookup: (\S+)", str(text))
    return f"unknown config key {lookup.group(1)}" if lookup else None
  bad, close = match.group("key"), match.group("close")
  for key in _config_overrides(argv):
    parts = key.split(".")
    if bad in parts:
      message = f"unknown config key {key}"
      if close:
        fixed = [close if p == bad else p for p in parts]
        message += f"; did you mean {'.'.join(fixed)}?"
      return message
  return f"unknown config key {bad}" + (f"; did you mean {close}?" if close else "")


def _flag_error_message(error: flags.Error) -> str:
  """absl's flag error in one line; a config file's own error is its last line."""
  text = str(error)
  marker = "Error whilst parsing config file:"
  if marker in text:
    # ml_collections embeds the traceback of the config's get_config: its last line is
    # the exception (`ValueError: unknown dataset variant ...`).
    flag_part = text.split(marker)[0].rstrip(": ")
    last = [line for line in text.splitlines() if line.strip()][-1].strip()
    last = re.sub(r"^(ValueError|TypeError): ", "", last)
    return f"{flag_part}: {last}"
  return one_line(text)


def _config_path(argv: list[str], flag_name: str) -> str:
  """The file of config flag `flag_name`: its last value in `argv`, else its default."""
  path: str | None = None
  for i, arg in enumerate(argv[1:], 1):
    if arg == "--":
      break
    for prefix in (f"--{flag_name}=", f"-{flag_name}="):
      if arg.startswith(prefix):
        path = arg[len(prefix) :]
    if arg in (f"--{flag_name}", f"-{flag_name}") and i + 1 < len(argv):
      path = argv[i + 1]
  if path is None:
    path = (flags.FLAGS[flag_name].default_as_str or "").strip("'\"")
  return path.split(":")[0]


def _defines_get_config(path: str) -> bool:
  """Whether the Python file `path` defines `get_config` (is a config, not a helper)."""
  try:
    with open(path) as f:
      return "\ndef get_config(" in f.read()
  except OSError:
    return False


def _load_failure_message(error: BaseException, flag_name: str, argv: list[str]) -> str:
  """A config file that did not load (`--config=nope.py`) in one line."""
  text = str(error).replace(_LOAD_FAILURE + ":", "")
  path = _config_path(argv, flag_name)
  last = [line for line in text.splitlines() if line.strip()][-1].strip()
  if "No such file or directory" in last:
    folder = os.path.dirname(path) or "."
    known = (
      sorted(
        n[:-3]
        for n in os.listdir(folder)
        if n.endswith(".py") and _defines_get_config(os.path.join(folder, n))
      )
      if os.path.isdir(folder)
      else []
    )
    message = f"--{flag_name}: config file {path} does not exist"
    if known:
      message += f"; {folder} has {', '.join(known)}"
    return message
  return f"--{flag_name}={path}: {one_line(last)}"


def _config_flag_names() -> list[str]:
  return [
    name
    for name, flag in flags.FLAGS._flags().items()  # pylint: disable=protected-access
    if isinstance(flag.parser, _config_flags.ConfigFileFlagParser) and "." not in name
  ]


def parse_flags(argv: list[str]) -> list[str]:
  """`absl.app.run`'s flag parser with every mistake as a one-line error (`fail`).

  Returns:
    The arguments left after the flags, as absl's own parser returns them.
  """
  try:
    remaining = flags.FLAGS(argv)
  except flags.Error as e:
    fail(_flag_error_message(e))
  except OSError as e:  # an override of a config file that did not load
    if _LOAD_FAILURE not in str(e):
      raise
    name = _config_flag_names()[0] if _config_flag_names() else "config"
    fail(_load_failure_message(e, name, argv))
  except (AttributeError, KeyError) as e:
    # ml_collections looks the override keys up while the flags are parsed.
    message = _config_key_message(e, argv)
    if message is None:
      raise
    fail(message)
  for name in _config_flag_names():
    value = flags.FLAGS[name].value
    if isinstance(value, getattr(_config_flags, "_ErrorConfig", ())):
      # ml_collections defers a file that did not load until the config is read.
      fail(_load_failure_message(vars(value)["_error"], name, argv))
  return remaining


# Held by the thread that ends a process of a multi-process run (the main thread or the
# peer watch), so that one line, not two, says why.
_ending = threading.Lock()


def _multiprocess() -> bool:
  """Whether this process has joined a multi-process run (`jax.distributed`)."""
  if "jax" not in sys.modules:  # no JAX yet: nothing to join, and nothing to load
    return False
  from energynets.train import faults  # pylint: disable=g-import-not-at-top

  return faults.joined()


def _exit_now(status: int) -> NoReturn:
  """Flushes the logs and ends the process without the interpreter's exit handlers:
  JAX's shutdown barrier would wait for processes that are waiting for this one."""
  from absl import logging  # pylint: disable=g-import-not-at-top

  logging.flush()
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(status)  # pylint: disable=protected-access


def stop_run(status: int, message: Any) -> NoReturn:
  """Ends the command with `<program>: error: <message>` (one line) and `status`.

  A process of a multi-process run first records the status and the message for the
  others (`faults.announce_failure`, which `stop_for_peer` answers on each of them)
  and exits at once.
  """
  line = one_line(message)
  if not _multiprocess():
    print(f"{program_name()}: error: {line}", file=sys.stderr, flush=True)
    sys.exit(status)
  from energynets.train import faults  # pylint: disable=g-import-not-at-top

  with _ending:
    faults.announce_failure(status, line[:2000])
    print(f"{program_name()}: error: {line}", file=sys.stderr, flush=True)
    faults.end_after_failure()
    _exit_now(status)


def stop_for_peer(process: int, status: int, reason: str) -> NoReturn:
  """Ends this process of a multi-process run because process `process` failed with
  `status` and one-line `reason`: `<program>: error: process P failed: <reason>`, the
  failed process's status (`faults.watch_peers` calls it)."""
  from energynets.train import faults  # pylint: disable=g-import-not-at-top

  with _ending:
    print(
      f"{program_name()}: error: process {process} failed: {reason}", file=sys.stderr, flush=True
    )
    faults.end_after_failure()
    _exit_now(status)


def exception_line(error: BaseException, limit: int = 600) -> str:
  """`<type>: <message>` in one line; a message that carries a traceback (an error
  raised in a host callback) keeps its first line and the exception it ends with."""
  lines = [l.strip() for l in str(error).splitlines() if l.strip()]
  if not lines:
    return type(error).__name__
  first = lines[0].replace("Traceback (most recent call last):", "").strip()
  text = first if len(lines) == 1 else f"{first} ... {lines[-1]}"
  text = f"{type(error).__name__}: {text}"
  return text if len(text) <= limit else text[: limit - 3] + "..."


def _preempted_type() -> type[BaseException]:
  from energynets.train import faults  # pylint: disable=g-import-not-at-top

  return faults.Preempted


def run(main: Callable[[list[str]], Any], *, data_dir_flag: str = "--data_dir") -> None:
  """`absl.app.run(main)` with the user's mistakes as one line and exit status 2.

  A run stopped by a preemption (`faults.Preempted`) prints `<program>: preempted at
  step S: ...; rerun to resume` and exits with `EXIT_PREEMPTED`. In a multi-process
  run every failure ends the process at once and all the others with it
  (`stop_run`); an exception that is not a user error prints its traceback, then one
  line, and exits with `EXIT_FAILURE`, or, when another process failed first (the
  error is then most often a collective that lost it), with that process's status
  and reason.

  Args:
    main: the binary's `main(argv)`.
    data_dir_flag: the flag that sets the data directory on this command line, which a
      missing-data error names.
  """

  def guarded(argv):
    try:
      return main(argv)
    except _preempted_type() as e:  # pylint: disable=catching-non-exception
      print(f"{program_name()}: {one_line(e)}", file=sys.stderr, flush=True)
      sys.exit(EXIT_PREEMPTED)
    except _user_error_types() as e:  # pylint: disable=catching-non-exception
      stop_run(EXIT_USER_ERROR, user_error_message(e, data_dir_flag))
    except Exception as e:  # pylint: disable=broad-except
      if not _multiprocess():
        raise
      from energynets.train import faults  # pylint: disable=g-import-not-at-top

      traceback.print_exc()
      peer = faults.peer_failure(wait_s=PEER_FAILURE_WAIT_S)
      if peer is not None:
        stop_for_peer(*peer)
      stop_run(EXIT_FAILURE, exception_line(e))

  app.run(guarded, flags_parser=parse_flags)
