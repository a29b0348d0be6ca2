"""The registry and `load_dataset` on the real files: counts from SOURCES.md, splits,
preprocessing, loading by path, the synthetic default and data-directory errors."""

import functools
import json
import pathlib

import numpy as np
import pytest

from energynets import data
from energynets.data import registry
from energynets.data.errors import MissingDataError

TESTDATA = pathlib.Path(__file__).parent / "testdata"


@functools.cache
def _load(name: str, data_dir: str, **kwargs) -> data.MultiLabelDataset:
  # Several tests read the same dataset; parse it once per session.
  return data.load_dataset(name, data_dir=data_dir, **kwargs)


@pytest.fixture(scope="module")
def load(data_dir):
  return lambda name, **kwargs: _load(name, str(data_dir), **kwargs)


def _shapes(ds):
  return {
    s: getattr(ds, s).x.shape + getattr(ds, s).y.shape[1:] for s in ("train", "validation", "test")
  }


def _cardinality(*parts):
  return float(np.concatenate([p.y for p in parts]).sum(1).mean())


# ------------------------------------------------------------------ counts (SOURCES.md)

# name -> (train, validation, test, D, L)
_EXPECTED = {
  # Shipped train 4880 = 4392 + 488 (seeded 10% validation), test 2515.
  "bibtex": (4392, 488, 2515, 1836, 159),
  # Train 12920 = 11628 + 1292, test 3185.
  "delicious": (11628, 1292, 3185, 500, 983),
  # Fold 0 of 10 on 2417 rows: test 242; validation round(10% of 2175) = 218.
  "yeast": (1957, 218, 242, 103, 14),
  # Train 463 = 417 + 46, test 199; 1185 features once `protein` is dropped.
  "genbase": (417, 46, 199, 1185, 27),
  # 60/20/20 of 502.
  "cal500": (302, 100, 100, 68, 174),
  "expr_fun": (1639, 849, 1291, 561, 499),
  "spo_fun": (1600, 837, 1266, 86, 499),
}


@pytest.mark.parametrize("name", sorted(_EXPECTED))
def test_counts_and_shapes(load, name):
  ds = load(name)
  n_tr, n_va, n_te, d, l = _EXPECTED[name]
  assert _shapes(ds) == {"train": (n_tr, d, l), "validation": (n_va, d, l), "test": (n_te, d, l)}
  assert (ds.num_features, ds.num_labels) == (d, l)
  spec = data.REGISTRY[name]
  assert (spec.num_features, spec.num_labels) == (d, l)
  assert dict(spec.counts) == {"train": n_tr, "validation": n_va, "test": n_te}
  assert ds.meta["num_examples"] == dict(spec.counts)
  for split in (ds.train, ds.validation, ds.test):
    assert split.x.dtype == np.float32 and split.y.dtype == np.float32
    assert np.isfinite(split.x).all()
    assert set(np.unique(split.y)) <= {0.0, 1.0}
  assert len(set(ds.feature_names)) == d and len(set(ds.label_names)) == l
  json.dumps(ds.meta)  # JSON-serialisable
  # Every file read is recorded with its checksum, and matches the registry's.
  assert {pathlib.Path(f["path"]).name: f["sha256"] for f in ds.meta["files"]} == dict(spec.sha256)


@pytest.mark.parametrize(
  "name, train_card, test_card",
  [
    ("bibtex", 2.380, 2.444),
    ("delicious", 19.05, 18.91),
    ("yeast", None, None),
    ("cal500", 26.044, None),
  ],
)
def test_label_cardinality_matches_sources(load, name, train_card, test_card):
  ds = load(name)
  if name == "yeast":  # cross-validation mixes the files: check the union (4.237)
    card = _cardinality(ds.train, ds.validation, ds.test)
    assert card == pytest.approx((4.228 * 1500 + 4.252 * 917) / 2417, abs=2e-3)
  elif name == "cal500":
    assert _cardinality(ds.train, ds.validation, ds.test) == pytest.approx(26.044, abs=1e-3)
  else:
    assert _cardinality(ds.train, ds.validation) == pytest.approx(train_card, abs=5e-3)
    assert _cardinality(ds.test) == pytest.approx(test_card, abs=5e-3)


