"""Dataset registry and `load_dataset`: name or path -> `MultiLabelDataset`.

A registered name (`REGISTRY`, kept in `energynets.data.dataset_specs`) maps to its
files under the data directory (`energynets.data.datadir`), label layout, split rule,
public URL and checksums. Any MULAN dataset can also be loaded by path.
Every split is identical for every method: it depends only on (dataset,
split_seed, fold, resplit), all recorded in `dataset.meta`.
"""

import copy
import dataclasses
import os
import pathlib
from typing import Any, Mapping

import numpy as np

from energynets.data import batching
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
from energynets.data.dataset_specs import DatasetSpec
from energynets.data.dataset_specs import REGISTRY
from energynets.data.errors import DataError
from energynets.data.splits import MultiLabelDataset, Split

_SYNTHETIC_KWARGS = ("num_train", "num_validation", "num_test", "num_features",
                     "num_blocks", "block_size")


def _take(x: np.ndarray, y: np.ndarray, idx: np.ndarray) -> Split:
  return Split(x=np.ascontiguousarray(x[idx]), y=np.ascontiguousarray(y[idx]))


def _is_binary(x: np.ndarray) -> bool:
  finite = x[~np.isnan(x)]
  return bool(np.all((finite == 0) | (finite == 1)))


def _split_mulan(name: str, rule: str, parsed: dict[str, mulan.MulanArff], *,
                 split_seed: int, fold: int, resplit_sizes: Mapping[str, int] | None,
                 scaling: str, meta: dict[str, Any], scaling_option: str,
                 auto: str) -> MultiLabelDataset:
  """Applies split `rule` to parsed MULAN files ('train'/'test' or 'all'), then
  `splits.finish_dataset` (`scaling` applied, `scaling_option` and `auto` recorded)."""
  first = next(iter(parsed.values()))
  for role, m in parsed.items():
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
  tr, va, te = splits.split_indices(rule, counts, positive, split_seed=split_seed,
                                    fold=fold, resplit_sizes=resplit_sizes, meta=meta)
  mulan.record_encoding(meta, first)
  parts = {"train": _take(x, y, tr), "validation": _take(x, y, va), "test": _take(x, y, te)}
  return splits.finish_dataset(name, parts, first.feature_names, first.label_names, scaling,
                               meta, scaling_option=scaling_option, auto=auto)


def select_process_rows(dataset: MultiLabelDataset, process_index: int,
                        process_count: int) -> MultiLabelDataset:
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
  meta = dict(dataset.meta, process_rows=mulan_rows.held_rows(held, totals, process_index,
                                                              process_count))
  return dataclasses.replace(dataset, meta=meta, **parts)


class TooFewTrainingRows(ValueError):
  """`num_train` asks for more training rows than the dataset's training split has."""


# Second seed word of the training-subset permutation: a stream of its own, apart from
# the split rules' permutations of the same split_seed.
_SUBSET_STREAM = 1


def keep_train_rows(dataset: MultiLabelDataset, num_train: int, seed: int,
                    feature_scaling: str = "none") -> MultiLabelDataset:
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
    raise TooFewTrainingRows(f"{dataset.name}: num_train={num_train}: the training split has "
                     f"{available} rows; keep 1..{available} (0: all)")
  rows = np.sort(np.random.default_rng([seed, _SUBSET_STREAM]).permutation(available)[
      :num_train])
  meta = copy.deepcopy(dataset.meta)
  meta["train_subset"] = {"kept": num_train, "of": available, "seed": seed,
                          "rule": "the first num_train of a seeded permutation of the "
                                  "training rows (nested across sizes); feature scaling "
                                  "fit on the kept rows"}
  parts = {"train": _take(dataset.train.x, dataset.train.y, rows),
           "validation": dataset.validation, "test": dataset.test}
  auto = meta.get("preprocessing", {}).get("feature_scaling", {}).get("auto")
  if feature_scaling == "auto" and auto is None:
    raise ValueError(f"{dataset.name}: feature_scaling='auto', but its meta does not record "
                     "what 'auto' means (meta['preprocessing']['feature_scaling']['auto'])")
  scaling = splits.resolve_scaling(feature_scaling, auto, dataset.name)
  return splits.finish_dataset(dataset.name, parts, dataset.feature_names,
                               dataset.label_names, scaling, meta,
                               scaling_option=feature_scaling, auto=auto)


def _check_fold(name: str, fold: int, allowed: bool):
  if not allowed and fold != 0:
    raise ValueError(f"{name}: `fold` only applies to cross-validated datasets (yeast); "
                     f"got fold={fold}")


