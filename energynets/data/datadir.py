"""Where dataset files live: the data directory, a dataset's files in it, their checksums.

The data directory is the `data_dir` argument (`--data_dir`, `--config.data.data_dir`),
else $ENERGYNETS_DATA_DIR (`DATA_DIR_ENV`), else a per-user cache,
`$XDG_CACHE_HOME/energynets/data` or `~/.cache/energynets/data` (`default_data_dir`).
Every dataset has a folder in it. A registered dataset whose files are missing is
downloaded on first use (`energynets.data.fetch`; $ENERGYNETS_AUTO_FETCH=0 turns that
off); where that is off or fails, a `MissingDataError` lists every missing file and
the fetch command.
"""

from collections.abc import Mapping
import hashlib
import os
import pathlib

from energynets.data.errors import DataError

DATA_DIR_ENV = "ENERGYNETS_DATA_DIR"
AUTO_FETCH_ENV = "ENERGYNETS_AUTO_FETCH"
FETCH_MODULE = "energynets.data.fetch"


def default_data_dir() -> pathlib.Path:
  """The per-user data directory used when neither `data_dir` nor $ENERGYNETS_DATA_DIR is set.

  Returns:
    `$XDG_CACHE_HOME/energynets/data`, or `~/.cache/energynets/data` when
    $XDG_CACHE_HOME is unset or empty; it need not exist yet.
  """
  cache = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
  return pathlib.Path(cache).expanduser() / "energynets" / "data"


def auto_fetch_enabled() -> bool:
  """Whether missing registered files are downloaded on first use.

  Returns:
    False when $ENERGYNETS_AUTO_FETCH is '0', 'false', 'no' or 'off' (any case); True
    otherwise, also when it is unset.
  """
  return os.environ.get(AUTO_FETCH_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def fetch_command(name: str, root: pathlib.Path | None = None) -> str:
  """The shell command that downloads dataset `name` into the data directory `root`.

  Args:
    name: a registered dataset name, or 'all'.
    root: the data directory the files belong in; named with `--data_dir` unless it is
      the one the command finds by itself ($ENERGYNETS_DATA_DIR, else the default).

  Returns:
    E.g. `python -m energynets.data.fetch yeast --data_dir=/data`.
  """
  command = f"python -m {FETCH_MODULE} {name}"
  if root is not None and pathlib.Path(root) != resolve_data_dir(None, must_exist=False):
    command += f" --data_dir={root}"
  return command


def resolve_data_dir(
  data_dir: str | os.PathLike | None = None, *, must_exist: bool = True
) -> pathlib.Path:
  """The data directory: `data_dir` if given, else $ENERGYNETS_DATA_DIR, else the default.

  Args:
    data_dir: the directory asked for; None or '' to use the environment or default.
    must_exist: raise when a directory given by argument or environment is missing
      (the default directory `default_data_dir` may be absent: fetching creates it).

  Returns:
    The directory's path.

  Raises:
    DataError: `must_exist` and a directory given by argument or environment does not
      exist.
  """
  if data_dir is not None and str(data_dir):
    path, origin = pathlib.Path(data_dir).expanduser(), "data_dir argument"
  elif os.environ.get(DATA_DIR_ENV):
    path, origin = pathlib.Path(os.environ[DATA_DIR_ENV]).expanduser(), f"${DATA_DIR_ENV}"
  else:
    return default_data_dir()
  if must_exist and not path.is_dir():
    raise DataError(
      path,
      None,
      f"data directory (from the {origin}) does not exist; pass "
      f"data_dir=... (--data_dir) or set {DATA_DIR_ENV}, or fetch the data "
      f"into it with `python -m {FETCH_MODULE} all --data_dir={path}`",
    )
  return path


def dataset_files(
  data_dir, subdir: str, files: Mapping[str, str], name: str
) -> tuple[pathlib.Path, dict[str, pathlib.Path]]:
  """`(folder, {role: path})` of a dataset's files under the data directory.

  Missing files of a registered dataset are downloaded first
  (`energynets.data.fetch.fetch_missing`), unless $ENERGYNETS_AUTO_FETCH is off.

  Args:
    data_dir: the data directory (`resolve_data_dir`).
    subdir: the dataset's folder in it.
    files: role -> file name.
    name: the dataset's registered name (names the download and the error).

  Returns:
    The dataset's folder and its files' paths, each an existing file.

  Raises:
    MissingDataError (a DataError): files are missing and could not be downloaded; it
      lists them all and names the fetch command. DataError: a data directory given
      by argument or environment does not exist.
  """
  root = resolve_data_dir(data_dir)
  folder = root / subdir
  paths = {role: folder / f for role, f in files.items()}
  if any(not p.is_file() for p in paths.values()):
    # Imported here: the fetcher reads the dataset registries, which import this module.
    from energynets.data import fetch  # pylint: disable=g-import-not-at-top

    fetch.fetch_missing(name, root, [p for p in paths.values() if not p.is_file()])
  return folder, paths


def sha256_of(path: str | os.PathLike) -> str:
  """Hex sha256 of the file at `path`, read in 1 MiB chunks."""
  h = hashlib.sha256()
  with open(path, "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
      h.update(chunk)
  return h.hexdigest()


def file_record(
  path: pathlib.Path, expected: str | None, relative_to: pathlib.Path | None = None
) -> dict[str, str]:
  """Path (relative to `relative_to`, so results name no machine's layout) and sha256."""
  if not path.is_file():
    raise DataError(path, None, "file not found")
  digest = sha256_of(path)
  if expected is not None and digest != expected:
    raise DataError(
      path,
      None,
      f"sha256 {digest} differs from the registry's {expected}: "
      f"not the registered file (to use it anyway, load its folder by path)",
    )
  shown = path.relative_to(relative_to) if relative_to is not None else path
  return {"path": str(shown), "sha256": digest}
