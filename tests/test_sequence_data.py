"""Sequence-labeling data: parsers, tagging schemes, vocabularies, GloVe, encoding and
bucketed batching on hand-made fixtures, and the counts of SOURCES.md on the real files."""

import functools
import json
import pathlib

import numpy as np
import pytest

from energynets import data
from energynets import metrics
from energynets.data import DataError

TESTDATA = pathlib.Path(__file__).parent / "testdata"


# ------------------------------------------------------------------ parsers


def test_parse_conll_fixture_exact():
  sents = data.parse_conll2003(TESTDATA / "conll_tiny.txt")
  assert [s.tokens for s in sents] == [
    ("EU", "rejects", "German", "call", "."),
    ("Peter", "Blackburn"),
    ("BRUSSELS", "1996-08-22", "Antidisestablishmentarianism"),
  ]
  assert sents[0].pos == ("NNP", "VBZ", "JJ", "NN", ".")
  assert sents[0].chunk == ("B-NP", "B-VP", "B-NP", "I-NP", "O")
  assert sents[0].tags == ("B-ORG", "O", "B-MISC", "O", "O")
  # An I- tag after O is accepted (conlleval reads it as a chunk start).
  assert sents[2].tags == ("B-LOC", "O", "I-MISC")
  assert [s.line for s in sents] == [3, 9, 14]


def test_parse_twitter_fixture_exact():
  sents = data.parse_twitter_pos(TESTDATA / "twpos_tiny.txt")
  assert [s.tokens for s in sents] == [
    ("I", "predict", "I", "won't", "win"),
    ("@user", "\xa0", "lol", "#win", "http://t.co/x"),
  ]  # U+00A0 is a token.
  assert [s.tags for s in sents] == [("O", "V", "O", "V", "V"), ("@", "G", "!", "#", "U")]
  assert sents[0].pos == () and sents[0].chunk == ()


def _error(parse, tmp_path, text, name="f.txt") -> DataError:
  path = tmp_path / name
  path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
  with pytest.raises(DataError) as info:
    parse(path)
  assert str(path) in str(info.value)
  return info.value


def test_conll_wrong_column_count_names_file_and_line():
  with pytest.raises(DataError) as info:
    data.parse_conll2003(TESTDATA / "conll_malformed.txt")
  err = info.value
  assert err.line == 4 and "expected 4 columns" in err.problem and "got 3" in err.problem
  assert err.path == str(TESTDATA / "conll_malformed.txt")
  assert "conll_malformed.txt, line 4" in str(err)


@pytest.mark.parametrize(
  "text, line, problem",
  [
    ("a\tN\nb\tV\textra\n", 2, "expected 2 columns"),
    ("a\tN\n\nb\n", 3, "expected 2 columns"),
    ("a\tN\n\tV\n", 2, "empty token"),
    ("a\tN\nb\t\n", 2, "empty tag"),
    ("a\tN\nb\tQ\n", 2, "unknown tag 'Q'"),
  ],
)
def test_twitter_malformed(tmp_path, text, line, problem):
  err = _error(data.parse_twitter_pos, tmp_path, text)
  assert err.line == line and problem in err.problem


@pytest.mark.parametrize(
  "text, line, problem",
  [
    ("EU NNP B-NP B-ORG extra\n", 1, "expected 4 columns"),
    ("EU NNP B-NP X-ORG\n", 1, "not IOB2"),
    ("EU NNP B-NP E-ORG\n", 1, "not IOB2"),
    ("EU NNP B-NP B-\n", 1, "not IOB2"),
  ],
)
def test_conll_malformed(tmp_path, text, line, problem):
  err = _error(data.parse_conll2003, tmp_path, text)
  assert err.line == line and problem in err.problem


