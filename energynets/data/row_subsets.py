"""A multi-label dataset cut to fewer rows: one process's rows of every split
(`select_process_rows`), or a seeded training subset (`keep_train_rows`)."""

import copy
import dataclasses

import numpy as np

from energynets.data import batching
from energynets.data import mulan_rows
from energynets.data import splits
from energynets.data.splits import MultiLabelDataset
from energynets.data.splits import Split

__all__ = ["TooFewTrainingRows", "keep_train_rows", "select_process_rows", "take_rows"]


def take_rows(x: np.ndarray, y: np.ndarray, idx: np.ndarray) -> Split:
  """The `Split` of rows `idx` of `x` and `y` (contiguous copies)."""
  return Split(x=np.ascontiguousarray(x[idx]), y=np.ascontiguousarray(y[idx]))


def select_process_rows(
  dataset: MultiLabelDataset, process_index: int, process_count: int
) -> MultiLabelDataset:
  """`dataset` holding only process `process_index`'s rows of every split.

  Args:
    dataset: the whole dataset.
    process_index: this process.
    process_count: the processes of the run.

  Returns:
    The dataset whose splits are copies of the process's `batching.process_rows` (so the
    whole arrays can be freed), `meta["process_rows"]` recording them; with one process,
    `dataset` itself.
  """
  if process_count == 1:
    return dataset
  parts, held = {}, {}
  for split in ("train", "validation", "test"):
    whole = getattr(dataset, split)
    held[split] = batching.process_rows(len(whole.x), process_index, process_count)
    parts[split] = Split(whole.x[held[split]].copy(), whole.y[held[split]].copy())
  totals = {split: len(getattr(dataset, split).x) for split in held}
  meta = dict(
    dataset.meta, process_rows=mulan_rows.held_rows(held, totals, process_index, process_count)
  )
  return dataclasses.replace(
    dataset, meta=meta, train=parts["train"], validation=parts["validation"], test=parts["test"]
  )


class TooFewTrainingRows(ValueError):
  """`num_train` asks for more training rows than the dataset's training split has."""


# Second seed word of the training-subset permutation: a stream of its own, apart from
# the split rules' permutations of the same split_seed.
_SUBSET_STREAM = 1


def keep_train_rows(
  dataset: MultiLabelDataset, num_train: int, seed: int, feature_scaling: str = "none"
) -> MultiLabelDataset:
  """`dataset` training on a seeded random subset of its training rows.

  Args:
    dataset: the dataset, features unscaled (missing values already imputed).
    num_train: training rows to keep, 1..all; the subsets of one seed are nested (the
      first `num_train` rows of one permutation), so a smaller set is part of a larger.
    seed: seeds the permutation.
    feature_scaling: 'none', 'zscore', 'maxabs' or 'auto' (what the dataset's
      `meta["preprocessing"]["feature_scaling"]["auto"]` records), fit on the kept rows.

  Returns:
    The dataset with the kept rows in their original order, validation and test
    unchanged (scaled by the kept rows' statistics); `meta["train_subset"]` records the
    cut and `meta`'s counts and preprocessing describe the result (what 'auto' means
    for the dataset carried over from `dataset.meta`).

  Raises:
    TooFewTrainingRows (a ValueError): `num_train` outside 1..the training rows.
    ValueError: an unknown `feature_scaling`, or 'auto' for a dataset whose meta does
      not record what it means.
  """
  available = dataset.train.num_examples
  if not 1 <= num_train <= available:
    raise TooFewTrainingRows(
      f"{dataset.name}: num_train={num_train}: the training split has "
      f"{available} rows; keep 1..{available} (0: all)"
    )
  rows = np.sort(np.random.default_rng([seed, _SUBSET_STREAM]).permutation(available)[:num_train])
  meta = copy.deepcopy(dataset.meta)
  meta["train_subset"] = {
    "kept": num_train,
    "of": available,
    "seed": seed,
    "rule": "the first num_train of a seeded permutation of the "
    "training rows (nested across sizes); feature scaling "
    "fit on the kept rows",
  }
  parts = {
    "train": take_rows(dataset.train.x, dataset.train.y, rows),
    "validation": dataset.validation,
    "test": dataset.test,
  }
  auto = meta.get("preprocessing", {}).get("feature_scaling", {}).get("auto")
  if feature_scaling == "auto" and auto is None:
    raise ValueError(
      f"{dataset.name}: feature_scaling='auto', but its meta does not record "
      "what 'auto' means (meta['preprocessing']['feature_scaling']['auto'])"
    )
  scaling = splits.resolve_scaling(feature_scaling, auto, dataset.name)
  return splits.finish_dataset(
    dataset.name,
    parts,
    dataset.feature_names,
    dataset.label_names,
    scaling,
    meta,
    scaling_option=feature_scaling,
    auto=auto,
  )
