"""The denoising task: generated depth-like scenes (`energynets.data.denoising`); PSNR on
the depth test scenes and on crops of scikit-image's natural images (`natural/psnr`), the
transfer test of a denoiser trained on depth."""

from typing import NamedTuple

import ml_collections
import numpy as np

from energynets import metrics
from energynets.data import denoising
from experiments.tasks.base import Predictions
from experiments.tasks.base import Task
from experiments.tasks.base import gathered_rows
from experiments.tasks.base import process_part

__all__ = [
  "DENOISING",
  "DENOISING_DATASETS",
  "DENOISING_METRICS",
  "DenoisingData",
  "denoising_process_rows",
  "denoising_results",
  "denoising_validation_metrics",
  "load_denoising",
]

DENOISING_METRICS = {
  "psnr": "mean over images of 10·log10(1 / MSE_i) in dB: values in [0, 1], peak 1 = the "
  "full depth range (the 8-bit convention with peak 255, divided through)",
  "natural/psnr": "the same on crops of scikit-image's grayscale natural images "
  "(a denoiser trained on depth scenes, tested for transfer)",
}


class DenoisingData(NamedTuple):
  """The depth-scene splits plus the natural-image test crops of one noise setting.

  `input_statistics`: set where the splits hold one process's rows (`keep_rows`): the
  mean and standard deviation of all training rows' noisy images, which the denoisers
  are standardized with (`builders.denoising_input_statistics`); None: computed from
  `train`.
  """

  name: str
  train: denoising.DenoisingSplit
  validation: denoising.DenoisingSplit
  test: denoising.DenoisingSplit
  natural: denoising.DenoisingSplit
  meta: dict
  input_statistics: dict | None = None


def load_denoising(config: ml_collections.ConfigDict) -> DenoisingData:
  cfg = config.data
  options = dict(
    num_train=cfg.num_train,
    num_validation=cfg.num_validation,
    height=cfg.height,
    width=cfg.width,
    noise_sigma=cfg.noise_sigma,
    seed=cfg.split_seed,
  )
  depth = denoising.load_denoising("depth_scenes", num_test=cfg.num_test, **options)
  # Same train/validation scenes (a pure function of the arguments); only test differs.
  natural = denoising.load_denoising(
    "natural_images",
    num_train=0,
    num_validation=0,
    **{k: v for k, v in options.items() if not k.startswith("num_")},
  )
  meta = dict(
    depth.meta,
    natural_test=natural.meta["test_source"],
    natural_count=natural.test.num_examples,
    split_rule="generated",
  )
  return DenoisingData(cfg.name, depth.train, depth.validation, depth.test, natural.test, meta)


def denoising_validation_metrics(split, estimate: np.ndarray) -> dict[str, float]:
  return {"validation/psnr": metrics.psnr(split.y, estimate)}


def denoising_results(dataset: DenoisingData, predictions: Predictions) -> dict[str, float]:
  return {
    f"{name}/psnr": metrics.psnr(split.y, predictions(split))
    for name, split in (
      ("validation", dataset.validation),
      ("test", dataset.test),
      ("natural", dataset.natural),
    )
  }


def denoising_process_rows(
  dataset: DenoisingData, process_index: int, process_count: int
) -> DenoisingData:
  """`dataset` holding only process `process_index`'s rows of every split (`process_part`),
  with the input statistics of all training rows."""
  if process_count == 1:
    return dataset
  # The numbers builders.denoising_input_statistics computes from the whole train split.
  images = np.asarray(dataset.train.x, np.float64)
  statistics = dict(input_mean=float(images.mean()), input_std=float(images.std()))
  return process_part(
    dataset,
    process_index,
    process_count,
    ("train", "validation", "test", "natural"),
    input_statistics=statistics,
  )


DENOISING = Task(
  "denoising",
  load_denoising,
  denoising_validation_metrics,
  denoising_results,
  DENOISING_METRICS,
  keep_rows=denoising_process_rows,
  all_rows=gathered_rows,
  eval_splits=("validation", "test", "natural"),
)

DENOISING_DATASETS = ("depth_scenes",)