def test_bibtex_delicious_have_binary_unstandardized_features(load):
  for name in ("bibtex", "delicious", "genbase"):
    ds = load(name)
    assert set(np.unique(ds.train.x)) == {0.0, 1.0}
    assert ds.meta["preprocessing"]["standardize"] == {"applied": False}
  genbase = load("genbase")
  assert "protein" not in genbase.feature_names
  assert genbase.meta["preprocessing"]["dropped_attributes"] == ["protein"]
  assert genbase.meta["preprocessing"]["binary_nominal_indicator"] == {
    "num_attributes": 1185,
    "value_encoded_as_1": {"YES": 1185},
  }


@pytest.mark.parametrize("name", ["yeast", "cal500", "expr_fun", "spo_fun"])
def test_real_valued_features_standardized_with_train_stats(load, name):
  ds = load(name)
  assert ds.meta["preprocessing"]["standardize"]["applied"]
  std = ds.train.x.std(0)
  np.testing.assert_allclose(ds.train.x.mean(0), 0, atol=1e-4)
  np.testing.assert_allclose(std[std > 1e-3], 1, atol=1e-3)
  # Held-out splits are transformed with train statistics, so are not exactly centred.
  assert np.abs(ds.test.x.mean(0)).max() > 1e-3


# ------------------------------------------------------------------ yeast CV


@pytest.mark.parametrize("fold, test_size", [(0, 242), (6, 242), (7, 241), (9, 241)])
def test_yeast_folds(load, fold, test_size):
  ds = load("yeast", fold=fold)
  counts = ds.meta["num_examples"]
  assert sum(counts.values()) == 2417  # the union of train (1500) and test (917)
  assert counts["test"] == test_size
  assert counts["validation"] == int((2417 - test_size) * 0.1 + 0.5)
  assert ds.meta["split_rule"] == "cv10" and ds.meta["fold"] == fold


def test_yeast_bad_fold(data_dir):
  with pytest.raises(ValueError, match="fold"):
    data.load_dataset("yeast", data_dir=data_dir, fold=10)
  with pytest.raises(ValueError, match="fold"):
    data.load_dataset("bibtex", data_dir=data_dir, fold=1)


# ------------------------------------------------------------------ split determinism


def _row_set(x):
  return {row.tobytes() for row in x}


def test_split_determinism_and_disjointness(load, data_dir):
  a = load("yeast", split_seed=0)
  b = data.load_dataset("yeast", data_dir=data_dir, split_seed=0)
  for split in ("train", "validation", "test"):
    np.testing.assert_array_equal(getattr(a, split).x, getattr(b, split).x)
    np.testing.assert_array_equal(getattr(a, split).y, getattr(b, split).y)
  assert a.meta["split_fingerprint"] == b.meta["split_fingerprint"]
  c = load("yeast", split_seed=1)
  assert c.meta["split_fingerprint"] != a.meta["split_fingerprint"]
  assert not np.array_equal(a.test.y, c.test.y)
  # Yeast rows are distinct real vectors, so row identity shows the splits are disjoint.
  assert len(_row_set(a.train.x)) == len(a.train.x)
  assert not _row_set(a.train.x) & _row_set(a.validation.x)
  assert not _row_set(a.train.x) & _row_set(a.test.x)
  assert not _row_set(a.validation.x) & _row_set(a.test.x)


def test_holdout_validation_comes_from_the_train_file(load):
  ds = load("bibtex")
  other = load("bibtex", split_seed=1)
  assert ds.meta["split_seed"] == 0 and other.meta["split_seed"] == 1
  assert ds.meta["split_fingerprint"] != other.meta["split_fingerprint"]
  # The shipped test file is untouched by the seed.
  np.testing.assert_array_equal(ds.test.x, other.test.x)
  # Train + validation is the train file in both cases.
  both = np.concatenate([ds.train.y, ds.validation.y]).sum(0)
  np.testing.assert_array_equal(both, np.concatenate([other.train.y, other.validation.y]).sum(0))