@pytest.mark.parametrize("parse", [data.parse_conll2003, data.parse_twitter_pos])
@pytest.mark.parametrize("text", ["", "\n\n", "-DOCSTART- -X- -X- O\n\n"])
def test_no_sentences(tmp_path, parse, text):
  if parse is data.parse_twitter_pos and "DOCSTART" in text:
    text = "-DOCSTART-\n"
  assert _error(parse, tmp_path, text).problem == "no sentences"


def test_missing_and_non_utf8_files(tmp_path):
  with pytest.raises(DataError, match="file not found") as info:
    data.parse_conll2003(tmp_path / "absent.txt")
  assert info.value.path == str(tmp_path / "absent.txt")
  assert "UTF-8" in _error(data.parse_twitter_pos, tmp_path, b"a\t\xff\n").problem


def test_crlf_and_missing_final_blank_line(tmp_path):
  path = tmp_path / "crlf.txt"
  path.write_bytes(b"EU NNP B-NP B-ORG\r\nrejects VBZ B-VP O\r\n\r\nPeter NNP B-NP B-PER")
  sents = data.parse_conll2003(path)
  assert [s.tags for s in sents] == [("B-ORG", "O"), ("B-PER",)]


# ------------------------------------------------------------------ tagging schemes


@pytest.mark.parametrize(
  "iob2, bioes",
  [
    ([], []),
    (["O"], ["O"]),
    (["B-PER"], ["S-PER"]),
    (["B-PER", "I-PER"], ["B-PER", "E-PER"]),
    (["B-PER", "I-PER", "I-PER", "O", "B-LOC"], ["B-PER", "I-PER", "E-PER", "O", "S-LOC"]),
    (["B-PER", "B-PER", "I-PER"], ["S-PER", "B-PER", "E-PER"]),
    (["B-ORG", "B-LOC", "I-LOC", "I-LOC"], ["S-ORG", "B-LOC", "I-LOC", "E-LOC"]),
  ],
)
def test_iob2_bioes_hand_cases(iob2, bioes):
  assert data.iob2_to_bioes(iob2) == bioes
  assert data.bioes_to_iob2(bioes) == iob2


def test_ill_formed_conversion_keeps_conlleval_chunks():
  # conlleval reads `I-` after O or another type as a chunk start.
  assert data.iob2_to_bioes(["O", "I-PER", "I-LOC"]) == ["O", "S-PER", "S-LOC"]
  assert data.bioes_to_iob2(["E-PER", "S-PER", "I-PER"]) == ["B-PER", "B-PER", "B-PER"]
  with pytest.raises(ValueError, match="not a iob2 tag"):
    data.iob2_to_bioes(["S-PER"])


def _random_tags(rng, n, prefixes, types=("PER", "LOC", "ORG")):
  tags = ["O"] + [f"{p}-{t}" for p in prefixes for t in types]
  return [str(t) for t in rng.choice(tags, size=n)]


def test_scheme_round_trip_random():
  rng = np.random.default_rng(0)
  for _ in range(500):
    tags = _random_tags(rng, int(rng.integers(0, 15)), "BI")  # ill-formed included.
    bioes = data.iob2_to_bioes(tags)
    spans = metrics.extract_spans(tags, "iob2")
    assert metrics.extract_spans(bioes, "bioes") == spans
    iob2 = data.bioes_to_iob2(bioes)
    assert metrics.extract_spans(iob2, "iob2") == spans
    assert data.iob2_to_bioes(iob2) == bioes  # well-formed now: exact round trips.
    assert data.bioes_to_iob2(data.iob2_to_bioes(iob2)) == iob2
  rand_bioes = _random_tags(rng, 40, "BIES")
  assert metrics.extract_spans(data.bioes_to_iob2(rand_bioes), "iob2") == metrics.extract_spans(
    rand_bioes, "bioes"
  )


def test_scheme_tags():
  assert data.scheme_tags(["PER", "LOC", "PER"], "iob2") == (
    "O",
    "B-LOC",
    "I-LOC",
    "B-PER",
    "I-PER",
  )
  assert len(data.scheme_tags(["PER", "LOC", "ORG", "MISC"], "bioes")) == 17


