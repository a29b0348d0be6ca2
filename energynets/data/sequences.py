"""Sequence-labeling data: CoNLL-2003 NER and Twitter POS (the InfNet tasks).

Files (shared/data/SOURCES.md): CoNLL-2003 has 4 space-separated columns
`token POS chunk NER`, `-DOCSTART-` lines between documents and IOB2 NER tags;
Twitter POS (Gimpel et al. 2011; Owoputi et al. 2013) has 2 tab-separated columns
`token tag` with a fixed set of 25 tags. A blank line ends a sentence (tweet).
Parsers are strict: a line with the wrong number of columns, an empty field, a tag
outside the file's scheme or a file without sentences raises `DataError` naming
the file, the line and the problem. Only the line terminator is stripped from a
Twitter line: tokens may be (or start with) U+00A0, which `str.strip` would eat.

Encoding (`SequenceDataset`): ids come from vocabularies built on the training split
only, so dev/test words outside it map to the unknown id (1), never to a new row.
Word, character, POS and chunk ids reserve 0 for padding and 1 for unknown; tag ids
do not: 0..K-1 are the K tags the model outputs (17 for CoNLL BIOES: O plus
B/I/E/S x PER, LOC, ORG, MISC), so a tag unseen in training is an error, and padding
positions hold 0 but are masked out. The padded length T of a split is its longest
sentence; `bucketed_batches` + `batch_of` crop each batch to its own longest
sentence, which keeps the padding small.
"""

import collections
import dataclasses
import os
import pathlib
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from energynets import metrics
from energynets.data.arff import DataError
from energynets.data.registry import dataset_files
from energynets.data.registry import sha256_of
from energynets.tokens import PACKED_COLUMNS  # re-exported
from energynets.tokens import unpack_tokens  # re-exported

PathLike = str | os.PathLike

PAD, UNK = "<pad>", "<unk>"
PAD_ID, UNK_ID = 0, 1

SCHEMES = ("iob2", "bioes", "pos")
_SCHEME_PREFIXES = {"iob2": ("B", "I"), "bioes": ("B", "I", "E", "S")}

# Owoputi et al. (2013) coarse tag set, in the order of SOURCES.md (= tag ids).
TWITTER_POS_TAGS = tuple("! # $ & , @ A D E G L M N O P R S T U V X Y Z ^ ~".split())

DEFAULT_MAX_WORD_LENGTH = 20
BATCHES_PER_BUCKET = 4


# ------------------------------------------------------------------ parsing


@dataclasses.dataclass(frozen=True)
class Sentence:
  """One sentence (or tweet); every annotation has one entry per token.

  Attributes:
    tokens: the words.
    tags: NER tags (CoNLL, IOB2) or POS tags (Twitter): the prediction target.
    pos: CoNLL POS tags (input features); () for Twitter.
    chunk: CoNLL chunk tags (input features); () for Twitter.
    line: 1-based line of the first token in its file, for error messages.
  """
  tokens: tuple[str, ...]
  tags: tuple[str, ...]
  pos: tuple[str, ...] = ()
  chunk: tuple[str, ...] = ()
  line: int = 0

  def __post_init__(self):
    n = len(self.tokens)
    if not n or len(self.tags) != n or len(self.pos) not in (0, n) or len(self.chunk) not in (0, n):
      raise ValueError(f"Sentence needs >= 1 token and one tag (and POS, chunk if given) per "
                       f"token; got {n} tokens, {len(self.tags)} tags, {len(self.pos)} POS, "
                       f"{len(self.chunk)} chunk")


def _read_lines(path: PathLike) -> list[str]:
  path = pathlib.Path(path)
  if not path.is_file():
    raise DataError(path, None, "file not found")
  try:
    text = path.read_text(encoding="utf-8")
  except UnicodeDecodeError as e:
    raise DataError(path, None, f"not UTF-8 text ({e})") from None
  # Not `splitlines()`: it would also split tweets at U+2028, U+0085, form feeds, ...
  return [line.rstrip("\r") for line in text.split("\n")]


