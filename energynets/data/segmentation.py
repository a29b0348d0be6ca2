"""Binary image segmentation data: the Weizmann horses at 32×32 (the DVN / SEAL split).

The file is `<data_dir>/weizmann_horse/weizmann_horse_32x32_splits.npz` (see
docs/datasets.md): plain uint8 arrays `train_images (160, 32, 32, 3)`,
`train_masks (160, 32, 32)`, and likewise `val_*` (40) and `test_*` (128), masks in
{0, 1} (1 = horse). It is the split of Gygli et al. (2017) and SEAL (Lee et al. 2022):
200 train+validation images, 128 test. The data directory is found as for every other
dataset (`data_dir`, else $ENERGYNETS_DATA_DIR, else the per-user default:
`registry.resolve_data_dir`; `energynets.data.fetch` downloads and builds it), and the
file's sha256 must be the registered one (`load_segmentation_file` loads another file
of the same layout without that check).

Preprocessing. Images become float32 `(pixel − mean_c) / std_c` with the per-channel
mean and (population) standard deviation of the *train* split only, so nothing about
validation or test leaks into training; masks become float32 {0, 1} `[N, H, W]`
(predictions live in the Box [0, 1]^{H×W}).

Training-time augmentation and SEAL's test-time crops are
`energynets.data.segmentation_augment` (re-exported here).
"""

from collections.abc import Mapping
import dataclasses
import os
import pathlib
from typing import Any

import numpy as np

from energynets.data.datadir import dataset_files
from energynets.data.datadir import sha256_of
from energynets.data.errors import DataError
from energynets.data.segmentation_augment import DEFAULT_PAD  # re-exported
from energynets.data.segmentation_augment import PAD_MODES  # re-exported
from energynets.data.segmentation_augment import SEAL_CROP_OFFSETS  # re-exported
from energynets.data.segmentation_augment import augment  # re-exported
from energynets.data.segmentation_augment import augmented_batch  # re-exported
from energynets.data.segmentation_augment import average_crops  # re-exported
from energynets.data.segmentation_augment import average_mirrors  # re-exported
from energynets.data.segmentation_augment import crop_grid  # re-exported
from energynets.data.segmentation_augment import with_mirrors  # re-exported

__all__ = [
  "DEFAULT_PAD",
  "PAD_MODES",
  "SEAL_CROP_OFFSETS",
  "SEGMENTATION_DATASETS",
  "SPLIT_PREFIXES",
  "SegmentationDataset",
  "SegmentationSpec",
  "SegmentationSplit",
  "augment",
  "augmented_batch",
  "average_crops",
  "average_mirrors",
  "build_segmentation_dataset",
  "channel_stats",
  "crop_grid",
  "load_segmentation",
  "load_segmentation_file",
  "normalize",
  "read_segmentation_npz",
  "with_mirrors",
]

PathLike = str | os.PathLike

# Split name -> the prefix of its arrays in the .npz.
SPLIT_PREFIXES = {"train": "train", "validation": "val", "test": "test"}


@dataclasses.dataclass(frozen=True)
class SegmentationSpec:
  """What the loader knows about a registered segmentation dataset.

  `file` (sha256 `sha256`, `size` bytes) is not published as such: `energynets.data.fetch`
  downloads `sources` (file name -> sha256, sizes in `source_sizes`) from the public
  folder `url` (pinned to a commit) and builds it from them.
  """

  subdir: str
  file: str
  sha256: str
  counts: Mapping[str, int]
  image_shape: tuple[int, int, int]
  split: str
  url: str
  citation: str
  sources: Mapping[str, str] = dataclasses.field(default_factory=dict)
  source_sizes: Mapping[str, int] = dataclasses.field(default_factory=dict)
  size: int | None = None
  license: str = ""