# ------------------------------------------------------------------ vocabularies


def test_vocabulary_build_min_count_and_unknown():
  v = data.Vocabulary.build(["b", "a", "b", "c", "a", "b", "d"], min_count=2)
  assert v.items == ("<pad>", "<unk>", "b", "a")  # by count, then alphabetically.
  assert v.index("b") == 2 and v.index("c") == 1 and v.index("zzz") == 1
  np.testing.assert_array_equal(v.encode(["a", "d", "b"]), [3, 1, 2])
  assert v.encode([]).dtype == np.int32 and v.decode([2, 3, 0]) == ["b", "a", "<pad>"]
  assert "a" in v and "c" not in v and len(v) == 4
  with pytest.raises(ValueError, match="min_count"):
    data.Vocabulary.build(["a"], min_count=0)


def test_vocabulary_case():
  words = ["Paris", "paris", "PARIS", "Rome"]
  cased = data.Vocabulary.build(words)
  assert len(cased) == 2 + 4 and cased.index("pARIS") == 1
  lower = data.Vocabulary.build(words, lowercase=True)
  assert lower.items == ("<pad>", "<unk>", "paris", "rome")
  assert lower.index("pARIS") == lower.index("Paris") == 2


def test_tag_vocabulary_has_no_unknown():
  tags = data.Vocabulary(("O", "B-PER", "I-PER"), reserved=False)
  np.testing.assert_array_equal(tags.encode(["I-PER", "O"]), [2, 0])
  with pytest.raises(ValueError, match="'B-LOC' is not in the vocabulary"):
    tags.index("B-LOC")
  with pytest.raises(ValueError, match="twice"):
    data.Vocabulary(("O", "O"), reserved=False)
  with pytest.raises(ValueError, match="starts with"):
    data.Vocabulary(("a", "b"))


# ------------------------------------------------------------------ GloVe


def _vocab():
  return data.Vocabulary.build(["the", "Peter", "Blackburn", "Blackburn", "unseen"])


def test_load_glove_fixture():
  vocab = _vocab()  # <pad> <unk> Blackburn Peter the unseen
  matrix, found = data.load_glove(TESTDATA / "glove_tiny.txt", vocab, 3, seed=1)
  assert matrix.shape == (6, 3) and matrix.dtype == np.float32 and found == 3
  np.testing.assert_array_equal(matrix[0], 0)  # padding
  np.testing.assert_allclose(matrix[vocab.index("the")], [0.1, 0.2, 0.3])
  np.testing.assert_allclose(matrix[vocab.index("Peter")], [1, 2, 3])  # via "peter"
  np.testing.assert_allclose(matrix[vocab.index("Blackburn")], [-0.5, 0, 0.5])
  again, _ = data.load_glove(TESTDATA / "glove_tiny.txt", vocab, 3, seed=1)
  np.testing.assert_array_equal(matrix, again)  # seeded rows
  other, _ = data.load_glove(TESTDATA / "glove_tiny.txt", vocab, 3, seed=2)
  assert not np.array_equal(matrix[1], other[1])
  assert 0 < np.abs(matrix[vocab.index("unseen")]).max() < 1  # small normal


def test_load_glove_exact_match_beats_lowercase(tmp_path):
  path = tmp_path / "g.txt"
  path.write_text("peter 1 1\nPeter 2 2\n", encoding="utf-8")
  matrix, found = data.load_glove(path, data.Vocabulary.build(["Peter", "peter"]), 2)
  np.testing.assert_array_equal(matrix[2:], [[2, 2], [1, 1]])  # Peter, peter
  assert found == 2


