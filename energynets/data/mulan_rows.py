"""One process's rows of a MULAN dataset, read line by line from its files.

`load_dataset(..., process_rows=(p, P))` keeps process p's `batching.process_rows` of
every split (`load_mulan_rows`). Parsing the files whole and cutting them afterwards
would hold every row while loading; here each file is read line by line
(`mulan.MulanReader`) and only the kept rows are stored, so memory while loading grows
with those rows, not the file.

What needs every row is computed in passes that keep only per-column sums:

- the splits need each file's row count (a pass that decodes nothing), and the
  re-split of bibtex/delicious which rows have a positive label (a pass of booleans);
- imputation needs the training rows' per-column NaN-free sums and counts, and the
  number of missing cells of every split (the pass that stores the kept rows);
- z-scoring needs the training mean, then the sum of squared deviations from it (two
  passes over the training rows; one more first if training rows have NaNs);
- max-abs scaling the training rows' column maxima.

Every sum runs over the training rows in the order numpy reduces an array `[N, D]`
along axis 0 (row after row, starting from the first), so the statistics, and with
them every kept value, are bit-identical to those of the whole-file load.
"""

from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
import functools
from typing import Any

import numpy as np

from energynets.data import batching
from energynets.data import splits
from energynets.data.errors import DataError
from energynets.data.mulan import MulanReader
from energynets.data.mulan import record_encoding
from energynets.data.splits import MultiLabelDataset
from energynets.data.splits import Split

_SPLITS = ("train", "validation", "test")


class _Sum:
  """A float64 column sum over rows, added in order as `np.sum(x, axis=0)` adds them."""

  def __init__(self):
    self.total = None

  def add(self, row: np.ndarray) -> None:
    if self.total is None:
      self.total = np.array(row, np.float64)
    else:
      self.total += row


def count_rows(readers: Sequence[MulanReader]) -> list[int]:
  """The data rows of each file (lines counted, nothing decoded)."""
  return [r.count_rows() for r in readers]


def positive_rows(readers: Sequence[MulanReader]) -> np.ndarray:
  """bool `[N]`: which rows of the files, concatenated, have a positive label."""
  return np.concatenate(
    [np.asarray([bool((y > 0).any()) for _, _, y in r.rows()], bool) for r in readers]
  )


def _is_train_row(split_of: np.ndarray, i: int) -> bool:
  return split_of[i] == 0


def _train_pass(
  readers: Sequence[MulanReader],
  counts: Sequence[int],
  split_of: np.ndarray,
  visit: Callable[[np.ndarray], None],
  fill: np.ndarray | None,
) -> None:
  """Calls `visit(row float64 [D])` on every training row in order, imputed with `fill`
  (None: as read); only the training rows are decoded."""
  offset = 0
  for reader, n in zip(readers, counts):
    mine = split_of[offset : offset + n]
    for _, x, _ in reader.rows(wanted=functools.partial(_is_train_row, mine)):
      if fill is not None:
        x = x.copy()
        missing = np.isnan(x)
        x[missing] = fill[missing]
      visit(x.astype(np.float64))
    offset += n


