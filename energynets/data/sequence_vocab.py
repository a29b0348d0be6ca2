"""Vocabularies (string <-> id maps) and GloVe embedding matrices for them.

Word, character, POS and chunk vocabularies reserve id 0 for padding and id 1 for
unknown strings; a tag vocabulary does not: its ids 0..K-1 are the K tags a model
outputs, and a tag outside it is an error.
"""

import collections
import dataclasses
import pathlib
from typing import Iterable, Iterator

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
      raise ValueError(f"a reserved vocabulary starts with {PAD!r}, {UNK!r}; got "
                       f"{tuple(self.items[:2])}")
    index = {s: i for i, s in enumerate(self.items)}
    if len(index) != len(self.items):
      dup = next(s for s, c in collections.Counter(self.items).items() if c > 1)
      raise ValueError(f"vocabulary has the entry {dup!r} twice")
    object.__setattr__(self, "_index", index)

  @classmethod
  def build(cls, strings: Iterable[str], min_count: int = 1,
            lowercase: bool = False) -> "Vocabulary":
    """Padding, unknown, then every string seen `min_count` times, most frequent first.

    Ties are broken alphabetically, so the ids depend only on the counts.
    """
    if not isinstance(min_count, int) or min_count < 1:
      raise ValueError(f"min_count must be an integer >= 1; got {min_count!r}")
    counts = collections.Counter(s.lower() if lowercase else s for s in strings)
    kept = sorted((s for s, c in counts.items() if c >= min_count and s not in (PAD, UNK)),
                  key=lambda s: (-counts[s], s))
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


def _glove_vectors(path: pathlib.Path, dim: int) -> Iterator[tuple[str, np.ndarray]]:
  """(word, vector) for each line of a GloVe text file; checks every line."""
  with open(path, encoding="utf-8") as f:
    try:
      for lineno, line in enumerate(f, 1):
        fields = line.rstrip("\r\n").split(" ")
        if fields == [""]:
          continue
        if len(fields) != dim + 1 or not fields[0]:
          raise DataError(path, lineno, f"expected a word and {dim} values, got "
                          f"{len(fields) - 1} values")
        try:
          yield fields[0], np.array(fields[1:], np.float32)
        except ValueError:
          raise DataError(path, lineno, "a vector value is not a number") from None
    except UnicodeDecodeError as e:
      raise DataError(path, None, f"not UTF-8 text ({e})") from None


def load_glove(path: PathLike, vocabulary: Vocabulary, dim: int, seed: int = 0,
               scale: float = 0.1) -> tuple[np.ndarray, int]:
  """Embedding matrix [V, dim] float32 for `vocabulary` from a GloVe text file.

  Each line is `word v1 ... vdim`, single-space separated (every line is checked).
  A vocabulary word takes the vector of the same word in the file, else that of its
  lower-cased form (GloVe 6B is lower-cased); the first occurrence wins. Other rows,
  the unknown row included, are N(0, scale^2) drawn from `seed`; the padding row is
  zero. No GloVe file ships with the data: training from scratch is the default.

  Returns:
    (matrix, number of vocabulary words found in the file).
  """
  path = pathlib.Path(path)
  if not path.is_file():
    raise DataError(path, None, "file not found")
  if not isinstance(dim, int) or dim < 1:
    raise ValueError(f"dim must be a positive integer; got {dim!r}")
  rng = np.random.default_rng(seed)
  matrix = rng.normal(0.0, scale, (len(vocabulary), dim)).astype(np.float32)
  first = 2 if vocabulary.reserved else 0  # padding and unknown never match a word.
  if vocabulary.reserved:
    matrix[PAD_ID] = 0.0
  by_lower = collections.defaultdict(list)
  for i in range(first, len(vocabulary)):
    by_lower[vocabulary.items[i].lower()].append(i)
  exact = np.zeros(len(vocabulary), bool)
  found = np.zeros(len(vocabulary), bool)
  for word, vector in _glove_vectors(path, dim):
    i = vocabulary._index.get(word, -1)  # the stored (normalised) form
    if i >= first and not exact[i]:
      matrix[i], exact[i], found[i] = vector, True, True
    for j in by_lower.get(word, ()):
      if not found[j]:
        matrix[j], found[j] = vector, True
  return matrix, int(found.sum())