@pytest.mark.parametrize(
  "text, line, problem",
  [
    ("the 0.1 0.2 0.3\npeter 1 2\n", 2, "expected a word and 3 values, got 2"),
    ("the 0.1 0.2 0.3\n\npeter 1 2 x\n", 3, "not a number"),
    ("the 0.1 0.2 0.3 0.4\n", 1, "got 4"),
  ],
)
def test_load_glove_malformed(tmp_path, text, line, problem):
  path = tmp_path / "g.txt"
  path.write_text(text, encoding="utf-8")
  with pytest.raises(DataError) as info:
    data.load_glove(path, _vocab(), 3)
  assert info.value.line == line and problem in info.value.problem
  assert str(path) in str(info.value)


def test_load_glove_missing_or_binary_file(tmp_path):
  with pytest.raises(DataError, match="file not found"):
    data.load_glove(tmp_path / "none.txt", _vocab(), 3)
  (tmp_path / "g.bin").write_bytes(b"the 1 2 3\n\xff\xfe 1 2 3\n")
  with pytest.raises(DataError, match="not UTF-8"):
    data.load_glove(tmp_path / "g.bin", _vocab(), 3)
  with pytest.raises(ValueError, match="dim"):
    data.load_glove(TESTDATA / "glove_tiny.txt", _vocab(), 0)


# ------------------------------------------------------------------ encoding


def _tiny_conll(scheme="iob2", **kwargs):
  sents = data.parse_conll2003(TESTDATA / "conll_tiny.txt")
  return data.build_sequence_dataset(
    "tiny", {"train": sents, "validation": sents[1:], "test": sents[2:]}, scheme=scheme, **kwargs
  )


def test_build_conll_fixture_exact():
  ds = _tiny_conll(max_word_length=6)
  assert ds.tag_names == (
    "O",
    "B-LOC",
    "I-LOC",
    "B-MISC",
    "I-MISC",
    "B-ORG",
    "I-ORG",
    "B-PER",
    "I-PER",
  )
  tr = ds.train
  assert tr.words.shape == (3, 5) and tr.chars.shape == (3, 5, 6)
  for name in ("words", "chars", "pos", "chunk", "tags", "lengths"):
    assert getattr(tr, name).dtype == np.int32, name
  np.testing.assert_array_equal(tr.lengths, [5, 2, 3])
  np.testing.assert_array_equal(tr.mask, [[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0]])
  assert ds.word_vocab.decode(tr.words[1]) == ["Peter", "Blackburn", "<pad>", "<pad>", "<pad>"]
  assert [ds.tag_names[i] for i in tr.tags[0]] == ["B-ORG", "O", "B-MISC", "O", "O"]
  np.testing.assert_array_equal(tr.tags[1, 2:], 0)  # padding: 0, masked
  assert ds.pos_vocab.decode(tr.pos[0]) == ["NNP", "VBZ", "JJ", "NN", "."]
  assert ds.chunk_vocab.decode(tr.chunk[2, :3]) == ["B-NP", "I-NP", "I-NP"]
  # Characters: truncated to C = 6, zero padded.
  assert "".join(ds.char_vocab.decode(tr.chars[2, 2])) == "Antidi"
  assert ds.char_vocab.decode(tr.chars[1, 0]) == list("Peter") + ["<pad>"]
  np.testing.assert_array_equal(tr.chars[1, 2:], 0)
  # T and C are per split: the validation split's longest sentence has 3 words.
  assert ds.validation.words.shape == (2, 3) and ds.test.chars.shape == (1, 3, 6)
  assert ds.meta["counts"]["train"]["entities"] == 5
  json.dumps(ds.meta)


def test_build_char_length_is_longest_word_when_shorter():
  ds = _tiny_conll()
  assert ds.test.chars.shape[2] == 20 and ds.validation.chars.shape[2] == 20
  sents = data.parse_conll2003(TESTDATA / "conll_tiny.txt")[:2]
  ds = data.build_sequence_dataset(
    "t", {"train": sents, "validation": sents, "test": sents}, scheme="iob2"
  )
  assert ds.train.chars.shape[2] == len("Blackburn")