def read_process_rows(
  readers: Sequence[MulanReader],
  counts: Sequence[int],
  indices: Mapping[str, np.ndarray],
  process_index: int,
  process_count: int,
  scaling: str | Callable[[bool], str],
  binary_file: int | None = None,
) -> tuple[dict, dict]:
  """Process `process_index`'s rows of each split, imputed and scaled as the whole load.

  Args:
    readers: the dataset's files, in the order their rows are numbered (train, test).
    counts: the data rows of each file (`count_rows`).
    indices: `{"train", "validation", "test"}` -> increasing row indices of the files
      concatenated (the split rule's).
    process_index: p.
    process_count: P; the process keeps rows `batching.process_rows(n, p, P)` of each
      split's n rows.
    scaling: 'none', 'zscore' or 'maxabs', or `binary -> one of them`, given whether
      every finite value of file `binary_file` is 0 or 1.
    binary_file: the file whose values decide a callable `scaling`.

  Returns:
    `({split: (x float32 [n_p, D], y float32 [n_p, L])}`, `{"num_missing": missing cells
    of all splits, or None without any, "scaling": the one applied, "num_constant":
    constant training columns (z-score), "binary": see `scaling`, "held": {split:
    slice}}`).
  """
  num_rows = int(sum(counts))
  split_of = np.full(num_rows, -1, np.int8)
  position = np.zeros(num_rows, np.int64)
  held = {}
  for k, name in enumerate(_SPLITS):
    idx = np.asarray(indices[name], np.int64)
    split_of[idx] = k
    position[idx] = np.arange(len(idx))
    held[name] = batching.process_rows(len(idx), process_index, process_count)
  out = {
    name: (
      np.empty((held[name].stop - held[name].start, readers[0].num_features), np.float32),
      np.empty((held[name].stop - held[name].start, readers[0].num_labels), np.float32),
    )
    for name in _SPLITS
  }
  num_features = readers[0].num_features
  nan_free = _Sum()
  observed = np.zeros(num_features, np.int64)
  raw_sum = _Sum()
  raw_peak = np.zeros(num_features, np.float64)
  num_missing = 0
  binary = True
  offset = 0
  for f, (reader, n) in enumerate(zip(readers, counts)):
    for i, x, y in reader.rows():
      g = offset + i
      missing = np.isnan(x)
      if f == binary_file and binary:
        finite = x[~missing]
        binary = bool(np.all((finite == 0) | (finite == 1)))
      k = split_of[g]
      if k < 0:
        continue
      num_missing += int(missing.sum())
      name = _SPLITS[k]
      at = position[g] - held[name].start
      if 0 <= at < len(out[name][0]):
        out[name][0][at], out[name][1][at] = x, y
      if k == 0:
        row = x.astype(np.float64)
        observed += ~missing
        nan_free.add(np.where(missing, 0.0, row))
        raw_sum.add(row)
        np.maximum(raw_peak, np.abs(row), out=raw_peak)
    offset += n
  scaling = scaling(binary) if callable(scaling) else scaling
  num_train = len(indices["train"])
  fill = None
  if num_missing:
    # `splits.impute_with_train_mean`'s fill, from the same sums.
    fill = np.where(observed > 0, nan_free.total / np.maximum(observed, 1), 0.0)
    for x, _ in out.values():
      mask = np.isnan(x)
      x[mask] = np.broadcast_to(fill, x.shape)[mask]
  train_has_nan = bool(np.any(observed < num_train))
  scaler: splits.Standardizer | splits.MaxAbsScaler | None = None
  num_constant = None
  if scaling in ("zscore", "maxabs"):
    total, peak = raw_sum, raw_peak
    if train_has_nan:  # the statistics are those of the imputed training rows
      total, peak = _Sum(), np.zeros(num_features, np.float64)

      def add_row(r: np.ndarray) -> None:
        total.add(r)
        np.maximum(peak, np.abs(r), out=peak)

      _train_pass(readers, counts, split_of, add_row, fill)
    if scaling == "maxabs":
      scaler = splits.MaxAbsScaler(scale=np.where(peak > 0, peak, 1.0))
    else:
      mean = total.total / num_train
      squares = _Sum()
      _train_pass(readers, counts, split_of, lambda r: squares.add((r - mean) * (r - mean)), fill)
      std = np.sqrt(squares.total / num_train)
      scaler = splits.Standardizer(mean=mean, scale=np.where(std > 0, std, 1.0), constant=std == 0)
      num_constant = scaler.num_constant
  elif scaling != "none":
    raise ValueError(f"unknown feature_scaling {scaling!r}")
  if scaler is not None:
    out = {name: (scaler(x), y) for name, (x, y) in out.items()}
  return out, {
    "num_missing": num_missing if num_missing else None,
    "scaling": scaling,
    "num_constant": num_constant,
    "binary": binary,
    "held": held,
  }