def _parse_columns(path: PathLike, columns: tuple[str, ...],
                   split_line: Callable[[str], list[str]],
                   check: Callable[[list[str], int], None]) -> list[list[tuple]]:
  """Blank-line separated blocks of rows with `len(columns)` non-empty fields each.

  Returns one list of (line, fields) rows per sentence; `-DOCSTART-` lines end a
  sentence and are dropped.
  """
  blocks, rows = [], []
  for lineno, line in enumerate(_read_lines(path), 1):
    fields = split_line(line) if line.strip(" \t") else []
    if not fields or fields[0] == "-DOCSTART-":  # a sentence boundary.
      if rows:
        blocks.append(rows)
      rows = []
      continue
    if len(fields) != len(columns):
      raise DataError(path, lineno, f"expected {len(columns)} columns ({' '.join(columns)}), "
                      f"got {len(fields)}: {line!r}")
    for name, value in zip(columns, fields):
      if not value:
        raise DataError(path, lineno, f"empty {name}")
    check(fields, lineno)
    rows.append((lineno, fields))
  if rows:
    blocks.append(rows)
  if not blocks:
    raise DataError(path, None, "no sentences")
  return blocks


def parse_conll2003(path: PathLike) -> list[Sentence]:
  """CoNLL-2003 file: `token POS chunk NER` per line, IOB2 NER tags.

  Columns are split on whitespace (CoNLL tokens contain none). The NER tag must be
  'O', 'B-TYPE' or 'I-TYPE'; an I- tag that does not continue a same-type chunk is
  accepted (conlleval reads it as a chunk start).
  """
  def check(fields, lineno):
    tag = fields[3]
    prefix, sep, kind = tag.partition("-")
    if tag != "O" and not (sep and kind and prefix in ("B", "I")):
      raise DataError(path, lineno, f"NER tag {tag!r} is not IOB2 ('O', 'B-TYPE', 'I-TYPE')")

  blocks = _parse_columns(path, ("token", "POS", "chunk", "NER"), str.split, check)
  return [Sentence(tokens=tuple(f[0] for _, f in rows), pos=tuple(f[1] for _, f in rows),
                   chunk=tuple(f[2] for _, f in rows), tags=tuple(f[3] for _, f in rows),
                   line=rows[0][0]) for rows in blocks]


def parse_twitter_pos(path: PathLike) -> list[Sentence]:
  """Twitter POS file: `token<TAB>tag` per line, tags from `TWITTER_POS_TAGS`."""
  known = frozenset(TWITTER_POS_TAGS)

  def check(fields, lineno):
    if fields[1] not in known:
      raise DataError(path, lineno, f"unknown tag {fields[1]!r}; the Twitter POS tags are "
                      f"{' '.join(TWITTER_POS_TAGS)}")

  blocks = _parse_columns(path, ("token", "tag"), lambda line: line.split("\t"), check)
  return [Sentence(tokens=tuple(f[0] for _, f in rows), tags=tuple(f[1] for _, f in rows),
                   line=rows[0][0]) for rows in blocks]


# ------------------------------------------------------------------ tagging schemes


def _spans_to_tags(spans, length: int, scheme: str) -> list[str]:
  tags = ["O"] * length
  for kind, start, end in spans:
    tags[start:end] = [f"I-{kind}"] * (end - start)
    if scheme == "iob2":
      tags[start] = f"B-{kind}"
    elif end - start == 1:
      tags[start] = f"S-{kind}"
    else:
      tags[start], tags[end - 1] = f"B-{kind}", f"E-{kind}"
  return tags


def iob2_to_bioes(tags: Sequence[str]) -> list[str]:
  """IOB2 -> BIOES, chunk by chunk, so the chunks (conlleval semantics) are kept.

  A single-token chunk becomes S-, a longer one B- I-* E-. An I- tag that starts a
  chunk (after O or another type) is read as conlleval reads it, as a chunk start.
  """
  return _spans_to_tags(metrics.extract_spans(tags, "iob2"), len(tags), "bioes")


def bioes_to_iob2(tags: Sequence[str]) -> list[str]:
  """BIOES -> IOB2, chunk by chunk: the inverse of `iob2_to_bioes` on valid input."""
  return _spans_to_tags(metrics.extract_spans(tags, "bioes"), len(tags), "iob2")


def scheme_tags(entity_types: Iterable[str], scheme: str) -> tuple[str, ...]:
  """The full tag set of a span scheme: 'O', then each prefix for each sorted type."""
  return ("O",) + tuple(f"{p}-{t}" for t in sorted(set(entity_types))
                        for p in _SCHEME_PREFIXES[scheme])


# ------------------------------------------------------------------ vocabularies


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


