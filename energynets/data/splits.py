"""Dataset containers, seeded split rules and the assembly of a preprocessed dataset.

Every split is a pure function of (number of examples, seed[, fold]): indices come
from `np.random.default_rng([stream, seed, ...])`, where `stream` is a constant per
rule, so two rules with the same seed never share random numbers. Index arrays are
returned sorted, so each split keeps the file order of its rows. `split_indices` applies
a rule of `SPLIT_RULES` to a MULAN dataset's files; `finish_dataset` imputes and scales
the splits with training statistics (`energynets.data.preprocessing`, whose names this
module re-exports) and records what it did in the dataset's `meta`.
"""

from collections.abc import Mapping
from collections.abc import Sequence
import dataclasses
import hashlib
import math
from typing import Any

import numpy as np

from energynets.data.preprocessing import FEATURE_SCALINGS
from energynets.data.preprocessing import MaxAbsScaler
from energynets.data.preprocessing import Standardizer
from energynets.data.preprocessing import _scaling_name
from energynets.data.preprocessing import impute_with_train_mean
from energynets.data.preprocessing import record_preprocessing
from energynets.data.preprocessing import resolve_scaling
from energynets.data.preprocessing import scale_features

__all__ = [
  "check_fold",
  "FEATURE_SCALINGS",
  "finish_dataset",
  "fraction_count",
  "fraction_sizes",
  "holdout_validation",
  "impute_with_train_mean",
  "kfold_split",
  "MaxAbsScaler",
  "MultiLabelDataset",
  "random_split",
  "record_preprocessing",
  "resolve_scaling",
  "scale_features",
  "Split",
  "split_fingerprint",
  "split_indices",
  "SPLIT_RULES",
  "Standardizer",
  "training_folds",
  "VALIDATION_FRACTION",
]

VALIDATION_FRACTION = 0.1

# One random stream per split rule (the first entry of the rng seed list).
_HOLDOUT_STREAM = 1
_KFOLD_STREAM = 2
_KFOLD_VALIDATION_STREAM = 3
_RANDOM_SPLIT_STREAM = 4
_TRAINING_FOLDS_STREAM = 5

SPLIT_RULES = {
  "shipped_train_test+holdout_validation": (
    "shipped train/test files; validation = seeded 10% of the train file "
    "(rows drawn without replacement)"
  ),
  "shipped_train_valid_test": "shipped train/valid/test files, used as they are",
  "cv10": "10-fold cross-validation on the union train+test: seeded permutation split "
  "into 10 folds (np.array_split), test = fold `fold`, validation = seeded 10% of "
  "the other 9 folds, train = the rest",
  "random_60_20_20": "seeded 60/20/20 train/validation/test split of the single file",
  "resplit": "seeded re-split of the union train+test, without rows that have no positive "
  "label, into the sizes of the implicit-energy paper (Shankar & Piratla)",
  "generated": "generated in-process from the seed",
}


@dataclasses.dataclass(frozen=True)
class Split:
  """One split, numpy.

  Attributes:
    x: float32 [N, D] features.
    y: float32 [N, L] labels in {0, 1}.
  """

  x: np.ndarray
  y: np.ndarray

  def __post_init__(self):
    if self.x.ndim != 2 or self.y.ndim != 2 or len(self.x) != len(self.y):
      raise ValueError(
        f"Split needs x [N, D] and y [N, L] with the same N; got {self.x.shape} and {self.y.shape}"
      )

  @property
  def num_examples(self) -> int:
    return len(self.x)


@dataclasses.dataclass(frozen=True)
class MultiLabelDataset:
  """A multi-label dataset with fixed train/validation/test splits.

  `meta` is JSON-serialisable: files read (with sha256), split rule, seed, fold,
  preprocessing applied and the number of examples per split.
  """

  name: str
  train: Split
  validation: Split
  test: Split
  label_names: tuple[str, ...]
  feature_names: tuple[str, ...]
  meta: dict[str, Any]

  def __post_init__(self):
    for split_name in ("train", "validation", "test"):
      split = getattr(self, split_name)
      if split.x.shape[1] != len(self.feature_names) or split.y.shape[1] != len(self.label_names):
        raise ValueError(
          f"{self.name}/{split_name}: x {split.x.shape}, y {split.y.shape} do not match "
          f"{len(self.feature_names)} features and {len(self.label_names)} labels"
        )

  @property
  def num_features(self) -> int:
    return len(self.feature_names)

  @property
  def num_labels(self) -> int:
    return len(self.label_names)


def fraction_count(num_examples: int, fraction: float) -> int:
  """round(num_examples * fraction), halves rounded up (so the rule is unambiguous)."""
  return int(math.floor(num_examples * fraction + 0.5))


