"""Sequence-labeling metrics (numpy / Python): token accuracy and entity span F1.

Tags are strings: 'O' or '<P>-<TYPE>', P in {B, I} (IOB2) or {B, I, E, S} (BIOES).
Chunks follow conlleval exactly (the rules of conlleval.pl's startOfChunk / endOfChunk,
with the S- rules every BIOES port of it adds, as seqeval's default mode does), also on
ill-formed sequences:

* a chunk ends before O, B-, S-, a tag of another type, or after E- / S-;
* a chunk starts at B- or S-, and also at an I- or E- that follows O, E-, S- or a tag
  of another type (so `O I-PER` is a PER chunk, not an error).

On IOB2 tags these are exactly conlleval.pl's rules. Sentence boundaries end every
chunk. Spans are `(type, start, end)` with `end` exclusive.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from energynets.metrics._checks import ArrayLike
from energynets.metrics._checks import check_same_shape

__all__ = ["SPAN_SCHEMES", "SpanScores", "token_accuracy", "extract_spans", "span_f1"]


# Tag prefixes allowed by each span scheme.
SPAN_SCHEMES: dict[str, frozenset[str]] = {
  "iob2": frozenset("BI"),
  "bioes": frozenset("BIES"),
}
"""The tag prefixes each span scheme allows: `'iob2'` B/I, `'bioes'` B/I/E/S."""


class SpanScores(NamedTuple):
  """Micro-averaged span scores, fractions in [0, 1]."""

  precision: float
  recall: float
  f1: float


def token_accuracy(gold: ArrayLike, pred: ArrayLike, mask: ArrayLike) -> float:
  """Fraction of real tokens (mask True) whose predicted tag id equals the gold one.

  Padding positions are ignored whatever ids they hold, so padded batches of
  any length give the same number as the unpadded sentences.

  Args:
    gold: [N, T] integer tag ids.
    pred: [N, T] integer tag ids.
    mask: [N, T] bool (or 0/1), True on real tokens.

  Returns:
    A float in [0, 1].
  """
  g, p, m = np.asarray(gold), np.asarray(pred), np.asarray(mask)
  for name, a in (("gold", g), ("pred", p)):
    if not np.issubdtype(a.dtype, np.integer):
      raise ValueError(f"{name} must hold integer tag ids; got dtype {a.dtype}")
  check_same_shape("gold", g, "pred", p)
  check_same_shape("gold", g, "mask", m)
  if m.dtype != np.bool_:
    if not np.issubdtype(m.dtype, np.integer) or ((m != 0) & (m != 1)).any():
      raise ValueError(f"mask must be boolean or 0/1; got dtype {m.dtype}")
    m = m.astype(bool)
  num_tokens = np.count_nonzero(m)
  if num_tokens == 0:
    raise ValueError("mask selects no tokens: token accuracy is undefined")
  return float(np.count_nonzero((g == p) & m) / num_tokens)


def _split_tag(tag: str, scheme: str) -> tuple[str, str]:
  """'B-PER' -> ('B', 'PER'); 'O' -> ('O', ''). Rejects tags outside `scheme`."""
  if tag == "O":
    return "O", ""
  prefix, sep, kind = str(tag).partition("-")
  if not sep or not kind or prefix not in SPAN_SCHEMES[scheme]:
    allowed = "/".join(sorted(SPAN_SCHEMES[scheme]))
    raise ValueError(f"{tag!r} is not a {scheme} tag: expected 'O' or '<{allowed}>-<TYPE>'")
  return prefix, kind


def _chunk_ends(prev: str, prev_type: str, tag: str, tag_type: str) -> bool:
  return prev != "O" and (prev in "ES" or tag in "BSO" or prev_type != tag_type)


def _chunk_starts(prev: str, prev_type: str, tag: str, tag_type: str) -> bool:
  return tag != "O" and (tag in "BS" or prev in "OES" or prev_type != tag_type)


def extract_spans(tags: Sequence[str], scheme: str = "iob2") -> list[tuple[str, int, int]]:
  """The chunks of one tag sequence, with conlleval semantics (the module's rules).

  Ill-formed sequences are not errors: like conlleval, `O I-PER I-PER` has the
  chunk ('PER', 1, 3) and `B-PER I-LOC` has two chunks. (seqeval's strict
  mode would drop such chunks instead; its default mode agrees with this.)

  Args:
    tags: one sentence's tags, e.g. ['B-PER', 'I-PER', 'O'].
    scheme: 'iob2' or 'bioes'; a tag with another prefix raises ValueError.

  Returns:
    `(type, start, end)` spans in order, `end` exclusive: tags[start:end].
  """
  if scheme not in SPAN_SCHEMES:
    raise ValueError(f"unknown tagging scheme {scheme!r}; expected one of {sorted(SPAN_SCHEMES)}")
  if isinstance(tags, str):
    raise ValueError(f"tags must be a sequence of tags, not the string {tags!r}")
  spans = []
  prev, prev_type, start = "O", "", 0
  parsed = [_split_tag(t, scheme) for t in tags] + [("O", "")]  # "O" flushes the end.
  for i, (tag, tag_type) in enumerate(parsed):
    if _chunk_ends(prev, prev_type, tag, tag_type):
      spans.append((prev_type, start, i))
    if _chunk_starts(prev, prev_type, tag, tag_type):
      start = i
    prev, prev_type = tag, tag_type
  return spans


def span_f1(
  gold_seqs: Sequence[Sequence[str]], pred_seqs: Sequence[Sequence[str]], scheme: str = "iob2"
) -> SpanScores:
  """Entity precision, recall and F1: micro over all spans, exact span and type.

  What conlleval reports (as fractions, not percentages): a predicted chunk is
  correct when a gold chunk of the same sentence has the same start, end and
  type. With no predicted chunks precision is 0, with no gold chunks recall is
  0, and F1 is 0 when both are 0 (conlleval's and seqeval's convention).

  Args:
    gold_seqs: one tag sequence per sentence.
    pred_seqs: predicted tag sequences, the same lengths as `gold_seqs`.
    scheme: 'iob2' or 'bioes', the scheme of both.

  Returns:
    `SpanScores(precision, recall, f1)`.
  """
  if isinstance(gold_seqs, str) or isinstance(pred_seqs, str):
    raise ValueError("gold_seqs and pred_seqs must be sequences of tag sequences")
  if len(gold_seqs) != len(pred_seqs):
    raise ValueError(f"{len(gold_seqs)} gold sentences but {len(pred_seqs)} predicted")
  num_gold = num_pred = num_correct = 0
  for i, (gold, pred) in enumerate(zip(gold_seqs, pred_seqs)):
    if isinstance(gold, str) or isinstance(pred, str):
      raise ValueError(
        f"sentence {i} is a string, not a tag sequence: pass one list of tags per sentence"
      )
    if len(gold) != len(pred):
      raise ValueError(f"sentence {i}: {len(gold)} gold tags but {len(pred)} predicted")
    g, p = set(extract_spans(gold, scheme)), set(extract_spans(pred, scheme))
    num_gold += len(g)
    num_pred += len(p)
    num_correct += len(g & p)
  precision = num_correct / num_pred if num_pred else 0.0
  recall = num_correct / num_gold if num_gold else 0.0
  f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
  return SpanScores(precision, recall, f1)
