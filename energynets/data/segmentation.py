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

Training-time augmentation (`augment`, `augmented_batch`): a random `crop`×`crop` window
(the original size by default) of the image padded by `pad` pixels on every side, and a
horizontal flip with probability ½, the same crop and flip for an image and its mask.
Padding is 'constant' by default: zeros, which for the normalized image is the train
split's mean colour and for the mask is background. The batch of a step is a pure
function of `(seed, step)` (as `batching.train_batch_indices`), so a resumed run sees
the same augmented batches.

SEAL's / DVN's crop protocol (their public code): train on random 24×24 crops of the
unpadded 32×32 image (`crop=24, pad=0`), predict on a fixed grid of 36 crops at offsets
`SEAL_CROP_OFFSETS` in each axis (`crop_grid`), and average the crops' soft masks per
pixel over the crops that cover it (`average_crops`). The nets and energies see only
24×24 inputs then (`FCN` is size-agnostic; `SegmentationEnergy` with `pooling='flatten'`
is built at its training size).
"""

import dataclasses
import os
import pathlib
from typing import Any, Iterable, Mapping

import numpy as np

from energynets.data import batching
from energynets.data.arff import DataError
from energynets.data.registry import dataset_files, sha256_of

PathLike = str | os.PathLike

# Split name -> the prefix of its arrays in the .npz.
SPLIT_PREFIXES = {"train": "train", "validation": "val", "test": "test"}
PAD_MODES = ("constant", "reflect", "edge")
DEFAULT_PAD = 4
# Crop offsets (rows and columns alike) of SEAL's 36 test crops of 24×24 in a 32×32
# image (iesl/seal-neurips-2022, its horse dataset reader's `thirty_six_crop`).
SEAL_CROP_OFFSETS = (0, 2, 3, 4, 6, 8)


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
        subdir="weizmann_horse", file="weizmann_horse_32x32_splits.npz",
        sha256="8aaf784cbc4ddaad59f8badb578beab4c69a2ffb2cc4ee27e05553db1599cd41",
        counts={"train": 160, "validation": 40, "test": 128}, image_shape=(32, 32, 3),
        split="shipped DVN/SEAL split: train 160, validation 40, test 128 (made here from "
              "the three .npy files of iesl/structured_prediction_baselines; docs/datasets.md)",
        url="https://raw.githubusercontent.com/iesl/structured_prediction_baselines/"
            "8336a0bcef1807227e6023b2d548b8323d5c36ff/data/weizmann_horse_seg/",
        citation="Borenstein & Ullman. Class-specific, top-down segmentation. ECCV 2002; "
                 "split of Gygli, Norouzi & Angelova, Deep Value Networks, ICML 2017.",
        sources={
            "weizmann_horse_train.npy":
                "aab5b0f9cbe1a4ede9711ea645e99903136ab0006efcaf45917753c486bb3e5c",
            "weizmann_horse_val.npy":
                "9d9a2be4c9e49950e4f6e028fa041043ab40cf409c5c78a0a8a18b17de2b1214",
            "weizmann_horse_test.npy":
                "1093ca5b440273dcb46c3e17b7f0443f66bbd67160855e398f3e7932d8fc25df",
        },
        source_sizes={"weizmann_horse_train.npy": 674256, "weizmann_horse_val.npy": 168334,
                      "weizmann_horse_test.npy": 539343},
        size=979067,
        license="No licence stated by the source; the Weizmann Horse images are for "
                "research use, cite Borenstein & Ullman (2002)."),
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
      raise ValueError(f"SegmentationSplit needs images [N, H, W, C] and masks [N, H, W] "
                       f"of the same N, H, W; got {self.x.shape} and {self.y.shape}")

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
      raise DataError(path, None, f"{prefix}_images must be [N, H, W, C] and "
                      f"{prefix}_masks [N, H, W] with the same N, H, W; got "
                      f"{images.shape} and {masks.shape}")
    if len(images) == 0:
      raise DataError(path, None, f"{prefix} split is empty")
    bad = masks > 1
    if bad.any():
      n, i, j = (int(v) for v in np.argwhere(bad)[0])
      raise DataError(path, None, f"{prefix}_masks must hold only 0 and 1; found "
                      f"{int(masks[n, i, j])} at image {n}, pixel ({i}, {j})")
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


def build_segmentation_dataset(name: str, raw: Mapping[str, tuple[np.ndarray, np.ndarray]],
                               meta: dict[str, Any]) -> SegmentationDataset:
  """Normalizes every split with the train split's channel statistics."""
  mean, std = channel_stats(raw["train"][0])
  splits = {s: SegmentationSplit(normalize(images, mean, std), masks.astype(np.float32))
            for s, (images, masks) in raw.items()}
  meta = dict(meta)
  meta["num_examples"] = {s: split.num_examples for s, split in splits.items()}
  meta["image_shape"] = list(splits["train"].x.shape[1:])
  meta["foreground_fraction"] = {s: float(split.y.mean()) for s, split in splits.items()}
  meta["preprocessing"] = {
      "normalize": "per channel (x − mean) / std, population statistics of the train "
                   "split only, on pixel values 0..255",
      "train_mean": [float(v) for v in mean], "train_std": [float(v) for v in std]}
  return SegmentationDataset(name, splits["train"], splits["validation"], splits["test"],
                             mean, std, meta)


