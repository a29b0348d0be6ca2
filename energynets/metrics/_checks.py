"""Input validation shared by the host-side (numpy) metrics.

Each check raises a ValueError naming the argument and, where it applies, the first
offending index, so a bad input fails with a message that points at the problem.
"""

from __future__ import annotations

from typing import Any

import numpy as np

ArrayLike = Any  # np.ndarray, jax.Array, nested lists.


def first_index(mask: np.ndarray) -> tuple[int, ...]:
  """The index of the first True entry of `mask`, for error messages."""
  return tuple(int(i) for i in np.argwhere(mask)[0])


def as_2d(name: str, a: ArrayLike) -> np.ndarray:
  """`a` as a numeric or boolean array [N, L] with N, L >= 1."""
  a = np.asarray(a)
  if a.ndim != 2:
    raise ValueError(f"{name} must be a 2-D array [N, L]; got shape {a.shape}")
  if a.shape[0] == 0 or a.shape[1] == 0:
    raise ValueError(f"{name} must have at least one example and one label; got shape {a.shape}")
  if not (
    a.dtype == np.bool_ or np.issubdtype(a.dtype, np.integer) or np.issubdtype(a.dtype, np.floating)
  ):
    raise ValueError(f"{name} must be numeric or boolean; got dtype {a.dtype}")
  return a


def check_binary(name: str, a: ArrayLike) -> np.ndarray:
  """Validates a {0,1} matrix [N, L] and returns it as a bool array."""
  a = as_2d(name, a)
  if a.dtype == np.bool_:
    return a
  if np.issubdtype(a.dtype, np.floating):
    nan = np.isnan(a)
    if nan.any():
      raise ValueError(f"{name} contains NaN (first at index {first_index(nan)})")
  bad = (a != 0) & (a != 1)
  if bad.any():
    idx = first_index(bad)
    raise ValueError(f"{name} must be binary (0/1); found {a[idx]!r} at index {idx}")
  return a.astype(bool)


def check_probs(name: str, p: ArrayLike) -> np.ndarray:
  """Validates probabilities [N, L] in [0, 1] (no NaN) and returns them."""
  p = as_2d(name, p)
  if p.dtype == np.bool_:
    return p.astype(np.float32)
  if np.issubdtype(p.dtype, np.floating):
    nan = np.isnan(p)
    if nan.any():
      raise ValueError(f"{name} contains NaN (first at index {first_index(nan)})")
  bad = (p < 0) | (p > 1)
  if bad.any():
    idx = first_index(bad)
    raise ValueError(f"{name} must be probabilities in [0, 1]; found {p[idx]!r} at index {idx}")
  return p


def check_same_shape(name_a: str, a: np.ndarray, name_b: str, b: np.ndarray):
  """Raises unless `a` and `b` have the same shape."""
  if a.shape != b.shape:
    raise ValueError(
      f"shape mismatch: {name_a} has shape {a.shape} but {name_b} has shape {b.shape}"
    )


def check_threshold(threshold: float) -> float:
  """`threshold` as a float in [0, 1]."""
  t = float(threshold)
  if not 0.0 <= t <= 1.0:  # Also rejects NaN.
    raise ValueError(f"threshold must be in [0, 1]; got {threshold!r}")
  return t