def test_build_unknown_words_min_count_and_lowercase():
  sents = data.parse_conll2003(TESTDATA / "conll_tiny.txt")
  dev = [
    data.Sentence(
      tokens=("eu", "Zanzibar"), tags=("B-ORG", "O"), pos=("NNP", "XX"), chunk=("B-NP", "B-NP")
    )
  ]
  ds = data.build_sequence_dataset(
    "t", {"train": sents, "validation": dev, "test": dev}, scheme="iob2"
  )
  np.testing.assert_array_equal(ds.validation.words, [[1, 1]])  # unseen -> unknown
  assert (
    ds.validation.pos[0, 1] == 1 and ds.meta["counts"]["validation"]["unknown_word_rate"] == 1.0
  )
  ds = data.build_sequence_dataset(
    "t", {"train": sents, "validation": dev, "test": dev}, scheme="iob2", lowercase=True
  )
  assert ds.word_vocab.decode(ds.validation.words[0]) == ["eu", "<unk>"]
  ds = data.build_sequence_dataset(
    "t", {"train": sents, "validation": dev, "test": dev}, scheme="iob2", min_count=2
  )
  assert len(ds.word_vocab) == 2  # every word once


def test_build_unseen_tag_is_an_error():
  sents = data.parse_conll2003(TESTDATA / "conll_tiny.txt")
  dev = [data.Sentence(tokens=("x",), tags=("B-DATE",), pos=("NN",), chunk=("O",))]
  with pytest.raises(ValueError, match=r"validation split: tag\(s\) \['B-DATE'\]"):
    data.build_sequence_dataset(
      "t", {"train": sents, "validation": dev, "test": sents}, scheme="iob2"
    )


def test_build_bioes():
  ds = _tiny_conll("bioes")
  assert ds.num_tags == 1 + 4 * 4 and ds.scheme == "bioes"
  assert [ds.tag_names[i] for i in ds.train.tags[1, :2]] == ["B-PER", "E-PER"]
  assert [ds.tag_names[i] for i in ds.train.tags[2, :3]] == ["S-LOC", "O", "S-MISC"]
  assert ds.meta["counts"] == _tiny_conll("iob2").meta["counts"]


def test_build_twitter_fixture():
  sents = data.parse_twitter_pos(TESTDATA / "twpos_tiny.txt")
  ds = data.build_sequence_dataset(
    "tw",
    {"train": sents[:1], "validation": sents[1:], "test": sents},
    scheme="pos",
    tag_names=data.TWITTER_POS_TAGS,
  )
  assert ds.tag_names == data.TWITTER_POS_TAGS and ds.num_tags == 25
  # Tags unseen in train still map: the tag set is fixed.
  assert [ds.tag_names[i] for i in ds.validation.tags[0]] == ["@", "G", "!", "#", "U"]
  assert ds.pos_vocab is None and not ds.validation.pos.any() and not ds.test.chunk.any()
  assert "entities" not in ds.meta["counts"]["train"]


def test_sentence_checks_lengths():
  with pytest.raises(ValueError, match="2 tokens, 1 tags"):
    data.Sentence(tokens=("a", "b"), tags=("O",))
  with pytest.raises(ValueError, match="1 POS"):
    data.Sentence(tokens=("a", "b"), tags=("O", "O"), pos=("NN",))
  with pytest.raises(ValueError, match="0 tokens"):
    data.Sentence(tokens=(), tags=())


def test_build_argument_errors():
  sents = data.parse_conll2003(TESTDATA / "conll_tiny.txt")
  with pytest.raises(ValueError, match="need splits"):
    data.build_sequence_dataset("t", {"train": sents}, scheme="iob2")
  with pytest.raises(ValueError, match="scheme"):
    data.build_sequence_dataset(
      "t", {"train": sents, "validation": sents, "test": sents}, scheme="iobes"
    )
  with pytest.raises(ValueError, match="validation split has no sentences"):
    data.build_sequence_dataset(
      "t", {"train": sents, "validation": [], "test": sents}, scheme="iob2"
    )


