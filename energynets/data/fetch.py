"""Downloads registered datasets from their public URLs into the data directory.

    python -m energynets.data.fetch yeast genbase --data_dir=/path/to/data
    python -m energynets.data.fetch --list

Each file comes from `DatasetSpec.file_url(role)` and lands at
`<data_dir>/<spec.subdir>/<file name>`, the path `load_dataset(name, data_dir=...)`
reads. Its sha256 must equal the registry's before it is moved into place (downloads
go to a temporary file in the same folder, then a rename). A file already there with
the registered checksum is not downloaded again. Where the plain file is not on the
server (HTTP 404) its zipped copy `<url>.zip` is tried and the file is taken out of the
archive; the registered sha256 is the unzipped file's.
"""

import os
import pathlib
import sys
import tempfile
import urllib.error
import urllib.request
import zipfile
from typing import Any, BinaryIO, Callable, Iterable

from absl import app
from absl import flags

from energynets.data import registry

DEFAULT_TIMEOUT_S = 60.0
_CHUNK = 1 << 20

Opener = Callable[[str], Any]  # url -> bytes or a binary file-like object


class FetchError(RuntimeError):
  """A dataset could not be fetched; the message is one line saying why and what to do."""


def _default_opener(url: str) -> BinaryIO:
  return urllib.request.urlopen(url, timeout=DEFAULT_TIMEOUT_S)  # noqa: S310 (https only)


def _spec(name: str) -> registry.DatasetSpec:
  spec = registry.REGISTRY.get(name.lower())
  if spec is None:
    raise FetchError(f"unknown dataset {name!r}; registered: "
                     f"{', '.join(sorted(registry.REGISTRY))}")
  if spec.files and not spec.url:
    raise FetchError(f"dataset {spec.name!r} has no public source (the registry holds no URL "
                     f"for it); place its files {sorted(spec.files.values())} by hand")
  missing = sorted(f for f in spec.files.values() if f not in spec.sha256)
  if missing:
    raise FetchError(f"dataset {spec.name!r}: no registered sha256 for {missing}, so a "
                     f"download could not be verified")
  return spec


def _resolve_root(data_dir: str | os.PathLike | None) -> pathlib.Path:
  if data_dir is not None and str(data_dir):
    return pathlib.Path(data_dir).expanduser()
  if os.environ.get(registry.DATA_DIR_ENV):
    return pathlib.Path(os.environ[registry.DATA_DIR_ENV]).expanduser()
  raise FetchError(f"no data directory: pass --data_dir (data_dir=...) or set "
                   f"{registry.DATA_DIR_ENV}")


def _copy(source: Any, sink: BinaryIO) -> None:
  """Writes `source` (bytes, or a binary file-like object, closed after) to `sink`."""
  if isinstance(source, (bytes, bytearray, memoryview)):
    sink.write(source)
    return
  try:
    for chunk in iter(lambda: source.read(_CHUNK), b""):
      sink.write(chunk)
  finally:
    close = getattr(source, "close", None)
    if close is not None:
      close()


def _download(url: str, path: pathlib.Path, sha256: str, opener: Opener) -> pathlib.Path:
  """Downloads `url` (or `url.zip`) to a temporary file beside `path`; returns it verified."""
  hand = f"place the file by hand at {path} (sha256 {sha256})"
  fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
  tmp = pathlib.Path(tmp_name)
  source_url = url
  try:
    with os.fdopen(fd, "wb") as sink:
      try:
        try:
          _copy(opener(url), sink)
        except urllib.error.HTTPError as e:
          if e.code != 404:
            raise
          source_url = url + ".zip"
          sink.seek(0)
          sink.truncate()
          _copy(opener(source_url), sink)
      except urllib.error.HTTPError as e:
        raise FetchError(f"download of {source_url} failed: HTTP {e.code} {e.reason}; "
                         f"{hand}") from None
      except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", None) or e
        raise FetchError(f"could not reach {source_url} ({reason}): this machine looks "
                         f"offline; {hand}") from None
    if source_url != url:
      try:
        with zipfile.ZipFile(tmp) as archive:
          members = [m for m in archive.namelist()
                     if pathlib.PurePosixPath(m).name == path.name]
          data = archive.read(members[0]) if members else None
      except zipfile.BadZipFile:
        raise FetchError(f"{source_url} is not a zip archive; {hand}") from None
      if data is None:
        raise FetchError(f"{source_url} holds no {path.name}; {hand}")
      tmp.write_bytes(data)
    got = registry.sha256_of(tmp)
    if got != sha256:
      raise FetchError(f"checksum mismatch for {path.name} from {source_url}: expected sha256 "
                       f"{sha256}, got {got}")
    return tmp
  except BaseException:
    tmp.unlink(missing_ok=True)
    raise


