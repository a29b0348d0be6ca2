"""Sequence metrics: token accuracy and conlleval span F1, against seqeval and by hand.

Which seqeval mode is our semantics (checked below): seqeval's *default* mode is
conlleval (with the S- rules of the BIOES ports) and agrees with `extract_spans` /
`span_f1` on every sequence, ill-formed ones included, for IOB2 and for BIOES.
`mode='strict'` (scheme IOB2 or IOBES) agrees only on well-formed sequences: it drops
chunks that do not start with B- (or S-), e.g. `O I-PER`, which conlleval counts.
"""

import os
import pathlib
import warnings

import jax.numpy as jnp
import numpy as np
import pytest
import seqeval.metrics as sm  # a test oracle only
from seqeval.metrics.sequence_labeling import get_entities
from seqeval.scheme import IOB2
from seqeval.scheme import IOBES

from energynets import data
from energynets import metrics

TYPES = ("PER", "LOC", "ORG", "MISC")
PREFIXES = {"iob2": "BI", "bioes": "BIES"}


def _random_tags(rng, n, scheme):
  """Uniform random tags: mostly ill-formed (I- after O, E- without B-, ...)."""
  tags = ["O"] * 3 + [f"{p}-{t}" for p in PREFIXES[scheme] for t in TYPES]
  return [str(t) for t in rng.choice(tags, size=n)]


def _well_formed(rng, n, scheme):
  """Well-formed tags written from random non-overlapping chunks."""
  tags, i = ["O"] * n, 0
  while i < n:
    size = int(rng.integers(1, 4))
    if rng.random() < 0.4 and i + size <= n:
      kind = TYPES[rng.integers(len(TYPES))]
      chunk = [f"I-{kind}"] * size
      chunk[0] = f"B-{kind}"
      if scheme == "bioes":
        chunk[-1] = f"E-{kind}" if size > 1 else f"S-{kind}"
      tags[i : i + size] = chunk
    i += size
  return tags


def _corpus(seed, scheme, well_formed, num_sentences=200):
  """Gold sentences and predictions that agree with gold on ~70% of the tokens."""
  rng = np.random.default_rng(seed)
  make = _well_formed if well_formed else _random_tags
  gold = [make(rng, int(rng.integers(0, 25)), scheme) for _ in range(num_sentences)]
  pred = []
  for g in gold:
    p = make(rng, len(g), scheme)
    keep = rng.random(len(g)) < 0.7
    pred.append([a if k else b for a, b, k in zip(g, p, keep)])
  if well_formed:  # mixing breaks well-formedness; re-writing chunk by chunk restores it.
    there, back = (
      (data.bioes_to_iob2, data.iob2_to_bioes)
      if scheme == "bioes"
      else (data.iob2_to_bioes, data.bioes_to_iob2)
    )
    pred = [back(there(p)) for p in pred]
  return gold, pred


def _seqeval(gold, pred, **kwargs):
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # zero-division warnings
    return (
      sm.precision_score(gold, pred, **kwargs),
      sm.recall_score(gold, pred, **kwargs),
      sm.f1_score(gold, pred, **kwargs),
    )


# ------------------------------------------------------------------ seqeval oracle


@pytest.mark.parametrize("scheme", ["iob2", "bioes"])
def test_extract_spans_equals_seqeval_entities(scheme):
  rng = np.random.default_rng(0)
  for _ in range(600):
    tags = (_random_tags if rng.random() < 0.7 else _well_formed)(
      rng, int(rng.integers(0, 20)), scheme
    )
    ours = [(t, s, e - 1) for t, s, e in metrics.extract_spans(tags, scheme)]  # inclusive
    assert ours == get_entities(tags), tags


