"""Classical denoising baselines: the noisy input, median filter, total variation, BM3D.

They put the learned denoisers' PSNR in context: the end-to-end SPEN paper's Table 1
lists BM3D (35.46 dB on 7-Scenes) next to its energy models. Everything is numpy on
the CPU, one image at a time; inputs are [N, H, W] (or one [H, W] image) in the
project's [0, 1] value scale, outputs float32 of the same shape.

Estimates are not clipped to [0, 1]: each method is scored as it comes, and the noisy
input's PSNR is then exactly that of the Gaussian observation. Parameters are chosen
on the validation split only (`tune_on_validation`), never on test; BM3D is given the
true noise sigma, as is standard (it is a noise level, not a tuned weight).
"""

from collections.abc import Callable
from collections.abc import Sequence
from typing import Any
from typing import NamedTuple

import numpy as np

from energynets import metrics

# TV weights tried by `evaluate_baselines` (skimage's `weight`: larger = smoother). For
# noise sigma 0.01-0.1 on depth scenes the validation optimum is inside the grid.
TV_WEIGHT_GRID: tuple[float, ...] = (
  0.005,
  0.01,
  0.02,
  0.03,
  0.04,
  0.05,
  0.06,
  0.07,
  0.08,
  0.1,
  0.12,
  0.15,
  0.2,
  0.3,
)
# Chambolle TV solver tolerance and iteration cap (see `tv_denoise`); at these the PSNR
# is within ~0.03 dB of a 5000-iteration solve.
TV_EPS = 1e-6
TV_MAX_ITERATIONS = 2000
# Smallest image side given to the `bm3d` package (it crashes on 8 x 8 images).
BM3D_MIN_SIDE = 16
# Median filter window sides tried by `evaluate_baselines`.
MEDIAN_SIZE_GRID: tuple[int, ...] = (3, 5, 7, 9)

# Scores within this distance count as tied in `tune_on_validation`.
_TIE_ATOL = 1e-9


def _images(name: str, x: Any) -> tuple[np.ndarray, bool]:
  """(float64 [N, H, W], whether the input was a single [H, W] image)."""
  a = np.asarray(x, np.float64)
  if a.ndim == 2:
    return a[None], True
  if a.ndim != 3 or a.size == 0:
    raise ValueError(f"{name} must be images [N, H, W] or one image [H, W]; got shape {a.shape}")
  return a, False


