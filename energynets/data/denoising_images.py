"""Clean images of the denoising task: generated depth-like scenes and natural crops.

`depth_scene` draws one piecewise planar depth map with occlusion edges from a
generator; `natural_image_crops` cuts fixed tiles from scikit-image's grayscale natural
test images. Both lie in [0, 1]. The task built from them (noise, splits, seeds) is
`energynets.data.denoising`, which re-exports these names.
"""

from typing import Any

import numpy as np

__all__ = [
  "DEFAULT_CROPS_PER_IMAGE",
  "DEFAULT_HEIGHT",
  "DEFAULT_WIDTH",
  "depth_scene",
  "MIN_SIDE",
  "natural_image_crops",
  "NATURAL_IMAGES",
]

# Paper: random 96 x 128 crops. The default size is this project's CPU-sized choice;
# pass height=96, width=128 for the paper's crops.
DEFAULT_HEIGHT = 64
DEFAULT_WIDTH = 64
# Crops taken from each natural image (evenly spaced over its grid of tiles).
DEFAULT_CROPS_PER_IMAGE = 8

# Smallest image side. The `bm3d` binary crashes the process (segfault) on an 8 x 8
# image; 16 keeps every baseline safe with margin and is far below any useful size.
MIN_SIDE = 16

# scikit-image test images bundled with the wheel (no download); RGB ones go to gray.
NATURAL_IMAGES = (
  "camera",
  "astronaut",
  "chelsea",
  "coffee",
  "coins",
  "moon",
  "page",
  "text",
  "clock",
  "rocket",
)

# --------------------------------------------------------------------------- scenes


def _plane(
  rng: np.random.Generator,
  u: np.ndarray,
  v: np.ndarray,
  depth: float,
  max_slope: float,
  u0: float,
  v0: float,
) -> np.ndarray:
  """z = depth + a (u - u0) + b (v - v0) with random slopes |a|, |b| <= max_slope."""
  a, b = rng.uniform(-max_slope, max_slope, size=2)
  return depth + a * (u - u0) + b * (v - v0)


def _convex_region(
  rng: np.random.Generator, u: np.ndarray, v: np.ndarray, cu: float, cv: float
) -> np.ndarray:
  """bool mask of a random convex region around (cu, cv): rotated rectangle, ellipse or
  convex polygon."""
  ru, rv = rng.uniform(0.08, 0.35, size=2)
  angle = rng.uniform(0.0, np.pi)
  du, dv = u - cu, v - cv
  # Coordinates in the region's rotated frame.
  p = du * np.cos(angle) + dv * np.sin(angle)
  q = -du * np.sin(angle) + dv * np.cos(angle)
  kind = rng.integers(3)
  if kind == 0:  # rectangle
    return (np.abs(p) <= ru) & (np.abs(q) <= rv)
  if kind == 1:  # ellipse
    return (p / ru) ** 2 + (q / rv) ** 2 <= 1.0
  # Convex polygon: 3-7 vertices on the ellipse, in angle order; inside = left of
  # every edge (counter-clockwise order).
  n = int(rng.integers(3, 8))
  t = np.sort(rng.uniform(0.0, 2 * np.pi, size=n))
  vp, vq = ru * np.cos(t), rv * np.sin(t)
  inside = np.ones(u.shape, bool)
  for k in range(n):
    ep, eq = vp[(k + 1) % n] - vp[k], vq[(k + 1) % n] - vq[k]
    inside &= ep * (q - vq[k]) - eq * (p - vp[k]) >= 0
  return inside


