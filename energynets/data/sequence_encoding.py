"""Sequence-labeling datasets as padded id arrays, and conversions between tagging schemes.

Encoding (`SequenceDataset`): ids come from vocabularies built on the training split
only, so dev/test words outside it map to the unknown id (1), never to a new row.
Word, character, POS and chunk ids reserve 0 for padding and 1 for unknown; tag ids
do not: 0..K-1 are the K tags the model outputs (17 for CoNLL BIOES: O plus
B/I/E/S x PER, LOC, ORG, MISC), so a tag unseen in training is an error, and padding
positions hold 0 but are masked out. The padded length T of a split is its longest
sentence (`energynets.data.sequence_batches` crops each batch to its own).
"""

from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
import dataclasses
from typing import Any

import numpy as np

from energynets import metrics
from energynets.data.sequence_files import Sentence
from energynets.data.sequence_vocab import UNK_ID
from energynets.data.sequence_vocab import Vocabulary

SCHEMES = ("iob2", "bioes", "pos")
_SCHEME_PREFIXES = {"iob2": ("B", "I"), "bioes": ("B", "I", "E", "S")}

DEFAULT_MAX_WORD_LENGTH = 20


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
  return ("O",) + tuple(
    f"{p}-{t}" for t in sorted(set(entity_types)) for p in _SCHEME_PREFIXES[scheme]
  )


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
        raise ValueError(
          f"SequenceSplit: {name} has shape {getattr(self, name).shape}, words {shape}"
        )
    if len(shape) != 2 or self.chars.shape[:2] != shape or self.lengths.shape != shape[:1]:
      raise ValueError(
        f"SequenceSplit needs words [N, T], chars [N, T, C], lengths [N]; "
        f"got {shape}, {self.chars.shape}, {self.lengths.shape}"
      )
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


def _encode_split(
  split: str, sentences: Sequence[Sentence], vocab: Mapping[str, Any], max_word_length: int
) -> tuple[SequenceSplit, dict[str, Any]]:
  unseen = sorted({t for s in sentences for t in s.tags} - set(vocab["tag"].items))
  if unseen:
    raise ValueError(
      f"{split} split: tag(s) {unseen} not in the tag set built from the "
      f"training split {list(vocab['tag'].items)}"
    )
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
    table[k, : min(len(w), c)] = vocab["char"].encode(w[:c])

  words = padded("tokens", vocab["word"].encode)
  arrays = {
    "words": words,
    "chars": padded("tokens", lambda ws: table[[types[w] for w in ws]]),
    "tags": padded("tags", vocab["tag"].encode),
  }
  for name in ("pos", "chunk"):  # Twitter has neither: zeros.
    arrays[name] = (
      np.zeros((n, t), np.int32) if vocab[name] is None else padded(name, vocab[name].encode)
    )
  mask = np.arange(t) < lengths[:, None]
  counts = {
    "sentences": n,
    "tokens": int(lengths.sum()),
    "max_length": t,
    "char_length": c,
    "unknown_word_rate": float(np.mean(words[mask] == UNK_ID)),
  }
  return SequenceSplit(mask=mask, lengths=lengths, **arrays), counts


def build_sequence_dataset(
  name: str,
  sentences: Mapping[str, Sequence[Sentence]],
  *,
  scheme: str,
  tag_names: Sequence[str] | None = None,
  lowercase: bool = False,
  min_count: int = 1,
  max_word_length: int = DEFAULT_MAX_WORD_LENGTH,
  meta: Mapping[str, Any] | None = None,
) -> SequenceDataset:
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
    sentences = {
      k: [dataclasses.replace(s, tags=tuple(iob2_to_bioes(s.tags))) for s in v]
      for k, v in sentences.items()
    }
  train = sentences["train"]
  if tag_names is None:
    train_tags = {t for s in train for t in s.tags}
    tag_names = (
      sorted(train_tags)
      if scheme == "pos"
      else scheme_tags((t[2:] for t in train_tags if t != "O"), scheme)
    )
  word_vocab = Vocabulary.build((w for s in train for w in s.tokens), min_count, lowercase)
  char_vocab = Vocabulary.build(ch for s in train for w in s.tokens for ch in w)
  tag_vocab = Vocabulary(tuple(tag_names), reserved=False)
  pos_vocab = Vocabulary.build(p for s in train for p in s.pos) if train[0].pos else None
  chunk_vocab = Vocabulary.build(c for s in train for c in s.chunk) if train[0].chunk else None
  vocab = {
    "word": word_vocab,
    "char": char_vocab,
    "tag": tag_vocab,
    "pos": pos_vocab,
    "chunk": chunk_vocab,
  }
  parts, counts = {}, {}
  for split in ("train", "validation", "test"):
    parts[split], counts[split] = _encode_split(split, sentences[split], vocab, max_word_length)
    if scheme != "pos":
      counts[split]["entities"] = sum(
        len(metrics.extract_spans(s.tags, scheme)) for s in sentences[split]
      )
  meta = dict(meta or {})
  meta.update(
    dataset=name,
    scheme=scheme,
    lowercase=lowercase,
    min_count=min_count,
    max_word_length=max_word_length,
    counts=counts,
    tag_names=list(tag_names),
    vocab_sizes={k: len(v) for k, v in vocab.items() if v is not None},
  )
  return SequenceDataset(
    name=name,
    scheme=scheme,
    meta=meta,
    train=parts["train"],
    validation=parts["validation"],
    test=parts["test"],
    word_vocab=word_vocab,
    char_vocab=char_vocab,
    tag_vocab=tag_vocab,
    pos_vocab=pos_vocab,
    chunk_vocab=chunk_vocab,
  )


def decode_tags(tag_ids: np.ndarray, mask: np.ndarray, tag_names: Sequence[str]) -> list[list[str]]:
  """Padded [N, T] tag ids -> one list of tag strings per sentence (for `span_f1`)."""
  tag_ids, mask = np.asarray(tag_ids), np.asarray(mask, bool)
  if tag_ids.shape != mask.shape or tag_ids.ndim != 2:
    raise ValueError(f"tag_ids and mask must both be [N, T]; got {tag_ids.shape} and {mask.shape}")
  return [[tag_names[i] for i in row[m]] for row, m in zip(tag_ids, mask)]