def fetch(names: Iterable[str], data_dir: str | os.PathLike | None, *,
          opener: Opener | None = None, force: bool = False,
          progress: Callable[[str], None] | None = None) -> list[pathlib.Path]:
  """Downloads registered datasets into the folder layout `load_dataset` reads.

  All names are checked before anything is downloaded. Each file goes to
  `<data_dir>/<subdir>/<file>` through a temporary file in that folder, renamed into
  place once its sha256 equals the registry's. 'synthetic' needs no files.

  Args:
    names: registered dataset names (`energynets.data.REGISTRY`).
    data_dir: the data directory (created if missing); None or '' means
      $ENERGYNETS_DATA_DIR.
    opener: `url -> bytes or binary file-like object`; default
      `urllib.request.urlopen` with a `DEFAULT_TIMEOUT_S` timeout.
    force: download and replace files that are already present.
    progress: called with one line per file (name, size, what was done).

  Returns:
    The paths written, in order; files already present with the registered checksum
    are skipped and not listed.

  Raises:
    FetchError: an unknown name, a dataset with no public URL or no checksum, no data
      directory, a network failure, a checksum mismatch, or a present file with another
      checksum (pass force=True to replace it).
  """
  specs = [_spec(n) for n in names]
  root = _resolve_root(data_dir)
  opener = opener or _default_opener
  say = progress or (lambda line: None)
  written = []
  for spec in specs:
    if not spec.files:
      say(f"{spec.name}: generated, no files to fetch")
      continue
    folder = root / spec.subdir
    folder.mkdir(parents=True, exist_ok=True)
    for role, file_name in spec.files.items():
      path, expected = folder / file_name, spec.sha256[file_name]
      shown = f"{spec.subdir}/{file_name}" if spec.subdir else file_name
      if path.is_file() and not force:
        got = registry.sha256_of(path)
        if got != expected:
          raise FetchError(f"{path} exists with sha256 {got}, the registry expects "
                           f"{expected}; pass --force (force=True) to replace it")
        say(f"{shown}: {path.stat().st_size} bytes, present, sha256 verified, skipped")
        continue
      tmp = _download(spec.file_url(role), path, expected, opener)
      os.replace(tmp, path)
      written.append(path)
      say(f"{shown}: {path.stat().st_size} bytes, downloaded, sha256 verified")
  return written


def _define_flags():
  # Defined only when run as a program, so importing this module defines no flags.
  flags.DEFINE_string("data_dir", "", f"data directory (else ${registry.DATA_DIR_ENV})")
  flags.DEFINE_bool("list", False, "list the registered datasets and whether they have a URL")
  flags.DEFINE_bool("force", False, "download and replace files already present")


def main(argv):
  f = flags.FLAGS
  names = argv[1:]
  if f.list:
    for name, spec in sorted(registry.REGISTRY.items()):
      source = (spec.url if spec.url else "generated, no files" if not spec.files
                else "no public URL")
      print(f"{name:10s} {spec.kind:9s} {len(spec.files)} files  {source}")
    return
  if not names:
    raise app.UsageError("name at least one dataset (see --list)")
  try:
    fetch(names, f.data_dir, force=f.force, progress=lambda line: print(line, flush=True))
  except FetchError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)


if __name__ == "__main__":
  _define_flags()
  app.run(main)