def load_segmentation_file(path: PathLike, name: str | None = None) -> SegmentationDataset:
  """Any `.npz` with the horse file's layout (`read_segmentation_npz`), without a
  checksum: for other images of the same kind, or a modified copy."""
  path = pathlib.Path(path)
  meta = {"dataset": name or path.stem, "source": "path",
          "files": [{"path": path.name, "sha256": sha256_of(path) if path.is_file() else ""}],
          "split_rule": "shipped train/val/test arrays"}
  return build_segmentation_dataset(name or path.stem, read_segmentation_npz(path), meta)


def load_segmentation(name: str = "weizmann_horse",
                      data_dir: PathLike | None = None) -> SegmentationDataset:
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
    raise ValueError(f"unknown segmentation dataset {name!r}; known: "
                     f"{sorted(SEGMENTATION_DATASETS)}")
  spec = SEGMENTATION_DATASETS[name]
  root, files = dataset_files(data_dir, spec.subdir, {"splits": spec.file}, name)
  path = files["splits"]
  digest = sha256_of(path)
  if digest != spec.sha256:
    raise DataError(path, None, f"sha256 {digest} differs from the registered {spec.sha256} "
                    "(to use the file anyway: segmentation.load_segmentation_file)")
  raw = read_segmentation_npz(path)
  counts = {s: len(images) for s, (images, _) in raw.items()}
  shape = next(iter(raw.values()))[0].shape[1:]
  if counts != dict(spec.counts) or shape != spec.image_shape:
    raise DataError(path, None, f"holds {counts} images of {shape}; the registry expects "
                    f"{dict(spec.counts)} of {spec.image_shape}")
  meta = {"dataset": name, "source": "segmentation registry", "data_dir": str(root.parent),
          "files": [{"path": str(path.relative_to(root.parent)), "sha256": digest}],
          "url": spec.url, "citation": spec.citation, "split_rule": spec.split}
  return build_segmentation_dataset(name, raw, meta)


# ------------------------------------------------------------------------ augmentation


