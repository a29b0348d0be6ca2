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
downloaded on its first use; $ENERGYNETS_AUTO_FETCH=0 turns that off.
"""

import dataclasses
import os
import pathlib
import sys
import tempfile
import urllib.error
import urllib.request
import zipfile
from typing import Any, BinaryIO, Callable, Iterable, Mapping

from absl import app
from absl import flags
import numpy as np

from energynets.data import datadir
from energynets.data import registry
from energynets.data import segmentation
from energynets.data import sequences
from energynets.data.errors import MissingDataError

DEFAULT_TIMEOUT_S = 60.0
_CHUNK = 1 << 20

# Experiment dataset names that read another registered dataset's files.
ALIASES = {"conll2003_plus": "conll2003"}

Opener = Callable[[str], Any]  # url -> bytes or a binary file-like object


class FetchError(RuntimeError):
  """A dataset could not be fetched; the message is one line saying why and what to do.

  Attributes:
    cause: the short reason (e.g. the machine is offline), without the file listing.
  """

  def __init__(self, message: str, cause: str | None = None):
    super().__init__(message)
    self.cause = cause or message


class _Unreachable(FetchError):
  """The server could not be reached: no further download is tried."""


@dataclasses.dataclass(frozen=True)
class RemoteFile:
  """One file of a dataset: its name in the dataset's folder, public URL, sha256, size.

  `url` is '' for a file built from the dataset's other files rather than downloaded.
  """
  name: str
  url: str
  sha256: str
  size: int | None = None


@dataclasses.dataclass(frozen=True)
class DatasetSource:
  """How to get one registered dataset's files.

  Attributes:
    name: the registered name.
    kind: 'mulan', 'clus', 'sequence', 'segmentation' or 'synthetic'.
    subdir: the dataset's folder under the data directory.
    downloads: the files to download.
    built: files made from the downloads by `build(folder, out)` (writes the one built
      file to the binary file `out`).
    license: the data's licence and caveats.
  """
  name: str
  kind: str
  subdir: str
  downloads: tuple[RemoteFile, ...]
  built: tuple[RemoteFile, ...] = ()
  build: Callable[[pathlib.Path, BinaryIO], None] | None = None
  license: str = ""

  @property
  def files(self) -> tuple[RemoteFile, ...]:
    return self.downloads + self.built


def build_horse_splits(folder: pathlib.Path, out: BinaryIO) -> None:
  """Writes the horses' splits `.npz` (`segmentation.read_segmentation_npz`'s layout).

  The public `.npy` files are pickled dicts `{split, images, masks}` (lists of uint8
  arrays); they become plain uint8 arrays `<prefix>_images [N, 32, 32, 3]` and
  `<prefix>_masks [N, 32, 32]`, written with `np.savez_compressed` in the order train,
  val, test, which reproduces the registered file byte for byte.

  Args:
    folder: holds `weizmann_horse_{train,val,test}.npy`, checksums already verified.
    out: binary file the `.npz` is written to.
  """
  arrays = {}
  for prefix in segmentation.SPLIT_PREFIXES.values():
    # Unpickling is safe here: `_build` verified the files' registered sha256 first.
    (record,) = np.load(folder / f"weizmann_horse_{prefix}.npy", allow_pickle=True)
    arrays[f"{prefix}_images"] = np.stack(record["images"]).astype(np.uint8)
    arrays[f"{prefix}_masks"] = np.stack(record["masks"]).astype(np.uint8)
  np.savez_compressed(out, **arrays)


def sources() -> dict[str, DatasetSource]:
  """Every registered dataset's `DatasetSource`, by name (aliases not included).

  Returns:
    The multi-label `registry.REGISTRY` (as it is now), the sequence and the
    segmentation datasets; a dataset without a public URL has no downloads.
  """
  out = {}
  for name, spec in registry.REGISTRY.items():
    out[name] = DatasetSource(
        name, spec.kind if spec.url or not spec.files else "unpublished", spec.subdir,
        tuple(RemoteFile(f, spec.file_url(role), spec.sha256.get(f, ""), spec.sizes.get(f))
              for role, f in spec.files.items()) if spec.url else (),
        license=spec.license)
  for name, spec in sequences.SEQUENCE_DATASETS.items():
    out[name] = DatasetSource(
        name, "sequence", spec.subdir,
        tuple(RemoteFile(f, spec.file_url(f), spec.sha256[f], spec.sizes.get(f))
              for f in spec.files.values()),
        license=spec.license)
  for name, spec in segmentation.SEGMENTATION_DATASETS.items():
    out[name] = DatasetSource(
        name, "segmentation", spec.subdir,
        tuple(RemoteFile(f, spec.url + f, sha, spec.source_sizes.get(f))
              for f, sha in spec.sources.items()),
        built=(RemoteFile(spec.file, "", spec.sha256, spec.size),),
        build=build_horse_splits, license=spec.license)
  return out


def _source(name: str, known: Mapping[str, DatasetSource]) -> DatasetSource:
  key = ALIASES.get(name.lower(), name.lower())
  source = known.get(key)
  if source is None:
    raise FetchError(f"unknown dataset {name!r}; registered: "
                     f"{', '.join(sorted([*known, *ALIASES, 'all']))}")
  if source.kind == "unpublished":
    spec = registry.REGISTRY[key]
    raise FetchError(f"dataset {key!r} has no public source (the registry holds no URL "
                     f"for it); place its files {sorted(spec.files.values())} by hand")
  missing = sorted(f.name for f in source.files if not f.sha256)
  if missing:
    raise FetchError(f"dataset {key!r}: no registered sha256 for {missing}, so a "
                     f"download could not be verified")
  return source


def _select(names: Iterable[str]) -> list[DatasetSource]:
  """The sources of `names` ('all': every dataset with files), each once, in order."""
  known = sources()
  chosen = []
  for name in names:
    picked = ([s for s in known.values() if s.downloads] if name.lower() == "all"
              else [_source(name, known)])
    chosen += [s for s in picked if s not in chosen]
  return chosen


def _default_opener(url: str) -> BinaryIO:
  return urllib.request.urlopen(url, timeout=DEFAULT_TIMEOUT_S)  # noqa: S310 (https only)


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


def _temp_beside(path: pathlib.Path) -> tuple[int, pathlib.Path]:
  fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
  return fd, pathlib.Path(name)


def _download(url: str, path: pathlib.Path, sha256: str, opener: Opener) -> pathlib.Path:
  """Downloads `url` (or `url.zip`) to a temporary file beside `path`; returns it verified.

  A `.zip` URL of a file not named `.zip` is an archive the file is taken out of.
  """
  hand = f"place the file by hand at {path} (sha256 {sha256})"
  fd, tmp = _temp_beside(path)
  source_url = url
  archive = url.endswith(".zip") and not path.name.endswith(".zip")
  try:
    with os.fdopen(fd, "wb") as sink:
      try:
        try:
          _copy(opener(url), sink)
        except urllib.error.HTTPError as e:
          if e.code != 404 or archive:
            raise
          source_url, archive = url + ".zip", True
          sink.seek(0)
          sink.truncate()
          _copy(opener(source_url), sink)
      except urllib.error.HTTPError as e:
        raise FetchError(f"download of {source_url} failed: HTTP {e.code} {e.reason}; "
                         f"{hand}") from None
      except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", None) or e
        raise _Unreachable(f"could not reach {source_url} ({reason}): this machine looks "
                           f"offline; {hand}",
                           cause=f"could not reach {source_url} ({reason}): this machine "
                                 f"looks offline") from None
    if archive:
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


def _build(source: DatasetSource, item: RemoteFile, path: pathlib.Path) -> pathlib.Path:
  """Builds `item` from the downloaded files into a temporary file; returns it verified."""
  for download in source.downloads:
    # Also files placed by hand: `build` may unpickle them.
    got = registry.sha256_of(path.parent / download.name)
    if got != download.sha256:
      raise FetchError(f"{path.parent / download.name} has sha256 {got}, the registry "
                       f"expects {download.sha256}; pass --force (force=True) to replace it")
  fd, tmp = _temp_beside(path)
  try:
    with os.fdopen(fd, "wb") as out:
      source.build(path.parent, out)
    got = registry.sha256_of(tmp)
    if got != item.sha256:
      raise FetchError(f"{path.name} built from {[f.name for f in source.downloads]} has "
                       f"sha256 {got}, the registry expects {item.sha256} (another numpy or "
                       f"zlib can compress differently); load the file anyway with "
                       f"segmentation.load_segmentation_file({str(path)!r})")
    return tmp
  except BaseException:
    tmp.unlink(missing_ok=True)
    raise


def _size(n: int | None) -> str:
  return "size unknown" if n is None else f"{n} bytes"


def _listing(pending: list[tuple[DatasetSource, RemoteFile, pathlib.Path]]) -> str:
  """One line naming each file: destination, URL, size and sha256."""
  parts = []
  for source, item, path in pending:
    origin = (f"from {item.url}" if item.url else
              f"built from {', '.join(f.name for f in source.downloads)}")
    parts.append(f"{path} ({origin}, {_size(item.size)}, sha256 {item.sha256})")
  return "; ".join(parts)


def _pending(chosen: list[DatasetSource], root: pathlib.Path
             ) -> list[tuple[DatasetSource, RemoteFile, pathlib.Path]]:
  return [(s, f, root / s.subdir / f.name) for s in chosen for f in s.files
          if not (root / s.subdir / f.name).is_file()]


def fetch(names: Iterable[str], data_dir: str | os.PathLike | None, *,
          opener: Opener | None = None, force: bool = False,
          progress: Callable[[str], None] | None = None,
          only_missing: bool = False) -> list[pathlib.Path]:
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
  chosen = _select(names)
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
          raise FetchError(f"{path} exists with sha256 {got}, the registry expects "
                           f"{item.sha256}; pass --force (force=True) to replace it")
        say(f"{shown}: {path.stat().st_size} bytes, present, sha256 verified, skipped")
        continue
      try:
        tmp = (_download(item.url, path, item.sha256, opener) if item.url
               else _build(source, item, path))
      except _Unreachable as e:
        left = _pending(chosen, root)
        raise FetchError(f"{e.cause}; {len(left)} files not fetched: {_listing(left)}; "
                         f"place them by hand, or rerun where the network is reachable",
                         cause=e.cause) from None
      os.replace(tmp, path)
      written.append(path)
      say(f"{shown}: {path.stat().st_size} bytes, "
          f"{'downloaded' if item.url else 'built'}, sha256 verified")
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
    (source,) = _select([name])
  except FetchError as e:
    raise MissingDataError(root, name, [str(p) for p in missing], command,
                           f"files not found: {[str(p) for p in missing]}; {e}") from None
  folder = root / source.subdir
  had_folder = folder.is_dir()
  if not datadir.auto_fetch_enabled():
    cause = f"automatic download is off (${datadir.AUTO_FETCH_ENV}=0)"
  else:
    pending = _pending([source], root)
    total = sum(f.size or 0 for _, f, _ in pending if f.url)
    print(f"energynets: downloading dataset {source.name!r} ({len(pending)} files, "
          f"{total / 1e6:.1f} MB) into {folder} (${datadir.AUTO_FETCH_ENV}=0 turns this "
          f"off)", file=sys.stderr, flush=True)
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
      path, source.name, [str(p) for _, _, p in pending], command,
      f"{what} ({cause}); missing: {_listing(pending)}; get them with `{command}` (or "
      f"`{datadir.fetch_command('all', root)}`), or point data_dir=... (--data_dir) or "
      f"${datadir.DATA_DIR_ENV} at a folder that holds them")


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
    what = (f"{len(source.files)} files, {total / 1e6:.1f} MB" if source.files else
            "no public source" if source.kind == "unpublished" else "generated, no files")
    lines.append(f"{name} ({source.kind}; {what}): {source.license or 'licence unknown'}")
    for item in source.files:
      path = root / source.subdir / item.name
      state = ("missing" if not path.is_file() else
               "present" if item.size in (None, path.stat().st_size) else
               "present, size differs")
      origin = item.url or f"built from {', '.join(f.name for f in source.downloads)}"
      lines.append(f"  {item.name:28s} {_size(item.size):>15s}  {state:8s} {origin}")
  for alias, target in sorted(ALIASES.items()):
    lines.append(f"{alias}: the files of {target}")
  return lines


def _define_flags():
  # Defined only when run as a program, so importing this module defines no flags.
  flags.DEFINE_string("data_dir", "", f"data directory (else ${datadir.DATA_DIR_ENV}, else "
                      f"{datadir.default_data_dir()})")
  flags.DEFINE_bool("list", False, "list the registered datasets, their files, sizes and "
                    "whether each is present")
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