def test_decode_tags():
  ds = _tiny_conll()
  gold = data.decode_tags(ds.train.tags, ds.train.mask, ds.tag_names)
  assert gold[1] == ["B-PER", "I-PER"] and list(map(len, gold)) == [5, 2, 3]
  assert metrics.span_f1(gold, gold).f1 == 1.0


# ------------------------------------------------------------------ batching


def test_bucketed_batches_cover_every_example_once():
  lengths = np.random.default_rng(0).integers(1, 60, size=103)
  batches = list(data.bucketed_batches(lengths, 8, np.random.default_rng(1), num_buckets=4))
  np.testing.assert_array_equal(np.sort(np.concatenate(batches)), np.arange(103))
  assert sorted(map(len, batches)) == [7] + [8] * 12
  again = list(data.bucketed_batches(lengths, 8, 1, num_buckets=4))  # int seed accepted
  assert all(np.array_equal(a, b) for a, b in zip(batches, again))
  other = list(data.bucketed_batches(lengths, 8, 2, num_buckets=4))
  assert not all(np.array_equal(a, b) for a, b in zip(batches, other))
  # Defaults: one bucket when there are fewer than 4 batches' worth of sentences.
  assert len(list(data.bucketed_batches(lengths[:5], 8, 0))) == 1
  with pytest.raises(ValueError, match="batch_size"):
    data.bucketed_batches(lengths, 0, 0)
  with pytest.raises(ValueError, match="num_buckets"):
    data.bucketed_batches(lengths, 8, 0, num_buckets=0)


def test_bucketed_batches_group_similar_lengths():
  lengths = np.arange(1, 101)
  batches = list(data.bucketed_batches(lengths, 10, 0, num_buckets=10))
  assert all(np.ptp(lengths[b]) == 9 for b in batches)  # each bucket is one batch
  assert data.padding_fraction(lengths, batches) < 0.1


def test_batch_of_crops_to_batch_length():
  ds = _tiny_conll()
  batch = data.batch_of(ds.train, np.array([1, 2]))
  assert set(batch) == {"words", "chars", "pos", "chunk", "tags", "mask"}
  assert batch["words"].shape == (2, 3) and batch["chars"].shape == (2, 3, 20)
  np.testing.assert_array_equal(batch["tags"], ds.train.tags[[1, 2], :3])
  np.testing.assert_array_equal(batch["mask"].sum(1), [2, 3])
  assert data.batch_of(ds.train, [1], length_multiple=4)["words"].shape == (1, 4)
  assert data.batch_of(ds.train, [2], length_multiple=4)["words"].shape == (1, 4)
  assert data.batch_of(ds.train, [0], length_multiple=4)["words"].shape == (1, 5)  # <= T
  with pytest.raises(ValueError, match="non-empty"):
    data.batch_of(ds.train, [])


# ------------------------------------------------------------------ load_sequence_dataset


def test_load_errors(tmp_path):
  with pytest.raises(ValueError, match="unknown sequence dataset"):
    data.load_sequence_dataset("conll2000", data_dir=tmp_path)
  with pytest.raises(ValueError, match="scheme"):
    data.load_sequence_dataset("twitter_pos", data_dir=tmp_path, scheme="bioes")
  with pytest.raises(DataError, match="not found") as info:
    data.load_sequence_dataset("conll2003", data_dir=tmp_path)
  assert info.value.path == str(tmp_path / "conll2003")
  (tmp_path / "conll2003").mkdir()
  for f in ("train.txt", "valid.txt"):
    (tmp_path / "conll2003" / f).write_bytes((TESTDATA / "conll_tiny.txt").read_bytes())
  with pytest.raises(DataError, match="file not found") as info:
    data.load_sequence_dataset("conll2003", data_dir=tmp_path)
  assert info.value.path == str(tmp_path / "conll2003" / "test.txt")
  (tmp_path / "conll2003" / "test.txt").write_bytes(b"x X X O\n")
  with pytest.raises(DataError, match="sha256"):
    data.load_sequence_dataset("conll2003", data_dir=tmp_path)