# ------------------------------------------------------------------ datasets


@dataclasses.dataclass(frozen=True)
class SequenceSplit:
  """One split, padded numpy arrays (N sentences, T = longest, C = char length).

  Attributes:
    words: int32 [N, T] word ids (0 = padding).
    chars: int32 [N, T, C] character ids of each word, truncated to C (0 = padding).
    pos: int32 [N, T] CoNLL POS ids (zeros for Twitter).
    chunk: int32 [N, T] CoNLL chunk ids (zeros for Twitter).
    tags: int32 [N, T] target tag ids; padding positions hold 0 and are masked.
    mask: bool [N, T], True on real tokens.
    lengths: int32 [N] sentence lengths.
  """
  words: np.ndarray
  chars: np.ndarray
  pos: np.ndarray
  chunk: np.ndarray
  tags: np.ndarray
  mask: np.ndarray
  lengths: np.ndarray

  def __post_init__(self):
    shape = self.words.shape
    for name in ("pos", "chunk", "tags", "mask"):
      if getattr(self, name).shape != shape:
        raise ValueError(f"SequenceSplit: {name} has shape {getattr(self, name).shape}, "
                         f"words {shape}")
    if len(shape) != 2 or self.chars.shape[:2] != shape or self.lengths.shape != shape[:1]:
      raise ValueError(f"SequenceSplit needs words [N, T], chars [N, T, C], lengths [N]; "
                       f"got {shape}, {self.chars.shape}, {self.lengths.shape}")
    if not np.array_equal(self.mask, np.arange(shape[1]) < self.lengths[:, None]):
      raise ValueError("SequenceSplit: mask does not match lengths")

  @property
  def num_examples(self) -> int:
    return len(self.lengths)

  @property
  def max_length(self) -> int:
    return self.words.shape[1]

  @property
  def num_tokens(self) -> int:
    return int(self.lengths.sum())


@dataclasses.dataclass(frozen=True)
class SequenceDataset:
  """A sequence-labeling task with fixed train/validation/test splits.

  `meta` is JSON-serialisable: files read (with sha256), split rule, options, counts
  per split (sentences, tokens, unknown-word rate, entities for NER) and vocabulary
  sizes.
  """
  name: str
  train: SequenceSplit
  validation: SequenceSplit
  test: SequenceSplit
  word_vocab: Vocabulary
  char_vocab: Vocabulary
  tag_vocab: Vocabulary
  pos_vocab: Vocabulary | None
  chunk_vocab: Vocabulary | None
  scheme: str
  meta: dict[str, Any]

  def __post_init__(self):
    if self.scheme not in SCHEMES:
      raise ValueError(f"scheme must be one of {SCHEMES}; got {self.scheme!r}")

  @property
  def tag_names(self) -> tuple[str, ...]:
    return self.tag_vocab.items

  @property
  def num_tags(self) -> int:
    return len(self.tag_vocab)


def _encode_split(split: str, sentences: Sequence[Sentence], vocab: Mapping[str, Any],
                  max_word_length: int) -> tuple[SequenceSplit, dict[str, Any]]:
  unseen = sorted({t for s in sentences for t in s.tags} - set(vocab["tag"].items))
  if unseen:
    raise ValueError(f"{split} split: tag(s) {unseen} not in the tag set built from the "
                     f"training split {list(vocab['tag'].items)}")
  lengths = np.array([len(s.tokens) for s in sentences], np.int32)
  n, t = len(lengths), int(lengths.max())
  rows = np.repeat(np.arange(n), lengths)
  cols = np.arange(len(rows)) - np.repeat(np.cumsum(lengths) - lengths, lengths)

  def padded(name: str, encode: Callable[[list[str]], np.ndarray]) -> np.ndarray:
    ids = encode([x for s in sentences for x in getattr(s, name)])
    out = np.zeros((n, t) + ids.shape[1:], np.int32)
    out[rows, cols] = ids
    return out

  # Characters: one row of ids per distinct word, gathered per token.
  types = {w: k for k, w in enumerate(dict.fromkeys(w for s in sentences for w in s.tokens))}
  c = min(max(map(len, types)), max_word_length)
  table = np.zeros((len(types), c), np.int32)
  for w, k in types.items():
    table[k, :min(len(w), c)] = vocab["char"].encode(w[:c])

  words = padded("tokens", vocab["word"].encode)
  arrays = {"words": words, "chars": padded("tokens", lambda ws: table[[types[w] for w in ws]]),
            "tags": padded("tags", vocab["tag"].encode)}
  for name in ("pos", "chunk"):  # Twitter has neither: zeros.
    arrays[name] = (np.zeros((n, t), np.int32) if vocab[name] is None else
                    padded(name, vocab[name].encode))
  mask = np.arange(t) < lengths[:, None]
  counts = {"sentences": n, "tokens": int(lengths.sum()), "max_length": t, "char_length": c,
            "unknown_word_rate": float(np.mean(words[mask] == UNK_ID))}
  return SequenceSplit(mask=mask, lengths=lengths, **arrays), counts


