"""Image denoising data: procedural depth-like scenes and scikit-image's natural images.

The end-to-end SPEN paper (Belanger, Yang & McCallum 2017, §6.1) denoises Kinect depth
maps of 7-Scenes (Newcombe et al. 2011), which are not obtainable here. The substitute
(docs/design.md, "Data") is generated in-process:

* `depth_scenes`: piecewise planar depth maps with occlusion edges (`depth_scene`):
  a back wall, sometimes a floor, and a few planar objects in front, composited with a
  z-buffer (the nearest surface wins). That gives what depth maps look like: smooth
  ramps, creases where planes meet, and sharp jumps at occlusion boundaries.
* `natural_images`: the same train/validation depth scenes, but the test split is a
  fixed set of crops of the grayscale natural test images that scikit-image ships
  (`NATURAL_IMAGES`). It measures how a denoiser trained on depth scenes transfers.

The clean images come from `energynets.data.denoising_images`, whose names this module
re-exports; this module adds the noise, the splits and their seeds.

Value scale: every clean image lies in [0, 1]; 0 is the nearest representable depth and
1 the farthest (for natural images, black and white). PSNR uses peak 1 (the full depth
range), which is the 8-bit convention with peak 255 divided through by 255.

Noise: x = y + sigma * N(0, 1), i.i.d. per pixel and *not* clipped, so x is exactly the
Gaussian observation model of the paper's energy (its Eq. 12). The paper does not state
a noise level (its inputs are raw Kinect measurements, not synthetic noise); its only
anchors are PSNRs: BM3D 35.46 dB (Table 1) and "a PSNR of 30 can be obtained with
elementary signal processing" (§6.1.3); its best model reaches 40.4 dB. The default
`DEFAULT_NOISE_SIGMA` = 0.07 (7% of the depth range; noisy input ~23.1 dB) is the
round value at which both anchors hold on these scenes: on the default test split BM3D
given the true sigma scores 35.2 dB and a validation-tuned median filter 30.1 dB (on 15
test images, sigma 0.05 gave 37.8 / 32.0 and sigma 0.1 32.9 / 28.3). So the task is
about as hard as the paper's for classical methods. (Converged TV does as well as BM3D
here, 35.2 dB: piecewise planar scenes suit it.) See
`results/e2e/denoising_baselines.md`.

Determinism: image i of a split is a pure function of (seed, split, i): its scene and its
noise come from `np.random.default_rng([stream, seed, split_id, i])`. So a split never
changes when another split's size changes, and a smaller split is a prefix of a larger
one (stronger than generating test, then validation, then train from one stream).
"""

import dataclasses
import math
from typing import Any

import numpy as np

from energynets.data.denoising_images import DEFAULT_CROPS_PER_IMAGE
from energynets.data.denoising_images import DEFAULT_HEIGHT
from energynets.data.denoising_images import DEFAULT_WIDTH
from energynets.data.denoising_images import MIN_SIDE
from energynets.data.denoising_images import NATURAL_IMAGES
from energynets.data.denoising_images import _check_side
from energynets.data.denoising_images import depth_scene
from energynets.data.denoising_images import natural_image_crops

__all__ = [
  "DEFAULT_CROPS_PER_IMAGE",
  "DEFAULT_HEIGHT",
  "DEFAULT_NOISE_SIGMA",
  "DEFAULT_NUM_TEST",
  "DEFAULT_NUM_TRAIN",
  "DEFAULT_NUM_VALIDATION",
  "DEFAULT_SEED",
  "DEFAULT_WIDTH",
  "DenoisingDataset",
  "DenoisingSplit",
  "depth_scene",
  "load_denoising",
  "MIN_SIDE",
  "NAMES",
  "natural_image_crops",
  "NATURAL_IMAGES",
]

