"""ARFF parsers on hand-made fixtures (exact arrays), malformed files and an oracle."""

import math
import pathlib

import arff as liac_arff  # liac-arff: a test oracle only
import numpy as np
import pytest

from energynets import data
from energynets.data import arff
from energynets.data import mulan_decoder
from energynets.data import splits
from energynets.data import synthetic

TESTDATA = pathlib.Path(__file__).parent / "testdata"
nan = math.nan


# ------------------------------------------------------------------ MULAN, fixtures


def test_dense_fixture_exact():
  x, y, feature_names, label_names = data.parse_mulan_arff(
    TESTDATA / "dense.arff", TESTDATA / "dense.xml"
  )
  np.testing.assert_array_equal(
    x,
    np.array(
      [
        # num1, quoted name, flag(YES), answer(yes), colour one-hot, pair(b)
        [1.5, -2.0, 1, 0, 1, 0, 0, 0],
        [0.0, 0.3, 0, 1, 0, 0, 1, 1],
        [-0.25, 7.0, 1, 1, 0, 1, 0, 1],
        [nan, 1.0, nan, 0, nan, nan, nan, 0],
      ],
      np.float32,
    ),
  )
  np.testing.assert_array_equal(y, [[1, 0], [0, 1], [1, 1], [0, 0]])
  assert x.dtype == np.float32 and y.dtype == np.float32
  assert feature_names == (
    "num1",
    "quoted name",
    "flag",
    "answer",
    "colour=red",
    "colour=green",
    "colour=blue",
    "pair",
  )
  # ARFF attribute order, not the XML's.
  assert label_names == ("lab1", "lab 2")


def test_sparse_fixture_exact():
  x, y, feature_names, label_names = data.parse_mulan_arff(
    TESTDATA / "sparse.arff", TESTDATA / "sparse.xml"
  )
  np.testing.assert_array_equal(
    x,
    [
      [1, 0, 0, 1],  # omitted `flag` is its first value, YES -> 1
      [0, 0, 0, 1],  # `{}`: every attribute omitted
      [0, 2.5, 0, 0],
      [0, 0, 1, 1],
      [0, 1, 0, 0],  # a dense row inside a sparse file
    ],
  )
  np.testing.assert_array_equal(y, [[1, 0, 0], [0, 0, 0], [0, 0, 1], [0, 1, 1], [0, 1, 0]])
  assert feature_names == ("w0", "w1", "w2", "flag")
  assert label_names == ("L0", "L1", "L2")


def test_num_labels_without_xml_and_drop_attributes():
  x, y, names, labels = data.parse_mulan_arff(
    TESTDATA / "dense.arff", num_labels=2, drop_attributes=("colour", "num1")
  )
  assert names == ("quoted name", "flag", "answer", "pair")
  np.testing.assert_array_equal(x[0], [-2.0, 1, 0, 0])
  assert labels == ("lab1", "lab 2") and y.shape == (4, 2)


@pytest.mark.parametrize(
  "positive, declared, expected_index",
  [
    ("1", ("0", "1"), 1),
    ("YES", ("YES", "NO"), 0),
    ("yes", ("no", "yes"), 1),
    ("True", ("True", "False"), 0),
    ("b", ("a", "b"), 1),
  ],
)
def test_binary_nominal_positive_value(positive, declared, expected_index):
  attr = arff.Attribute("f", "nominal", declared)
  assert mulan_decoder._positive_index(attr) == expected_index
  assert declared[expected_index] == positive


def test_encoding_notes():
  m = data.read_mulan(TESTDATA / "dense.arff", TESTDATA / "dense.xml")
  assert m.binary_nominal == (("flag", "YES"), ("answer", "yes"), ("pair", "b"))
  assert m.one_hot == ("colour",)


# ------------------------------------------------------------------ malformed input

_MALFORMED = [
  # (file, xml, line, words that must appear in the message)
  ("bad_value.arff", "malformed.xml", 8, ["bad value", "'2.0x'", "f0"]),
  ("bad_nominal.arff", "malformed.xml", 8, ["bad value", "'c'", "f1"]),
  ("field_count.arff", "malformed.xml", 9, ["3 fields", "expected 4"]),
  ("sparse_range.arff", "malformed.xml", 8, ["sparse index 4 out of range"]),
  ("bad_label.arff", "malformed.xml", 8, ["label", "'2'", "0 or 1"]),
  ("missing_label.arff", "malformed.xml", 8, ["label", "missing"]),
  ("truncated.arff", "malformed.xml", 8, ["not closed", "truncated"]),
  ("sparse_duplicate.arff", "malformed.xml", 8, ["sparse index 0 given twice"]),
  ("no_data.arff", "malformed.xml", 5, ["expected @relation, @attribute or @data"]),
  ("header_only.arff", "malformed.xml", 3, ["no @data"]),
  # Label count: the XML names more labels than the file has, or fewer.
  ("dense.arff", "three_labels.xml", 14, ["label 'L0'", "three_labels.xml"]),
  ("sparse.arff", "malformed.xml", 8, ["label 'L0'", "last attributes"]),
  ("bad_value.arff", "not_last.xml", 3, ["label 'f1'", "last attributes"]),
]


