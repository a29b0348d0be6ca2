"""The segmentation task: Weizmann horses (`energynets.data.segmentation`), x normalized
images `[N, 32, 32, 3]` and y binary masks `[N, 32, 32]`; mean per-image foreground IoU
(selection) and dataset IoU at 0.5; training batches augmented (random padded crop,
horizontal flip)."""

from collections.abc import Callable

import ml_collections
import numpy as np

from energynets import metrics
from energynets.data import segmentation
from experiments.tasks.base import Predictions
from experiments.tasks.base import Task
from experiments.tasks.base import gathered_rows
from experiments.tasks.base import held_shards
from experiments.tasks.base import num_examples
from experiments.tasks.base import process_part

__all__ = [
  "SEGMENTATION",
  "SEGMENTATION_DATASETS",
  "SEGMENTATION_METRICS",
  "load_segmentation",
  "segmentation_model_rows",
  "segmentation_predict_split",
  "segmentation_process_rows",
  "segmentation_results",
  "segmentation_train_batches",
  "segmentation_validation_metrics",
]

SEGMENTATION_METRICS = {
  "mean_iou": "mean over images of the foreground IoU |ŷ ∧ y| / |ŷ ∨ y|, ŷ = prob >= 0.5 "
  "(an image with empty gold and empty prediction scores 1; the horse splits "
  "have none); the SEAL / DVN 'mean image IoU'",
  "dataset_iou": "total intersection / total union over all images of the split, at 0.5",
  "scale": "fractions in [0, 1]",
}


def load_segmentation(config: ml_collections.ConfigDict) -> segmentation.SegmentationDataset:
  cfg = config.data
  return segmentation.load_segmentation(cfg.name, data_dir=cfg.data_dir or None)


def _segmentation_scores(split, probs: np.ndarray, prefix: str) -> dict[str, float]:
  return {
    f"{prefix}/mean_iou": metrics.mean_iou(probs, split.y),
    f"{prefix}/dataset_iou": metrics.dataset_iou(probs, split.y),
  }


def segmentation_validation_metrics(split, probs: np.ndarray) -> dict[str, float]:
  return _segmentation_scores(split, probs, "validation")


def segmentation_results(dataset, predictions: Predictions) -> dict[str, float]:
  results = {}
  for name in ("validation", "test"):
    split = getattr(dataset, name)
    results.update(_segmentation_scores(split, predictions(split), name))
  return results


def segmentation_train_batches(
  config, dataset, batch_size: int, seed: int, num_shards: int | None = None
) -> Callable[[int], dict]:
  """Training batches, a pure function of (seed, step): the loop's uniform random rows,
  augmented (`segmentation.augmented_batch`: a random `data.crop_size` window, 0 = the
  image's size, of the image padded by `data.augment_pad` pixels, flipped if
  `data.augment_flip`). With `data.augment` off: the rows as they are, or, with a
  `crop_size`, random crops without padding or flips (the model's input size). With
  `num_shards`, drawn shard by shard, and this process's part of each."""
  cfg = config.data
  # Augmentation off is the identity transform (no padding, no flip) of the same rows.
  pad, flip = (cfg.augment_pad, cfg.augment_flip) if cfg.augment else (0, False)
  shards, first_row = held_shards(dataset, num_shards) if num_shards else (None, 0)
  num_rows = num_examples(dataset, "train")
  return lambda step: segmentation.augmented_batch(
    dataset.train.x,
    dataset.train.y,
    batch_size,
    seed,
    step,
    pad=pad,
    flip=flip,
    pad_mode=cfg.augment_pad_mode,
    crop=cfg.crop_size,
    num_shards=num_shards or 1,
    shards=shards,
    first_row=first_row,
    num_rows=num_rows,
  )


def segmentation_model_rows(config, a: np.ndarray) -> np.ndarray:
  """Images `[N, H, W, C]` or masks `[N, H, W]` as the model sees them at evaluation:
  whole, or with `data.crop_size` the crops at `data.eval_crop_offsets`
  (`segmentation.crop_grid`, SEAL's test protocol); with `data.eval_flip`, those rows
  followed by their left-right mirrors (`segmentation.with_mirrors`)."""
  cfg = config.data
  if cfg.crop_size:
    a = segmentation.crop_grid(a, cfg.crop_size, tuple(cfg.eval_crop_offsets))
  return segmentation.with_mirrors(a) if cfg.eval_flip else a


def segmentation_predict_split(config, predict_rows, x: np.ndarray) -> np.ndarray:
  """The model's soft masks of whole images; with `data.crop_size`, of the crops
  (`segmentation_model_rows`) averaged back per pixel; with `data.eval_flip`, each
  row's mask averaged with its mirror's, mirrored back (test-time flip averaging)."""
  probs = predict_rows(segmentation_model_rows(config, x))
  if config.data.eval_flip:
    probs = segmentation.average_mirrors(probs)
  if not config.data.crop_size:
    return probs
  return segmentation.average_crops(
    probs, x.shape[1], x.shape[2], tuple(config.data.eval_crop_offsets)
  )


def segmentation_process_rows(
  dataset: segmentation.SegmentationDataset, process_index: int, process_count: int
) -> segmentation.SegmentationDataset:
  """`dataset` holding only process `process_index`'s rows of every split (`process_part`;
  the images stay normalized by all training rows' statistics)."""
  return process_part(dataset, process_index, process_count, ("train", "validation", "test"))


SEGMENTATION = Task(
  "segmentation",
  load_segmentation,
  segmentation_validation_metrics,
  segmentation_results,
  SEGMENTATION_METRICS,
  segmentation_train_batches,
  segmentation_predict_split,
  segmentation_model_rows,
  keep_rows=segmentation_process_rows,
  all_rows=gathered_rows,
)

SEGMENTATION_DATASETS = tuple(segmentation.SEGMENTATION_DATASETS)
