"""Dataset registry and `load_dataset`: name or path -> `MultiLabelDataset`.

A registered name (`REGISTRY`, kept in `energynets.data.dataset_specs`) maps to its
files under the data directory (`energynets.data.datadir`), label layout, split rule,
public URL and checksums. Any MULAN dataset can also be loaded by path.
Every split is identical for every method: it depends only on (dataset,
split_seed, fold, resplit), all recorded in `dataset.meta`.
"""

from collections.abc import Mapping
import os
import pathlib
from typing import Any

import numpy as np

from energynets.data import clus
from energynets.data import mulan
from energynets.data import mulan_rows
from energynets.data import splits
from energynets.data import synthetic
from energynets.data.datadir import DATA_DIR_ENV  # re-exported
from energynets.data.datadir import dataset_files
from energynets.data.datadir import file_record
from energynets.data.datadir import resolve_data_dir  # re-exported
from energynets.data.datadir import sha256_of  # re-exported
from energynets.data.dataset_specs import REGISTRY
from energynets.data.dataset_specs import DatasetSpec
from energynets.data.errors import DataError
from energynets.data.mulan_datasets import load_mulan_path
from energynets.data.mulan_datasets import split_mulan
from energynets.data.row_subsets import TooFewTrainingRows  # re-exported
from energynets.data.row_subsets import keep_train_rows  # re-exported
from energynets.data.row_subsets import select_process_rows  # re-exported
from energynets.data.splits import MultiLabelDataset
from energynets.data.splits import Split

__all__ = [
  "DATA_DIR_ENV",
  "DataError",
  "DatasetSpec",
  "REGISTRY",
  "TooFewTrainingRows",
  "keep_train_rows",
  "load_dataset",
  "resolve_data_dir",
  "select_process_rows",
  "sha256_of",
]

_SYNTHETIC_KWARGS = (
  "num_train",
  "num_validation",
  "num_test",
  "num_features",
  "num_blocks",
  "block_size",
)


def _load_registered(
  spec: DatasetSpec,
  data_dir,
  split_seed: int,
  fold: int,
  resplit: bool,
  root_label: bool = False,
  feature_scaling: str = "auto",
  process_rows: tuple[int, int] | None = None,
) -> MultiLabelDataset:
  splits.check_fold(spec.name, fold, spec.split_rule == "cv10")
  if resplit and not spec.resplit_counts:
    offered = sorted(n for n, s in REGISTRY.items() if s.resplit_counts)
    raise ValueError(f"{spec.name}: resplit=True is only defined for {offered}")
  root, files = dataset_files(data_dir, spec.subdir, spec.files, spec.name)
  records = [file_record(p, spec.sha256.get(p.name), root.parent) for p in files.values()]
  meta: dict[str, Any] = {
    "dataset": spec.name,
    "source": "registry",
    "kind": spec.kind,
    "data_dir": str(root.parent),
    "files": records,
    "url": spec.url,
    "citation": spec.citation,
  }
  if feature_scaling != "auto" and spec.kind not in ("mulan", "clus"):
    raise ValueError(
      f"{spec.name}: feature_scaling={feature_scaling!r} applies to MULAN, "
      "CLUS and synthetic datasets only; leave it 'auto'"
    )
  auto = splits.resolve_scaling("auto", spec.standardize, spec.name)
  scaling = splits.resolve_scaling(feature_scaling, auto, spec.name)
  if spec.kind == "mulan" and process_rows is not None and process_rows[1] > 1:
    readers = {
      role: mulan.MulanReader(p, files["xml"], spec.num_labels, spec.drop_attributes)
      for role, p in files.items()
      if role != "xml"
    }
    ds = mulan_rows.load_mulan_rows(
      spec.name,
      spec.split_rule,
      readers,
      process_rows,
      split_seed=split_seed,
      fold=fold,
      resplit_sizes=spec.resplit_counts if resplit else None,
      scaling_option=feature_scaling,
      auto=auto,
      meta=meta,
    )
  elif spec.kind == "mulan":
    parsed = {
      role: mulan.read_mulan(p, files["xml"], spec.num_labels, spec.drop_attributes)
      for role, p in files.items()
      if role != "xml"
    }
    ds = split_mulan(
      spec.name,
      spec.split_rule,
      parsed,
      split_seed=split_seed,
      fold=fold,
      resplit_sizes=spec.resplit_counts if resplit else None,
      scaling=scaling,
      meta=meta,
      scaling_option=feature_scaling,
      auto=auto,
    )
  elif spec.kind == "clus":
    ds = _load_clus(spec, files, split_seed, meta, root_label, scaling, feature_scaling, auto)
  else:
    raise ValueError(f"unknown dataset kind {spec.kind!r}")
  if (ds.num_features, ds.num_labels) != (spec.num_features, spec.num_labels + root_label):
    raise DataError(
      root,
      None,
      f"loaded {ds.num_features} features / {ds.num_labels} "
      f"labels, the registry expects {spec.num_features} / "
      f"{spec.num_labels}",
    )
  return ds


