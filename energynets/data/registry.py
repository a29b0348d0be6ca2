"""Dataset registry and `load_dataset`: name or path -> `MultiLabelDataset`.

A registered name maps to its files under the data directory, label layout, split
rule, public URL and checksums. Any MULAN dataset can also be loaded by path.
Every split is identical for every method: it depends only on (dataset,
split_seed, fold, resplit), all recorded in `dataset.meta`.
"""

import collections
import dataclasses
import hashlib
import os
import pathlib
from typing import Any, Mapping

import numpy as np

from energynets.data import arff
from energynets.data import splits
from energynets.data import synthetic
from energynets.data.arff import DataError
from energynets.data.splits import MultiLabelDataset, Split

DATA_DIR_ENV = "ENERGYNETS_DATA_DIR"

_MULAN_COMMIT = "43f6389095ad71984264db4387a8074b22bc7d4a"
_MULAN_URL = ("https://raw.githubusercontent.com/tsoumakas/mulan/" + _MULAN_COMMIT +
              "/data/multi-label/{}/")
_HICLASS_URL = ("https://raw.githubusercontent.com/tondach01/hiclass/"
                "b4d65a1918626db564994884816f6dc2c9bb8ff6/datasets_FUN/{}/")
_CHMCNN_URL = ("https://raw.githubusercontent.com/EGiunchiglia/C-HMCNN/"
               "e887855ab4b3b8f22e4fafc80a0a33c1d1ac0041/HMC_data/datasets_FUN/{}/")


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
  """What the registry knows about one dataset.

  Attributes:
    name: registry key.
    kind: 'mulan', 'clus' or 'synthetic'.
    subdir: folder under the data directory holding the files ('' if none).
    files: role ('train', 'test', 'valid', 'all', 'xml') -> file name.
    num_features: D after preprocessing (one-hot, dropped attributes).
    num_labels: L.
    split_rule: key of `splits.SPLIT_RULES`.
    split: human-readable split rule.
    counts: expected examples per split for split_seed=0, fold=0, resplit=False.
    resplit_counts: sizes of the optional `resplit=True` split (empty: not offered).
    url: public folder the files come from (append the file name; '' if none).
    sha256: file name -> sha256 of the public copy (checked on load).
    drop_attributes: attributes left out of the features.
    standardize: whether features are standardized with train mean/std.
    citation: where the data comes from.
    notes: caveats.
  """
  name: str
  kind: str
  subdir: str
  files: Mapping[str, str]
  num_features: int
  num_labels: int
  split_rule: str
  split: str
  counts: Mapping[str, int]
  resplit_counts: Mapping[str, int] = dataclasses.field(default_factory=dict)
  url: str = ""
  sha256: Mapping[str, str] = dataclasses.field(default_factory=dict)
  drop_attributes: tuple[str, ...] = ()
  standardize: bool = False
  citation: str = ""
  notes: str = ""

  def file_url(self, role: str) -> str:
    return self.url + self.files[role] if self.url else ""


def _counts(train: int, validation: int, test: int) -> dict[str, int]:
  return {"train": train, "validation": validation, "test": test}