@pytest.mark.parametrize(
  "name, sizes, dropped",
  [
    ("bibtex", (4407, 1491, 1497), 0),
    # 9690 + 3207 + 3194 = 16091 = 16105 rows - the 14 with no positive label.
    ("delicious", (9690, 3207, 3194), 14),
  ],
)
def test_resplit_sizes(load, name, sizes, dropped):
  ds = load(name, resplit=True)
  assert (len(ds.train.x), len(ds.validation.x), len(ds.test.x)) == sizes
  assert ds.meta["split_rule"] == "resplit" and ds.meta["resplit"]
  assert f"minus {dropped} rows" in ds.meta["split_detail"]
  assert dict(data.REGISTRY[name].resplit_counts) == dict(
    zip(("train", "validation", "test"), sizes)
  )
  default = load(name)
  total = _cardinality(default.train, default.validation, default.test) * sum(
    len(s.y) for s in (default.train, default.validation, default.test)
  )
  assert _cardinality(ds.train, ds.validation, ds.test) * sum(sizes) == pytest.approx(total)


@pytest.mark.parametrize("name", ["yeast", "genbase", "cal500", "expr_fun", "synthetic"])
def test_resplit_only_for_bibtex_delicious(data_dir, name):
  with pytest.raises(ValueError, match="resplit"):
    data.load_dataset(name, data_dir=data_dir, resplit=True)


# ------------------------------------------------------------------ CLUS


@pytest.mark.parametrize("name", ["expr_fun", "spo_fun"])
def test_clus_labels_are_ancestor_closed(load, name):
  ds = load(name)
  index = {node: k for k, node in enumerate(ds.label_names)}
  parent = np.array(
    [index.get(n.rsplit("/", 1)[0], -1) if "/" in n else -1 for n in ds.label_names]
  )
  assert (parent[[("/" in n) for n in ds.label_names]] >= 0).all()
  has_parent = parent >= 0
  for split in (ds.train, ds.validation, ds.test):
    y = split.y.astype(bool)
    # Every positive node's parent is positive.
    assert not (y[:, has_parent] & ~y[:, parent[has_parent]]).any()
    assert y.sum(1).min() >= 1


def test_root_label_is_seals_500th_label(load):
  plain, rooted = load("spo_fun"), load("spo_fun", root_label=True)
  assert rooted.num_labels == plain.num_labels + 1 == 500
  assert rooted.label_names == ("root",) + plain.label_names
  for a, b in ((plain.train, rooted.train), (plain.test, rooted.test)):
    assert (b.y[:, 0] == 1).all()
    np.testing.assert_array_equal(b.y[:, 1:], a.y)
    np.testing.assert_array_equal(b.x, a.x)


@pytest.mark.parametrize("name", ["genbase", "synthetic"])
def test_root_label_only_for_hierarchical_data(data_dir, name):
  with pytest.raises(ValueError, match="root_label"):
    data.load_dataset(name, data_dir=data_dir, root_label=True)


def test_expr_fun_missing_values_and_one_hot(load):
  ds = load("expr_fun")
  pre = ds.meta["preprocessing"]
  assert pre["impute"]["missing_cells"]["train"] == 80441  # SOURCES.md
  assert len(pre["one_hot"]) == 4
  assert ds.num_features == 547 + 5 + 5 + 2 + 2


# ------------------------------------------------------------------ by path


def test_load_mulan_dataset_by_path(data_dir):
  ds = data.load_dataset(str(data_dir / "yeast"))
  assert ds.name == "yeast" and ds.meta["source"] == "path"
  assert (len(ds.train.x), len(ds.validation.x), len(ds.test.x)) == (1350, 150, 917)
  assert (ds.num_features, ds.num_labels) == (103, 14)
  assert ds.meta["preprocessing"]["standardize"]["applied"]  # real-valued features
  assert ds.meta["split_rule"] == "shipped_train_test+holdout_validation"


def test_load_tiny_fixture_by_path():
  ds = data.load_dataset(TESTDATA / "tiny_mulan", split_seed=0)
  assert ds.name == "tiny"
  assert (len(ds.train.x), len(ds.validation.x), len(ds.test.x)) == (9, 1, 3)
  assert ds.feature_names == ("f0", "f1", "sw") and ds.label_names == ("A", "B", "C")
  # Standardized with train statistics (the indicator column too: features are not 0/1).
  np.testing.assert_allclose(ds.train.x.mean(0), 0, atol=1e-6)
  np.testing.assert_allclose(ds.train.x.std(0), 1, atol=1e-5)
  again = data.load_dataset(TESTDATA / "tiny_mulan" / "tiny.xml", split_seed=0)
  np.testing.assert_array_equal(again.validation.x, ds.validation.x)