@pytest.mark.parametrize("scheme", ["iob2", "bioes"])
@pytest.mark.parametrize("well_formed", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_span_f1_equals_seqeval_default_mode(scheme, well_formed, seed):
  gold, pred = _corpus(seed, scheme, well_formed)
  ours = metrics.span_f1(gold, pred, scheme)
  assert 0.2 < ours.f1 < 0.95  # a non-trivial case
  assert ours == pytest.approx(_seqeval(gold, pred), abs=1e-12)


@pytest.mark.parametrize("scheme, oracle", [("iob2", IOB2), ("bioes", IOBES)])
@pytest.mark.parametrize("seed", range(4))
def test_span_f1_equals_seqeval_strict_on_well_formed(scheme, oracle, seed):
  gold, pred = _corpus(seed, scheme, well_formed=True)
  expected = _seqeval(gold, pred, mode="strict", scheme=oracle)
  assert metrics.span_f1(gold, pred, scheme) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("scheme, oracle", [("iob2", IOB2), ("bioes", IOBES)])
def test_strict_mode_is_not_conlleval_on_ill_formed(scheme, oracle):
  gold, pred = _corpus(0, scheme, well_formed=False)
  ours = metrics.span_f1(gold, pred, scheme)
  assert ours.f1 != pytest.approx(_seqeval(gold, pred, mode="strict", scheme=oracle)[2])
  # The smallest case: conlleval counts `O I-PER` as a PER chunk, strict mode does not.
  assert metrics.span_f1([["O", "I-PER"]], [["O", "I-PER"]], scheme).f1 == 1.0
  assert _seqeval([["O", "I-PER"]], [["O", "I-PER"]])[2] == 1.0
  assert _seqeval([["O", "I-PER"]], [["O", "I-PER"]], mode="strict", scheme=oracle)[2] == 0


# ------------------------------------------------------------------ hand cases


@pytest.mark.parametrize(
  "tags, scheme, spans",
  [
    ([], "iob2", []),
    (["O", "O"], "iob2", []),
    (["B-PER", "I-PER", "O", "B-LOC"], "iob2", [("PER", 0, 2), ("LOC", 3, 4)]),
    (["O", "I-PER", "I-PER"], "iob2", [("PER", 1, 3)]),  # conlleval: I- starts
    (["B-PER", "I-LOC"], "iob2", [("PER", 0, 1), ("LOC", 1, 2)]),  # type change
    (["B-PER", "B-PER"], "iob2", [("PER", 0, 1), ("PER", 1, 2)]),
    (["B-PER", "I-PER", "E-PER", "S-LOC"], "bioes", [("PER", 0, 3), ("LOC", 3, 4)]),
    (["S-PER", "S-PER"], "bioes", [("PER", 0, 1), ("PER", 1, 2)]),
    (["E-PER", "I-PER"], "bioes", [("PER", 0, 1), ("PER", 1, 2)]),  # E- ends a chunk
    (["S-PER", "I-PER", "E-PER"], "bioes", [("PER", 0, 1), ("PER", 1, 3)]),
    (["B-PER", "I-PER"], "bioes", [("PER", 0, 2)]),  # unfinished: kept
    (["B-MISC", "I-MISC", "O"], "bioes", [("MISC", 0, 2)]),
  ],
)
def test_extract_spans_hand_cases(tags, scheme, spans):
  assert metrics.extract_spans(tags, scheme) == spans


def test_span_f1_hand_cases():
  gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG"]]
  assert metrics.span_f1(gold, gold) == (1.0, 1.0, 1.0)
  # Wrong type and a partial overlap both miss: 1 of 3 predicted, 1 of 3 gold.
  pred = [["B-PER", "I-PER", "O", "B-ORG"], ["O"]]
  np.testing.assert_allclose(metrics.span_f1(gold, pred), [0.5, 1 / 3, 0.4])
  pred = [["B-PER", "O", "O", "B-LOC"], ["B-ORG"]]
  np.testing.assert_allclose(metrics.span_f1(gold, pred), [2 / 3, 2 / 3, 2 / 3])
  scores = metrics.span_f1(gold, [["O"] * 4, ["O"]])
  assert scores == (0.0, 0.0, 0.0) and scores.recall == 0.0  # nothing predicted
  assert metrics.span_f1([["O"]], [["B-PER"]]) == (0.0, 0.0, 0.0)
  assert metrics.span_f1([["O"]], [["O"]]) == (0.0, 0.0, 0.0)  # conlleval: no chunks -> 0
  assert metrics.span_f1([], []) == (0.0, 0.0, 0.0)
  # A sentence boundary ends a chunk: `I-PER` in the next sentence is a new one.
  assert metrics.span_f1([["B-PER"], ["I-PER"]], [["B-PER"], ["B-PER"]]) == (1.0, 1.0, 1.0)


def test_span_f1_input_errors():
  with pytest.raises(ValueError, match="2 gold sentences but 1 predicted"):
    metrics.span_f1([["O"], ["O"]], [["O"]])
  with pytest.raises(ValueError, match="sentence 1: 2 gold tags but 1 predicted"):
    metrics.span_f1([["O"], ["O", "O"]], [["O"], ["O"]])
  with pytest.raises(ValueError, match="string"):
    metrics.span_f1(["B-PER", "O"], ["B-PER", "O"])  # forgot the sentence level
  with pytest.raises(ValueError, match="not a iob2 tag"):
    metrics.span_f1([["S-PER"]], [["O"]])
  with pytest.raises(ValueError, match="unknown tagging scheme"):
    metrics.span_f1([["O"]], [["O"]], scheme="iobes")


@pytest.mark.parametrize("tag", ["B", "B-", "X-PER", "b-PER", "", "BI-PER"])
def test_extract_spans_rejects_bad_tags(tag):
  with pytest.raises(ValueError, match="tag"):
    metrics.extract_spans(["O", tag], "bioes")


def test_token_accuracy():
  gold = np.array([[1, 2, 3], [4, 0, 0]])
  pred = np.array([[1, 0, 3], [4, 5, 6]])
  mask = np.array([[1, 1, 1], [1, 0, 0]], bool)
  assert metrics.token_accuracy(gold, pred, mask) == 0.75  # padding ignored
  assert metrics.token_accuracy(jnp.asarray(gold), jnp.asarray(pred), mask.astype(np.int32)) == 0.75
  assert metrics.token_accuracy(gold, gold, mask) == 1.0


def test_token_accuracy_input_errors():
  gold, mask = np.zeros((2, 3), np.int32), np.ones((2, 3), bool)
  with pytest.raises(ValueError, match="shape mismatch"):
    metrics.token_accuracy(gold, gold[:, :2], mask)
  with pytest.raises(ValueError, match="shape mismatch"):
    metrics.token_accuracy(gold, gold, mask[:1])
  with pytest.raises(ValueError, match="integer tag ids"):
    metrics.token_accuracy(gold, gold.astype(np.float32), mask)
  with pytest.raises(ValueError, match="no tokens"):
    metrics.token_accuracy(gold, gold, ~mask)
  with pytest.raises(ValueError, match="mask must be boolean"):
    metrics.token_accuracy(gold, gold, np.full((2, 3), 2))


# ------------------------------------------------------------------ real file


def test_conll_dev_against_seqeval(request):
  path = os.environ.get(data.DATA_DIR_ENV)
  if not path or not (pathlib.Path(path) / "conll2003").is_dir():
    pytest.skip(
      "real data not found: set ENERGYNETS_DATA_DIR or place shared/data beside the repository"
    )
  dev = data.parse_conll2003(request.getfixturevalue("data_dir") / "conll2003/valid.txt")
  gold = [list(s.tags) for s in dev]
  rng = np.random.default_rng(0)
  pred = [
    [t if rng.random() < 0.9 else str(rng.choice(["O", "B-PER", "I-ORG"])) for t in g] for g in gold
  ]  # ill-formed predictions, as an untrained tagger makes
  ours = metrics.span_f1(gold, pred)
  assert ours == pytest.approx(_seqeval(gold, pred), abs=1e-12)
  bioes = metrics.span_f1(
    [data.iob2_to_bioes(g) for g in gold], [data.iob2_to_bioes(p) for p in pred], "bioes"
  )
  assert bioes == pytest.approx(ours, abs=1e-12)  # conversion keeps the chunks
  assert sum(len(metrics.extract_spans(g)) for g in gold) == 5942