def _load_registered(spec: DatasetSpec, data_dir, split_seed: int, fold: int,
                     resplit: bool, root_label: bool = False,
                     feature_scaling: str = "auto",
                     process_rows: tuple[int, int] | None = None) -> MultiLabelDataset:
  _check_fold(spec.name, fold, spec.split_rule == "cv10")
  if resplit and not spec.resplit_counts:
    offered = sorted(n for n, s in REGISTRY.items() if s.resplit_counts)
    raise ValueError(f"{spec.name}: resplit=True is only defined for {offered}")
  root, files = dataset_files(data_dir, spec.subdir, spec.files, spec.name)
  records = [file_record(p, spec.sha256.get(p.name), root.parent) for p in files.values()]
  meta: dict[str, Any] = {
      "dataset": spec.name, "source": "registry", "kind": spec.kind,
      "data_dir": str(root.parent), "files": records, "url": spec.url,
      "citation": spec.citation}
  if feature_scaling != "auto" and spec.kind not in ("mulan", "clus"):
    raise ValueError(f"{spec.name}: feature_scaling={feature_scaling!r} applies to MULAN, "
                     "CLUS and synthetic datasets only; leave it 'auto'")
  auto = splits.resolve_scaling("auto", spec.standardize, spec.name)
  scaling = splits.resolve_scaling(feature_scaling, auto, spec.name)
  if spec.kind == "mulan" and process_rows is not None and process_rows[1] > 1:
    readers = {role: mulan.MulanReader(p, files["xml"], spec.num_labels, spec.drop_attributes)
               for role, p in files.items() if role != "xml"}
    ds = mulan_rows.load_mulan_rows(spec.name, spec.split_rule, readers, process_rows,
                                    split_seed=split_seed, fold=fold,
                                    resplit_sizes=spec.resplit_counts if resplit else None,
                                    scaling_option=feature_scaling, auto=auto, meta=meta)
  elif spec.kind == "mulan":
    parsed = {role: mulan.read_mulan(p, files["xml"], spec.num_labels, spec.drop_attributes)
              for role, p in files.items() if role != "xml"}
    ds = _split_mulan(spec.name, spec.split_rule, parsed, split_seed=split_seed, fold=fold,
                      resplit_sizes=spec.resplit_counts if resplit else None,
                      scaling=scaling, meta=meta, scaling_option=feature_scaling, auto=auto)
  elif spec.kind == "clus":
    ds = _load_clus(spec, files, split_seed, meta, root_label, scaling, feature_scaling, auto)
  else:
    raise ValueError(f"unknown dataset kind {spec.kind!r}")
  if (ds.num_features, ds.num_labels) != (spec.num_features, spec.num_labels + root_label):
    raise DataError(root, None, f"loaded {ds.num_features} features / {ds.num_labels} "
                    f"labels, the registry expects {spec.num_features} / "
                    f"{spec.num_labels}")
  return ds


def _load_clus(spec: DatasetSpec, files: Mapping[str, pathlib.Path], split_seed: int,
               meta: dict[str, Any], root_label: bool = False, scaling: str = "zscore",
               scaling_option: str = "auto", auto: str = "zscore") -> MultiLabelDataset:
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
  parts = {name: Split(pre(raw[role]), with_root(raw[role].y))
           for name, role in (("train", "train"), ("validation", "valid"), ("test", "test"))}
  meta.update(split_seed=split_seed, fold=0, resplit=False, split_rule=spec.split_rule,
              split=spec.split)
  meta["split_fingerprint"] = splits.split_fingerprint(
      *(np.arange(raw[r].num_examples) for r in ("train", "valid", "test")))
  meta["preprocessing"] = {
      "impute": {"missing_cells": {r: clus.count_missing(raw[r]) for r in raw},
                 "rule": "numeric: train mean; nominal: train mode (ties: first declared)"},
      "one_hot": [a.name for a in pre.attributes if a.kind == "nominal"],
      "labels": "ancestor closure of the @-separated FunCat paths over the declared "
                "hierarchy nodes" + (", plus the root (label 0, always positive)"
                                     if root_label else " (no root node)"),
  }
  ds = splits.finish_dataset(spec.name, parts, pre.feature_names, label_names,
                             scaling=False if by_preprocessor else scaling, meta=meta,
                             scaling_option=scaling_option, auto=auto)
  if pre.standardizer is not None:
    ds.meta["preprocessing"]["standardize"] = {
        "applied": True, "stats": "train split mean and population std (0 -> 1), after "
                                  "imputation and one-hot",
        "constant_train_columns": pre.standardizer.num_constant}
    ds.meta["preprocessing"]["feature_scaling"]["applied"] = "zscore"
  return ds