def test_missing_mulan_features_imputed_with_train_mean(tmp_path):
  for f in ("tiny-train.arff", "tiny-test.arff", "tiny.xml"):
    text = (TESTDATA / "tiny_mulan" / f).read_text()
    # One missing numeric cell in train, one in test.
    text = text.replace("0.5,10,yes", "?,10,yes").replace("0.9,11,yes", "?,11,yes")
    (tmp_path / f).write_text(text)
  ds = data.load_dataset(tmp_path)
  assert ds.meta["preprocessing"]["impute"]["missing_cells"] == 2
  for split in (ds.train, ds.validation, ds.test):
    assert np.isfinite(split.x).all()
  # The test row's missing f0 became the train mean, which standardizes to 0.
  assert ds.test.x[1, 0] == pytest.approx(0, abs=1e-6)


def test_path_without_mulan_files(tmp_path):
  (tmp_path / "readme.txt").write_text("nothing here")
  with pytest.raises(data.DataError, match="expected exactly one MULAN dataset"):
    data.load_dataset(tmp_path)
  (tmp_path / "x-train.arff").write_text("")
  with pytest.raises(data.DataError, match=r"x-test\.arff: file not found"):
    data.load_dataset(tmp_path)


# ------------------------------------------------------------------ synthetic


def test_synthetic_is_default_and_needs_no_files(monkeypatch):
  monkeypatch.delenv(registry.DATA_DIR_ENV, raising=False)
  ds = data.load_dataset("synthetic")
  assert _shapes(ds) == {
    "train": (15000, 64, 16),
    "validation": (1000, 64, 16),
    "test": (1000, 64, 16),
  }
  for split in (ds.train, ds.validation, ds.test):
    np.testing.assert_array_equal(split.y.reshape(-1, 4, 4).sum(-1), 1)
  assert ds.meta["split_seed"] == 0
  json.dumps(ds.meta)


def test_synthetic_kwargs_and_nesting():
  small = data.load_dataset("synthetic", num_train=1500, split_seed=3)
  full = data.load_dataset("synthetic", split_seed=3)
  # Held-out rows do not depend on num_train; smaller train sets are prefixes.
  np.testing.assert_array_equal(small.test.x, full.test.x)
  np.testing.assert_array_equal(small.validation.y, full.validation.y)
  np.testing.assert_array_equal(small.train.x, full.train.x[:1500])
  other = data.load_dataset("synthetic", num_train=1500, split_seed=4)
  assert not np.array_equal(other.test.x, small.test.x)
  with pytest.raises(TypeError, match="unexpected"):
    data.load_dataset("synthetic", bogus=1)
  with pytest.raises(TypeError, match="only the 'synthetic'"):
    data.load_dataset("yeast", num_features=5)


# ------------------------------------------------------------------ errors


def test_default_data_dir_is_the_per_user_cache(monkeypatch, tmp_path):
  monkeypatch.delenv(registry.DATA_DIR_ENV, raising=False)
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
  assert data.resolve_data_dir() == tmp_path / "xdg" / "energynets" / "data"
  monkeypatch.delenv("XDG_CACHE_HOME")
  monkeypatch.setenv("HOME", str(tmp_path / "home"))
  default = tmp_path / "home" / ".cache" / "energynets" / "data"
  assert data.resolve_data_dir() == default  # need not exist: fetching creates it
  with pytest.raises(MissingDataError) as info:
    data.load_dataset("bibtex")
  message = str(info.value)
  assert "\n" not in message and str(default / "bibtex" / "bibtex.xml") in message
  # The default directory is where the command fetches to: no --data_dir needed.
  assert "`python -m energynets.data.fetch bibtex`" in message
  assert "ENERGYNETS_AUTO_FETCH=0" in message