def _load_clus(
  spec: DatasetSpec,
  files: Mapping[str, pathlib.Path],
  split_seed: int,
  meta: dict[str, Any],
  root_label: bool = False,
  scaling: str = "zscore",
  scaling_option: str = "auto",
  auto: str = "zscore",
) -> MultiLabelDataset:
  """A CLUS (FunCat) dataset; 'auto' scaling z-scores after imputation and one-hot, as
  its preprocessor does, any other is applied by `splits.finish_dataset` (`auto`: what
  'auto' means for the dataset, recorded)."""
  raw = {role: clus.parse_clus_arff(files[role]) for role in ("train", "valid", "test")}
  label_names = list(raw["train"].label_nodes)
  # SEAL counts the hierarchy's root as a label (500 = 499 FunCat nodes + root); it is
  # positive in every example, so it raises example-F1 of any model that predicts it.
  with_root = lambda y: np.concatenate([np.ones((len(y), 1), y.dtype), y], 1) if root_label else y
  if root_label:
    label_names = ["root"] + label_names
  for role in ("valid", "test"):
    if raw[role].label_nodes != raw["train"].label_nodes:
      raise DataError(raw[role].path, None, "hierarchy differs from the train file's")
  by_preprocessor = scaling_option == "auto" and spec.standardize
  pre = clus.fit_clus_preprocessor(raw["train"], standardize=by_preprocessor)
  parts = {
    name: Split(pre(raw[role]), with_root(raw[role].y))
    for name, role in (("train", "train"), ("validation", "valid"), ("test", "test"))
  }
  meta.update(
    split_seed=split_seed, fold=0, resplit=False, split_rule=spec.split_rule, split=spec.split
  )
  meta["split_fingerprint"] = splits.split_fingerprint(
    *(np.arange(raw[r].num_examples) for r in ("train", "valid", "test"))
  )
  meta["preprocessing"] = {
    "impute": {
      "missing_cells": {r: clus.count_missing(raw[r]) for r in raw},
      "rule": "numeric: train mean; nominal: train mode (ties: first declared)",
    },
    "one_hot": [a.name for a in pre.attributes if a.kind == "nominal"],
    "labels": "ancestor closure of the @-separated FunCat paths over the declared "
    "hierarchy nodes"
    + (", plus the root (label 0, always positive)" if root_label else " (no root node)"),
  }
  ds = splits.finish_dataset(
    spec.name,
    parts,
    pre.feature_names,
    label_names,
    scaling=False if by_preprocessor else scaling,
    meta=meta,
    scaling_option=scaling_option,
    auto=auto,
  )
  if pre.standardizer is not None:
    ds.meta["preprocessing"]["standardize"] = {
      "applied": True,
      "stats": "train split mean and population std (0 -> 1), after imputation and one-hot",
      "constant_train_columns": pre.standardizer.num_constant,
    }
    ds.meta["preprocessing"]["feature_scaling"]["applied"] = "zscore"
  return ds