@pytest.mark.parametrize("filename, xml, line, words", _MALFORMED)
def test_malformed_mulan_names_file_line_and_problem(filename, xml, line, words):
  with pytest.raises(data.DataError) as info:
    data.parse_mulan_arff(TESTDATA / filename, TESTDATA / xml)
  err = info.value
  assert isinstance(err, ValueError)
  assert err.line == line, str(err)
  message = str(err)
  assert filename in message and f"line {line}" in message
  for word in words:
    assert word in message, message


_HEADER = [
  "@relation h",
  "@attribute f0 numeric",
  "@attribute L0 {0,1}",
  "@attribute L1 {0,1}",
  "@data",
  "1,0,1",
]


@pytest.mark.parametrize(
  "line, replacement, words",
  [
    (2, "@attribute f0 {a,b", ["unterminated nominal value list"]),
    (2, "@attribute f0 {a,a}", ["repeated nominal value"]),
    (2, "@attribute f0 relational", ["unsupported type"]),
    (2, "@attribute f0", ["has no type"]),
    (2, "@attribute 'f0 numeric", ["unterminated quoted name"]),
    (2, "@attribute f0 string", ["type string", "drop it"]),
    (3, "@attribute L0 {0,1,2}", ["must be declared {0,1}"]),
    (6, "{0 x,2 1}", ["bad value 'x'"]),
    (6, "{zero 1}", ["bad sparse index 'zero'"]),
    (6, "{0}", ["malformed sparse entry"]),
    (6, "1,0,1,", ["4 fields, expected 3"]),
    (6, "nan,0,1", ["bad value 'nan'"]),
    (6, "1,'0,1", ["unterminated quoted value"]),
  ],
)
def test_malformed_header_and_rows(tmp_path, line, replacement, words):
  lines = list(_HEADER)
  lines[line - 1] = replacement
  path = tmp_path / "h.arff"
  path.write_text("\n".join(lines) + "\n")
  with pytest.raises(data.DataError) as info:
    data.parse_mulan_arff(path, num_labels=2)
  assert info.value.line == line, str(info.value)
  assert f"h.arff, line {line}: " in str(info.value)
  for word in words:
    assert word in str(info.value)


def test_valid_header_variants(tmp_path):
  lines = list(_HEADER)
  lines[1] = "@ATTRIBUTE\t'f 0'\tINTEGER"
  lines[5] = "{0 4, 1 1}"
  path = tmp_path / "h.arff"
  path.write_text("\ufeff" + "\r\n".join(lines) + "\r\n")
  x, y, names, _ = data.parse_mulan_arff(path, num_labels=2)
  assert names == ("f 0",)
  np.testing.assert_array_equal(x, [[4]])
  np.testing.assert_array_equal(y, [[1, 0]])


def test_label_count_mismatch_with_num_labels():
  with pytest.raises(data.DataError, match=r"dense\.xml.*declares 2 labels, expected 3"):
    data.parse_mulan_arff(TESTDATA / "dense.arff", TESTDATA / "dense.xml", num_labels=3)


def test_missing_files():
  with pytest.raises(data.DataError, match="nope.arff: file not found"):
    data.parse_mulan_arff(TESTDATA / "nope.arff", TESTDATA / "dense.xml")
  with pytest.raises(data.DataError, match="nope.xml: file not found"):
    data.parse_mulan_arff(TESTDATA / "dense.arff", TESTDATA / "nope.xml")
  with pytest.raises(data.DataError, match="nope.arff: file not found"):
    data.parse_clus_arff(TESTDATA / "nope.arff")


def test_drop_unknown_attribute_is_an_error():
  with pytest.raises(data.DataError, match="'protein' to drop is not declared"):
    data.parse_mulan_arff(
      TESTDATA / "dense.arff", TESTDATA / "dense.xml", drop_attributes=("protein",)
    )