SEGMENTATION_DATASETS: dict[str, SegmentationSpec] = {
  "weizmann_horse": SegmentationSpec(
    subdir="weizmann_horse",
    file="weizmann_horse_32x32_splits.npz",
    sha256="8aaf784cbc4ddaad59f8badb578beab4c69a2ffb2cc4ee27e05553db1599cd41",
    counts={"train": 160, "validation": 40, "test": 128},
    image_shape=(32, 32, 3),
    split="shipped DVN/SEAL split: train 160, validation 40, test 128 (made here from "
    "the three .npy files of iesl/structured_prediction_baselines; docs/datasets.md)",
    url="https://raw.githubusercontent.com/iesl/structured_prediction_baselines/"
    "8336a0bcef1807227e6023b2d548b8323d5c36ff/data/weizmann_horse_seg/",
    citation="Borenstein & Ullman. Class-specific, top-down segmentation. ECCV 2002; "
    "split of Gygli, Norouzi & Angelova, Deep Value Networks, ICML 2017.",
    sources={
      "weizmann_horse_train.npy": "aab5b0f9cbe1a4ede9711ea645e99903136ab0006efcaf45917753c486bb3e5c",  # noqa: E501
      "weizmann_horse_val.npy": "9d9a2be4c9e49950e4f6e028fa041043ab40cf409c5c78a0a8a18b17de2b1214",
      "weizmann_horse_test.npy": "1093ca5b440273dcb46c3e17b7f0443f66bbd67160855e398f3e7932d8fc25df",
    },
    source_sizes={
      "weizmann_horse_train.npy": 674256,
      "weizmann_horse_val.npy": 168334,
      "weizmann_horse_test.npy": 539343,
    },
    size=979067,
    license="No licence stated by the source; the Weizmann Horse images are for "
    "research use, cite Borenstein & Ullman (2002).",
  ),
}


@dataclasses.dataclass(frozen=True)
class SegmentationSplit:
  """One split, numpy.

  Attributes:
    x: float32 `[N, H, W, C]` normalized images.
    y: float32 `[N, H, W]` masks in {0, 1} (1 = foreground).
  """

  x: np.ndarray
  y: np.ndarray

  def __post_init__(self):
    if self.x.ndim != 4 or self.y.shape != self.x.shape[:3]:
      raise ValueError(
        f"SegmentationSplit needs images [N, H, W, C] and masks [N, H, W] "
        f"of the same N, H, W; got {self.x.shape} and {self.y.shape}"
      )

  @property
  def num_examples(self) -> int:
    return len(self.x)


@dataclasses.dataclass(frozen=True)
class SegmentationDataset:
  """A segmentation task with fixed train/validation/test splits.

  `mean` and `std` (`[C]`, float64) are the train split's per-channel statistics the
  images were normalized with (undo with `x * std + mean` to show them). `meta` is
  JSON-serialisable: files and checksums, split rule, counts, preprocessing.
  """

  name: str
  train: SegmentationSplit
  validation: SegmentationSplit
  test: SegmentationSplit
  mean: np.ndarray
  std: np.ndarray
  meta: dict[str, Any]

  @property
  def image_shape(self) -> tuple[int, ...]:
    return tuple(self.train.x.shape[1:])


# --------------------------------------------------------------------------- reading


def read_segmentation_npz(path: PathLike) -> dict[str, tuple[np.ndarray, np.ndarray]]:
  """`{split: (images uint8 [N, H, W, C], masks uint8 [N, H, W])}` of a splits `.npz`.

  Checked, each failure a `DataError` naming the file: the six arrays
  `<prefix>_images` / `<prefix>_masks` for prefixes train, val, test (`SPLIT_PREFIXES`)
  exist; they are uint8; images are `[N, H, W, C]` and masks `[N, H, W]` with the same
  N, H, W, one image size for all splits; masks hold only 0 and 1.
  """
  path = pathlib.Path(path)
  if not path.is_file():
    raise DataError(path, None, "file not found")
  try:
    # allow_pickle=False: the file must hold plain arrays (the shipped .npy files are
    # pickled dicts; the .npz is the project's plain-array copy).
    with np.load(path, allow_pickle=False) as npz:
      arrays = {k: npz[k] for k in npz.files}
  except (OSError, ValueError) as e:
    raise DataError(path, None, f"not a readable .npz of plain arrays ({e})") from e
  expected = [f"{p}_{kind}" for p in SPLIT_PREFIXES.values() for kind in ("images", "masks")]
  missing = [k for k in expected if k not in arrays]
  if missing:
    raise DataError(path, None, f"missing arrays {missing}; found {sorted(arrays)}")
  splits, sizes = {}, set()
  for split, prefix in SPLIT_PREFIXES.items():
    images, masks = arrays[f"{prefix}_images"], arrays[f"{prefix}_masks"]
    for key, a in ((f"{prefix}_images", images), (f"{prefix}_masks", masks)):
      if a.dtype != np.uint8:
        raise DataError(path, None, f"{key} must be uint8; got {a.dtype}")
    if images.ndim != 4 or masks.ndim != 3 or images.shape[:3] != masks.shape:
      raise DataError(
        path,
        None,
        f"{prefix}_images must be [N, H, W, C] and "
        f"{prefix}_masks [N, H, W] with the same N, H, W; got "
        f"{images.shape} and {masks.shape}",
      )
    if len(images) == 0:
      raise DataError(path, None, f"{prefix} split is empty")
    bad = masks > 1
    if bad.any():
      n, i, j = (int(v) for v in np.argwhere(bad)[0])
      raise DataError(
        path,
        None,
        f"{prefix}_masks must hold only 0 and 1; found "
        f"{int(masks[n, i, j])} at image {n}, pixel ({i}, {j})",
      )
    sizes.add(images.shape[1:])
    splits[split] = (images, masks)
  if len(sizes) != 1:
    raise DataError(path, None, f"splits disagree on the image size: {sorted(sizes)}")
  return splits