def augment(images: np.ndarray, masks: np.ndarray, rng: np.random.Generator,
            pad: int = DEFAULT_PAD, flip: bool = True, pad_mode: str = "constant",
            crop: int = 0, positions: np.ndarray | None = None,
            num_draws: int | None = None) -> tuple[np.ndarray, np.ndarray]:
  """Random padded crop and horizontal flip, the same for each image and its mask.

  Per example: pad `pad` pixels on every side (`pad_mode`: 'constant' zeros, 'reflect'
  or 'edge', as `np.pad`), take a `crop`×`crop` window (0: the original `H×W`) at a
  uniform offset in `[0, H + 2·pad − crop] × [0, W + 2·pad − crop]` (for the original
  size: a shift of up to `pad` pixels each way), then mirror left-right with
  probability ½ if `flip`. Draws come from `rng` in a fixed order (offsets, then flips),
  so equal generators give equal outputs. With `positions`, the draws are made for
  `num_draws` rows and each image takes those of its position: a process holding part
  of a global batch augments its rows as the whole batch would be augmented.

  Args:
    images: `[N, H, W, C]`.
    masks: `[N, H, W]`.
    rng: the generator of this batch.
    pad: the padding in pixels, ≥ 0.
    flip: whether to flip.
    pad_mode: one of `PAD_MODES`.
    crop: the side of the window, 0 < crop ≤ min(H, W) + 2·pad; 0: the original size.
    positions: int `[N]`, each image's row among the `num_draws` rows drawn for; None:
      the images are those rows, in order.
    num_draws: the rows drawn for (with `positions`).

  Returns:
    `(images [N, h, w, C], masks [N, h, w])` with `h = w = crop` (or `H, W`), the input
    dtypes.
  """
  if images.ndim != 4 or masks.shape != images.shape[:3]:
    raise ValueError(f"augment needs images [N, H, W, C] and masks [N, H, W]; got "
                     f"{images.shape} and {masks.shape}")
  if pad < 0 or pad_mode not in PAD_MODES:
    raise ValueError(f"augment needs pad >= 0 and pad_mode in {PAD_MODES}; got {pad}, "
                     f"{pad_mode!r}")
  n, height, width = masks.shape
  h, w = (crop, crop) if crop else (height, width)
  if crop < 0 or h > height + 2 * pad or w > width + 2 * pad:
    raise ValueError(f"augment's crop={crop} must be in [0, min(H, W) + 2·pad] = "
                     f"[0, {min(height, width) + 2 * pad}]")
  if (positions is None) != (num_draws is None):
    raise ValueError("augment takes positions and num_draws together, or neither")
  drawn = n if num_draws is None else num_draws
  offsets = rng.integers(0, [height + 2 * pad - h + 1, width + 2 * pad - w + 1],
                         size=(drawn, 2))
  flips = rng.random(drawn) < 0.5 if flip else np.zeros(drawn, bool)
  if positions is not None:
    positions = np.asarray(positions)
    if positions.shape != (n,) or n and not 0 <= positions.min() <= positions.max() < drawn:
      raise ValueError(f"augment needs one position in [0, {drawn}) per image; got "
                       f"{positions.shape[0] if positions.ndim else 0} for {n} images")
    offsets, flips = offsets[positions], flips[positions]
  # One padded copy of the batch: image and mask padded the same way (a 'constant'
  # mask pad is background, 0), so every crop below is aligned across the two.
  spatial = ((0, 0), (pad, pad), (pad, pad))
  padded_images = np.pad(images, spatial + ((0, 0),), mode=pad_mode)
  padded_masks = np.pad(masks, spatial, mode=pad_mode)
  out_images = np.empty((n, h, w) + images.shape[3:], images.dtype)
  out_masks = np.empty((n, h, w), masks.dtype)
  for i, ((dy, dx), mirror) in enumerate(zip(offsets, flips)):
    image = padded_images[i, dy:dy + h, dx:dx + w]
    mask = padded_masks[i, dy:dy + h, dx:dx + w]
    out_images[i], out_masks[i] = (image[:, ::-1], mask[:, ::-1]) if mirror else (image, mask)
  return out_images, out_masks


# First entry of the augmentation generator's seed: a stream of its own, so the draws
# never coincide with the row permutation's `default_rng([seed, epoch])`.
_AUGMENT_STREAM = 21


def augmented_batch(x: np.ndarray, y: np.ndarray, batch_size: int, seed: int, step: int,
                    pad: int = DEFAULT_PAD, flip: bool = True, pad_mode: str = "constant",
                    crop: int = 0, num_shards: int = 1, shards: Iterable[int] | None = None,
                    first_row: int = 0, num_rows: int | None = None) -> dict[str, np.ndarray]:
  """The augmented training batch of step `step`, a pure function of `(seed, step)`.

  Rows are `batching.sharded_batch_indices(num_rows, batch_size, seed, step, num_shards)`
  (with one shard: `train_batch_indices`, epochs of seeded permutations, full batches),
  augmented by `augment` with `np.random.default_rng([stream, seed, step])`, the draws
  made for the whole global batch and each row taking those of its place in it. A
  process holding some of the shards gets exactly its part of the global batch.

  Args:
    x: the images held `[n, H, W, C]`, rows `first_row .. first_row + n - 1` of the split.
    y: their masks `[n, H, W]`.
    batch_size: B, the global batch size; a multiple of `num_shards`.
    seed: the run's seed.
    step: the training step.
    pad, flip, pad_mode, crop: as `augment`.
    num_shards: S, the contiguous shards of the training rows (`batching.shard_bounds`).
    shards: the shards to draw from, in order (a process's `batching.process_shards`);
      None: all of them.
    first_row: the split's row that `x[0]` is.
    num_rows: N, the split's rows in all processes; None: `len(x)`.

  Returns:
    `{"x": [B / S * len(shards), h, w, C], "y": [..., h, w]}`.
  """
  num_rows = len(x) if num_rows is None else num_rows
  idx = batching.sharded_batch_indices(num_rows, batch_size, seed, step, num_shards, shards)
  rng = np.random.default_rng([_AUGMENT_STREAM, seed, step])
  per_shard = batch_size // num_shards
  # Each drawn row's place in the global batch: B/S per shard, in shard order.
  positions = np.concatenate([np.arange(q * per_shard, (q + 1) * per_shard)
                              for q in (range(num_shards) if shards is None else shards)])
  idx = idx - first_row
  if idx.min() < 0 or idx.max() >= len(x):
    raise ValueError(f"the batch's rows are not among the {len(x)} rows held from row "
                     f"{first_row} on: hold the rows of the shards drawn from")
  images, masks = augment(x[idx], y[idx], rng, pad=pad, flip=flip, pad_mode=pad_mode,
                          crop=crop, positions=positions, num_draws=batch_size)
  return {"x": images, "y": masks}


