"""What `energynets.data.fetch` downloads: each registered dataset's files and sources.

`sources()` describes every registered dataset with files (the multi-label `REGISTRY`,
the sequence datasets and the segmentation datasets) as a `DatasetSource`: its folder
under the data directory, the files to download (`RemoteFile`: public URL pinned to a
commit, sha256, size) and the files built from them (the horses' `.npz`,
`build_horse_splits`). `ALIASES` maps experiment variants to the dataset whose files
they read; `select_sources` turns names (or 'all') into sources, checked.
"""

from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
import dataclasses
import pathlib
from typing import Any
from typing import BinaryIO

import numpy as np

from energynets.data import registry
from energynets.data import segmentation
from energynets.data import sequences
from energynets.data.errors import FetchError

__all__ = [
  "ALIASES",
  "DatasetSource",
  "RemoteFile",
  "build_horse_splits",
  "select_sources",
  "source_of",
  "sources",
]

# Experiment dataset names that read another registered dataset's files.
ALIASES = {"conll2003_plus": "conll2003"}


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
  # Any: np.savez_compressed's stub types its keywords as its `allow_pickle` flag.
  arrays: dict[str, Any] = {}
  for prefix in segmentation.SPLIT_PREFIXES.values():
    # Unpickling is safe here: `download.build_verified` checked the registered sha256
    # of the files first.
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
      name,
      spec.kind if spec.url or not spec.files else "unpublished",
      spec.subdir,
      tuple(
        RemoteFile(f, spec.file_url(role), spec.sha256.get(f, ""), spec.sizes.get(f))
        for role, f in spec.files.items()
      )
      if spec.url
      else (),
      license=spec.license,
    )
  for name, sequence_spec in sequences.SEQUENCE_DATASETS.items():
    out[name] = DatasetSource(
      name,
      "sequence",
      sequence_spec.subdir,
      tuple(
        RemoteFile(
          f, sequence_spec.file_url(f), sequence_spec.sha256[f], sequence_spec.sizes.get(f)
        )
        for f in sequence_spec.files.values()
      ),
      license=sequence_spec.license,
    )
  for name, image_spec in segmentation.SEGMENTATION_DATASETS.items():
    out[name] = DatasetSource(
      name,
      "segmentation",
      image_spec.subdir,
      tuple(
        RemoteFile(f, image_spec.url + f, sha, image_spec.source_sizes.get(f))
        for f, sha in image_spec.sources.items()
      ),
      built=(RemoteFile(image_spec.file, "", image_spec.sha256, image_spec.size),),
      build=build_horse_splits,
      license=image_spec.license,
    )
  return out


def source_of(name: str, known: Mapping[str, DatasetSource]) -> DatasetSource:
  """The source of `name` (or of the dataset an alias reads) among `known`.

  Raises:
    FetchError: an unknown name, a dataset with no public URL, or a file without a
      registered sha256 (a download could not be verified).
  """
  key = ALIASES.get(name.lower(), name.lower())
  source = known.get(key)
  if source is None:
    raise FetchError(
      f"unknown dataset {name!r}; registered: {', '.join(sorted([*known, *ALIASES, 'all']))}"
    )
  if source.kind == "unpublished":
    spec = registry.REGISTRY[key]
    raise FetchError(
      f"dataset {key!r} has no public source (the registry holds no URL "
      f"for it); place its files {sorted(spec.files.values())} by hand"
    )
  missing = sorted(f.name for f in source.files if not f.sha256)
  if missing:
    raise FetchError(
      f"dataset {key!r}: no registered sha256 for {missing}, so a download could not be verified"
    )
  return source


def select_sources(names: Iterable[str]) -> list[DatasetSource]:
  """The sources of `names` ('all': every dataset with files), each once, in order."""
  known = sources()
  chosen = []
  for name in names:
    picked = (
      [s for s in known.values() if s.downloads]
      if name.lower() == "all"
      else [source_of(name, known)]
    )
    chosen += [s for s in picked if s not in chosen]
  return chosen