def build_sequence_dataset(name: str, sentences: Mapping[str, Sequence[Sentence]], *,
                           scheme: str, tag_names: Sequence[str] | None = None,
                           lowercase: bool = False, min_count: int = 1,
                           max_word_length: int = DEFAULT_MAX_WORD_LENGTH,
                           meta: Mapping[str, Any] | None = None) -> SequenceDataset:
  """Encodes parsed splits {'train', 'validation', 'test'} into a `SequenceDataset`.

  Vocabularies come from the train split only: words (`min_count`, `lowercase`),
  characters (every train character; case kept, it is what characters add), POS and
  chunk tags (if the sentences have them). Tags: `tag_names` if given, else for
  'iob2'/'bioes' the full scheme over the train entity types (`scheme_tags`), for
  'pos' the sorted train tags. Sentences carry IOB2 tags; 'bioes' converts them.
  """
  if set(sentences) != {"train", "validation", "test"}:
    raise ValueError(f"need splits train, validation, test; got {sorted(sentences)}")
  if scheme not in SCHEMES:
    raise ValueError(f"scheme must be one of {SCHEMES}; got {scheme!r}")
  if not isinstance(max_word_length, int) or max_word_length < 1:
    raise ValueError(f"max_word_length must be a positive integer; got {max_word_length!r}")
  empty = [k for k in ("train", "validation", "test") if not sentences[k]]
  if empty:
    raise ValueError(f"the {empty[0]} split has no sentences")
  if scheme == "bioes":
    sentences = {k: [dataclasses.replace(s, tags=tuple(iob2_to_bioes(s.tags))) for s in v]
                 for k, v in sentences.items()}
  train = sentences["train"]
  if tag_names is None:
    train_tags = {t for s in train for t in s.tags}
    tag_names = (sorted(train_tags) if scheme == "pos" else
                 scheme_tags((t[2:] for t in train_tags if t != "O"), scheme))
  vocab = {
      "word": Vocabulary.build((w for s in train for w in s.tokens), min_count, lowercase),
      "char": Vocabulary.build(ch for s in train for w in s.tokens for ch in w),
      "tag": Vocabulary(tuple(tag_names), reserved=False),
      "pos": Vocabulary.build(p for s in train for p in s.pos) if train[0].pos else None,
      "chunk": Vocabulary.build(c for s in train for c in s.chunk) if train[0].chunk else None,
  }
  parts, counts = {}, {}
  for split in ("train", "validation", "test"):
    parts[split], counts[split] = _encode_split(split, sentences[split], vocab,
                                                max_word_length)
    if scheme != "pos":
      counts[split]["entities"] = sum(len(metrics.extract_spans(s.tags, scheme))
                                      for s in sentences[split])
  meta = dict(meta or {})
  meta.update(dataset=name, scheme=scheme, lowercase=lowercase, min_count=min_count,
              max_word_length=max_word_length, counts=counts, tag_names=list(tag_names),
              vocab_sizes={k: len(v) for k, v in vocab.items() if v is not None})
  return SequenceDataset(name=name, scheme=scheme, meta=meta, **parts,
                         **{f"{k}_vocab": v for k, v in vocab.items()})


@dataclasses.dataclass(frozen=True)
class _Spec:
  subdir: str
  files: Mapping[str, str]
  parse: Callable[[PathLike], list[Sentence]]
  schemes: tuple[str, ...]  # the first is the default.
  tag_names: tuple[str, ...] | None
  split: str
  url: str
  sha256: Mapping[str, str]