# Paper: 200 training images, 5500 test images. The counts are this project's CPU-sized
# choice.
DEFAULT_NUM_TRAIN = 1000
DEFAULT_NUM_VALIDATION = 100
DEFAULT_NUM_TEST = 100
# In the [0, 1] value scale (7% of the depth range; noisy-input PSNR 23.1 dB).
# Calibrated to the paper's PSNR anchors; see the module docstring.
DEFAULT_NOISE_SIGMA = 0.07
DEFAULT_SEED = 0

NAMES = ("depth_scenes", "natural_images")

# Random streams (first entry of the rng seed list); split ids (third entry).
_SCENE_STREAM = 11
_NOISE_STREAM = 12
_SPLIT_IDS = {"train": 0, "validation": 1, "test": 2, "natural": 3}


@dataclasses.dataclass(frozen=True)
class DenoisingSplit:
  """One split of a denoising task, numpy.

  Attributes:
    x: float32 [N, H, W] noisy observations (clean + Gaussian noise, not clipped).
    y: float32 [N, H, W] clean images in [0, 1].
  """

  x: np.ndarray
  y: np.ndarray

  def __post_init__(self):
    if self.x.ndim != 3 or self.x.shape != self.y.shape:
      raise ValueError(
        f"DenoisingSplit needs x and y of one shape [N, H, W]; got "
        f"{self.x.shape} and {self.y.shape}"
      )

  @property
  def num_examples(self) -> int:
    return len(self.x)


@dataclasses.dataclass(frozen=True)
class DenoisingDataset:
  """A denoising task with fixed train/validation/test splits.

  Not a `MultiLabelDataset`: outputs are continuous images, not label vectors. `meta` is
  JSON-serialisable: generator, seed, noise sigma, value scale, image size, counts and,
  for natural images, which image and tile each test crop is.
  """

  name: str
  train: DenoisingSplit
  validation: DenoisingSplit
  test: DenoisingSplit
  meta: dict[str, Any]

  def __post_init__(self):
    shapes = {s.x.shape[1:] for s in (self.train, self.validation, self.test)}
    if len(shapes) != 1:
      raise ValueError(f"{self.name}: splits disagree on the image size: {shapes}")

  @property
  def image_shape(self) -> tuple[int, int]:
    return tuple(self.test.x.shape[1:])

  @property
  def noise_sigma(self) -> float:
    return float(self.meta["noise_sigma"])


# ------------------------------------------------------------------------ loading


def _check_count(name: str, value: int) -> int:
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
    raise ValueError(f"{name} must be a non-negative integer; got {value!r}")
  return int(value)


def _check_sigma(sigma: float) -> float:
  try:
    s = float(sigma)
  except (TypeError, ValueError):
    raise ValueError(f"noise_sigma must be a positive number; got {sigma!r}") from None
  if not (math.isfinite(s) and s > 0):
    raise ValueError(
      f"noise_sigma must be positive and finite (in the [0, 1] value scale); got {sigma!r}"
    )
  return s


def _noisy(clean: np.ndarray, sigma: float, seed: int, split: str) -> np.ndarray:
  """clean + sigma * N(0, 1), image i's noise from its own stream (see module doc)."""
  noise = np.empty(clean.shape, np.float64)
  for i in range(len(clean)):
    rng = np.random.default_rng([_NOISE_STREAM, seed, _SPLIT_IDS[split], i])
    noise[i] = rng.standard_normal(clean.shape[1:])
  return (clean.astype(np.float64) + sigma * noise).astype(np.float32)


def _scenes(n: int, height: int, width: int, seed: int, split: str) -> np.ndarray:
  out = np.empty((n, height, width), np.float32)
  for i in range(n):
    out[i] = depth_scene(
      np.random.default_rng([_SCENE_STREAM, seed, _SPLIT_IDS[split], i]), height, width
    )
  return out