@pytest.mark.parametrize(
  "filename, line, words",
  [
    ("clus_bad_path.arff", 6, ["'02/07'", "not a declared hierarchy node"]),
    ("clus_field_count.arff", 7, ["2 fields", "expected 3"]),
    ("header_only.arff", 3, ["no @data"]),
  ],
)
def test_malformed_clus(filename, line, words):
  with pytest.raises(data.DataError) as info:
    data.parse_clus_arff(TESTDATA / filename)
  message = str(info.value)
  assert info.value.line == line and filename in message and f"line {line}" in message
  for word in words:
    assert word in message, message


# ------------------------------------------------------------------ CLUS, fixtures

_CLUS_Y = np.array(
  [
    # 01, 01/01, 01/02, 02, 02/01, 02/01/05
    [1, 1, 0, 0, 0, 0],  # 01/01
    [1, 0, 0, 1, 1, 1],  # 02/01/05@01
    [1, 0, 1, 1, 0, 0],  # 01/02@02
    [0, 0, 0, 1, 1, 0],  # 02/01
  ],
  np.float32,
)


def test_clus_raw_parse():
  raw = data.parse_clus_arff(TESTDATA / "clus_train.arff")
  assert [a.name for a in raw.attributes] == ["a", "b", "c"]
  np.testing.assert_array_equal(raw.columns[0], [1.0, 3.0, nan, 2.0])
  np.testing.assert_array_equal(raw.columns[1], [nan, 4.0, 2.0, 0.0])
  np.testing.assert_array_equal(raw.columns[2], [0, -1, 2, 2])
  assert raw.label_nodes == ("01", "01/01", "01/02", "02", "02/01", "02/01/05")
  assert raw.label_paths == (("01/01",), ("02/01/05", "01"), ("01/02", "02"), ("02/01",))
  np.testing.assert_array_equal(raw.y, _CLUS_Y)
  assert arff.count_missing(raw) == 3