def _load_synthetic(spec: DatasetSpec, split_seed: int, fold: int, resplit: bool,
                    kwargs: dict[str, Any], feature_scaling: str = "auto"
                    ) -> MultiLabelDataset:
  _check_fold(spec.name, fold, False)
  if resplit:
    raise ValueError("synthetic: resplit=True is only defined for bibtex and delicious")
  unknown = set(kwargs) - set(_SYNTHETIC_KWARGS)
  if unknown:
    raise TypeError(f"synthetic: unexpected arguments {sorted(unknown)}; allowed: "
                    f"{list(_SYNTHETIC_KWARGS)}")
  num_train = kwargs.pop("num_train", synthetic.DEFAULT_NUM_TRAIN)
  num_val = kwargs.pop("num_validation", synthetic.DEFAULT_NUM_VALIDATION)
  num_test = kwargs.pop("num_test", synthetic.DEFAULT_NUM_TEST)
  if min(num_train, num_val, num_test) < 1:
    raise ValueError(f"synthetic: split sizes must be positive, got {num_train}, "
                     f"{num_val}, {num_test}")
  x, y = synthetic.block_exclusivity(num_test + num_val + num_train, seed=split_seed,
                                     **kwargs)
  # Held-out rows first: they stay fixed when num_train changes.
  parts = {"test": Split(x[:num_test], y[:num_test]),
           "validation": Split(x[num_test:num_test + num_val],
                               y[num_test:num_test + num_val]),
           "train": Split(x[num_test + num_val:], y[num_test + num_val:])}
  params = {"num_features": x.shape[1], "num_blocks": kwargs.get("num_blocks", 4),
            "block_size": kwargs.get("block_size", 4)}
  meta = {"dataset": spec.name, "source": "generated", "kind": "synthetic", "files": [],
          "generator": "energynets.data.synthetic.block_exclusivity", "generator_args": params,
          "split_seed": split_seed, "fold": 0, "resplit": False,
          "split_rule": spec.split_rule,
          "split": "one draw of block_exclusivity(seed=split_seed): rows [0, num_test) "
                   "test, next num_validation validation, rest train",
          "citation": spec.citation,
          "preprocessing": {}}
  feature_names = tuple(f"x{i}" for i in range(x.shape[1]))
  label_names = tuple(f"block{b}/{k}" for b in range(params["num_blocks"])
                      for k in range(params["block_size"]))
  # Generated features are left as drawn unless another scaling is asked for.
  return splits.finish_dataset(spec.name, parts, feature_names, label_names,
                               scaling=splits.resolve_scaling(feature_scaling, "none",
                                                              spec.name),
                               meta=meta, scaling_option=feature_scaling, auto="none")


def _mulan_files_in(path: pathlib.Path) -> tuple[str, dict[str, pathlib.Path]]:
  """(dataset name, role -> file) of a MULAN folder, or of the folder of a file in it."""
  folder = path if path.is_dir() else path.parent
  stem = None
  if path.is_file():
    stem = path.name
    for suffix in ("-train.arff", "-test.arff", ".arff", ".xml"):
      if stem.endswith(suffix):
        stem = stem[:-len(suffix)]
        break
  if stem is None:
    trains = sorted(folder.glob("*-train.arff"))
    xmls = sorted(folder.glob("*.xml"))
    if len(trains) == 1:
      stem = trains[0].name[:-len("-train.arff")]
    elif not trains and len(xmls) == 1:
      stem = xmls[0].stem
    else:
      raise DataError(folder, None, "expected exactly one MULAN dataset: <name>-train.arff, "
                      "<name>-test.arff and <name>.xml (or <name>.arff and <name>.xml), found "
                      f"{[p.name for p in trains] or 'no *-train.arff'}")
  xml = folder / f"{stem}.xml"
  train, test, single = (folder / f"{stem}-train.arff", folder / f"{stem}-test.arff",
                         folder / f"{stem}.arff")
  if train.is_file() or test.is_file():
    files = {"train": train, "test": test, "xml": xml}
  else:
    files = {"all": single, "xml": xml}
  for p in files.values():
    if not p.is_file():
      raise DataError(p, None, f"file not found (a MULAN dataset given by path needs "
                      f"{stem}-train.arff, {stem}-test.arff and {stem}.xml)")
  return stem, files


def _auto_by_path(binary: bool) -> str:
  """What feature_scaling='auto' means for a MULAN dataset given by path.

  Args:
    binary: whether every finite feature value of the train file (or of the single
      file) is 0 or 1.

  Returns:
    'none' for binary features (bag of words, YES/NO), which z-scoring would make dense;
    'zscore' otherwise.
  """
  return "none" if binary else "zscore"