def _check_seed(seed: int) -> int:
  if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or seed < 0:
    raise ValueError(f"split seed must be a non-negative integer, got {seed!r}")
  return int(seed)


def holdout_validation(
  num_examples: int, *, seed: int, fraction: float = VALIDATION_FRACTION
) -> tuple[np.ndarray, np.ndarray]:
  """Seeded (train, validation) row indices of one file; validation has round(f·N) rows."""
  seed = _check_seed(seed)
  num_val = fraction_count(num_examples, fraction)
  if not 0 < num_val < num_examples:
    raise ValueError(f"cannot hold out {fraction:.0%} of {num_examples} examples")
  rng = np.random.default_rng([_HOLDOUT_STREAM, seed])
  val = np.sort(rng.choice(num_examples, size=num_val, replace=False))
  train = np.setdiff1d(np.arange(num_examples), val)
  return train, val


def kfold_split(
  num_examples: int,
  *,
  fold: int,
  seed: int,
  num_folds: int = 10,
  validation_fraction: float = VALIDATION_FRACTION,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Seeded (train, validation, test) indices for cross-validation fold `fold`.

  The fold assignment depends on `seed` only, so folds 0..num_folds-1 of one seed
  partition the data; the validation rows drawn from the other folds depend on
  (seed, fold).
  """
  seed = _check_seed(seed)
  if (
    isinstance(fold, bool) or not isinstance(fold, (int, np.integer)) or not (0 <= fold < num_folds)
  ):
    raise ValueError(f"fold must be an integer in 0..{num_folds - 1}, got {fold!r}")
  perm = np.random.default_rng([_KFOLD_STREAM, seed]).permutation(num_examples)
  folds = np.array_split(perm, num_folds)
  test = np.sort(folds[fold])
  rest = np.sort(np.concatenate([f for i, f in enumerate(folds) if i != fold]))
  num_val = fraction_count(len(rest), validation_fraction)
  rng = np.random.default_rng([_KFOLD_VALIDATION_STREAM, seed, int(fold)])
  val = np.sort(rng.choice(rest, size=num_val, replace=False))
  train = np.setdiff1d(rest, val)
  return train, val, test


def random_split(num_examples: int, sizes: Sequence[int], *, seed: int) -> tuple[np.ndarray, ...]:
  """Seeded partition of range(num_examples) into parts of the given sizes."""
  seed = _check_seed(seed)
  if sum(sizes) != num_examples or any(s <= 0 for s in sizes):
    raise ValueError(f"split sizes {tuple(sizes)} must be positive and sum to {num_examples}")
  perm = np.random.default_rng([_RANDOM_SPLIT_STREAM, seed]).permutation(num_examples)
  bounds = np.cumsum([0, *sizes])
  return tuple(np.sort(perm[a:b]) for a, b in zip(bounds[:-1], bounds[1:]))


def fraction_sizes(num_examples: int, fractions: Sequence[float]) -> tuple[int, ...]:
  """Part sizes for `fractions`: all but the first rounded, the first takes the rest."""
  rest = [fraction_count(num_examples, f) for f in fractions[1:]]
  return (num_examples - sum(rest), *rest)


def split_fingerprint(*index_arrays: np.ndarray) -> str:
  """sha256 of the split's index arrays: equal fingerprints mean identical splits."""
  h = hashlib.sha256()
  for idx in index_arrays:
    h.update(np.asarray(idx, np.int64).tobytes())
    h.update(b"|")
  return h.hexdigest()


def split_indices(
  rule: str,
  counts: Sequence[int],
  positive: np.ndarray | None,
  *,
  split_seed: int,
  fold: int,
  resplit_sizes: Mapping[str, int] | None,
  meta: dict[str, Any],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """(train, validation, test) row indices of a MULAN dataset's files concatenated.

  Args:
    rule: the split rule (`SPLIT_RULES`; 'resplit' when `resplit_sizes`).
    counts: the rows of each file: `[train, test]` or `[all]`.
    positive: bool `[N]`, rows with a positive label (needed by the re-split only).
    split_seed: the split's seed.
    fold: the cross-validation fold.
    resplit_sizes: the re-split's sizes, or None.
    meta: the dataset's meta, given the split's record.

  Returns:
    Increasing row indices of each split.

  Raises:
    ValueError: an unknown split rule.
  """
  num_rows = int(sum(counts))
  meta.update(split_seed=split_seed, fold=fold, resplit=resplit_sizes is not None)
  if resplit_sizes is not None:
    rule = "resplit"
    sizes = (resplit_sizes["train"], resplit_sizes["validation"], resplit_sizes["test"])
    # The paper's sizes add up to the rows with at least one positive label (delicious
    # has 14 without; bibtex none), so those rows are left out before re-splitting.
    assert positive is not None, "the re-split needs the rows with a positive label"
    kept = np.flatnonzero(positive)
    tr, va, te = (kept[i] for i in random_split(len(kept), sizes, seed=split_seed))
    meta["split_detail"] = (
      f"union of train+test ({num_rows} rows), minus "
      f"{num_rows - len(kept)} rows with no positive label, into "
      f"sizes {sizes}"
    )
  elif rule == "shipped_train_test+holdout_validation":
    tr, va = holdout_validation(counts[0], seed=split_seed)
    te = np.arange(counts[0], num_rows)
  elif rule == "cv10":
    tr, va, te = kfold_split(num_rows, fold=fold, seed=split_seed)
    meta["split_detail"] = f"fold {fold} of 10 on the union train+test ({num_rows} rows)"
  elif rule == "random_60_20_20":
    tr, va, te = random_split(num_rows, fraction_sizes(num_rows, (0.6, 0.2, 0.2)), seed=split_seed)
  else:
    raise ValueError(f"unknown split rule {rule!r}")
  meta["split_rule"] = rule
  meta["split"] = SPLIT_RULES[rule]
  meta["split_fingerprint"] = split_fingerprint(tr, va, te)
  return tr, va, te


def training_folds(num_examples: int, num_folds: int, *, seed: int) -> list[np.ndarray]:
  """`num_folds` disjoint sorted index arrays that cover `range(num_examples)`: a seeded
  permutation cut into near-equal parts (`np.array_split`), for cross-validation on a
  training split (its own random stream, independent of every split rule's)."""
  if not 2 <= num_folds <= num_examples:
    raise ValueError(f"num_folds={num_folds} needs 2 <= num_folds <= {num_examples} rows")
  perm = np.random.default_rng([_TRAINING_FOLDS_STREAM, _check_seed(seed)]).permutation(
    num_examples
  )
  return [np.sort(part) for part in np.array_split(perm, num_folds)]


def check_fold(name: str, fold: int, allowed: bool) -> None:
  """A ValueError naming `name` unless `fold` is 0 or the dataset is cross-validated."""
  if not allowed and fold != 0:
    raise ValueError(
      f"{name}: `fold` only applies to cross-validated datasets (yeast); got fold={fold}"
    )


def finish_dataset(
  name: str,
  parts: Mapping[str, Split],
  feature_names,
  label_names,
  scaling: bool | str,
  meta: dict[str, Any],
  *,
  scaling_option: str,
  auto: str | None,
) -> MultiLabelDataset:
  """The dataset of `parts`, imputed and feature-scaled with training statistics.

  Args:
    name: the dataset's name.
    parts: 'train', 'validation' and 'test' -> the split, unscaled (NaN: missing).
    feature_names: [D].
    label_names: [L].
    scaling: True or 'zscore' (train mean and std), 'maxabs' (train max |x|), False or
      'none'.
    meta: the dataset's meta so far; `record_preprocessing` adds to it.
    scaling_option: the `feature_scaling` asked for (recorded).
    auto: what 'auto' means for the dataset (recorded; None: not known).

  Returns:
    The dataset, holding `meta`.
  """
  scaling = _scaling_name(scaling)
  train, val, test = parts["train"], parts["validation"], parts["test"]
  num_missing, num_constant = None, None
  if np.isnan(train.x).any() or np.isnan(val.x).any() or np.isnan(test.x).any():
    (tx, vx, sx), num_missing = impute_with_train_mean(train.x, val.x, test.x)
    train, val, test = Split(tx, train.y), Split(vx, val.y), Split(sx, test.y)
  if scaling == "zscore":
    std = Standardizer.fit(train.x)
    train, val, test = (Split(std(s.x), s.y) for s in (train, val, test))
    num_constant = std.num_constant
  elif scaling == "maxabs":
    tx, vx, sx = scale_features("maxabs", train.x, val.x, test.x)
    train, val, test = Split(tx, train.y), Split(vx, val.y), Split(sx, test.y)
  record_preprocessing(
    meta,
    num_missing,
    scaling,
    num_constant,
    {"train": train.num_examples, "validation": val.num_examples, "test": test.num_examples},
    feature_names,
    label_names,
    scaling_option=scaling_option,
    auto=auto,
  )
  return MultiLabelDataset(
    name=name,
    train=train,
    validation=val,
    test=test,
    label_names=tuple(label_names),
    feature_names=tuple(feature_names),
    meta=meta,
  )
