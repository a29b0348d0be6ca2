"""Dataset containers, seeded split rules and train-statistics preprocessing.

Every split is a pure function of (number of examples, seed[, fold]): indices come
from `np.random.default_rng([stream, seed, ...])`, where `stream` is a constant per
rule, so two rules with the same seed never share random numbers. Index arrays are
returned sorted, so each split keeps the file order of its rows.
"""

import dataclasses
import hashlib
import math
from typing import Any, Sequence

import numpy as np

VALIDATION_FRACTION = 0.1

# One random stream per split rule (the first entry of the rng seed list).
_HOLDOUT_STREAM = 1
_KFOLD_STREAM = 2
_KFOLD_VALIDATION_STREAM = 3
_RANDOM_SPLIT_STREAM = 4
_TRAINING_FOLDS_STREAM = 5

SPLIT_RULES = {
    "shipped_train_test+holdout_validation":
        "shipped train/test files; validation = seeded 10% of the train file "
        "(rows drawn without replacement)",
    "shipped_train_valid_test": "shipped train/valid/test files, used as they are",
    "cv10":
        "10-fold cross-validation on the union train+test: seeded permutation split "
        "into 10 folds (np.array_split), test = fold `fold`, validation = seeded 10% of "
        "the other 9 folds, train = the rest",
    "random_60_20_20": "seeded 60/20/20 train/validation/test split of the single file",
    "resplit":
        "seeded re-split of the union train+test, without rows that have no positive "
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
      raise ValueError(f"Split needs x [N, D] and y [N, L] with the same N; got "
                       f"{self.x.shape} and {self.y.shape}")

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
      if split.x.shape[1] != len(self.feature_names) or split.y.shape[1] != len(
          self.label_names):
        raise ValueError(
            f"{self.name}/{split_name}: x {split.x.shape}, y {split.y.shape} do not match "
            f"{len(self.feature_names)} features and {len(self.label_names)} labels")

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


def holdout_validation(num_examples: int, *, seed: int,
                       fraction: float = VALIDATION_FRACTION) -> tuple[np.ndarray, np.ndarray]:
  """Seeded (train, validation) row indices of one file; validation has round(f·N) rows."""
  seed = _check_seed(seed)
  num_val = fraction_count(num_examples, fraction)
  if not 0 < num_val < num_examples:
    raise ValueError(f"cannot hold out {fraction:.0%} of {num_examples} examples")
  rng = np.random.default_rng([_HOLDOUT_STREAM, seed])
  val = np.sort(rng.choice(num_examples, size=num_val, replace=False))
  train = np.setdiff1d(np.arange(num_examples), val)
  return train, val


def kfold_split(num_examples: int, *, fold: int, seed: int, num_folds: int = 10,
                validation_fraction: float = VALIDATION_FRACTION
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Seeded (train, validation, test) indices for cross-validation fold `fold`.

  The fold assignment depends on `seed` only, so folds 0..num_folds-1 of one seed
  partition the data; the validation rows drawn from the other folds depend on
  (seed, fold).
  """
  seed = _check_seed(seed)
  if isinstance(fold, bool) or not isinstance(fold, (int, np.integer)) or not (
      0 <= fold < num_folds):
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


def random_split(num_examples: int, sizes: Sequence[int], *, seed: int
                 ) -> tuple[np.ndarray, ...]:
  """Seeded partition of range(num_examples) into parts of the given sizes."""
  seed = _check_seed(seed)
  if sum(sizes) != num_examples or any(s <= 0 for s in sizes):
    raise ValueError(f"split sizes {tuple(sizes)} must be positive and sum to "
                     f"{num_examples}")
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


@dataclasses.dataclass(frozen=True)
class Standardizer:
  """Per-feature affine map (x - mean) / scale, with stats from the train split.

  Attributes:
    mean: float64 [D].
    scale: float64 [D]; the train standard deviation, 1 where it is 0.
    constant: bool [D]; where the train column is constant.
  """
  mean: np.ndarray
  scale: np.ndarray
  constant: np.ndarray

  @classmethod
  def fit(cls, x: np.ndarray) -> "Standardizer":
    """Stats of x [N, D] (population std, computed in float64)."""
    x = np.asarray(x, np.float64)
    mean = x.mean(axis=0)
    std = x.std(axis=0)
    # A constant train column carries no signal; a unit scale keeps it finite elsewhere.
    scale = np.where(std > 0, std, 1.0)
    return cls(mean=mean, scale=scale, constant=std == 0)

  def __call__(self, x: np.ndarray) -> np.ndarray:
    """float32 [N, D] standardized copy of x [N, D]."""
    return ((np.asarray(x, np.float64) - self.mean) / self.scale).astype(np.float32)

  @property
  def num_constant(self) -> int:
    return int(np.sum(self.constant))


@dataclasses.dataclass(frozen=True)
class MaxAbsScaler:
  """Per-feature map x / max|x_train|, with the max from the train split (scikit-learn's
  `MaxAbsScaler`: keeps zeros, hence sparsity and 0/1 features, as they are).

  Attributes:
    scale: float64 [D]; the train column's largest absolute value, 1 where it is 0.
  """
  scale: np.ndarray

  @classmethod
  def fit(cls, x: np.ndarray) -> "MaxAbsScaler":
    """The largest absolute value of each column of x [N, D] (float64)."""
    peak = np.abs(np.asarray(x, np.float64)).max(axis=0)
    return cls(scale=np.where(peak > 0, peak, 1.0))

  def __call__(self, x: np.ndarray) -> np.ndarray:
    """float32 [N, D] scaled copy of x [N, D]."""
    return (np.asarray(x, np.float64) / self.scale).astype(np.float32)


# `feature_scaling` options of the loaders: 'auto' is each dataset's own rule (the
# registry's `standardize`; by path: z-score unless every train feature is 0/1).
FEATURE_SCALINGS = ("auto", "none", "zscore", "maxabs")


def scale_features(scaling: str, train_x: np.ndarray, *others: np.ndarray
                   ) -> tuple[np.ndarray, ...]:
  """`train_x` and `others` scaled with statistics of `train_x` alone.

  Args:
    scaling: 'none', 'zscore' (`Standardizer`) or 'maxabs' ('auto' is resolved by the
      loader, which knows the dataset).
    train_x: float [N, D], the rows the statistics come from.
    *others: float [M, D] arrays scaled with the same statistics.

  Returns:
    float32 copies (train_x, *others).
  """
  if scaling == "none":
    return tuple(np.asarray(a, np.float32) for a in (train_x, *others))
  if scaling == "zscore":
    scaler = Standardizer.fit(train_x)
  elif scaling == "maxabs":
    scaler = MaxAbsScaler.fit(train_x)
  else:
    raise ValueError(f"unknown feature_scaling {scaling!r}; expected one of "
                     f"{FEATURE_SCALINGS[1:]} ('auto' is resolved by the loader)")
  return tuple(scaler(a) for a in (train_x, *others))


def training_folds(num_examples: int, num_folds: int, *, seed: int) -> list[np.ndarray]:
  """`num_folds` disjoint sorted index arrays that cover `range(num_examples)`: a seeded
  permutation cut into near-equal parts (`np.array_split`), for cross-validation on a
  training split (its own random stream, independent of every split rule's)."""
  if not 2 <= num_folds <= num_examples:
    raise ValueError(f"num_folds={num_folds} needs 2 <= num_folds <= {num_examples} rows")
  perm = np.random.default_rng([_TRAINING_FOLDS_STREAM, _check_seed(seed)]).permutation(
      num_examples)
  return [np.sort(part) for part in np.array_split(perm, num_folds)]


def impute_with_train_mean(train_x: np.ndarray, *others: np.ndarray
                           ) -> tuple[tuple[np.ndarray, ...], int]:
  """Replaces NaN by the train column mean (0 where the train column is all NaN).

  Returns:
    ((train_x, *others) imputed float32 copies, number of NaN cells in all of them).
  """
  with np.errstate(invalid="ignore"):
    counts = np.sum(~np.isnan(train_x), axis=0)
    sums = np.nansum(np.asarray(train_x, np.float64), axis=0)
  fill = np.where(counts > 0, sums / np.maximum(counts, 1), 0.0)
  out, num_missing = [], 0
  for x in (train_x, *others):
    mask = np.isnan(x)
    num_missing += int(mask.sum())
    x = np.array(x, np.float32)
    x[mask] = np.broadcast_to(fill, x.shape)[mask]
    out.append(x)
  return tuple(out), num_missing