def _per_image(x: Any, denoise_one: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
  images, single = _images("x", x)
  out = np.stack([denoise_one(image) for image in images]).astype(np.float32)
  return out[0] if single else out


def identity(x: Any) -> np.ndarray:
  """The noisy input itself (float32 copy): the 'no denoising' reference row."""
  images, single = _images("x", x)
  out = images.astype(np.float32)
  return out[0] if single else out


def median_denoise(x: Any, size: int) -> np.ndarray:
  """A size x size median filter on each image (edges: reflected).

  The "elementary signal processing" reference: the paper notes that such methods
  reach about 30 dB on its data, which the default noise level reproduces.

  Args:
    x: [N, H, W] noisy images (or one [H, W]).
    size: window side (odd integer >= 3).

  Returns:
    float32 filtered images, the shape of `x`.
  """
  from scipy import ndimage  # pylint: disable=g-import-not-at-top

  if (
    isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 3 or (size % 2 == 0)
  ):
    raise ValueError(f"median size must be an odd integer >= 3; got {size!r}")
  return _per_image(x, lambda image: ndimage.median_filter(image, size=int(size), mode="reflect"))


def tv_denoise(
  x: Any, weight: float, *, eps: float = TV_EPS, max_num_iter: int = TV_MAX_ITERATIONS
) -> np.ndarray:
  """Total-variation denoising of each image (Chambolle's algorithm, scikit-image).

  Each image is denoised on its own as a 2-D image (a stack passed to
  `denoise_tv_chambolle` whole would be treated as one 3-D volume). The solver runs
  to a tighter tolerance than scikit-image's default (eps 2e-4, 200 iterations): that
  default stops early enough that PSNR is not even monotone around the best weight
  (on depth scenes at sigma 0.07: 34.5 dB at weight 0.06, 33.5 at 0.07; converged,
  35.0 and 35.1), so tuning would pick up solver noise rather than the weight.

  Args:
    x: [N, H, W] noisy images (or one [H, W]).
    weight: TV weight (> 0); larger removes more noise and more detail.
    eps: scikit-image's relative stopping tolerance.
    max_num_iter: iteration cap.

  Returns:
    float32 denoised images, the shape of `x`.
  """
  from skimage.restoration import denoise_tv_chambolle  # pylint: disable=g-import-not-at-top

  weight = float(weight)
  if not weight > 0:
    raise ValueError(f"TV weight must be > 0; got {weight}")
  return _per_image(
    x, lambda image: denoise_tv_chambolle(image, weight=weight, eps=eps, max_num_iter=max_num_iter)
  )


def _import_bm3d():
  try:
    import bm3d  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError(
      "bm3d_denoise needs the `bm3d` package: pip install bm3d (or pip install -e '.[bench]')"
    ) from e
  return bm3d


def bm3d_denoise(x: Any, sigma: float) -> np.ndarray:
  """BM3D (Dabov et al. 2007; the `bm3d` package, both stages) on each image.

  `bm3d` is imported here, not at module import, so the rest of the project works
  without it. About 1 s per 64 x 64 image on one CPU core.

  Args:
    x: [N, H, W] noisy images (or one [H, W]); each side >= `BM3D_MIN_SIDE`.
    sigma: the noise standard deviation in the images' value scale (> 0).

  Returns:
    float32 denoised images, the shape of `x`.

  Raises:
    ImportError: the `bm3d` package is not installed (the message says how to).
    ValueError: sigma <= 0, or an image side below `BM3D_MIN_SIDE`.
  """
  bm3d = _import_bm3d()
  sigma = float(sigma)
  if not sigma > 0:
    raise ValueError(f"BM3D sigma must be > 0; got {sigma}")
  images, _ = _images("x", x)
  if min(images.shape[1:]) < BM3D_MIN_SIDE:
    # bm3d 4.0.3 segfaults on 8 x 8 input, killing the process; refuse small images.
    raise ValueError(
      f"bm3d_denoise needs images at least {BM3D_MIN_SIDE}x{BM3D_MIN_SIDE}; got {images.shape[1:]}"
    )
  return _per_image(x, lambda image: bm3d.bm3d(image, sigma_psd=sigma))


def tune_on_validation(
  fn: Callable[[np.ndarray, Any], np.ndarray],
  param_grid: Sequence[Any],
  val_noisy: Any,
  val_clean: Any,
  peak: float = 1.0,
) -> tuple[Any, list[tuple[Any, float]]]:
  """The grid value whose `fn(val_noisy, value)` has the best validation PSNR.

  Ties (within 1e-9 dB) go to the earliest grid value, so the order of the grid is the
  preference order.

  Args:
    fn: denoiser called as `fn(noisy_images, parameter)`.
    param_grid: candidate parameters (non-empty).
    val_noisy: [N, H, W] noisy validation images.
    val_clean: [N, H, W] clean validation images.
    peak: PSNR peak (value range).

  Returns:
    (best parameter, [(parameter, validation PSNR in dB)] for the whole grid).
  """
  grid = list(param_grid)
  if not grid:
    raise ValueError("param_grid must not be empty")
  scores = [(p, metrics.psnr(val_clean, fn(val_noisy, p), peak=peak)) for p in grid]
  best = max(s for _, s in scores)
  return next(p for p, s in scores if s >= best - _TIE_ATOL), scores


class Baseline(NamedTuple):
  """A classical denoiser as `evaluate_baselines` scores it: `NOISY`, `MEDIAN`, `TV`,
  `BM3D`, or your own.

  Attributes:
    name: its key in the results.
    denoise: `denoise(x [N, H, W]) -> estimate` without a parameter, else
      `denoise(x, parameter)`.
    parameter: the results key of its parameter; None: it takes none.
    grid: the parameter's values tuned on validation PSNR (`tune_on_validation`); None
      with a parameter: the parameter is the noise level (`evaluate_baselines`'
      `noise_sigma`), as BM3D's.
  """

  name: str
  denoise: Callable[..., np.ndarray]
  parameter: str | None = None
  grid: tuple | None = None


NOISY = Baseline("noisy", identity)
MEDIAN = Baseline("median", median_denoise, "size", MEDIAN_SIZE_GRID)
TV = Baseline("tv", tv_denoise, "weight", TV_WEIGHT_GRID)
BM3D = Baseline("bm3d", bm3d_denoise, "sigma")
BASELINES = (NOISY, MEDIAN, TV, BM3D)


def evaluate_baselines(
  dataset,
  *,
  methods: Sequence[Baseline] = BASELINES,
  noise_sigma: float | None = None,
  peak: float = 1.0,
) -> dict[str, dict[str, float]]:
  """PSNR of the classical baselines on the validation and test splits.

  A baseline with a grid (the median window, TV's weight) is tuned on validation PSNR
  (`tune_on_validation`) and applied unchanged to test; one with a parameter but no
  grid (BM3D) gets `noise_sigma`, by default the dataset's true noise sigma.

  Args:
    dataset: a `energynets.data.denoising.DenoisingDataset` (validation and test are
      used; train is not).
    methods: `Baseline`s (default: `NOISY`, `MEDIAN`, `TV`, `BM3D`; another grid:
      `TV._replace(grid=(0.01, 0.1))`).
    noise_sigma: noise level given to the baselines that take it; None =
      `dataset.noise_sigma`.
    peak: PSNR peak (1 for the [0, 1] value scale).

  Returns:
    name -> {"validation/psnr", "test/psnr"} in dB, plus the parameter used under the
    baseline's `parameter` key ("size" for `MEDIAN`, "weight" for `TV`, each with
    "validation/psnr@<value>" for every grid value; "sigma" for `BM3D`).

  Raises:
    TypeError: a method that is not a `Baseline`.
  """
  wrong = [m for m in methods if not isinstance(m, Baseline)]
  if wrong:
    raise TypeError(f"methods must be Baseline values (NOISY, MEDIAN, TV, BM3D); got {wrong}")
  val, test = dataset.validation, dataset.test
  if val.num_examples == 0 or test.num_examples == 0:
    raise ValueError("evaluate_baselines needs non-empty validation and test splits")

  def scores(denoise: Callable[[np.ndarray], np.ndarray]) -> dict[str, float]:
    return {
      f"{name}/psnr": metrics.psnr(split.y, denoise(split.x), peak=peak)
      for name, split in (("validation", val), ("test", test))
    }

  results: dict[str, dict[str, float]] = {}
  for method in methods:
    if method.parameter is None:
      results[method.name] = scores(method.denoise)
    elif method.grid is not None:
      best, grid_scores = tune_on_validation(method.denoise, method.grid, val.x, val.y, peak)
      results[method.name] = {
        **scores(_with_parameter(method.denoise, best)),
        method.parameter: float(best),
        **{f"validation/psnr@{p:g}": s for p, s in grid_scores},
      }
    else:
      sigma = dataset.noise_sigma if noise_sigma is None else float(noise_sigma)
      results[method.name] = {
        **scores(_with_parameter(method.denoise, sigma)),
        method.parameter: sigma,
      }
  return results


def _with_parameter(
  denoise: Callable[[Any, Any], np.ndarray], parameter: Any
) -> Callable[[np.ndarray], np.ndarray]:
  """`x -> denoise(x, parameter)`."""
  return lambda x: denoise(x, parameter)