SEQUENCE_DATASETS: dict[str, _Spec] = {
    "conll2003": _Spec(
        subdir="conll2003",
        files={"train": "train.txt", "validation": "valid.txt", "test": "test.txt"},
        parse=parse_conll2003, schemes=("iob2", "bioes"), tag_names=None,
        split="shipped train/valid/test files (valid = eng.testa, test = eng.testb), "
              "IOB2-converted copy",
        url="https://raw.githubusercontent.com/kamalkraj/BERT-NER/"
            "e5be564156f194f1becb0d82aeaf6e762d9eb9ed/data/",
        sha256={
            "train.txt": "213953b5522fb7924802d883e50f027b2c6ffb5d4d0e63368ed82909f9b60423",
            "valid.txt": "c02eb19809eafb83998326a0481942eb37d96f31826ae387cfe8773699969f5b",
            "test.txt": "dc4ac7f3d6d01a6bec59261814561da3b287b6b493b97d1f69c580b52ec1831b",
        }),
    "twitter_pos": _Spec(
        subdir="twitter_pos",
        files={"train": "oct27.traindev", "validation": "oct27.test",
               "test": "daily547.conll"},
        parse=parse_twitter_pos, schemes=("pos",), tag_names=TWITTER_POS_TAGS,
        split="as in the InfNet authors' scripts: train = oct27.traindev (Oct27 train+dev, "
              "1327 tweets), validation = oct27.test (500), test = daily547 (547)",
        url="https://raw.githubusercontent.com/brendano/ark-tweet-nlp/"
            "72755ccd1b29ba8e1dbbb49efe57ba9723c0013b/data/twpos-data-v0.3/",
        sha256={
            "oct27.traindev":
                "f1daf7281ca3236592c23befd0ce65ca01d5d6811a47bb0db392098c5c17d589",
            "oct27.test": "77f868fcd300d0acdd7bb8db28c961fcbe50d9cd0d48046e8fbec4b9f86bf814",
            "daily547.conll":
                "581862c4a7a05b62cb5c4d44119f11fc1fe55489862c9470120628cca8e4b080",
        }),
}


def load_sequence_dataset(name: str, data_dir: PathLike | None = None,
                          scheme: str | None = None, lowercase: bool = False,
                          min_count: int = 1,
                          max_word_length: int = DEFAULT_MAX_WORD_LENGTH) -> SequenceDataset:
  """Loads 'conll2003' or 'twitter_pos' from the data directory.

  Args:
    name: 'conll2003' or 'twitter_pos'.
    data_dir: the data directory; None: $ENERGYNETS_DATA_DIR (`resolve_data_dir`).
    scheme: CoNLL 'iob2' (default) or 'bioes'; Twitter 'pos' (default).
    lowercase: look words up lower-cased.
    min_count: train count a word needs to get its own id.
    max_word_length: characters kept per word (C is at most this).

  Raises:
    DataError: a missing folder or file, a checksum that differs from the public
      copy's, or a malformed file.
  """
  if name not in SEQUENCE_DATASETS:
    raise ValueError(f"unknown sequence dataset {name!r}; known: {sorted(SEQUENCE_DATASETS)}")
  spec = SEQUENCE_DATASETS[name]
  scheme = spec.schemes[0] if scheme is None else scheme
  if scheme not in spec.schemes:
    raise ValueError(f"{name}: scheme must be one of {spec.schemes}; got {scheme!r}")
  root, files = dataset_files(data_dir, spec.subdir, spec.files, name)
  records = []
  for split, p in files.items():
    digest = sha256_of(p)
    if digest != spec.sha256[p.name]:
      raise DataError(p, None, f"sha256 {digest} differs from the public copy's "
                      f"{spec.sha256[p.name]}")
    records.append({"split": split, "path": str(p.relative_to(root.parent)),
                    "sha256": digest})
  meta = {"source": "sequence registry", "data_dir": str(root.parent), "files": records,
          "url": spec.url, "split_rule": spec.split}
  parsed = {split: spec.parse(p) for split, p in files.items()}
  return build_sequence_dataset(name, parsed, scheme=scheme, tag_names=spec.tag_names,
                                lowercase=lowercase, min_count=min_count,
                                max_word_length=max_word_length, meta=meta)