def depth_scene(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
  """One depth-like image: planar surfaces composited with occlusion, in [0, 1].

  The scene is a back wall (a gently tilted plane at depth 0.6-0.9), with probability
  1/2 a floor (a plane that comes nearer towards the bottom of the image, meeting the
  wall in a crease), and 1-5 objects, each a tilted plane at depth 0.15-0.6 restricted
  to a random convex region (rotated rectangle, ellipse or convex polygon). A z-buffer
  keeps the nearest surface at every pixel, so objects occlude the wall and each other
  with sharp edges while each visible piece is an exact linear ramp.

  Coordinates are u = column / width, v = row / height in [0, 1), so a scene's
  geometry does not depend on the resolution. Slopes are bounded so that nothing
  leaves [0, 1] except rarely a corner of a steep floor; the result is clipped to
  [0, 1] to make the range a guarantee.

  Args:
    rng: the generator; the image is a deterministic function of its state.
    height: rows H >= 1.
    width: columns W >= 1.

  Returns:
    float32 [H, W] in [0, 1] (0 = nearest, 1 = farthest).
  """
  if height < 1 or width < 1:
    raise ValueError(f"depth_scene needs height, width >= 1; got {height}x{width}")
  v, u = np.meshgrid(np.arange(height) / height, np.arange(width) / width, indexing="ij")
  z = _plane(rng, u, v, rng.uniform(0.6, 0.9), 0.15, 0.5, 0.5)  # back wall
  if rng.random() < 0.5:
    # Floor: depth falls (nearer) linearly below a horizon row, plus a slight sideways
    # tilt; above the horizon it is behind the wall, so the wall hides it.
    horizon = rng.uniform(0.3, 0.7)
    drop = rng.uniform(0.4, 1.0)
    tilt = rng.uniform(-0.1, 0.1)
    floor = (z.max() + 0.05) - drop * (v - horizon) + tilt * (u - 0.5)
    z = np.minimum(z, floor)
  for _ in range(int(rng.integers(1, 6))):
    # The plane is anchored at the region's centre, so the visible piece stays near
    # its drawn depth.
    cu, cv = rng.uniform(0.1, 0.9, size=2)
    surface = _plane(rng, u, v, rng.uniform(0.15, 0.6), 0.25, cu, cv)
    mask = _convex_region(rng, u, v, cu, cv)
    z = np.where(mask, np.minimum(z, surface), z)
  return np.clip(z, 0.0, 1.0).astype(np.float32)


# ----------------------------------------------------------------- natural images


def _gray_image(name: str) -> np.ndarray:
  """float64 [H, W] in [0, 1] of one scikit-image test image."""
  from skimage import color  # pylint: disable=g-import-not-at-top
  from skimage import data as skdata  # pylint: disable=g-import-not-at-top
  from skimage import util  # pylint: disable=g-import-not-at-top

  image = getattr(skdata, name)()
  if image.ndim == 3:
    image = color.rgb2gray(image[..., :3])
  return util.img_as_float64(image)


def natural_image_crops(
  height: int = DEFAULT_HEIGHT,
  width: int = DEFAULT_WIDTH,
  *,
  crops_per_image: int = DEFAULT_CROPS_PER_IMAGE,
  images: tuple[str, ...] = NATURAL_IMAGES,
) -> tuple[np.ndarray, list[dict[str, Any]]]:
  """Fixed crops of scikit-image's grayscale natural test images.

  Each image is tiled into non-overlapping height x width tiles from its top-left
  corner (a remainder strip is dropped); `crops_per_image` tiles evenly spaced in
  row-major tile order are kept (all tiles if there are fewer). The crops are ordered
  round-robin over images (first crop of every image, then the second, ...), so any
  prefix covers as many images as possible. Nothing here is random: the crops depend
  only on the sizes. Images smaller than one tile are skipped.

  Args:
    height: crop rows.
    width: crop columns.
    crops_per_image: at most this many crops per image (>= 1).
    images: names of `skimage.data` functions that need no download.

  Returns:
    (clean float32 [N, height, width] in [0, 1], per-crop records
    {"image", "row", "col"} giving where each crop was cut).

  Raises:
    ValueError: bad sizes, or no image is large enough for one crop.
  """
  _check_side("height", height)
  _check_side("width", width)
  if (
    isinstance(crops_per_image, bool)
    or not isinstance(crops_per_image, int)
    or (crops_per_image < 1)
  ):
    raise ValueError(f"crops_per_image must be an integer >= 1; got {crops_per_image!r}")
  per_image = []
  for name in images:
    image = _gray_image(name)
    rows, cols = image.shape[0] // height, image.shape[1] // width
    if rows * cols == 0:
      continue
    picks = np.unique(
      np.round(np.linspace(0, rows * cols - 1, min(crops_per_image, rows * cols))).astype(int)
    )
    crops = []
    for k in picks:
      r, c = (int(k) // cols) * height, (int(k) % cols) * width
      crops.append((image[r : r + height, c : c + width], {"image": name, "row": r, "col": c}))
    per_image.append(crops)
  if not per_image:
    raise ValueError(f"no natural image is at least {height}x{width}")
  ordered = [
    crops[i] for i in range(max(map(len, per_image))) for crops in per_image if i < len(crops)
  ]
  clean = np.stack([c for c, _ in ordered]).astype(np.float32)
  return clean, [record for _, record in ordered]


def _check_side(name: str, value: int) -> int:
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < MIN_SIDE:
    raise ValueError(f"{name} must be an integer >= {MIN_SIDE}; got {value!r}")
  return int(value)