def _load_synthetic(
  spec: DatasetSpec,
  split_seed: int,
  fold: int,
  resplit: bool,
  kwargs: dict[str, Any],
  feature_scaling: str = "auto",
) -> MultiLabelDataset:
  splits.check_fold(spec.name, fold, False)
  if resplit:
    raise ValueError("synthetic: resplit=True is only defined for bibtex and delicious")
  unknown = set(kwargs) - set(_SYNTHETIC_KWARGS)
  if unknown:
    raise TypeError(
      f"synthetic: unexpected arguments {sorted(unknown)}; allowed: {list(_SYNTHETIC_KWARGS)}"
    )
  num_train = kwargs.pop("num_train", synthetic.DEFAULT_NUM_TRAIN)
  num_val = kwargs.pop("num_validation", synthetic.DEFAULT_NUM_VALIDATION)
  num_test = kwargs.pop("num_test", synthetic.DEFAULT_NUM_TEST)
  if min(num_train, num_val, num_test) < 1:
    raise ValueError(
      f"synthetic: split sizes must be positive, got {num_train}, {num_val}, {num_test}"
    )
  x, y = synthetic.block_exclusivity(num_test + num_val + num_train, seed=split_seed, **kwargs)
  # Held-out rows first: they stay fixed when num_train changes.
  parts = {
    "test": Split(x[:num_test], y[:num_test]),
    "validation": Split(x[num_test : num_test + num_val], y[num_test : num_test + num_val]),
    "train": Split(x[num_test + num_val :], y[num_test + num_val :]),
  }
  params = {
    "num_features": x.shape[1],
    "num_blocks": kwargs.get("num_blocks", 4),
    "block_size": kwargs.get("block_size", 4),
  }
  meta = {
    "dataset": spec.name,
    "source": "generated",
    "kind": "synthetic",
    "files": [],
    "generator": "energynets.data.synthetic.block_exclusivity",
    "generator_args": params,
    "split_seed": split_seed,
    "fold": 0,
    "resplit": False,
    "split_rule": spec.split_rule,
    "split": "one draw of block_exclusivity(seed=split_seed): rows [0, num_test) "
    "test, next num_validation validation, rest train",
    "citation": spec.citation,
    "preprocessing": {},
  }
  feature_names = tuple(f"x{i}" for i in range(x.shape[1]))
  label_names = tuple(
    f"block{b}/{k}" for b in range(params["num_blocks"]) for k in range(params["block_size"])
  )
  # Generated features are left as drawn unless another scaling is asked for.
  return splits.finish_dataset(
    spec.name,
    parts,
    feature_names,
    label_names,
    scaling=splits.resolve_scaling(feature_scaling, "none", spec.name),
    meta=meta,
    scaling_option=feature_scaling,
    auto="none",
  )