def load_denoising(
  name: str = "depth_scenes",
  *,
  num_train: int = DEFAULT_NUM_TRAIN,
  num_validation: int = DEFAULT_NUM_VALIDATION,
  num_test: int | None = None,
  height: int = DEFAULT_HEIGHT,
  width: int = DEFAULT_WIDTH,
  noise_sigma: float = DEFAULT_NOISE_SIGMA,
  seed: int = DEFAULT_SEED,
  crops_per_image: int = DEFAULT_CROPS_PER_IMAGE,
) -> DenoisingDataset:
  """A generated denoising dataset (see the module docstring for the task).

  Args:
    name: 'depth_scenes' (all splits generated) or 'natural_images' (train and
      validation are the same depth scenes as 'depth_scenes' with the same arguments;
      test is `natural_image_crops`).
    num_train: training images.
    num_validation: validation images.
    num_test: test images; None means `DEFAULT_NUM_TEST` for depth scenes and every
      crop for natural images (an integer takes the first crops, which cover the
      images round-robin).
    height: image rows (>= 16).
    width: image columns (>= 16).
    noise_sigma: standard deviation of the Gaussian noise in the [0, 1] value scale.
    seed: generator seed (non-negative integer): fixes scenes and noise.
    crops_per_image: 'natural_images' only: crops per natural image.

  Returns:
    The dataset; `meta` records name, generator, seed, noise sigma, value scale,
    image size, counts (and natural-image crop positions).

  Raises:
    ValueError: unknown name, negative counts, sides < 16, noise_sigma <= 0 (or not
      finite), a bad seed, or more natural test crops requested than exist.
  """
  if name not in NAMES:
    raise ValueError(f"unknown denoising dataset {name!r}; expected one of {NAMES}")
  num_train = _check_count("num_train", num_train)
  num_validation = _check_count("num_validation", num_validation)
  if num_test is not None:
    num_test = _check_count("num_test", num_test)
  height, width = _check_side("height", height), _check_side("width", width)
  sigma = _check_sigma(noise_sigma)
  seed = _check_count("seed", seed)

  clean = {
    "train": _scenes(num_train, height, width, seed, "train"),
    "validation": _scenes(num_validation, height, width, seed, "validation"),
  }
  meta: dict[str, Any] = {
    "name": name,
    "generator": "energynets.data.denoising.depth_scene (piecewise planar, z-buffer occlusion)",
    "seed": seed,
    "noise_sigma": sigma,
    "noise": "x = y + noise_sigma * N(0, 1), i.i.d., not clipped",
    "value_scale": "[0, 1]: 0 nearest, 1 farthest depth (natural images: black to "
    "white); PSNR peak 1",
    "height": height,
    "width": width,
    "split": "generated in-process; image i of a split depends only on (seed, split, i)",
  }
  if name == "depth_scenes":
    clean["test"] = _scenes(
      DEFAULT_NUM_TEST if num_test is None else num_test, height, width, seed, "test"
    )
    noise_split = "test"
  else:
    crops, records = natural_image_crops(height, width, crops_per_image=crops_per_image)
    if num_test is not None:
      if num_test > len(crops):
        raise ValueError(
          f"num_test={num_test} but there are only {len(crops)} natural "
          f"{height}x{width} crops ({crops_per_image} per image)"
        )
      crops, records = crops[:num_test], records[:num_test]
    clean["test"] = crops
    noise_split = "natural"
    meta["test_source"] = (
      "skimage.data grayscale natural images "
      + ", ".join(NATURAL_IMAGES)
      + f"; up to {crops_per_image} tiles per image"
    )
    meta["test_crops"] = records

  splits = {}
  for split, y in clean.items():
    x = _noisy(y, sigma, seed, noise_split if split == "test" else split)
    splits[split] = DenoisingSplit(x=x, y=y)
  meta["counts"] = {split: s.num_examples for split, s in splits.items()}
  return DenoisingDataset(
    name=name,
    train=splits["train"],
    validation=splits["validation"],
    test=splits["test"],
    meta=meta,
  )