# ------------------------------------------------------------------ test-time crops


def _check_grid(height: int, width: int, size: int, offsets) -> None:
  if size <= 0 or not offsets or min(offsets) < 0 or max(offsets) + size > min(height, width):
    raise ValueError(f"a crop grid of {size}×{size} windows at offsets {tuple(offsets)} "
                     f"does not fit a {height}×{width} image")


def crop_grid(images: np.ndarray, size: int, offsets=SEAL_CROP_OFFSETS) -> np.ndarray:
  """`[N, H, W, ...] -> [N·K², size, size, ...]`: the K×K `size`-pixel windows at
  (`offsets[i]`, `offsets[j]`), image-major (image n's crops are rows n·K² ... )."""
  n, height, width = images.shape[:3]
  _check_grid(height, width, size, offsets)
  crops = [images[:, dy:dy + size, dx:dx + size] for dy in offsets for dx in offsets]
  return np.stack(crops, axis=1).reshape((n * len(crops), size, size) + images.shape[3:])


def with_mirrors(rows: np.ndarray) -> np.ndarray:
  """`[N, H, W, ...] -> [2N, H, W, ...]`: the rows, then their left-right mirrors."""
  return np.concatenate([rows, rows[:, :, ::-1]])


def average_mirrors(probs: np.ndarray) -> np.ndarray:
  """The inverse of `with_mirrors` for soft masks: `[2N, H, W] -> [N, H, W]`, each pixel
  the mean of its row's prediction and the mirrored-back prediction of the mirror."""
  if probs.ndim != 3 or len(probs) % 2:
    raise ValueError(f"average_mirrors needs [2N, H, W] soft masks (rows, then their "
                     f"mirrors); got {probs.shape}")
  rows, mirrors = np.split(probs.astype(np.float64), 2)
  return ((rows + mirrors[:, :, ::-1]) / 2).astype(probs.dtype)


def average_crops(crop_probs: np.ndarray, height: int, width: int,
                  offsets=SEAL_CROP_OFFSETS) -> np.ndarray:
  """The inverse of `crop_grid` for soft masks: `[N·K², s, s] -> [N, H, W]`, each pixel the
  mean of the crops that cover it (SEAL's test-time averaging); pixels no crop covers
  raise, since they would have no prediction."""
  size = crop_probs.shape[-1]
  _check_grid(height, width, size, offsets)
  k2 = len(offsets) ** 2
  if crop_probs.ndim != 3 or crop_probs.shape[0] % k2 or crop_probs.shape[1] != size:
    raise ValueError(f"average_crops needs [N·{k2}, {size}, {size}] soft masks; got "
                     f"{crop_probs.shape}")
  probs = crop_probs.reshape((-1, k2, size, size)).astype(np.float64)
  total = np.zeros((len(probs), height, width))
  count = np.zeros((height, width))
  for c, (dy, dx) in enumerate((dy, dx) for dy in offsets for dx in offsets):
    total[:, dy:dy + size, dx:dx + size] += probs[:, c]
    count[dy:dy + size, dx:dx + size] += 1
  if not count.all():
    raise ValueError(f"crops of {size} at offsets {tuple(offsets)} leave pixels of the "
                     f"{height}×{width} image uncovered")
  return (total / count).astype(crop_probs.dtype)