REGISTRY: dict[str, DatasetSpec] = {
    "bibtex": DatasetSpec(
        name="bibtex", kind="mulan", subdir="bibtex",
        files={"train": "bibtex-train.arff", "test": "bibtex-test.arff",
               "xml": "bibtex.xml"},
        num_features=1836, num_labels=159,
        split_rule="shipped_train_test+holdout_validation",
        split=splits.SPLIT_RULES["shipped_train_test+holdout_validation"],
        counts=_counts(4392, 488, 2515), resplit_counts=_counts(4407, 1491, 1497),
        url=_MULAN_URL.format("bibtex"),
        sha256={
            "bibtex-train.arff":
                "8dcc9de6e0b2cebaec8c1f4fac78431adeeb73cfd3ab879b530a66d366e59174",
            "bibtex-test.arff":
                "9b03329cde64d3f994bdf7fbbac3f3b10fe185c311cb9ae725475f59c7f3f922",
            "bibtex.xml":
                "08fe20013c1e75dcf1888c185f5187c95e76495b8518ce289b4d3afce38d1232",
        },
        citation="Katakis, Tsoumakas, Vlahavas. Multilabel Text Classification for "
                 "Automated Tag Suggestion. ECML/PKDD 2008 Discovery Challenge.",
        notes="Binary bag-of-words features, not standardized. resplit=True gives the "
              "implicit-energy paper's 4407/1491/1497 split (seeded; their exact rows are "
              "not published)."),
    "delicious": DatasetSpec(
        name="delicious", kind="mulan", subdir="delicious",
        files={"train": "delicious-train.arff", "test": "delicious-test.arff",
               "xml": "delicious.xml"},
        num_features=500, num_labels=983,
        split_rule="shipped_train_test+holdout_validation",
        split=splits.SPLIT_RULES["shipped_train_test+holdout_validation"],
        counts=_counts(11628, 1292, 3185), resplit_counts=_counts(9690, 3207, 3194),
        url=_MULAN_URL.format("delicious"),
        sha256={
            "delicious-train.arff":
                "030186cdb542ebdd32052fcdbb1ebe30115b3a22518c1b4b198c45eb827aebe1",
            "delicious-test.arff":
                "2dfb01723a819914b0ca83361177ed413ce3f2169851d9f228d4692915d63944",
            "delicious.xml":
                "4e0c0f93c7d86a39b9fca4aaefaa00e9428f2c80277732dfbf03ca48e2c14da2",
        },
        citation="Tsoumakas, Katakis, Vlahavas. Effective and Efficient Multilabel "
                 "Classification in Domains with Large Number of Labels. ECML/PKDD 2008 "
                 "Workshop on Mining Multidimensional Data.",
        notes="Binary features, not standardized. 14 rows have no positive label. "
              "resplit=True gives the implicit-energy paper's 9690/3207/3194 sizes; they "
              "sum to 16091 = 16105 - the 14 label-less rows, which it leaves out."),
    "yeast": DatasetSpec(
        name="yeast", kind="mulan", subdir="yeast",
        files={"train": "yeast-train.arff", "test": "yeast-test.arff", "xml": "yeast.xml"},
        num_features=103, num_labels=14,
        split_rule="cv10", split=splits.SPLIT_RULES["cv10"],
        counts=_counts(1957, 218, 242),
        url=_MULAN_URL.format("yeast"),
        sha256={
            "yeast-train.arff":
                "e759dc991ff54694a4ff9c4314f3be0d6fd2b1994a4b563f57e416394c6aebbd",
            "yeast-test.arff":
                "4aaac102bff9669a765bf0b378602e5cc8c3b181048282e2f003117b496d552a",
            "yeast.xml":
                "c3056cc26444b5158b1588d1b73bec9c45429e10f0957ad085903423cb81f247",
        },
        standardize=True,
        citation="Elisseeff, Weston. A kernel method for multi-labelled classification. "
                 "NIPS 2001.",
        notes="SPEN 2016 (Table 2) reports 10-fold cross-validation on all 2417 rows; "
              "`fold` selects the test fold. Folds 0-6 hold 242 rows, 7-9 hold 241."),
    "genbase": DatasetSpec(
        name="genbase", kind="mulan", subdir="genbase",
        files={"train": "genbase-train.arff", "test": "genbase-test.arff",
               "xml": "genbase.xml"},
        num_features=1185, num_labels=27,
        split_rule="shipped_train_test+holdout_validation",
        split=splits.SPLIT_RULES["shipped_train_test+holdout_validation"],
        counts=_counts(417, 46, 199),
        url=_MULAN_URL.format("genbase"),
        sha256={
            "genbase-train.arff":
                "37670db2c2b308a1c163d05501819526f1d65d659638ddfb76812d4ce384b5c6",
            "genbase-test.arff":
                "0e988520bedab39aa3f23f08f646c769bcdb6f9119ee298fd92b37127b226a36",
            "genbase.xml":
                "198e8a1d7070e9603119e02e626cedc589db7577339b307b06f5192047b69eb9",
        },
        drop_attributes=("protein",),
        citation="Diplaris, Tsoumakas, Mitkas, Vlahavas. Protein Classification with "
                 "Multiple Algorithms. PCI 2005.",
        notes="`protein` (a per-example accession ID) is dropped; the 1185 {YES,NO} "
              "features become 0/1 (YES = 1), not standardized. SEAL used Cometa "
              "stratified folds, which are not available; this is the MULAN split."),
    "cal500": DatasetSpec(
        name="cal500", kind="mulan", subdir="cal500",
        files={"all": "cal500.arff", "xml": "cal500.xml"},
        num_features=68, num_labels=174,
        split_rule="random_60_20_20", split=splits.SPLIT_RULES["random_60_20_20"],
        counts=_counts(302, 100, 100),
        url=_MULAN_URL.format("cal500"),
        sha256={
            "cal500.arff":
                "cfe6097ba5fd6e8584e54911ab9783dcab34e898446b7c9370c71d477eae56d3",
            "cal500.xml":
                "877e128531268d7661faa3e44f7bb43cbcda829c0895e49879168775b192728c",
        },
        standardize=True,
        citation="Turnbull, Barrington, Torres, Lanckriet. Semantic Annotation and "
                 "Retrieval of Music and Sound Effects. IEEE TASLP 16(2), 2008.",
        notes="MULAN ships no split; SEAL's Cometa folds are not available, so this "
              "project's seeded 60/20/20 split is used (validation and test = round(20%), "
              "train = the rest)."),
    "expr_fun": DatasetSpec(
        name="expr_fun", kind="clus", subdir="expr_fun",
        files={"train": "expr_FUN.train.arff", "valid": "expr_FUN.valid.arff",
               "test": "expr_FUN.test.arff"},
        num_features=561, num_labels=499,
        split_rule="shipped_train_valid_test",
        split=splits.SPLIT_RULES["shipped_train_valid_test"],
        counts=_counts(1639, 849, 1291),
        url=_HICLASS_URL.format("expr_FUN"),
        sha256={
            "expr_FUN.train.arff":
                "100314a68323f03a5fa348d57fbf08b62ddff414a0d4c28881157024750b8134",
            "expr_FUN.valid.arff":
                "345aeb499a813118b5da6e43ea51a759f787fa5772f2907f0f789068c0ad82c7",
            "expr_FUN.test.arff":
                "1e7c095a3ce32efa3a81357fd79102e55f282bfa3a4aab40a9c810e5fc4fde0d",
        },
        standardize=True,
        citation="Vens, Struyf, Schietgat, Dzeroski, Blockeel. Decision trees for "
                 "hierarchical multi-label classification. Machine Learning 73(2), 2008; "
                 "data from Clare & King 2003.",
        notes="The public copy is zipped (`<file>.zip`; sha256 is of the unzipped file). "
              "547 numeric + 4 nominal attributes -> 561 features after one-hot. One "
              "attribute name is repeated in the file; the second copy is named `#2`. "
              "Labels: the 499 FunCat nodes, ancestor-closed; no root label (SEAL used 500 "
              "with the root)."),
    "spo_fun": DatasetSpec(
        name="spo_fun", kind="clus", subdir="spo_fun",
        files={"train": "spo_FUN.train.arff", "valid": "spo_FUN.valid.arff",
               "test": "spo_FUN.test.arff"},
        num_features=86, num_labels=499,
        split_rule="shipped_train_valid_test",
        split=splits.SPLIT_RULES["shipped_train_valid_test"],
        counts=_counts(1600, 837, 1266),
        url=_CHMCNN_URL.format("spo_FUN"),
        sha256={
            "spo_FUN.train.arff":
                "8049c3a620b8fcbbbe3f195ccca7dafb36372fce418d9bfe49d6ffadd4bcf6ca",
            "spo_FUN.valid.arff":
                "5ab7eaab567b80144299761abec833aa1a4a1115a347819362d06a149b43b0cf",
            "spo_FUN.test.arff":
                "18a9be63b28d636e767b5886121dee5ddc8ae5a61a05098408d1b8991419f284",
        },
        standardize=True,
        citation="Vens, Struyf, Schietgat, Dzeroski, Blockeel. Decision trees for "
                 "hierarchical multi-label classification. Machine Learning 73(2), 2008; "
                 "data from Clare & King 2003.",
        notes="77 numeric + 3 nominal attributes -> 86 features after one-hot. Labels: "
              "the 499 FunCat nodes, ancestor-closed; no root label."),
    "synthetic": DatasetSpec(
        name="synthetic", kind="synthetic", subdir="", files={},
        num_features=64, num_labels=16,
        split_rule="generated", split=splits.SPLIT_RULES["generated"],
        counts=_counts(synthetic.DEFAULT_NUM_TRAIN, synthetic.DEFAULT_NUM_VALIDATION,
                       synthetic.DEFAULT_NUM_TEST),
        citation="Belanger, McCallum. Structured Prediction Energy Networks. ICML 2016, "
                 "Section 7.3.",
        notes="Block exclusivity: X ~ N(0,1) [., 64], A ~ N(0,1) [64, 16], Z = XA, y = "
              "one-hot argmax of Z in each of 4 blocks of 4. Generated from split_seed: "
              "rows [0, test) are test, then validation, then train, so held-out sets do "
              "not change with num_train and smaller train sets are prefixes of larger "
              "ones. The paper trains on 15k (and 1.5k); held-out sizes are this "
              "project's choice."),
}

