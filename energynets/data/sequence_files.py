"""Readers of the sequence-labeling files: CoNLL-2003 NER and Twitter POS.

Files (docs/datasets.md): CoNLL-2003 has 4 space-separated columns
`token POS chunk NER`, `-DOCSTART-` lines between documents and IOB2 NER tags;
Twitter POS (Gimpel et al. 2011; Owoputi et al. 2013) has 2 tab-separated columns
`token tag` with a fixed set of 25 tags. A blank line ends a sentence (tweet).
Parsers are strict: a line with the wrong number of columns, an empty field, a tag
outside the file's scheme or a file without sentences raises `DataError` naming
the file, the line and the problem. Only the line terminator is stripped from a
Twitter line: tokens may be (or start with) U+00A0, which `str.strip` would eat.
"""

from collections.abc import Callable
import dataclasses
import pathlib

from energynets.data.errors import DataError
from energynets.data.errors import PathLike

# Owoputi et al. (2013) coarse tag set, in the order of docs/datasets.md (= tag ids).
TWITTER_POS_TAGS = tuple("! # $ & , @ A D E G L M N O P R S T U V X Y Z ^ ~".split())


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
      raise ValueError(
        f"Sentence needs >= 1 token and one tag (and POS, chunk if given) per "
        f"token; got {n} tokens, {len(self.tags)} tags, {len(self.pos)} POS, "
        f"{len(self.chunk)} chunk"
      )


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


def _parse_columns(
  path: PathLike,
  columns: tuple[str, ...],
  split_line: Callable[[str], list[str]],
  check: Callable[[list[str], int], None],
) -> list[list[tuple]]:
  """Blank-line separated blocks of rows with `len(columns)` non-empty fields each.

  Returns one list of (line, fields) rows per sentence; `-DOCSTART-` lines end a
  sentence and are dropped.
  """
  blocks: list[list[tuple]] = []
  rows: list[tuple] = []
  for lineno, line in enumerate(_read_lines(path), 1):
    fields = split_line(line) if line.strip(" \t") else []
    if not fields or fields[0] == "-DOCSTART-":  # a sentence boundary.
      if rows:
        blocks.append(rows)
      rows = []
      continue
    if len(fields) != len(columns):
      raise DataError(
        path,
        lineno,
        f"expected {len(columns)} columns ({' '.join(columns)}), got {len(fields)}: {line!r}",
      )
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
  return [
    Sentence(
      tokens=tuple(f[0] for _, f in rows),
      pos=tuple(f[1] for _, f in rows),
      chunk=tuple(f[2] for _, f in rows),
      tags=tuple(f[3] for _, f in rows),
      line=rows[0][0],
    )
    for rows in blocks
  ]


def parse_twitter_pos(path: PathLike) -> list[Sentence]:
  """Twitter POS file: `token<TAB>tag` per line, tags from `TWITTER_POS_TAGS`."""
  known = frozenset(TWITTER_POS_TAGS)

  def check(fields, lineno):
    if fields[1] not in known:
      raise DataError(
        path,
        lineno,
        f"unknown tag {fields[1]!r}; the Twitter POS tags are {' '.join(TWITTER_POS_TAGS)}",
      )

  blocks = _parse_columns(path, ("token", "tag"), lambda line: line.split("\t"), check)
  return [
    Sentence(
      tokens=tuple(f[0] for _, f in rows), tags=tuple(f[1] for _, f in rows), line=rows[0][0]
    )
    for rows in blocks
  ]
