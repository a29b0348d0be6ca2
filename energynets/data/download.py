"""One verified transfer of `energynets.data.fetch`: a file downloaded, or built, beside its
destination and returned once its sha256 is the registered one.

Downloads go to a temporary file in the destination's folder (the caller renames it into
place). Where the plain file is not on the server (HTTP 404) its zipped copy `<url>.zip`
is tried and the file is taken out of the archive; the registered sha256 is the unzipped
file's. `ServerUnreachable` says the server could not be reached, so that the caller
tries nothing further.
"""

from collections.abc import Callable
import os
import pathlib
import tempfile
from typing import Any
from typing import BinaryIO
import urllib.error
import zipfile

from energynets.data import registry
from energynets.data.errors import FetchError
from energynets.data.remote import DatasetSource
from energynets.data.remote import RemoteFile

__all__ = [
  "Opener",
  "ServerUnreachable",
  "build_verified",
  "copy_source",
  "download_verified",
  "temp_beside",
]

_CHUNK = 1 << 20

Opener = Callable[[str], Any]  # url -> bytes or a binary file-like object


class ServerUnreachable(FetchError):
  """The server could not be reached: no further download is tried."""


def copy_source(source: Any, sink: BinaryIO) -> None:
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


def temp_beside(path: pathlib.Path) -> tuple[int, pathlib.Path]:
  """`(descriptor, path)` of a new hidden temporary file in `path`'s folder."""
  fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
  return fd, pathlib.Path(name)


def download_verified(url: str, path: pathlib.Path, sha256: str, opener: Opener) -> pathlib.Path:
  """Downloads `url` (or `url.zip`) to a temporary file beside `path`; returns it verified.

  A `.zip` URL of a file not named `.zip` is an archive the file is taken out of.
  """
  hand = f"place the file by hand at {path} (sha256 {sha256})"
  fd, tmp = temp_beside(path)
  source_url = url
  archive = url.endswith(".zip") and not path.name.endswith(".zip")
  try:
    with os.fdopen(fd, "wb") as sink:
      try:
        try:
          copy_source(opener(url), sink)
        except urllib.error.HTTPError as e:
          if e.code != 404 or archive:
            raise
          source_url, archive = url + ".zip", True
          sink.seek(0)
          sink.truncate()
          copy_source(opener(source_url), sink)
      except urllib.error.HTTPError as e:
        raise FetchError(
          f"download of {source_url} failed: HTTP {e.code} {e.reason}; {hand}"
        ) from None
      except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", None) or e
        raise ServerUnreachable(
          f"could not reach {source_url} ({reason}): this machine looks offline; {hand}",
          cause=f"could not reach {source_url} ({reason}): this machine looks offline",
        ) from None
    if archive:
      try:
        with zipfile.ZipFile(tmp) as zipped:
          members = [m for m in zipped.namelist() if pathlib.PurePosixPath(m).name == path.name]
          data = zipped.read(members[0]) if members else None
      except zipfile.BadZipFile:
        raise FetchError(f"{source_url} is not a zip archive; {hand}") from None
      if data is None:
        raise FetchError(f"{source_url} holds no {path.name}; {hand}")
      tmp.write_bytes(data)
    got = registry.sha256_of(tmp)
    if got != sha256:
      raise FetchError(
        f"checksum mismatch for {path.name} from {source_url}: expected sha256 {sha256}, got {got}"
      )
    return tmp
  except BaseException:
    tmp.unlink(missing_ok=True)
    raise


def build_verified(source: DatasetSource, item: RemoteFile, path: pathlib.Path) -> pathlib.Path:
  """Builds `item` from the downloaded files into a temporary file; returns it verified."""
  assert source.build is not None, "a source with built files has their build"
  for download in source.downloads:
    # Also files placed by hand: `build` may unpickle them.
    got = registry.sha256_of(path.parent / download.name)
    if got != download.sha256:
      raise FetchError(
        f"{path.parent / download.name} has sha256 {got}, the registry "
        f"expects {download.sha256}; pass --force (force=True) to replace it"
      )
  fd, tmp = temp_beside(path)
  try:
    with os.fdopen(fd, "wb") as out:
      source.build(path.parent, out)
    got = registry.sha256_of(tmp)
    if got != item.sha256:
      raise FetchError(
        f"{path.name} built from {[f.name for f in source.downloads]} has "
        f"sha256 {got}, the registry expects {item.sha256} (another numpy or "
        f"zlib can compress differently); load the file anyway with "
        f"segmentation.load_segmentation_file({str(path)!r})"
      )
    return tmp
  except BaseException:
    tmp.unlink(missing_ok=True)
    raise
