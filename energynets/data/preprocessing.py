"""Feature preprocessing with training statistics: imputation, scaling and its record.

Every statistic comes from the train split alone and is applied unchanged to the other
splits: `impute_with_train_mean` fills missing cells with the train column mean,
`scale_features` applies a `feature_scaling` (`Standardizer` or `MaxAbsScaler`), and
`record_preprocessing` writes what was done into a dataset's `meta`.
"""

from collections.abc import Mapping
import dataclasses
from typing import Any

import numpy as np

__all__ = [
  "FEATURE_SCALINGS",
  "impute_with_train_mean",
  "MaxAbsScaler",
  "record_preprocessing",
  "resolve_scaling",
  "scale_features",
  "Standardizer",
]


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
    raise ValueError(
      f"{where}: unknown feature_scaling {option!r}; expected one of {FEATURE_SCALINGS}"
    )
  if option != "auto":
    return option
  return _scaling_name(auto)


def _scaling_name(scaling: bool | str) -> str:
  """'zscore' for True, 'none' for False, a scaling's name as it is."""
  if isinstance(scaling, str):
    return scaling
  return {True: "zscore", False: "none"}[scaling]


def scale_features(
  scaling: str, train_x: np.ndarray, *others: np.ndarray
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
  scaler: Standardizer | MaxAbsScaler
  if scaling == "zscore":
    scaler = Standardizer.fit(train_x)
  elif scaling == "maxabs":
    scaler = MaxAbsScaler.fit(train_x)
  else:
    raise ValueError(
      f"unknown feature_scaling {scaling!r}; expected one of "
      f"{FEATURE_SCALINGS[1:]} ('auto' is resolved by the loader)"
    )
  return tuple(scaler(a) for a in (train_x, *others))


def impute_with_train_mean(
  train_x: np.ndarray, *others: np.ndarray
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


def record_preprocessing(
  meta: dict[str, Any],
  num_missing: int | None,
  scaling: str,
  num_constant: int | None,
  num_examples: Mapping[str, int],
  feature_names,
  label_names,
  *,
  scaling_option: str,
  auto: str | None,
) -> None:
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
    preprocessing["impute"] = {
      "missing_cells": num_missing,
      "rule": "train column mean (0 if never observed)",
    }
  if scaling == "zscore":
    preprocessing["standardize"] = {
      "applied": True,
      "stats": "train split mean and population std (0 -> 1)",
      "constant_train_columns": num_constant,
    }
  else:
    preprocessing["standardize"] = {"applied": False}
  preprocessing["feature_scaling"] = {
    "option": scaling_option,
    "applied": scaling,
    "stats": "train split only",
  }
  if auto is not None:
    preprocessing["feature_scaling"]["auto"] = auto
  meta["num_examples"] = dict(num_examples)
  meta["num_features"] = len(feature_names)
  meta["num_labels"] = len(label_names)