def load_dataset(
  name_or_path: str | os.PathLike,
  *,
  data_dir: str | None = None,
  split_seed: int = 0,
  fold: int = 0,
  resplit: bool = False,
  root_label: bool = False,
  feature_scaling: str = "auto",
  process_rows: tuple[int, int] | None = None,
  num_train: int | None = None,
  **synthetic_kwargs,
) -> MultiLabelDataset:
  """Loads a registered dataset, or any MULAN dataset given by path.

  Args:
    name_or_path: a `REGISTRY` name ('synthetic' needs no files), or a folder holding
      `<name>-train.arff`, `<name>-test.arff` and `<name>.xml` (validation: seeded 10%
      of train), or `<name>.arff` and `<name>.xml` (seeded 60/20/20).
    data_dir: folder holding the registered datasets' folders; default
      $ENERGYNETS_DATA_DIR, else the per-user `datadir.default_data_dir()`. A registered
      dataset's missing files are downloaded into it on first use
      (`energynets.data.fetch`; $ENERGYNETS_AUTO_FETCH=0 turns that off).
    split_seed: seed of every random split rule (and of the synthetic generator).
    fold: the cross-validation test fold, 0..9 (yeast only).
    resplit: bibtex/delicious only: the implicit-energy paper's re-split sizes.
    root_label: expr_fun/spo_fun only: add the hierarchy's root as label 0 (always
      positive), SEAL's 500-label setting; default the 499 FunCat nodes.
    feature_scaling: MULAN, CLUS and synthetic datasets: 'none', 'zscore' (train mean
      and std), 'maxabs' (train max |x|), or 'auto' (the registry's rule; by path:
      z-score unless every feature of the train file, or of the single file, is 0/1;
      synthetic: none); statistics from the train split. Whatever is asked for,
      `meta["preprocessing"]["feature_scaling"]["auto"]` records what 'auto' means for
      the dataset.
    process_rows: `(p, P)`: hold only process p of P's rows of every split
      (`select_process_rows`), with `meta["process_rows"]` recording them (`meta`'s
      counts stay those of the whole splits). MULAN files are then read line by line,
      storing only those rows (`mulan_rows.load_mulan_rows`); other datasets are loaded
      whole and cut. None or P = 1: every row.
    num_train: 'synthetic': the training rows generated (default
      `synthetic.DEFAULT_NUM_TRAIN`). Any other dataset: keep a seeded, nested random
      subset of that many training rows (`keep_train_rows`, seeded by `split_seed`),
      with feature scaling fit on the kept rows and validation and test whole; the
      whole dataset is read first and then cut (also with `process_rows`), which is
      cheap at the small sizes this is meant for. None or 0: every training row.
    **synthetic_kwargs: 'synthetic' only: num_validation, num_test, num_features,
      num_blocks, block_size.

  Returns:
    The dataset; `meta` records files and checksums, split rule, seed, fold,
    preprocessing and counts.

  Raises:
    MissingDataError (a DataError): files missing and not downloaded; it lists them
      and names the fetch command.
    DataError: a missing data directory, checksum mismatch, malformed file.
    ValueError: an unknown name or an option the dataset does not offer.
    TooFewTrainingRows (a ValueError): `num_train` negative or above the training rows.
  """
  key = os.fspath(name_or_path)
  spec = REGISTRY.get(key.lower())
  if root_label and (spec is None or spec.kind != "clus"):
    raise ValueError(
      f"{key}: root_label=True only applies to the hierarchical (FunCat) "
      f"datasets {sorted(n for n, s in REGISTRY.items() if s.kind == 'clus')}"
    )
  if process_rows is not None:
    index, count = process_rows
    if not 0 <= index < count:
      raise ValueError(f"process_rows={process_rows}: need 0 <= process < processes")
  ds: MultiLabelDataset | None
  if spec is not None and spec.kind == "synthetic":
    generator_kwargs = dict(synthetic_kwargs)
    if num_train is not None:
      generator_kwargs["num_train"] = num_train
    ds = _load_synthetic(spec, split_seed, fold, resplit, generator_kwargs, feature_scaling)
    return select_process_rows(ds, *process_rows) if process_rows else ds
  if synthetic_kwargs:
    raise TypeError(
      f"{key}: unexpected arguments {sorted(synthetic_kwargs)} (only the "
      f"'synthetic' dataset takes generator arguments)"
    )
  if num_train:
    # Scaling statistics come from the kept rows only: load unscaled, cut, then scale.
    whole = load_dataset(
      key,
      data_dir=data_dir,
      split_seed=split_seed,
      fold=fold,
      resplit=resplit,
      root_label=root_label,
      feature_scaling="none",
    )
    ds = keep_train_rows(whole, num_train, split_seed, feature_scaling)
    return select_process_rows(ds, *process_rows) if process_rows else ds
  if spec is not None:
    ds = _load_registered(
      spec, data_dir, split_seed, fold, resplit, root_label, feature_scaling, process_rows
    )
  elif (path := pathlib.Path(key).expanduser()).exists():
    ds = load_mulan_path(path, split_seed, fold, resplit, feature_scaling, process_rows)
  else:
    ds = None
  if ds is not None:
    # A no-op where the MULAN files were read for this process's rows only.
    if process_rows and "process_rows" not in ds.meta:
      ds = select_process_rows(ds, *process_rows)
    return ds
  # A DataError (a ValueError): the binaries print it as the one line it is.
  raise DataError(
    None,
    None,
    f"unknown dataset {key!r}: not a registered name ({sorted(REGISTRY)}) and not an existing path",
  )
