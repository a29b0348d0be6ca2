"""Tests of the sequence baselines' objectives: token cross-entropy (`local_token_ce`)
and the BiLSTM-CRF (`crf_objective`), and of the sequence task's metrics.

Oracles: the CE written out with numpy on real tokens only; Viterbi of the trained
scores (`inference.crf`, itself checked against enumeration in test_crf.py); descent of
each objective's own loss on one batch; conlleval span F1 from `metrics.span_f1`.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from energynets import inference
from energynets import nets
from energynets import testing
from energynets.data import sequences
from energynets.objectives import crf_objective
from energynets.objectives import local_token_ce
from energynets.objectives.local import token_cross_entropy
from experiments import tasks

B, T, L = testing.SEQ_BATCH, testing.SEQ_STEPS, testing.SEQ_TAGS
_batch = testing.tiny_sequence_batch
_tagger = testing.tiny_tagger


def test_token_cross_entropy_averages_over_real_tokens_only():
  batch, mask, tags = _batch()
  logits = np.random.RandomState(1).randn(B, T, L).astype(np.float32)
  logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  expected = -np.mean(np.take_along_axis(logp, tags[..., None], -1)[..., 0][mask])
  np.testing.assert_allclose(token_cross_entropy(logits, batch["y"]), expected, rtol=1e-6)
  junk = np.where(mask[..., None], logits, 100.0 * np.random.RandomState(2).randn(B, T, L))
  np.testing.assert_allclose(token_cross_entropy(junk, batch["y"]), expected, rtol=1e-6)


@pytest.mark.parametrize(
  "build",
  [
    lambda: local_token_ce(_tagger(), optax.adam(3e-2)),
    lambda: crf_objective(_tagger(), L, optax.adam(3e-2)),
  ],
)
def test_objectives_fit_one_batch(build):
  batch, _, _ = _batch()
  _, losses, _ = testing.fit_one_batch(build(), batch, num_steps=40)
  assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5]), losses


def test_crf_predicts_the_viterbi_path_as_one_hot_tags():
  batch, mask, _ = _batch()
  objective = crf_objective(_tagger(), L, optax.adam(1e-2))
  state = objective.init(jax.random.key(0), batch)
  params = jax.tree.map(
    lambda a: a + 0.3 * jax.random.normal(jax.random.key(1), a.shape), state["net"].params
  )
  state = {"net": state["net"]._replace(params=params)}
  y = objective.predict(state, batch["x"])
  unaries = _tagger().apply({"params": params["tagger"]}, batch["x"])
  c = params["crf"]
  tags, _ = inference.crf.viterbi_decode(
    unaries, c["transitions"], jnp.asarray(mask), c["start"], c["end"]
  )
  np.testing.assert_array_equal(np.asarray(y).argmax(-1)[mask], np.asarray(tags)[mask])
  np.testing.assert_array_equal(np.asarray(y).sum(-1), 1.0)


def test_crf_continues_a_token_ce_tagger():
  batch, _, _ = _batch()
  ce = local_token_ce(_tagger(), optax.adam(1e-2))
  prev = ce.init(jax.random.key(3), batch)
  state = crf_objective(_tagger(), L, optax.adam(1e-2)).init_from(prev, jax.random.key(0), batch)
  for a, b in zip(
    jax.tree.leaves(prev["net"].params), jax.tree.leaves(state["net"].params["tagger"])
  ):
    np.testing.assert_array_equal(a, b)
  np.testing.assert_array_equal(state["net"].params["crf"]["transitions"], 0.0)


def test_sequence_task_scores_ner_spans_with_conlleval_semantics():
  names = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC")
  gold = np.array([[1, 2, 0, 3, 0], [0, 3, 4, 0, 0]])
  pred = np.array([[1, 2, 0, 0, 0], [0, 3, 4, 0, 0]])
  mask = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], bool)
  y = np.eye(5, dtype=np.float32)[gold] * mask[..., None]
  split = tasks.SequenceSplit(x=None, y=y, mask=mask, tag_names=names, scheme="iob2")
  scores = tasks.sequence_validation_metrics(split, np.eye(5)[pred])
  # Gold spans: PER(0,2), LOC(3,4), LOC(1,3); predicted: PER(0,2), LOC(1,3).
  assert scores["validation/span_precision"] == 1.0
  assert scores["validation/span_recall"] == pytest.approx(2 / 3)
  assert scores["validation/span_f1"] == pytest.approx(0.8)
  assert scores["validation/token_acc"] == pytest.approx(7 / 8)
  pos = split._replace(scheme="pos")
  assert set(tasks.sequence_validation_metrics(pos, np.eye(5)[pred])) == {"validation/token_acc"}


def test_packed_tagger_equals_the_dict_tagger():
  batch, _, _ = _batch()
  tagger = _tagger()
  params = tagger.init(jax.random.key(0), batch["x"])["params"]
  plain = nets.BiLSTMTagger(embedder=tagger.embedder, encoder=tagger.encoder, num_tags=L)
  np.testing.assert_allclose(
    tagger.apply({"params": params}, batch["x"]),
    plain.apply({"params": params}, sequences.unpack_tokens(batch["x"])),
    rtol=1e-6,
  )
