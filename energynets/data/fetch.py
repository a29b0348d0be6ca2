"""Downloads registered datasets from their public URLs into the data directory.

    python -m energynets.data.fetch yeast genbase --data_dir=/path/to/data
    python -m energynets.data.fetch all
    python -m energynets.data.fetch --list

Every registered dataset with files can be fetched: the multi-label `REGISTRY`, the
sequence datasets (`sequences.SEQUENCE_DATASETS`) and the segmentation datasets
(`segmentation.SEGMENTATION_DATASETS`); `ALIASES` maps experiment variants (such as
conll2003_plus) to the dataset whose files they read. Each file comes from a public URL
pinned to a commit and lands at `<data_dir>/<subdir>/<file name>`, the path the loaders
read; the data directory is `--data_dir`, else $ENERGYNETS_DATA_DIR, else
`datadir.default_data_dir()`. A file's sha256 must equal the registry's before it is
moved into place (downloads go to a temporary file in the same folder, then a rename),
and a file already there with the registered checksum is not downloaded again. Where
the plain file is not on the server (HTTP 404) its zipped copy `<url>.zip` is tried and
the file is taken out of the archive; the registered sha256 is the unzipped file's. A
file the public sources do not hold (the horses' `.npz`) is built from the downloaded
ones and checked against its registered sha256 too.

The loaders call `fetch_missing` when a dataset's files are missing, so a dataset is
downloaded on its first use; $ENERGYNETS_AUTO_FETCH=0 turns that off. What each
dataset's files are is `energynets.data.remote`; one verified transfer is
`energynets.data.download`.
"""

from collections.abc import Callable
from collections.abc import Iterable
import os
import pathlib
import sys
from typing import BinaryIO
import urllib.request

from absl import app
from absl import flags

from energynets.data import datadir
from energynets.data import download
from energynets.data import registry
from energynets.data.download import Opener
from energynets.data.errors import FetchError
from energynets.data.errors import MissingDataError
from energynets.data.remote import ALIASES
from energynets.data.remote import DatasetSource
from energynets.data.remote import RemoteFile
from energynets.data.remote import build_horse_splits
from energynets.data.remote import select_sources
from energynets.data.remote import sources

__all__ = [
  "ALIASES",
  "DEFAULT_TIMEOUT_S",
  "DatasetSource",
  "FetchError",
  "Opener",
  "RemoteFile",
  "build_horse_splits",
  "describe",
  "fetch",
  "fetch_missing",
  "select_sources",
  "sources",
]

DEFAULT_TIMEOUT_S = 60.0


def _default_opener(url: str) -> BinaryIO:
  return urllib.request.urlopen(url, timeout=DEFAULT_TIMEOUT_S)  # noqa: S310 (https only)


def _size(n: int | None) -> str:
  return "size unknown" if n is None else f"{n} bytes"


def _listing(pending: list[tuple[DatasetSource, RemoteFile, pathlib.Path]]) -> str:
  """One line naming each file: destination, URL, size and sha256."""
  parts = []
  for source, item, path in pending:
    origin = (
      f"from {item.url}"
      if item.url
      else f"built from {', '.join(f.name for f in source.downloads)}"
    )
    parts.append(f"{path} ({origin}, {_size(item.size)}, sha256 {item.sha256})")
  return "; ".join(parts)


def _pending(
  chosen: list[DatasetSource], root: pathlib.Path
) -> list[tuple[DatasetSource, RemoteFile, pathlib.Path]]:
  return [
    (s, f, root / s.subdir / f.name)
    for s in chosen
    for f in s.files
    if not (root / s.subdir / f.name).is_file()
  ]


def fetch(
  names: Iterable[str],
  data_dir: str | os.PathLike | None,
  *,
  opener: Opener | None = None,
  force: bool = False,
  progress: Callable[[str], None] | None = None,
  only_missing: bool = False,
) -> list[pathlib.Path]:
  """Downloads registered datasets into the folder layout the loaders read.

  All names are checked before anything is downloaded. Each file goes to
  `<data_dir>/<subdir>/<file>` through a temporary file in that folder, renamed into
  place once its sha256 equals the registry's; files built from the downloads (the
  horses' `.npz`) are made next. 'synthetic' needs no files. Where the server cannot be
  reached, nothing more is tried and one error lists every file still missing.

  Args:
    names: registered dataset names (`sources()`, `ALIASES`), or 'all'.
    data_dir: the data directory (created if missing); None or '' means
      $ENERGYNETS_DATA_DIR, else `datadir.default_data_dir()`.
    opener: `url -> bytes or binary file-like object`; default
      `urllib.request.urlopen` with a `DEFAULT_TIMEOUT_S` timeout.
    force: download and replace files that are already present.
    progress: called with one line per file (name, size, what was done).
    only_missing: leave present files alone without reading them (the loaders check
      their checksums).

  Returns:
    The paths written, in order; files already present with the registered checksum
    are skipped and not listed.

  Raises:
    FetchError: an unknown name, a dataset with no public URL or no checksum, a
      network failure (listing every missing file), a checksum mismatch, or a present
      file with another checksum (pass force=True to replace it).
  """
  chosen = select_sources(names)
  root = datadir.resolve_data_dir(data_dir, must_exist=False)
  opener = opener or _default_opener
  say = progress or (lambda line: None)
  written = []
  for source in chosen:
    if not source.files:
      say(f"{source.name}: generated, no files to fetch")
      continue
    folder = root / source.subdir
    folder.mkdir(parents=True, exist_ok=True)
    for item in source.files:
      path = folder / item.name
      shown = f"{source.subdir}/{item.name}" if source.subdir else item.name
      if path.is_file() and not force:
        if only_missing:
          continue
        got = registry.sha256_of(path)
        if got != item.sha256:
          raise FetchError(
            f"{path} exists with sha256 {got}, the registry expects "
            f"{item.sha256}; pass --force (force=True) to replace it"
          )
        say(f"{shown}: {path.stat().st_size} bytes, present, sha256 verified, skipped")
        continue
      try:
        tmp = (
          download.download_verified(item.url, path, item.sha256, opener)
          if item.url
          else download.build_verified(source, item, path)
        )
      except download.ServerUnreachable as e:
        left = _pending(chosen, root)
        raise FetchError(
          f"{e.cause}; {len(left)} files not fetched: {_listing(left)}; "
          f"place them by hand, or rerun where the network is reachable",
          cause=e.cause,
        ) from None
      os.replace(tmp, path)
      written.append(path)
      say(
        f"{shown}: {path.stat().st_size} bytes, "
        f"{'downloaded' if item.url else 'built'}, sha256 verified"
      )
  return written