def load_mulan_rows(
  name: str,
  rule: str,
  readers: Mapping[str, MulanReader],
  process_rows: tuple[int, int],
  *,
  split_seed: int,
  fold: int,
  resplit_sizes: Mapping[str, int] | None,
  scaling_option: str,
  auto: str | Callable[[bool], str],
  meta: dict[str, Any],
) -> MultiLabelDataset:
  """`select_process_rows` of the whole MULAN dataset, read line by line.

  Only the process's rows of each split are stored (`read_process_rows`); the split
  rule, imputation and feature scaling see every row through passes that keep counts
  and per-column sums, so the kept rows equal the whole load's bit for bit.

  Args:
    name: the dataset's name.
    rule: its split rule (`splits.SPLIT_RULES`).
    readers: 'train' and 'test', or 'all' -> the file's reader.
    process_rows: (process index, process count).
    split_seed: the split's seed.
    fold: the cross-validation fold.
    resplit_sizes: the re-split's sizes, or None.
    scaling_option: the `feature_scaling` asked for (`splits.FEATURE_SCALINGS`).
    auto: what 'auto' means for the dataset: 'none', 'zscore' or 'maxabs', or `binary ->
      one of them` (binary: every finite value of the first file is 0 or 1).
    meta: the dataset's meta so far.

  Returns:
    The dataset holding the process's rows; `meta` records the encoding, split,
    preprocessing (with `auto` resolved) and counts of the whole dataset, and with
    more than one process `meta["process_rows"]` (`held_rows`).

  Raises:
    DataError: files whose attributes differ, or a malformed file.
    ValueError: an unknown `scaling_option` or split rule.
  """
  first = next(iter(readers.values()))
  for reader in readers.values():
    if (reader.feature_names, reader.label_names) != (first.feature_names, first.label_names):
      raise DataError(reader.path, None, f"attributes differ from {first.path}")
  scaling: str | Callable[[bool], str]
  if callable(auto):
    scaling = lambda binary: splits.resolve_scaling(scaling_option, auto(binary), name)
  else:
    scaling = splits.resolve_scaling(scaling_option, auto, name)
  files = [readers[role] for role in (("all",) if "all" in readers else ("train", "test"))]
  counts = count_rows(files)
  positive = positive_rows(files) if resplit_sizes is not None else None
  tr, va, te = splits.split_indices(
    rule, counts, positive, split_seed=split_seed, fold=fold, resplit_sizes=resplit_sizes, meta=meta
  )
  record_encoding(meta, first)
  index, count = process_rows
  parts, info = read_process_rows(
    files, counts, {"train": tr, "validation": va, "test": te}, index, count, scaling, binary_file=0
  )
  totals = {"train": len(tr), "validation": len(va), "test": len(te)}
  splits.record_preprocessing(
    meta,
    info["num_missing"],
    info["scaling"],
    info["num_constant"],
    totals,
    first.feature_names,
    first.label_names,
    scaling_option=scaling_option,
    auto=auto(info["binary"]) if callable(auto) else auto,
  )
  if count > 1:
    meta["process_rows"] = held_rows(info["held"], totals, index, count)
  return MultiLabelDataset(
    name=name,
    label_names=tuple(first.label_names),
    feature_names=tuple(first.feature_names),
    meta=meta,
    **{split: Split(x, y) for split, (x, y) in parts.items()},
  )


def held_rows(
  held: Mapping[str, slice], totals: Mapping[str, int], index: int, count: int
) -> dict[str, Any]:
  """The record of the rows one process holds, `meta["process_rows"]`.

  Args:
    held: split -> the process's rows of it.
    totals: split -> its rows in all processes.
    index: the process.
    count: the processes of the run.

  Returns:
    `{"process": index, "processes": count, split: {"start", "stop", "of"}, ...}`.
  """
  record: dict[str, Any] = {"process": index, "processes": count}
  for split, rows in held.items():
    record[split] = {"start": rows.start, "stop": rows.stop, "of": totals[split]}
  return record