_SYNTHETIC_KWARGS = ("num_train", "num_validation", "num_test", "num_features",
                     "num_blocks", "block_size")


def resolve_data_dir(data_dir: str | os.PathLike | None = None) -> pathlib.Path:
  """The data directory: `data_dir` if given, else $ENERGYNETS_DATA_DIR.

  Raises:
    DataError: neither is set, or the directory does not exist.
  """
  if data_dir is not None and str(data_dir):
    path, origin = pathlib.Path(data_dir).expanduser(), "data_dir argument"
  elif os.environ.get(DATA_DIR_ENV):
    path, origin = pathlib.Path(os.environ[DATA_DIR_ENV]).expanduser(), f"${DATA_DIR_ENV}"
  else:
    raise DataError(None, None, f"no data directory: pass data_dir=... (--data_dir) or "
                    f"set the environment variable {DATA_DIR_ENV}")
  if not path.is_dir():
    raise DataError(path, None, f"data directory (from the {origin}) does not exist; pass "
                    f"data_dir=... (--data_dir) or set {DATA_DIR_ENV}")
  return path


def dataset_files(data_dir, subdir: str, files: Mapping[str, str], name: str
                  ) -> tuple[pathlib.Path, dict[str, pathlib.Path]]:
  """`(folder, {role: path})` of a dataset's files under the data directory.

  A DataError names a missing folder or file, before any checksum is looked at.
  """
  root = resolve_data_dir(data_dir) / subdir
  if not root.is_dir():
    raise DataError(root, None, f"dataset folder of {name!r} not found under the data "
                    f"directory (set data_dir or {DATA_DIR_ENV})")
  paths = {role: root / f for role, f in files.items()}
  for p in paths.values():
    if not p.is_file():
      raise DataError(p, None, f"file not found (dataset {name!r} needs "
                      f"{sorted(files.values())})")
  return root, paths