# ---------------------------------------------------------------------- normalization


def channel_stats(images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Per-channel mean and population std `[C]` (float64) of images `[N, H, W, C]`.

  A constant channel gets std 1 (normalization then only centers it).
  """
  flat = np.asarray(images, np.float64).reshape(-1, images.shape[-1])
  mean, std = flat.mean(axis=0), flat.std(axis=0)
  return mean, np.where(std > 0, std, 1.0)


def normalize(images: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
  """`(images − mean) / std` per channel, float32."""
  return ((np.asarray(images, np.float64) - mean) / std).astype(np.float32)


def build_segmentation_dataset(
  name: str, raw: Mapping[str, tuple[np.ndarray, np.ndarray]], meta: dict[str, Any]
) -> SegmentationDataset:
  """Normalizes every split with the train split's channel statistics."""
  mean, std = channel_stats(raw["train"][0])
  splits = {
    s: SegmentationSplit(normalize(images, mean, std), masks.astype(np.float32))
    for s, (images, masks) in raw.items()
  }
  meta = dict(meta)
  meta["num_examples"] = {s: split.num_examples for s, split in splits.items()}
  meta["image_shape"] = list(splits["train"].x.shape[1:])
  meta["foreground_fraction"] = {s: float(split.y.mean()) for s, split in splits.items()}
  meta["preprocessing"] = {
    "normalize": "per channel (x − mean) / std, population statistics of the train "
    "split only, on pixel values 0..255",
    "train_mean": [float(v) for v in mean],
    "train_std": [float(v) for v in std],
  }
  return SegmentationDataset(
    name, splits["train"], splits["validation"], splits["test"], mean, std, meta
  )


def load_segmentation_file(path: PathLike, name: str | None = None) -> SegmentationDataset:
  """Any `.npz` with the horse file's layout (`read_segmentation_npz`), without a
  checksum: for other images of the same kind, or a modified copy."""
  path = pathlib.Path(path)
  meta = {
    "dataset": name or path.stem,
    "source": "path",
    "files": [{"path": path.name, "sha256": sha256_of(path) if path.is_file() else ""}],
    "split_rule": "shipped train/val/test arrays",
  }
  return build_segmentation_dataset(name or path.stem, read_segmentation_npz(path), meta)


def load_segmentation(
  name: str = "weizmann_horse", data_dir: PathLike | None = None
) -> SegmentationDataset:
  """A registered segmentation dataset (`SEGMENTATION_DATASETS`) from the data directory.

  Args:
    name: 'weizmann_horse'.
    data_dir: the data directory; None: $ENERGYNETS_DATA_DIR, else the per-user default
      (`resolve_data_dir`). A missing file is downloaded and built on first use
      (`energynets.data.fetch`).

  Raises:
    DataError: a missing folder or file, a checksum that differs from the registered
      one, or a malformed file (each naming the file).
  """
  if name not in SEGMENTATION_DATASETS:
    raise ValueError(
      f"unknown segmentation dataset {name!r}; known: {sorted(SEGMENTATION_DATASETS)}"
    )
  spec = SEGMENTATION_DATASETS[name]
  root, files = dataset_files(data_dir, spec.subdir, {"splits": spec.file}, name)
  path = files["splits"]
  digest = sha256_of(path)
  if digest != spec.sha256:
    raise DataError(
      path,
      None,
      f"sha256 {digest} differs from the registered {spec.sha256} "
      "(to use the file anyway: segmentation.load_segmentation_file)",
    )
  raw = read_segmentation_npz(path)
  counts = {s: len(images) for s, (images, _) in raw.items()}
  shape = next(iter(raw.values()))[0].shape[1:]
  if counts != dict(spec.counts) or shape != spec.image_shape:
    raise DataError(
      path,
      None,
      f"holds {counts} images of {shape}; the registry expects "
      f"{dict(spec.counts)} of {spec.image_shape}",
    )
  meta = {
    "dataset": name,
    "source": "segmentation registry",
    "data_dir": str(root.parent),
    "files": [{"path": str(path.relative_to(root.parent)), "sha256": digest}],
    "url": spec.url,
    "citation": spec.citation,
    "split_rule": spec.split,
  }
  return build_segmentation_dataset(name, raw, meta)