def test_clus_preprocessor_uses_train_statistics():
  train = data.parse_clus_arff(TESTDATA / "clus_train.arff")
  test = data.parse_clus_arff(TESTDATA / "clus_test.arff")
  plain = data.fit_clus_preprocessor(train, standardize=False)
  assert plain.feature_names == ("a", "b", "c=x", "c=y", "c=z")
  # a: train mean 2; b: train mean 2; c: train mode z; full one-hot over x, y, z.
  encoded = np.array(
    [[1, 2, 1, 0, 0], [3, 4, 0, 0, 1], [2, 2, 0, 0, 1], [2, 0, 0, 0, 1]], np.float32
  )
  np.testing.assert_array_equal(plain(train), encoded)
  np.testing.assert_array_equal(plain(test), [[2, 1, 0, 1, 0]])

  pre = data.fit_clus_preprocessor(train)
  mean = np.array([2, 2, 0.25, 0, 0.75])
  std = np.array(
    [
      math.sqrt(0.5),
      math.sqrt(2),
      math.sqrt(0.1875),
      1.0,  # y: constant
      math.sqrt(0.1875),
    ]
  )
  np.testing.assert_allclose(pre(train), (encoded - mean) / std, rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(pre(test), ([[2, 1, 0, 1, 0]] - mean) / std, rtol=1e-6)
  assert pre(train).dtype == np.float32


def test_clus_header_mismatch_is_an_error(tmp_path):
  text = (TESTDATA / "clus_test.arff").read_text().replace("{x,y,z}", "{x,y}")
  (tmp_path / "other.arff").write_text(text)
  pre = data.fit_clus_preprocessor(data.parse_clus_arff(TESTDATA / "clus_train.arff"))
  with pytest.raises(data.DataError, match=r"other\.arff, line 4: attribute 'c' differs"):
    pre(data.parse_clus_arff(tmp_path / "other.arff"))


# ------------------------------------------------------------------ oracle, real files


def _oracle(path):
  with open(path) as f:
    return np.array(
      liac_arff.load(f, encode_nominal=True, return_type=liac_arff.DENSE)["data"], np.float64
    )


def test_sparse_parse_equals_liac_arff_bibtex(data_dir):
  path = data_dir / "bibtex" / "bibtex-test.arff"
  x, y, _, labels = data.parse_mulan_arff(path, data_dir / "bibtex" / "bibtex.xml")
  expected = _oracle(path)
  assert len(labels) == 159
  np.testing.assert_array_equal(np.concatenate([x, y], axis=1), expected)


def test_dense_numeric_parse_equals_liac_arff_yeast(data_dir):
  path = data_dir / "yeast" / "yeast-test.arff"
  x, y, _, labels = data.parse_mulan_arff(path, data_dir / "yeast" / "yeast.xml")
  assert len(labels) == 14
  # Both read each decimal as a float64 first; the parser then stores float32.
  np.testing.assert_array_equal(np.concatenate([x, y], axis=1), _oracle(path).astype(np.float32))


def test_dense_nominal_parse_equals_liac_arff_genbase(data_dir):
  path = data_dir / "genbase" / "genbase-test.arff"
  x, y, names, _ = data.parse_mulan_arff(
    path, data_dir / "genbase" / "genbase.xml", drop_attributes=("protein",)
  )
  expected = _oracle(path)
  # {YES,NO} is encoded 0 for YES by liac-arff; the parser maps YES -> 1.
  np.testing.assert_array_equal(x, 1 - expected[:, 1:1186])
  np.testing.assert_array_equal(y, expected[:, 1186:])
  assert len(names) == 1185 and "protein" not in names


# ------------------------------------------------------------------ splits, synthetic


@pytest.mark.parametrize("n, seed", [(4880, 0), (463, 3), (20, 1)])
def test_holdout_validation(n, seed):
  train, val = splits.holdout_validation(n, seed=seed)
  assert len(val) == int(n * 0.1 + 0.5) and len(train) + len(val) == n
  assert not set(train) & set(val)
  again = splits.holdout_validation(n, seed=seed)
  np.testing.assert_array_equal(val, again[1])
  assert not np.array_equal(val, splits.holdout_validation(n, seed=seed + 1)[1])


def test_kfold_partitions_and_validation():
  tests = []
  for fold in range(10):
    train, val, test = splits.kfold_split(2417, fold=fold, seed=0)
    assert len(test) == (242 if fold < 7 else 241)
    assert len(val) == int((2417 - len(test)) * 0.1 + 0.5)
    assert len(train) + len(val) + len(test) == 2417
    assert not (set(train) & set(val) or set(train) & set(test) or set(val) & set(test))
    tests.append(test)
  # The ten test folds partition the union.
  np.testing.assert_array_equal(np.sort(np.concatenate(tests)), np.arange(2417))
  with pytest.raises(ValueError, match="fold"):
    splits.kfold_split(2417, fold=10, seed=0)


def test_random_split_sizes():
  parts = splits.random_split(502, splits.fraction_sizes(502, (0.6, 0.2, 0.2)), seed=0)
  assert [len(p) for p in parts] == [302, 100, 100]
  np.testing.assert_array_equal(np.sort(np.concatenate(parts)), np.arange(502))


def test_standardizer_constant_column():
  x = np.array([[1.0, 5.0], [3.0, 5.0]])
  std = splits.Standardizer.fit(x)
  np.testing.assert_array_equal(std(x), [[-1, 0], [1, 0]])
  assert std.num_constant == 1


@pytest.mark.parametrize("seed", [0, 7])
def test_block_exclusivity(seed):
  x, y = data.block_exclusivity(500, seed=seed)
  assert x.shape == (500, 64) and y.shape == (500, 16)
  assert x.dtype == np.float32 and y.dtype == np.float32
  blocks = y.reshape(500, 4, 4)
  assert set(np.unique(y)) == {0.0, 1.0}
  np.testing.assert_array_equal(blocks.sum(-1), 1)  # exactly one winner per block
  # y is the within-block argmax of Z = XA for the seed's A.
  a = data.block_exclusivity_weights(seed=seed)
  z = (x.astype(np.float64) @ a).reshape(500, 4, 4)
  np.testing.assert_array_equal(blocks.argmax(-1), z.argmax(-1))
  # Every label wins sometimes (A is not degenerate).
  assert (y.mean(0) > 0.05).all()
  x2, y2 = data.block_exclusivity(200, seed=seed)
  np.testing.assert_array_equal(x2, x[:200])  # smaller draws are prefixes
  np.testing.assert_array_equal(y2, y[:200])
  x3, _ = data.block_exclusivity(200, seed=seed + 1)
  assert not np.array_equal(x3, x2)


def test_block_exclusivity_other_shape():
  x, y = synthetic.block_exclusivity(10, seed=0, num_features=8, num_blocks=3, block_size=5)
  assert x.shape == (10, 8) and y.shape == (10, 15)
  np.testing.assert_array_equal(y.reshape(10, 3, 5).sum(-1), 1)