def sha256_of(path: str | os.PathLike) -> str:
  h = hashlib.sha256()
  with open(path, "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
      h.update(chunk)
  return h.hexdigest()


def _file_record(path: pathlib.Path, expected: str | None,
                 relative_to: pathlib.Path | None = None) -> dict[str, str]:
  """Path (relative to `relative_to`, so results name no machine's layout) and sha256."""
  if not path.is_file():
    raise DataError(path, None, "file not found")
  digest = sha256_of(path)
  if expected is not None and digest != expected:
    raise DataError(path, None, f"sha256 {digest} differs from the registry's {expected}: "
                    f"not the registered file (to use it anyway, load its folder by path)")
  shown = path.relative_to(relative_to) if relative_to is not None else path
  return {"path": str(shown), "sha256": digest}


def _take(x: np.ndarray, y: np.ndarray, idx: np.ndarray) -> Split:
  return Split(x=np.ascontiguousarray(x[idx]), y=np.ascontiguousarray(y[idx]))


def _finish(name: str, parts: dict[str, Split], feature_names, label_names,
            standardize: bool, meta: dict[str, Any]) -> MultiLabelDataset:
  """Train-statistics imputation and standardization; counts into meta."""
  train, val, test = parts["train"], parts["validation"], parts["test"]
  preprocessing = meta.setdefault("preprocessing", {})
  if np.isnan(train.x).any() or np.isnan(val.x).any() or np.isnan(test.x).any():
    (tx, vx, sx), num_missing = splits.impute_with_train_mean(train.x, val.x, test.x)
    train, val, test = Split(tx, train.y), Split(vx, val.y), Split(sx, test.y)
    preprocessing["impute"] = {"missing_cells": num_missing,
                               "rule": "train column mean (0 if never observed)"}
  if standardize:
    std = splits.Standardizer.fit(train.x)
    train, val, test = (Split(std(s.x), s.y) for s in (train, val, test))
    preprocessing["standardize"] = {
        "applied": True, "stats": "train split mean and population std (0 -> 1)",
        "constant_train_columns": std.num_constant}
  else:
    preprocessing["standardize"] = {"applied": False}
  meta["num_examples"] = {"train": train.num_examples, "validation": val.num_examples,
                    "test": test.num_examples}
  meta["num_features"] = len(feature_names)
  meta["num_labels"] = len(label_names)
  return MultiLabelDataset(name=name, train=train, validation=val, test=test,
                           label_names=tuple(label_names),
                           feature_names=tuple(feature_names), meta=meta)


def _is_binary(x: np.ndarray) -> bool:
  finite = x[~np.isnan(x)]
  return bool(np.all((finite == 0) | (finite == 1)))


def _split_mulan(name: str, rule: str, parsed: dict[str, arff.MulanArff], *,
                 split_seed: int, fold: int, resplit_sizes: Mapping[str, int] | None,
                 standardize: bool, meta: dict[str, Any]) -> MultiLabelDataset:
  """Applies split `rule` to parsed MULAN files ('train'/'test' or 'all')."""
  first = next(iter(parsed.values()))
  for role, m in parsed.items():
    if (m.feature_names, m.label_names) != (first.feature_names, first.label_names):
      raise DataError(m.path, None, f"attributes differ from {first.path}")
  if "all" in parsed:
    x, y = parsed["all"].x, parsed["all"].y
  else:
    x = np.concatenate([parsed["train"].x, parsed["test"].x])
    y = np.concatenate([parsed["train"].y, parsed["test"].y])
    num_train = len(parsed["train"].x)
  meta.update(split_seed=split_seed, fold=fold, resplit=resplit_sizes is not None)
  if resplit_sizes is not None:
    rule = "resplit"
    sizes = (resplit_sizes["train"], resplit_sizes["validation"], resplit_sizes["test"])
    # The paper's sizes add up to the rows with at least one positive label (delicious
    # has 14 without; bibtex none), so those rows are left out before re-splitting.
    kept = np.flatnonzero(y.sum(axis=1) > 0)
    tr, va, te = (kept[i] for i in splits.random_split(len(kept), sizes, seed=split_seed))
    meta["split_detail"] = (f"union of train+test ({len(x)} rows), minus "
                            f"{len(x) - len(kept)} rows with no positive label, into sizes "
                            f"{sizes}")
  elif rule == "shipped_train_test+holdout_validation":
    tr, va = splits.holdout_validation(num_train, seed=split_seed)
    te = np.arange(num_train, len(x))
  elif rule == "cv10":
    tr, va, te = splits.kfold_split(len(x), fold=fold, seed=split_seed)
    meta["split_detail"] = f"fold {fold} of 10 on the union train+test ({len(x)} rows)"
  elif rule == "random_60_20_20":
    tr, va, te = splits.random_split(len(x), splits.fraction_sizes(len(x), (0.6, 0.2, 0.2)),
                                     seed=split_seed)
  else:
    raise ValueError(f"unknown split rule {rule!r}")
  meta["split_rule"] = rule
  meta["split"] = splits.SPLIT_RULES[rule]
  meta["split_fingerprint"] = splits.split_fingerprint(tr, va, te)
  positives = collections.Counter(value for _, value in first.binary_nominal)
  meta["preprocessing"] = {
      "dropped_attributes": list(first.dropped),
      # Summarized: bibtex alone has 1836 such attributes.
      "binary_nominal_indicator": {"num_attributes": len(first.binary_nominal),
                                   "value_encoded_as_1": dict(positives)},
      "one_hot": list(first.one_hot),
  }
  parts = {"train": _take(x, y, tr), "validation": _take(x, y, va), "test": _take(x, y, te)}
  return _finish(name, parts, first.feature_names, first.label_names, standardize, meta)


def _check_fold(name: str, fold: int, allowed: bool):
  if not allowed and fold != 0:
    raise ValueError(f"{name}: `fold` only applies to cross-validated datasets (yeast); "
                     f"got fold={fold}")


def _load_registered(spec: DatasetSpec, data_dir, split_seed: int, fold: int,
                     resplit: bool, root_label: bool = False) -> MultiLabelDataset:
  _check_fold(spec.name, fold, spec.split_rule == "cv10")
  if resplit and not spec.resplit_counts:
    offered = sorted(n for n, s in REGISTRY.items() if s.resplit_counts)
    raise ValueError(f"{spec.name}: resplit=True is only defined for {offered}")
  root, files = dataset_files(data_dir, spec.subdir, spec.files, spec.name)
  records = [_file_record(p, spec.sha256.get(p.name), root.parent) for p in files.values()]
  meta: dict[str, Any] = {
      "dataset": spec.name, "source": "registry", "kind": spec.kind,
      "data_dir": str(root.parent), "files": records, "url": spec.url,
      "citation": spec.citation}
  if spec.kind == "mulan":
    parsed = {role: arff.read_mulan(p, files["xml"], spec.num_labels, spec.drop_attributes)
              for role, p in files.items() if role != "xml"}
    ds = _split_mulan(spec.name, spec.split_rule, parsed, split_seed=split_seed, fold=fold,
                      resplit_sizes=spec.resplit_counts if resplit else None,
                      standardize=spec.standardize, meta=meta)
  elif spec.kind == "clus":
    ds = _load_clus(spec, files, split_seed, meta, root_label)
  else:
    raise ValueError(f"unknown dataset kind {spec.kind!r}")
  if (ds.num_features, ds.num_labels) != (spec.num_features, spec.num_labels + root_label):
    raise DataError(root, None, f"loaded {ds.num_features} features / {ds.num_labels} "
                    f"labels, the registry expects {spec.num_features} / "
                    f"{spec.num_labels}")
  return ds


def _load_clus(spec: DatasetSpec, files: Mapping[str, pathlib.Path], split_seed: int,
               meta: dict[str, Any], root_label: bool = False) -> MultiLabelDataset:
  raw = {role: arff.parse_clus_arff(files[role]) for role in ("train", "valid", "test")}
  label_names = list(raw["train"].label_nodes)
  # SEAL counts the hierarchy's root as a label (500 = 499 FunCat nodes + root); it is
  # positive in every example, so it raises example-F1 of any model that predicts it.
  with_root = lambda y: np.concatenate([np.ones((len(y), 1), y.dtype), y], 1) if root_label else y
  if root_label:
    label_names = ["root"] + label_names
  for role in ("valid", "test"):
    if raw[role].label_nodes != raw["train"].label_nodes:
      raise DataError(raw[role].path, None, "hierarchy differs from the train file's")
  pre = arff.fit_clus_preprocessor(raw["train"], standardize=spec.standardize)
  parts = {name: Split(pre(raw[role]), with_root(raw[role].y))
           for name, role in (("train", "train"), ("validation", "valid"), ("test", "test"))}
  meta.update(split_seed=split_seed, fold=0, resplit=False, split_rule=spec.split_rule,
              split=spec.split)
  meta["split_fingerprint"] = splits.split_fingerprint(
      *(np.arange(raw[r].num_examples) for r in ("train", "valid", "test")))
  meta["preprocessing"] = {
      "impute": {"missing_cells": {r: arff.count_missing(raw[r]) for r in raw},
                 "rule": "numeric: train mean; nominal: train mode (ties: first declared)"},
      "one_hot": [a.name for a in pre.attributes if a.kind == "nominal"],
      "labels": "ancestor closure of the @-separated FunCat paths over the declared "
                "hierarchy nodes" + (", plus the root (label 0, always positive)"
                                     if root_label else " (no root node)"),
  }
  ds = _finish(spec.name, parts, pre.feature_names, label_names,
               standardize=False, meta=meta)
  if pre.standardizer is not None:
    ds.meta["preprocessing"]["standardize"] = {
        "applied": True, "stats": "train split mean and population std (0 -> 1), after "
                                  "imputation and one-hot",
        "constant_train_columns": pre.standardizer.num_constant}
  return ds


def _load_synthetic(spec: DatasetSpec, split_seed: int, fold: int, resplit: bool,
                    kwargs: dict[str, Any]) -> MultiLabelDataset:
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
  return _finish(spec.name, parts, feature_names, label_names, standardize=False, meta=meta)


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


def _load_mulan_path(path: pathlib.Path, split_seed: int, fold: int,
                     resplit: bool) -> MultiLabelDataset:
  _check_fold(str(path), fold, False)
  if resplit:
    raise ValueError("resplit=True is only defined for the registered bibtex and delicious")
  name, files = _mulan_files_in(path)
  records = [_file_record(p, None) for p in files.values()]
  parsed = {role: arff.read_mulan(p, files["xml"]) for role, p in files.items()
            if role != "xml"}
  # Binary features (bag of words, YES/NO) are left as they are; real ones standardized.
  reference = parsed["train"] if "train" in parsed else parsed["all"]
  standardize = not _is_binary(reference.x)
  rule = ("shipped_train_test+holdout_validation" if "train" in parsed
          else "random_60_20_20")
  meta: dict[str, Any] = {"dataset": name, "source": "path", "kind": "mulan",
                          "data_dir": str(files["xml"].parent), "files": records}
  ds = _split_mulan(name, rule, parsed, split_seed=split_seed, fold=fold, resplit_sizes=None,
                    standardize=standardize, meta=meta)
  ds.meta["preprocessing"]["standardize"]["reason"] = (
      "train features not all 0/1" if standardize else "train features all 0/1")
  return ds


def load_dataset(name_or_path: str | os.PathLike, *, data_dir: str | None = None,
                 split_seed: int = 0, fold: int = 0, resplit: bool = False,
                 root_label: bool = False, **synthetic_kwargs) -> MultiLabelDataset:
  """Loads a registered dataset, or any MULAN dataset given by path.

  Args:
    name_or_path: a `REGISTRY` name ('synthetic' needs no files), or a folder holding
      `<name>-train.arff`, `<name>-test.arff` and `<name>.xml` (validation: seeded 10%
      of train), or `<name>.arff` and `<name>.xml` (seeded 60/20/20).
    data_dir: folder holding the registered datasets' folders; default
      $ENERGYNETS_DATA_DIR.
    split_seed: seed of every random split rule (and of the synthetic generator).
    fold: the cross-validation test fold, 0..9 (yeast only).
    resplit: bibtex/delicious only: the implicit-energy paper's re-split sizes.
    root_label: expr_fun/spo_fun only: add the hierarchy's root as label 0 (always
      positive), SEAL's 500-label setting; default the 499 FunCat nodes.
    **synthetic_kwargs: 'synthetic' only: num_train, num_validation, num_test,
      num_features, num_blocks, block_size.

  Returns:
    The dataset; `meta` records files and checksums, split rule, seed, fold,
    preprocessing and counts.

  Raises:
    DataError: missing data directory or file, checksum mismatch, malformed file.
    ValueError: an unknown name or an option the dataset does not offer.
  """
  key = os.fspath(name_or_path)
  spec = REGISTRY.get(key.lower())
  if root_label and (spec is None or spec.kind != "clus"):
    raise ValueError(f"{key}: root_label=True only applies to the hierarchical (FunCat) "
                     f"datasets {sorted(n for n, s in REGISTRY.items() if s.kind == 'clus')}")
  if spec is not None and spec.kind == "synthetic":
    return _load_synthetic(spec, split_seed, fold, resplit, dict(synthetic_kwargs))
  if synthetic_kwargs:
    raise TypeError(f"{key}: unexpected arguments {sorted(synthetic_kwargs)} (only the "
                    f"'synthetic' dataset takes generator arguments)")
  if spec is not None:
    return _load_registered(spec, data_dir, split_seed, fold, resplit, root_label)
  path = pathlib.Path(key).expanduser()
  if path.exists():
    return _load_mulan_path(path, split_seed, fold, resplit)
  raise ValueError(f"unknown dataset {key!r}: not a registered name ({sorted(REGISTRY)}) "
                   f"and not an existing path")