def test_load_uses_environment_variable(monkeypatch, tmp_path):
  monkeypatch.setenv(data.DATA_DIR_ENV, str(tmp_path))
  with pytest.raises(DataError) as info:
    data.load_sequence_dataset("twitter_pos")
  assert info.value.path == str(tmp_path / "twitter_pos")


# ------------------------------------------------------------------ real files


@pytest.fixture
def real_dir(data_dir) -> pathlib.Path:
  """The shared data directory (conftest's `data_dir`: missing data is a failure, never a
  silent skip)."""
  return data_dir


@functools.cache
def _load(name: str, data_dir: str, **kwargs) -> data.SequenceDataset:
  return data.load_sequence_dataset(name, data_dir=data_dir, **kwargs)


def _counts(ds, key):
  return tuple(ds.meta["counts"][s][key] for s in ("train", "validation", "test"))


def test_conll2003_counts(real_dir):
  ds = _load("conll2003", str(real_dir))
  assert _counts(ds, "sentences") == (14041, 3250, 3453)
  assert _counts(ds, "tokens") == (203621, 51362, 46435)
  assert _counts(ds, "entities") == (23499, 5942, 5648)
  assert tuple(s.num_examples for s in (ds.train, ds.validation, ds.test)) == (14041, 3250, 3453)
  assert ds.num_tags == 9 and ds.train.max_length == int(ds.train.lengths.max())
  assert _counts(ds, "unknown_word_rate")[0] == 0.0
  assert ds.train.chars.shape[2] == 20  # capped
  assert ds.pos_vocab is not None and ds.train.pos[ds.train.mask].min() >= 2
  gold = data.decode_tags(ds.test.tags, ds.test.mask, ds.tag_names)
  assert sum(len(metrics.extract_spans(t)) for t in gold) == 5648
  files = {r["path"]: r["sha256"] for r in ds.meta["files"]}
  sums = dict(
    line.split()[::-1]
    for line in (real_dir / "SHA256SUMS").read_text().splitlines()
    if "conll2003" in line
  )
  assert {f"shared/data/{p}": h for p, h in files.items()} == sums
  json.dumps(ds.meta)


def test_conll2003_bioes(real_dir):
  ds = _load("conll2003", str(real_dir), scheme="bioes")
  iob2 = _load("conll2003", str(real_dir))
  assert ds.num_tags == 17 and _counts(ds, "entities") == (23499, 5942, 5648)
  for split in ("train", "test"):
    bioes_tags = data.decode_tags(getattr(ds, split).tags, getattr(ds, split).mask, ds.tag_names)
    iob2_tags = data.decode_tags(
      getattr(iob2, split).tags, getattr(iob2, split).mask, iob2.tag_names
    )
    assert [data.bioes_to_iob2(t) for t in bioes_tags] == iob2_tags  # exact round trip
    assert [data.iob2_to_bioes(t) for t in iob2_tags] == bioes_tags


def test_twitter_pos_counts(real_dir):
  ds = _load("twitter_pos", str(real_dir))
  assert _counts(ds, "sentences") == (1327, 500, 547)
  assert _counts(ds, "tokens") == (19442, 7152, 7707)
  assert ds.tag_names == data.TWITTER_POS_TAGS and ds.scheme == "pos"
  assert len(np.unique(ds.train.tags[ds.train.mask])) == 25
  assert not ds.train.pos.any() and not ds.test.chunk.any() and ds.chunk_vocab is None
  assert [r["path"] for r in ds.meta["files"]] == [
    "twitter_pos/oct27.traindev",
    "twitter_pos/oct27.test",
    "twitter_pos/daily547.conll",
  ]
  json.dumps(ds.meta)


