"""Segmentation images and masks augmented for training, and cropped for testing.

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
24×24 inputs then (`FCN` is size-agnostic; `SegmentationEnergy` with `pooling=flatten_pool`
is built at its training size).
"""

from collections.abc import Iterable
from typing import Literal
from typing import cast

import numpy as np

from energynets.data import batching

__all__ = [
  "DEFAULT_PAD",
  "PAD_MODES",
  "SEAL_CROP_OFFSETS",
  "augment",
  "augmented_batch",
  "average_crops",
  "average_mirrors",
  "crop_grid",
  "with_mirrors",
]

PAD_MODES = ("constant", "reflect", "edge")
DEFAULT_PAD = 4
# Crop offsets (rows and columns alike) of SEAL's 36 test crops of 24×24 in a 32×32
# image (iesl/seal-neurips-2022, its horse dataset reader's `thirty_six_crop`).
SEAL_CROP_OFFSETS = (0, 2, 3, 4, 6, 8)


def augment(
  images: np.ndarray,
  masks: np.ndarray,
  rng: np.random.Generator,
  pad: int = DEFAULT_PAD,
  flip: bool = True,
  pad_mode: str = "constant",
  crop: int = 0,
  positions: np.ndarray | None = None,
  num_draws: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
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
    raise ValueError(
      f"augment needs images [N, H, W, C] and masks [N, H, W]; got {images.shape} and {masks.shape}"
    )
  if pad < 0 or pad_mode not in PAD_MODES:
    raise ValueError(f"augment needs pad >= 0 and pad_mode in {PAD_MODES}; got {pad}, {pad_mode!r}")
  n, height, width = masks.shape
  h, w = (crop, crop) if crop else (height, width)
  if crop < 0 or h > height + 2 * pad or w > width + 2 * pad:
    raise ValueError(
      f"augment's crop={crop} must be in [0, min(H, W) + 2·pad] = "
      f"[0, {min(height, width) + 2 * pad}]"
    )
  if (positions is None) != (num_draws is None):
    raise ValueError("augment takes positions and num_draws together, or neither")
  drawn = n if num_draws is None else num_draws
  offsets = rng.integers(0, [height + 2 * pad - h + 1, width + 2 * pad - w + 1], size=(drawn, 2))
  flips = rng.random(drawn) < 0.5 if flip else np.zeros(drawn, bool)
  if positions is not None:
    positions = np.asarray(positions)
    if positions.shape != (n,) or n and not 0 <= positions.min() <= positions.max() < drawn:
      raise ValueError(
        f"augment needs one position in [0, {drawn}) per image; got "
        f"{positions.shape[0] if positions.ndim else 0} for {n} images"
      )
    offsets, flips = offsets[positions], flips[positions]
  # One padded copy of the batch: image and mask padded the same way (a 'constant'
  # mask pad is background, 0), so every crop below is aligned across the two.
  spatial = ((0, 0), (pad, pad), (pad, pad))
  # Checked above: every one of PAD_MODES is a mode np.pad knows.
  mode = cast(Literal["constant", "reflect", "edge"], pad_mode)
  padded_images = np.pad(images, spatial + ((0, 0),), mode=mode)
  padded_masks = np.pad(masks, spatial, mode=mode)
  out_images = np.empty((n, h, w) + images.shape[3:], images.dtype)
  out_masks = np.empty((n, h, w), masks.dtype)
  for i, ((dy, dx), mirror) in enumerate(zip(offsets, flips)):
    image = padded_images[i, dy : dy + h, dx : dx + w]
    mask = padded_masks[i, dy : dy + h, dx : dx + w]
    out_images[i], out_masks[i] = (image[:, ::-1], mask[:, ::-1]) if mirror else (image, mask)
  return out_images, out_masks


# First entry of the augmentation generator's seed: a stream of its own, so the draws
# never coincide with the row permutation's `default_rng([seed, epoch])`.
_AUGMENT_STREAM = 21


def augmented_batch(
  x: np.ndarray,
  y: np.ndarray,
  batch_size: int,
  seed: int,
  step: int,
  pad: int = DEFAULT_PAD,
  flip: bool = True,
  pad_mode: str = "constant",
  crop: int = 0,
  num_shards: int = 1,
  shards: Iterable[int] | None = None,
  first_row: int = 0,
  num_rows: int | None = None,
) -> dict[str, np.ndarray]:
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
  positions = np.concatenate(
    [
      np.arange(q * per_shard, (q + 1) * per_shard)
      for q in (range(num_shards) if shards is None else shards)
    ]
  )
  idx = idx - first_row
  if idx.min() < 0 or idx.max() >= len(x):
    raise ValueError(
      f"the batch's rows are not among the {len(x)} rows held from row "
      f"{first_row} on: hold the rows of the shards drawn from"
    )
  images, masks = augment(
    x[idx],
    y[idx],
    rng,
    pad=pad,
    flip=flip,
    pad_mode=pad_mode,
    crop=crop,
    positions=positions,
    num_draws=batch_size,
  )
  return {"x": images, "y": masks}


def _check_grid(height: int, width: int, size: int, offsets) -> None:
  if size <= 0 or not offsets or min(offsets) < 0 or max(offsets) + size > min(height, width):
    raise ValueError(
      f"a crop grid of {size}×{size} windows at offsets {tuple(offsets)} "
      f"does not fit a {height}×{width} image"
    )


def crop_grid(images: np.ndarray, size: int, offsets=SEAL_CROP_OFFSETS) -> np.ndarray:
  """`[N, H, W, ...] -> [N·K², size, size, ...]`: the K×K `size`-pixel windows at
  (`offsets[i]`, `offsets[j]`), image-major (image n's crops are rows n·K² ... )."""
  n, height, width = images.shape[:3]
  _check_grid(height, width, size, offsets)
  crops = [images[:, dy : dy + size, dx : dx + size] for dy in offsets for dx in offsets]
  return np.stack(crops, axis=1).reshape((n * len(crops), size, size) + images.shape[3:])


def with_mirrors(rows: np.ndarray) -> np.ndarray:
  """`[N, H, W, ...] -> [2N, H, W, ...]`: the rows, then their left-right mirrors."""
  return np.concatenate([rows, rows[:, :, ::-1]])


def average_mirrors(probs: np.ndarray) -> np.ndarray:
  """The inverse of `with_mirrors` for soft masks: `[2N, H, W] -> [N, H, W]`, each pixel
  the mean of its row's prediction and the mirrored-back prediction of the mirror."""
  if probs.ndim != 3 or len(probs) % 2:
    raise ValueError(
      f"average_mirrors needs [2N, H, W] soft masks (rows, then their mirrors); got {probs.shape}"
    )
  rows, mirrors = np.split(probs.astype(np.float64), 2)
  return ((rows + mirrors[:, :, ::-1]) / 2).astype(probs.dtype)


def average_crops(
  crop_probs: np.ndarray, height: int, width: int, offsets=SEAL_CROP_OFFSETS
) -> np.ndarray:
  """The inverse of `crop_grid` for soft masks: `[N·K², s, s] -> [N, H, W]`, each pixel the
  mean of the crops that cover it (SEAL's test-time averaging); pixels no crop covers
  raise, since they would have no prediction."""
  size = crop_probs.shape[-1]
  _check_grid(height, width, size, offsets)
  k2 = len(offsets) ** 2
  if crop_probs.ndim != 3 or crop_probs.shape[0] % k2 or crop_probs.shape[1] != size:
    raise ValueError(
      f"average_crops needs [N·{k2}, {size}, {size}] soft masks; got {crop_probs.shape}"
    )
  probs = crop_probs.reshape((-1, k2, size, size)).astype(np.float64)
  total = np.zeros((len(probs), height, width))
  count = np.zeros((height, width))
  for c, (dy, dx) in enumerate((dy, dx) for dy in offsets for dx in offsets):
    total[:, dy : dy + size, dx : dx + size] += probs[:, c]
    count[dy : dy + size, dx : dx + size] += 1
  if not count.all():
    raise ValueError(
      f"crops of {size} at offsets {tuple(offsets)} leave pixels of the "
      f"{height}×{width} image uncovered"
    )
  return (total / count).astype(crop_probs.dtype)
