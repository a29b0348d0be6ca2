"""MULAN datasets as `MultiLabelDataset`s: parsed files split by a rule (`split_mulan`),
and any MULAN folder given by path (`load_mulan_path`), whose 'auto' feature scaling
depends on whether its features are binary (`auto_scaling_by_path`)."""

from collections.abc import Mapping
import pathlib
from typing import Any

import numpy as np

from energynets.data import mulan
from energynets.data import mulan_rows
from energynets.data import splits
from energynets.data.datadir import file_record
from energynets.data.errors import DataError
from energynets.data.row_subsets import take_rows
from energynets.data.splits import MultiLabelDataset

__all__ = ["auto_scaling_by_path", "is_binary", "load_mulan_path", "mulan_files_in", "split_mulan"]


def is_binary(x: np.ndarray) -> bool:
  """Whether every finite value of `x` is 0 or 1."""
  finite = x[~np.isnan(x)]
  return bool(np.all((finite == 0) | (finite == 1)))


def split_mulan(
  name: str,
  rule: str,
  parsed: dict[str, mulan.MulanArff],
  *,
  split_seed: int,
  fold: int,
  resplit_sizes: Mapping[str, int] | None,
  scaling: str,
  meta: dict[str, Any],
  scaling_option: str,
  auto: str,
) -> MultiLabelDataset:
  """Applies split `rule` to parsed MULAN files ('train'/'test' or 'all'), then
  `splits.finish_dataset` (`scaling` applied, `scaling_option` and `auto` recorded)."""
  first = next(iter(parsed.values()))
  for m in parsed.values():
    if (m.feature_names, m.label_names) != (first.feature_names, first.label_names):
      raise DataError(m.path, None, f"attributes differ from {first.path}")
  if "all" in parsed:
    x, y = parsed["all"].x, parsed["all"].y
    counts = [len(x)]
  else:
    x = np.concatenate([parsed["train"].x, parsed["test"].x])
    y = np.concatenate([parsed["train"].y, parsed["test"].y])
    counts = [len(parsed["train"].x), len(parsed["test"].x)]
  positive = y.sum(axis=1) > 0 if resplit_sizes is not None else None
  tr, va, te = splits.split_indices(
    rule, counts, positive, split_seed=split_seed, fold=fold, resplit_sizes=resplit_sizes, meta=meta
  )
  mulan.record_encoding(meta, first)
  parts = {
    "train": take_rows(x, y, tr),
    "validation": take_rows(x, y, va),
    "test": take_rows(x, y, te),
  }
  return splits.finish_dataset(
    name,
    parts,
    first.feature_names,
    first.label_names,
    scaling,
    meta,
    scaling_option=scaling_option,
    auto=auto,
  )


def mulan_files_in(path: pathlib.Path) -> tuple[str, dict[str, pathlib.Path]]:
  """(dataset name, role -> file) of a MULAN folder, or of the folder of a file in it."""
  folder = path if path.is_dir() else path.parent
  stem = None
  if path.is_file():
    stem = path.name
    for suffix in ("-train.arff", "-test.arff", ".arff", ".xml"):
      if stem.endswith(suffix):
        stem = stem[: -len(suffix)]
        break
  if stem is None:
    trains = sorted(folder.glob("*-train.arff"))
    xmls = sorted(folder.glob("*.xml"))
    if len(trains) == 1:
      stem = trains[0].name[: -len("-train.arff")]
    elif not trains and len(xmls) == 1:
      stem = xmls[0].stem
    else:
      raise DataError(
        folder,
        None,
        "expected exactly one MULAN dataset: <name>-train.arff, "
        "<name>-test.arff and <name>.xml (or <name>.arff and <name>.xml), found "
        f"{[p.name for p in trains] or 'no *-train.arff'}",
      )
  xml = folder / f"{stem}.xml"
  train, test, single = (
    folder / f"{stem}-train.arff",
    folder / f"{stem}-test.arff",
    folder / f"{stem}.arff",
  )
  if train.is_file() or test.is_file():
    files = {"train": train, "test": test, "xml": xml}
  else:
    files = {"all": single, "xml": xml}
  for p in files.values():
    if not p.is_file():
      raise DataError(
        p,
        None,
        f"file not found (a MULAN dataset given by path needs "
        f"{stem}-train.arff, {stem}-test.arff and {stem}.xml)",
      )
  return stem, files


def auto_scaling_by_path(binary: bool) -> str:
  """What feature_scaling='auto' means for a MULAN dataset given by path.

  Args:
    binary: whether every finite feature value of the train file (or of the single
      file) is 0 or 1.

  Returns:
    'none' for binary features (bag of words, YES/NO), which z-scoring would make dense;
    'zscore' otherwise.
  """
  return "none" if binary else "zscore"


def load_mulan_path(
  path: pathlib.Path,
  split_seed: int,
  fold: int,
  resplit: bool,
  feature_scaling: str = "auto",
  process_rows: tuple[int, int] | None = None,
) -> MultiLabelDataset:
  """The MULAN dataset in the folder `path` (or the folder of a file in it), split by
  its files: shipped train/test plus a seeded validation holdout, or seeded 60/20/20 of
  one file (`load_dataset`'s arguments, which documents them)."""
  splits.check_fold(str(path), fold, False)
  if resplit:
    raise ValueError("resplit=True is only defined for the registered bibtex and delicious")
  name, files = mulan_files_in(path)
  records = [file_record(p, None) for p in files.values()]
  rule = "shipped_train_test+holdout_validation" if "train" in files else "random_60_20_20"
  meta: dict[str, Any] = {
    "dataset": name,
    "source": "path",
    "kind": "mulan",
    "data_dir": str(files["xml"].parent),
    "files": records,
  }
  if process_rows is not None and process_rows[1] > 1:
    readers = {
      role: mulan.MulanReader(p, files["xml"]) for role, p in files.items() if role != "xml"
    }
    ds = mulan_rows.load_mulan_rows(
      name,
      rule,
      readers,
      process_rows,
      split_seed=split_seed,
      fold=fold,
      resplit_sizes=None,
      scaling_option=feature_scaling,
      auto=auto_scaling_by_path,
      meta=meta,
    )
  else:
    parsed = {role: mulan.read_mulan(p, files["xml"]) for role, p in files.items() if role != "xml"}
    reference = parsed["train"] if "train" in parsed else parsed["all"]
    auto = auto_scaling_by_path(is_binary(reference.x))
    ds = split_mulan(
      name,
      rule,
      parsed,
      split_seed=split_seed,
      fold=fold,
      resplit_sizes=None,
      scaling=splits.resolve_scaling(feature_scaling, auto, str(path)),
      meta=meta,
      scaling_option=feature_scaling,
      auto=auto,
    )
  record = ds.meta["preprocessing"]["feature_scaling"]
  record["reason"] = (
    f"feature_scaling={feature_scaling!r}"
    if feature_scaling != "auto"
    else "auto: train features all 0/1"
    if record["auto"] == "none"
    else "auto: train features not all 0/1"
  )
  if record["applied"] == "zscore":
    ds.meta["preprocessing"]["standardize"]["reason"] = record["reason"]
  return ds
