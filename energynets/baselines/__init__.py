"""Classical (non-learned) baselines, numpy-side: denoising by median filter, TV and BM3D."""

from energynets.baselines.denoising import BASELINES
from energynets.baselines.denoising import BM3D
from energynets.baselines.denoising import MEDIAN
from energynets.baselines.denoising import MEDIAN_SIZE_GRID
from energynets.baselines.denoising import NOISY
from energynets.baselines.denoising import TV
from energynets.baselines.denoising import TV_WEIGHT_GRID
from energynets.baselines.denoising import Baseline
from energynets.baselines.denoising import bm3d_denoise
from energynets.baselines.denoising import evaluate_baselines
from energynets.baselines.denoising import identity
from energynets.baselines.denoising import median_denoise
from energynets.baselines.denoising import tune_on_validation
from energynets.baselines.denoising import tv_denoise

__all__ = [
  "BASELINES",
  "BM3D",
  "Baseline",
  "MEDIAN",
  "MEDIAN_SIZE_GRID",
  "NOISY",
  "TV",
  "TV_WEIGHT_GRID",
  "bm3d_denoise",
  "evaluate_baselines",
  "identity",
  "median_denoise",
  "tune_on_validation",
  "tv_denoise",
]