def decode_tags(tag_ids: np.ndarray, mask: np.ndarray, tag_names: Sequence[str]
                ) -> list[list[str]]:
  """Padded [N, T] tag ids -> one list of tag strings per sentence (for `span_f1`)."""
  tag_ids, mask = np.asarray(tag_ids), np.asarray(mask, bool)
  if tag_ids.shape != mask.shape or tag_ids.ndim != 2:
    raise ValueError(f"tag_ids and mask must both be [N, T]; got {tag_ids.shape} and "
                     f"{mask.shape}")
  return [[tag_names[i] for i in row[m]] for row, m in zip(tag_ids, mask)]


# ------------------------------------------------------------------ batching


def bucketed_batches(lengths: np.ndarray, batch_size: int,
                     rng: np.random.Generator | int,
                     num_buckets: int | None = None) -> Iterator[np.ndarray]:
  """One epoch of index batches of similar-length sentences, in random order.

  Sentences are sorted by length (ties in random order) and cut into `num_buckets`
  equal buckets (default: about `BATCHES_PER_BUCKET` batches each, so batches still
  mix sentences); each bucket is shuffled, the buckets are concatenated and cut into
  batches of `batch_size` (only the epoch's last batch may be smaller), and the batch
  order is shuffled. Every index appears exactly once. Pass
  `np.random.default_rng([seed, epoch])` for a pure function of (seed, epoch).
  On CoNLL train with batch size 32 this pads 3% of positions; random batches pad 66%.
  """
  lengths = np.asarray(lengths)
  if lengths.ndim != 1 or lengths.size == 0:
    raise ValueError(f"lengths must be a non-empty 1-D array; got shape {lengths.shape}")
  if batch_size < 1 or (num_buckets is not None and num_buckets < 1):
    raise ValueError(f"batch_size and num_buckets must be >= 1; got {batch_size}, "
                     f"{num_buckets}")
  if num_buckets is None:
    num_buckets = max(1, lengths.size // (BATCHES_PER_BUCKET * batch_size))
  rng = np.random.default_rng(rng)
  order = rng.permutation(lengths.size)
  order = order[np.argsort(lengths[order], kind="stable")]
  order = np.concatenate([rng.permutation(b)
                          for b in np.array_split(order, min(num_buckets, lengths.size))])
  batches = [order[i:i + batch_size] for i in range(0, lengths.size, batch_size)]
  return iter([batches[k] for k in rng.permutation(len(batches))])  # checks ran eagerly.


def batch_of(split: SequenceSplit, indices: np.ndarray,
             length_multiple: int = 1) -> dict[str, np.ndarray]:
  """The batch of rows `indices`, cropped to its longest sentence.

  `length_multiple` > 1 rounds the cropped length up (never beyond the split's T),
  which bounds how many shapes a jitted step compiles for.

  Returns:
    {"words", "pos", "chunk", "tags": int32 [B, T'], "chars": int32 [B, T', C],
     "mask": bool [B, T']}.
  """
  indices = np.asarray(indices)
  if indices.ndim != 1 or indices.size == 0:
    raise ValueError(f"indices must be a non-empty 1-D array; got shape {indices.shape}")
  t = int(split.lengths[indices].max())
  t = min(-(-t // length_multiple) * length_multiple, split.max_length)
  return {name: getattr(split, name)[indices, :t]
          for name in ("words", "chars", "pos", "chunk", "tags", "mask")}


def padding_fraction(lengths: np.ndarray, batches: Iterable[np.ndarray]) -> float:
  """Fraction of padded positions when each batch is cropped to its longest sentence."""
  lengths = np.asarray(lengths)
  real = padded = 0
  for b in batches:
    real += int(lengths[b].sum())
    padded += len(b) * int(lengths[b].max())
  return 1.0 - real / padded


# ------------------------------------------------------------------ one array per split
#
# A sentence's token features travel packed into one int32 array (`energynets.tokens`);
# `pack_tokens` builds it from a split.


def pack_tokens(split: SequenceSplit) -> np.ndarray:
  """`x [N, T, 3 + C]` int32: words, pos, chunk, then the characters."""
  columns = [getattr(split, name)[..., None] for name in PACKED_COLUMNS]
  return np.concatenate(columns + [split.chars], axis=-1).astype(np.int32)


def one_hot_tags(split: SequenceSplit, num_tags: int) -> np.ndarray:
  """`y [N, T, L]` float32: one-hot tags on real tokens, zero rows at padding."""
  y = np.eye(num_tags, dtype=np.float32)[split.tags]
  return y * split.mask[..., None]