def _load_mulan_path(path: pathlib.Path, split_seed: int, fold: int,
                     resplit: bool, feature_scaling: str = "auto",
                     process_rows: tuple[int, int] | None = None) -> MultiLabelDataset:
  _check_fold(str(path), fold, False)
  if resplit:
    raise ValueError("resplit=True is only defined for the registered bibtex and delicious")
  name, files = _mulan_files_in(path)
  records = [file_record(p, None) for p in files.values()]
  rule = ("shipped_train_test+holdout_validation" if "train" in files
          else "random_60_20_20")
  meta: dict[str, Any] = {"dataset": name, "source": "path", "kind": "mulan",
                          "data_dir": str(files["xml"].parent), "files": records}
  if process_rows is not None and process_rows[1] > 1:
    readers = {role: mulan.MulanReader(p, files["xml"]) for role, p in files.items()
               if role != "xml"}
    ds = mulan_rows.load_mulan_rows(name, rule, readers, process_rows, split_seed=split_seed,
                                    fold=fold, resplit_sizes=None,
                                    scaling_option=feature_scaling, auto=_auto_by_path,
                                    meta=meta)
  else:
    parsed = {role: mulan.read_mulan(p, files["xml"]) for role, p in files.items()
              if role != "xml"}
    reference = parsed["train"] if "train" in parsed else parsed["all"]
    auto = _auto_by_path(_is_binary(reference.x))
    ds = _split_mulan(name, rule, parsed, split_seed=split_seed, fold=fold,
                      resplit_sizes=None,
                      scaling=splits.resolve_scaling(feature_scaling, auto, str(path)),
                      meta=meta, scaling_option=feature_scaling, auto=auto)
  record = ds.meta["preprocessing"]["feature_scaling"]
  record["reason"] = (
      f"feature_scaling={feature_scaling!r}" if feature_scaling != "auto" else
      "auto: train features all 0/1" if record["auto"] == "none" else
      "auto: train features not all 0/1")
  if record["applied"] == "zscore":
    ds.meta["preprocessing"]["standardize"]["reason"] = record["reason"]
  return ds


def load_dataset(name_or_path: str | os.PathLike, *, data_dir: str | None = None,
                 split_seed: int = 0, fold: int = 0, resplit: bool = False,
                 root_label: bool = False, feature_scaling: str = "auto",
                 process_rows: tuple[int, int] | None = None,
                 num_train: int | None = None, **synthetic_kwargs) -> MultiLabelDataset:
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
    raise ValueError(f"{key}: root_label=True only applies to the hierarchical (FunCat) "
                     f"datasets {sorted(n for n, s in REGISTRY.items() if s.kind == 'clus')}")
  if process_rows is not None:
    index, count = process_rows
    if not 0 <= index < count:
      raise ValueError(f"process_rows={process_rows}: need 0 <= process < processes")
  if spec is not None and spec.kind == "synthetic":
    generator_kwargs = dict(synthetic_kwargs)
    if num_train is not None:
      generator_kwargs["num_train"] = num_train
    ds = _load_synthetic(spec, split_seed, fold, resplit, generator_kwargs, feature_scaling)
    return select_process_rows(ds, *process_rows) if process_rows else ds
  if synthetic_kwargs:
    raise TypeError(f"{key}: unexpected arguments {sorted(synthetic_kwargs)} (only the "
                    f"'synthetic' dataset takes generator arguments)")
  if num_train:
    # Scaling statistics come from the kept rows only: load unscaled, cut, then scale.
    whole = load_dataset(key, data_dir=data_dir, split_seed=split_seed, fold=fold,
                         resplit=resplit, root_label=root_label, feature_scaling="none")
    ds = keep_train_rows(whole, num_train, split_seed, feature_scaling)
    return select_process_rows(ds, *process_rows) if process_rows else ds
  if spec is not None:
    ds = _load_registered(spec, data_dir, split_seed, fold, resplit, root_label,
                          feature_scaling, process_rows)
  elif (path := pathlib.Path(key).expanduser()).exists():
    ds = _load_mulan_path(path, split_seed, fold, resplit, feature_scaling, process_rows)
  else:
    ds = None
  if ds is not None:
    # A no-op where the MULAN files were read for this process's rows only.
    if process_rows and "process_rows" not in ds.meta:
      ds = select_process_rows(ds, *process_rows)
    return ds
  # A DataError (a ValueError): the binaries print it as the one line it is.
  raise DataError(None, None, f"unknown dataset {key!r}: not a registered name "
                  f"({sorted(REGISTRY)}) and not an existing path")