def test_conll2003_bucketing_padding(real_dir):
  lengths = _load("conll2003", str(real_dir)).train.lengths
  rng = np.random.default_rng(0)
  bucketed = data.padding_fraction(lengths, data.bucketed_batches(lengths, 32, rng))
  perm = np.random.default_rng(0).permutation(len(lengths))
  shuffled = data.padding_fraction(lengths, [perm[i : i + 32] for i in range(0, len(perm), 32)])
  assert bucketed < 0.06 and shuffled > 0.5 and bucketed < shuffled / 10


def test_load_options(real_dir):
  ds = _load("twitter_pos", str(real_dir), lowercase=True, min_count=2, max_word_length=8)
  base = _load("twitter_pos", str(real_dir))
  assert len(ds.word_vocab) < len(base.word_vocab) and ds.train.chars.shape[2] == 8
  assert ds.meta["lowercase"] and ds.meta["min_count"] == 2


def test_packed_tokens_round_trip_and_one_hot_tags():
  ds = data.build_sequence_dataset(
    "conll2003",
    {k: data.parse_conll2003(TESTDATA / "conll_tiny.txt") for k in ("train", "validation", "test")},
    scheme="iob2",
  )
  split = ds.train
  x = data.pack_tokens(split)
  assert x.dtype == np.int32 and x.shape == split.words.shape + (3 + split.chars.shape[-1],)
  batch = data.unpack_tokens(x)
  for name in ("words", "pos", "chunk", "chars", "mask"):
    np.testing.assert_array_equal(batch[name], getattr(split, name))
  y = data.one_hot_tags(split, ds.num_tags)
  np.testing.assert_array_equal(y.sum(-1), split.mask)
  np.testing.assert_array_equal(y.argmax(-1)[split.mask], split.tags[split.mask])
  with pytest.raises(ValueError, match=r"\[B, T, 3 \+ C\]"):
    data.unpack_tokens(x[..., :3])


def test_length_bucketed_batches_are_deterministic_full_and_cropped():
  from energynets.data import batching

  rs = np.random.RandomState(0)
  n = 2000
  lengths = rs.randint(1, 60, n)
  x = np.where(np.arange(64) < lengths[:, None], 1 + rs.randint(1, 9, (n, 64)), 0)
  arrays = {"x": x[..., None], "y": np.ones((n, 64, 3)), "id": np.arange(n)}
  seen = []
  for step in range(n // 16):  # one epoch
    batch = batching.length_bucketed_batch(
      arrays, lengths, 16, seed=3, step=step, length_multiple=8
    )
    again = batching.length_bucketed_batch(
      arrays, lengths, 16, seed=3, step=step, length_multiple=8
    )
    np.testing.assert_array_equal(batch["id"], again["id"])
    t = batch["x"].shape[1]
    assert batch["y"].shape[:2] == (16, t) and t % 8 == 0
    assert lengths[batch["id"]].max() <= t < lengths[batch["id"]].max() + 8
    np.testing.assert_array_equal(batch["x"], x[batch["id"], :t, None])
    seen.extend(batch["id"])
  assert len(set(seen)) == len(seen) == 16 * (n // 16)
  # Similar lengths: far less padding than the whole padded width.
  waste = np.mean(
    [1 - lengths[b].mean() / 64 for b in [seen[i : i + 16] for i in range(0, len(seen), 16)]]
  )
  assert waste > 0.4  # random-length data padded to 64 wastes about half...
  cropped = [batching.length_bucketed_batch(arrays, lengths, 16, 3, s, 8) for s in range(40)]
  # (rounding up to a multiple of 8 alone wastes ~13% at these lengths)
  assert np.mean([1 - lengths[b["id"]].mean() / b["x"].shape[1] for b in cropped]) < 0.25
