"""Dataset containers, seeded split rules and train-statistics preprocessing.

Every split is a pure function of (number of examples, seed[, fold]): indices come
from `np.random.default_rng([stream, seed, ...])`, where `stream` is a constant per
rule, so two rules with the same seed never share random numbers. Index arrays are
returned sorted, so each split keeps the file order of its rows. `split_indices` applies
a rule of `SPLIT_RULES` to a MULAN dataset's files; `finish_dataset` imputes and scales
the splits with training statistics and records what it did in the dataset's `meta`.
"""

import dataclasses
import hashlib
import math
from typing import Any, Mapping, Sequence

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


def split_indices(rule: str, counts: Sequence[int], positive: np.ndarray | None, *,
                  split_seed: int, fold: int, resplit_sizes: Mapping[str, int] | None,
                  meta: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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
    kept = np.flatnonzero(positive)
    tr, va, te = (kept[i] for i in random_split(len(kept), sizes, seed=split_seed))
    meta["split_detail"] = (f"union of train+test ({num_rows} rows), minus "
                            f"{num_rows - len(kept)} rows with no positive label, into "
                            f"sizes {sizes}")
  elif rule == "shipped_train_test+holdout_validation":
    tr, va = holdout_validation(counts[0], seed=split_seed)
    te = np.arange(counts[0], num_rows)
  elif rule == "cv10":
    tr, va, te = kfold_split(num_rows, fold=fold, seed=split_seed)
    meta["split_detail"] = f"fold {fold} of 10 on the union train+test ({num_rows} rows)"
  elif rule == "random_60_20_20":
    tr, va, te = random_split(num_rows, fraction_sizes(num_rows, (0.6, 0.2, 0.2)),
                              seed=split_seed)
  else:
    raise ValueError(f"unknown split rule {rule!r}")
  meta["split_rule"] = rule
  meta["split"] = SPLIT_RULES[rule]
  meta["split_fingerprint"] = split_fingerprint(tr, va, te)
  return tr, va, te


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


def resolve_scaling(option: str, auto: bool | str, where: str) -> str:
  """The scaling a `feature_scaling` option applies.

  Args:
    option: one of `FEATURE_SCALINGS`.
    auto: what 'auto' means for the dataset: 'none', 'zscore' or 'maxabs', or a bool
      (a registry entry's `standardize`: True is 'zscore', False 'none').
    where: the dataset, named in the error.

  Returns:
    'none', 'zscore' or 'maxabs'.

  Raises:
    ValueError: an unknown option.
  """
  if option not in FEATURE_SCALINGS:
    raise ValueError(f"{where}: unknown feature_scaling {option!r}; expected one of "
                     f"{FEATURE_SCALINGS}")
  if option != "auto":
    return option
  return {True: "zscore", False: "none"}.get(auto, auto)


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


def finish_dataset(name: str, parts: Mapping[str, Split], feature_names, label_names,
                   scaling: bool | str, meta: dict[str, Any], *, scaling_option: str,
                   auto: str | None) -> MultiLabelDataset:
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
  scaling = {True: "zscore", False: "none"}.get(scaling, scaling)
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
  record_preprocessing(meta, num_missing, scaling, num_constant,
                       {"train": train.num_examples, "validation": val.num_examples,
                        "test": test.num_examples}, feature_names, label_names,
                       scaling_option=scaling_option, auto=auto)
  return MultiLabelDataset(name=name, train=train, validation=val, test=test,
                           label_names=tuple(label_names),
                           feature_names=tuple(feature_names), meta=meta)


def record_preprocessing(meta: dict[str, Any], num_missing: int | None, scaling: str,
                         num_constant: int | None, num_examples: Mapping[str, int],
                         feature_names, label_names, *, scaling_option: str,
                         auto: str | None) -> None:
  """Writes the imputation, feature scaling and counts of a dataset into its `meta`.

  Args:
    meta: the dataset's meta; its 'preprocessing' entry is added to.
    num_missing: the imputed cells of all splits, None if none.
    scaling: 'none', 'zscore' or 'maxabs', the scaling applied.
    num_constant: with 'zscore', the constant training columns.
    num_examples: split -> its rows.
    feature_names: [D].
    label_names: [L].
    scaling_option: the `feature_scaling` asked for.
    auto: what 'auto' means for the dataset, so that a loader asked for another option
      can still apply the dataset's own rule later (a training subset); None: not known.
  """
  preprocessing = meta.setdefault("preprocessing", {})
  if num_missing is not None:
    preprocessing["impute"] = {"missing_cells": num_missing,
                               "rule": "train column mean (0 if never observed)"}
  if scaling == "zscore":
    preprocessing["standardize"] = {
        "applied": True, "stats": "train split mean and population std (0 -> 1)",
        "constant_train_columns": num_constant}
  else:
    preprocessing["standardize"] = {"applied": False}
  preprocessing["feature_scaling"] = {"option": scaling_option, "applied": scaling,
                                      "stats": "train split only"}
  if auto is not None:
    preprocessing["feature_scaling"]["auto"] = auto
  meta["num_examples"] = dict(num_examples)
  meta["num_features"] = len(feature_names)
  meta["num_labels"] = len(label_names)
