"""SEAL (`objectives.seal`) on sequence labeling: the multi-label objective with a
`SequenceEnergy` loss-net and BiLSTM task nets (implicit training on sequences:
tests/test_implicit_sequences.py).

Oracles: per-token distributions; padding invariance of every loss (junk logits at
padded positions change nothing); descent on one batch; `init_from` a token-CE tagger.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from energynets import energies
from energynets import testing
from energynets.objectives import local_token_ce
from energynets.objectives import outputs
from energynets.objectives import seal


def _energy():
  return energies.SequenceEnergy(testing.tiny_tagger(), pairwise_scale=0.3)


def _named(name):
  """The library's loss-net objective `name`, with K = 3 samples where it takes K."""
  return {
    "nce": seal.SealNCE(num_samples=3),
    "margin": seal.SealMargin(),
    "regression_s": seal.SealRegressionS(num_samples=3),
  }[name]


def _seal(objective="nce"):
  return seal.seal_objective(
    _energy(),
    testing.tiny_tagger(),
    optax.adam(1e-2),
    optax.adam(2e-2),
    loss_net_objective=_named(objective),
  )


def _accuracy(probs, batch, mask):
  pred, gold = np.asarray(probs).argmax(-1), np.asarray(batch["y"]).argmax(-1)
  return float(np.mean((pred == gold)[mask]))


def _check_outputs(objective, state, batch):
  probs = np.asarray(objective.predict(state, batch["x"]))
  assert probs.shape == batch["y"].shape
  np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-5)


# Slow: test_seal_losses_ignore_padded_positions builds and differentiates each of these
# objectives on the same taggers in the default suite.
@pytest.mark.slow
@pytest.mark.parametrize("loss_net", ["margin", "regression_s"])
def test_objectives_run_on_taggers(loss_net):
  # (NCE: the training test.)
  batch, _, _ = testing.tiny_sequence_batch()
  objective = _seal(loss_net)
  state, losses, metrics = testing.fit_one_batch(objective, batch, num_steps=2)
  assert all(np.isfinite(losses)) and all(np.isfinite(float(v)) for v in metrics.values())
  _check_outputs(objective, state, batch)


def test_static_regression_is_rejected_on_sequences():
  with pytest.raises(ValueError, match="multi-label only"):
    seal.seal_losses(
      _energy(),
      testing.tiny_tagger(),
      options=seal.SealOptions(train_task_net=False),
      loss_net_objective=seal.SealRegression(loss_aug_gbi=None),
    )


class _JunkAtPadding:
  """A tagger whose logits at padded positions are replaced by `junk` (same params)."""

  def __init__(self, junk):
    self.tagger, self.junk = testing.tiny_tagger(), junk

  def init(self, *args, **kwargs):
    return self.tagger.init(*args, **kwargs)

  def apply(self, variables, x, **kwargs):
    logits = self.tagger.apply(variables, x, **kwargs)
    real = (x[..., 0] > 0)[..., None]
    return jnp.where(real, logits, self.junk[: x.shape[0], : x.shape[1]])


@pytest.mark.parametrize("objective", ["nce", "margin", "regression_s"])
def test_seal_losses_ignore_padded_positions(objective):
  batch, _, _ = testing.tiny_sequence_batch()
  junk = jnp.asarray(5 * np.random.RandomState(0).randn(*batch["y"].shape), jnp.float32)
  state = _seal(objective).init(jax.random.key(0), batch)
  task, loss = state["task_net"].params, state["loss_net"].params
  values = []
  for net in (_JunkAtPadding(jnp.zeros_like(junk)), _JunkAtPadding(junk)):
    losses = seal.seal_losses(_energy(), net, loss_net_objective=_named(objective))
    values.append(
      (
        losses.loss_net(loss, task, batch, jax.random.key(1))[0],
        losses.task_net(task, loss, batch, jax.random.key(2))[0],
      )
    )
  np.testing.assert_allclose(values[0], values[1], rtol=1e-5)


def test_training_improves_the_tagger():
  batch, mask, _ = testing.tiny_sequence_batch()
  objective = _seal("nce")
  before = objective.init(jax.random.key(0), batch)
  after, _, _ = testing.fit_one_batch(objective, batch, num_steps=40)
  acc0 = _accuracy(objective.predict(before, batch["x"]), batch, mask)
  acc1 = _accuracy(objective.predict(after, batch["x"]), batch, mask)
  assert acc1 >= 0.9 and acc1 > acc0 + 0.2, (acc0, acc1)


def test_ranking_without_a_loss_net_on_sequences():
  batch, mask, _ = testing.tiny_sequence_batch()
  objective = seal.task_net_ranking(
    testing.tiny_tagger(), optax.adam(3e-2), num_samples=3, output=outputs.SEQUENCE
  )
  state, losses, _ = testing.fit_one_batch(objective, batch, num_steps=30)
  assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5]), losses
  assert _accuracy(objective.predict(state, batch["x"]), batch, mask) >= 0.9


def test_init_from_a_token_ce_tagger():
  batch, _, _ = testing.tiny_sequence_batch()
  prev = local_token_ce(testing.tiny_tagger(), optax.adam(1e-2)).init(jax.random.key(5), batch)
  seal_state = _seal().init_from(prev, jax.random.key(0), batch)
  testing.assert_trees_equal(seal_state["task_net"].params, prev["net"].params)
