"""Where dataset files live: the data directory, a dataset's files in it, their checksums.

The data directory is the `data_dir` argument, else $ENERGYNETS_DATA_DIR
(`DATA_DIR_ENV`); every dataset has a folder in it. A missing directory, folder or file
is a `DataError` that says what to set or where the file should be.
"""

import hashlib
import os
import pathlib
from typing import Mapping

from energynets.data.errors import DataError

DATA_DIR_ENV = "ENERGYNETS_DATA_DIR"


def resolve_data_dir(data_dir: str | os.PathLike | None = None) -> pathlib.Path:
  """The data directory: `data_dir` if given, else $ENERGYNETS_DATA_DIR.

  Raises:
    DataError: neither is set, or the directory does not exist.
  """
  if data_dir is not None and str(data_dir):
    path, origin = pathlib.Path(data_dir).expanduser(), "data_dir argument"
  elif os.environ.get(DATA_DIR_ENV):
    path, origin = pathlib.Path(os.environ[DATA_DIR_ENV]).expanduser(), f"${DATA_DIR_ENV}"
  else:
    raise DataError(None, None, f"no data directory: pass data_dir=... (--data_dir) or "
                    f"set the environment variable {DATA_DIR_ENV}")
  if not path.is_dir():
    raise DataError(path, None, f"data directory (from the {origin}) does not exist; pass "
                    f"data_dir=... (--data_dir) or set {DATA_DIR_ENV}")
  return path


def dataset_files(data_dir, subdir: str, files: Mapping[str, str], name: str
                  ) -> tuple[pathlib.Path, dict[str, pathlib.Path]]:
  """`(folder, {role: path})` of a dataset's files under the data directory.

  A DataError names a missing folder or file, before any checksum is looked at.
  """
  root = resolve_data_dir(data_dir) / subdir
  if not root.is_dir():
    raise DataError(root, None, f"dataset folder of {name!r} not found under the data "
                    f"directory (set data_dir or {DATA_DIR_ENV})")
  paths = {role: root / f for role, f in files.items()}
  for p in paths.values():
    if not p.is_file():
      raise DataError(p, None, f"file not found (dataset {name!r} needs "
                      f"{sorted(files.values())})")
  return root, paths


def sha256_of(path: str | os.PathLike) -> str:
  """Hex sha256 of the file at `path`, read in 1 MiB chunks."""
  h = hashlib.sha256()
  with open(path, "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
      h.update(chunk)
  return h.hexdigest()


def file_record(path: pathlib.Path, expected: str | None,
                relative_to: pathlib.Path | None = None) -> dict[str, str]:
  """Path (relative to `relative_to`, so results name no machine's layout) and sha256."""
  if not path.is_file():
    raise DataError(path, None, "file not found")
  digest = sha256_of(path)
  if expected is not None and digest != expected:
    raise DataError(path, None, f"sha256 {digest} differs from the registry's {expected}: "
                    f"not the registered file (to use it anyway, load its folder by path)")
  shown = path.relative_to(relative_to) if relative_to is not None else path
  return {"path": str(shown), "sha256": digest}