def test_resolve_data_dir_precedence(monkeypatch, tmp_path):
  monkeypatch.setenv(registry.DATA_DIR_ENV, str(tmp_path))
  assert data.resolve_data_dir() == tmp_path
  other = tmp_path / "other"
  other.mkdir()
  assert data.resolve_data_dir(str(other)) == other
  with pytest.raises(data.DataError, match="does not exist") as info:
    data.resolve_data_dir(str(tmp_path / "absent"))
  assert f"python -m energynets.data.fetch all --data_dir={tmp_path / 'absent'}" in str(info.value)
  monkeypatch.setenv(registry.DATA_DIR_ENV, str(tmp_path / "absent"))
  with pytest.raises(
    data.DataError,
    match=r"\$ENERGYNETS_DATA_DIR.*does not exist|does not "
    r"exist.*ENERGYNETS_DATA_DIR",
  ):
    data.resolve_data_dir()


def test_missing_files_are_listed_in_one_error_with_the_fetch_command(tmp_path):
  with pytest.raises(MissingDataError, match="bibtex"):
    data.load_dataset("bibtex", data_dir=tmp_path)
  (tmp_path / "yeast").mkdir()
  (tmp_path / "yeast" / "yeast-train.arff").write_text("@relation x\n")
  with pytest.raises(MissingDataError) as info:
    data.load_dataset("yeast", data_dir=tmp_path)
  message, spec = str(info.value), registry.REGISTRY["yeast"]
  assert "\n" not in message and "2 files of dataset 'yeast' not found" in message
  for role in ("test", "xml"):
    name = spec.files[role]
    for part in (
      str(tmp_path / "yeast" / name),
      spec.file_url(role),
      spec.sha256[name],
      f"{spec.sizes[name]} bytes",
    ):
      assert part in message
  assert "yeast-train.arff (" not in message  # present: not listed
  assert f"`python -m energynets.data.fetch yeast --data_dir={tmp_path}`" in message
  assert info.value.dataset == "yeast" and len(info.value.missing) == 2


@pytest.mark.parametrize(
  "name, load",
  [
    ("twitter_pos", lambda d: data.load_sequence_dataset("twitter_pos", data_dir=d)),
    ("conll2003", lambda d: data.load_sequence_dataset("conll2003", data_dir=d)),
    ("weizmann_horse", lambda d: data.load_segmentation("weizmann_horse", data_dir=d)),
  ],
)
def test_sequence_and_segmentation_errors_name_the_fetch_command(name, load, tmp_path):
  with pytest.raises(MissingDataError) as info:
    load(tmp_path)
  message = str(info.value)
  assert f"python -m energynets.data.fetch {name} --data_dir={tmp_path}" in message
  assert "https://raw.githubusercontent.com/" in message and "sha256" in message
  assert list(tmp_path.iterdir()) == []  # nothing was downloaded or created


def test_checksum_mismatch_is_an_error(tmp_path, data_dir):
  folder = tmp_path / "cal500"
  folder.mkdir()
  text = (data_dir / "cal500" / "cal500.arff").read_text()
  (folder / "cal500.arff").write_text(text.replace("@relation CAL500", "@relation X", 1))
  (folder / "cal500.xml").write_bytes((data_dir / "cal500" / "cal500.xml").read_bytes())
  with pytest.raises(data.DataError, match="sha256"):
    data.load_dataset("cal500", data_dir=tmp_path)
  # By path there is no registry checksum to compare with.
  assert data.load_dataset(folder).num_labels == 174


def test_unknown_name():
  with pytest.raises(ValueError, match="unknown dataset 'bookmarks'"):
    data.load_dataset("bookmarks")


def test_registry_specs_are_consistent():
  for name, spec in data.REGISTRY.items():
    assert spec.name == name and spec.kind in ("mulan", "clus", "synthetic")
    assert spec.split_rule in data.splits.SPLIT_RULES
    if spec.kind != "synthetic":
      assert set(spec.sha256) == set(spec.files.values())
      assert spec.url.startswith("https://")
      assert spec.citation
  assert (
    data.REGISTRY["bibtex"].file_url("train").endswith("/data/multi-label/bibtex/bibtex-train.arff")
  )