def fetch_missing(name: str, root: pathlib.Path, missing: list[pathlib.Path]) -> None:
  """Gets a registered dataset's missing files on its first use (`datadir.dataset_files`).

  Downloads them (one line to stderr says so) unless $ENERGYNETS_AUTO_FETCH is off.

  Args:
    name: the dataset's registered name.
    root: the data directory.
    missing: the files the loader needs and found missing.

  Raises:
    MissingDataError: automatic download is off or failed. Its path is the dataset's
      folder where that is missing, else the one missing file the loader needs, else
      the folder; the message lists every missing file of the dataset (URL, size,
      sha256, destination) and the fetch command.
  """
  command = datadir.fetch_command(name, root)
  try:
    (source,) = select_sources([name])
  except FetchError as e:
    raise MissingDataError(
      root,
      name,
      [str(p) for p in missing],
      command,
      f"files not found: {[str(p) for p in missing]}; {e}",
    ) from None
  folder = root / source.subdir
  had_folder = folder.is_dir()
  if not datadir.auto_fetch_enabled():
    cause = f"automatic download is off (${datadir.AUTO_FETCH_ENV}=0)"
  else:
    pending = _pending([source], root)
    total = sum(f.size or 0 for _, f, _ in pending if f.url)
    print(
      f"energynets: downloading dataset {source.name!r} ({len(pending)} files, "
      f"{total / 1e6:.1f} MB) into {folder} (${datadir.AUTO_FETCH_ENV}=0 turns this "
      f"off)",
      file=sys.stderr,
      flush=True,
    )
    try:
      fetch([source.name], root, only_missing=True)
      return
    except FetchError as e:
      cause = e.cause
  pending = _pending([source], root)
  still = [p for p in missing if not p.is_file()]
  if not had_folder:
    path, what = folder, f"dataset folder of {source.name!r} not found under the data directory"
  elif len(still) == 1:
    path, what = still[0], f"file not found (dataset {source.name!r})"
  else:
    path, what = folder, f"{len(still)} files of dataset {source.name!r} not found"
  raise MissingDataError(
    path,
    source.name,
    [str(p) for _, _, p in pending],
    command,
    f"{what} ({cause}); missing: {_listing(pending)}; get them with `{command}` (or "
    f"`{datadir.fetch_command('all', root)}`), or point data_dir=... (--data_dir) or "
    f"${datadir.DATA_DIR_ENV} at a folder that holds them",
  )


def describe(root: pathlib.Path) -> list[str]:
  """`--list`'s lines: each dataset, its licence, and each file with size and state.

  Args:
    root: the data directory the files are looked for in.

  Returns:
    A header line per dataset (name, kind, files, total size, licence) followed by one
    line per file (name, size, present / missing, URL).
  """
  lines = [f"data directory: {root}"]
  for name, source in sorted(sources().items()):
    total = sum(f.size or 0 for f in source.files)
    what = (
      f"{len(source.files)} files, {total / 1e6:.1f} MB"
      if source.files
      else "no public source"
      if source.kind == "unpublished"
      else "generated, no files"
    )
    lines.append(f"{name} ({source.kind}; {what}): {source.license or 'licence unknown'}")
    for item in source.files:
      path = root / source.subdir / item.name
      state = (
        "missing"
        if not path.is_file()
        else "present"
        if item.size in (None, path.stat().st_size)
        else "present, size differs"
      )
      origin = item.url or f"built from {', '.join(f.name for f in source.downloads)}"
      lines.append(f"  {item.name:28s} {_size(item.size):>15s}  {state:8s} {origin}")
  for alias, target in sorted(ALIASES.items()):
    lines.append(f"{alias}: the files of {target}")
  return lines


def _define_flags():
  # Defined only when run as a program, so importing this module defines no flags.
  flags.DEFINE_string(
    "data_dir",
    "",
    f"data directory (else ${datadir.DATA_DIR_ENV}, else {datadir.default_data_dir()})",
  )
  flags.DEFINE_bool(
    "list", False, "list the registered datasets, their files, sizes and whether each is present"
  )
  flags.DEFINE_bool("force", False, "download and replace files already present")


def main(argv):
  f = flags.FLAGS
  names = argv[1:]
  try:
    if f.list:
      root = datadir.resolve_data_dir(f.data_dir, must_exist=False)
      print("\n".join(describe(root)))
      return
    if not names:
      raise app.UsageError("name at least one dataset, or 'all' (see --list)")
    fetch(names, f.data_dir, force=f.force, progress=lambda line: print(line, flush=True))
  except FetchError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)


if __name__ == "__main__":
  _define_flags()
  app.run(main)
