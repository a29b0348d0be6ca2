"""SEAL (`objectives.seal`) and implicit training (`objectives.implicit`) on sequence
labeling: the multi-label objectives with a `SequenceEnergy` and BiLSTM taggers.

Oracles: per-token distributions; padding invariance of every loss (junk logits at
padded positions change nothing); descent on one batch; `init_from` a token-CE tagger.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from energynets import diff
from energynets import energies
from energynets import testing
from energynets.objectives import implicit
from energynets.objectives import local_token_ce
from energynets.objectives import seal


def _energy():
  return energies.SequenceEnergy(testing.tiny_tagger(), pairwise_scale=0.3)


def _seal(objective="nce", **kwargs):
  return seal.seal_objective(testing.tiny_tagger(), _energy(), optax.adam(2e-2),
                             optax.adam(1e-2), objective=objective, num_samples=3, **kwargs)


def _implicit(primary="cd", **kwargs):
  return implicit.implicit_objective(
      testing.tiny_tagger(), _energy(), optax.adam(1e-2), optax.adam(2e-2),
      primary=primary, inner_steps=2, num_samples=3,
      inverse_hvp=diff.InverseHVP(num_terms=3, alpha=1e-3), **kwargs)


def _accuracy(probs, batch, mask):
  pred, gold = np.asarray(probs).argmax(-1), np.asarray(batch["y"]).argmax(-1)
  return float(np.mean((pred == gold)[mask]))


def _check_outputs(objective, state, batch):
  probs = np.asarray(objective.predict(state, batch["x"]))
  assert probs.shape == batch["y"].shape
  np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-5)


@pytest.mark.parametrize("build", [
    lambda: _seal("margin"), lambda: _seal("regression_s"),
    lambda: _implicit("cd", negatives="relaxed"), lambda: _implicit("ssvm"),
    lambda: _implicit("dvn")])
def test_objectives_run_on_taggers(build):
  # (SEAL's NCE and implicit CD with straight-through negatives: the training test.)
  batch, _, _ = testing.tiny_sequence_batch()
  objective = build()
  state, losses, metrics = testing.fit_one_batch(objective, batch, num_steps=2)
  assert all(np.isfinite(losses)) and all(np.isfinite(float(v)) for v in metrics.values())
  _check_outputs(objective, state, batch)


def test_static_regression_is_rejected_on_sequences():
  with pytest.raises(ValueError, match="multi-label only"):
    seal.seal_losses(testing.tiny_tagger(), _energy(), objective="regression",
                     phase="loss_net", loss_aug_gbi=None)


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
    losses = seal.seal_losses(net, _energy(), objective=objective, num_samples=3)
    values.append((losses.loss_net(loss, task, batch, jax.random.key(1))[0],
                   losses.task_net(task, loss, batch, jax.random.key(2))[0]))
  np.testing.assert_allclose(values[0], values[1], rtol=1e-5)


@pytest.mark.parametrize("primary", ["cd", "ssvm"])  # (dvn scores as cd does)
def test_implicit_losses_ignore_padded_positions(primary):
  batch, _, _ = testing.tiny_sequence_batch()
  junk = jnp.asarray(5 * np.random.RandomState(0).randn(*batch["y"].shape), jnp.float32)
  state = _implicit(primary).init(jax.random.key(0), batch)
  theta, phi = state["inference_net"].params, state["energy"].params
  values = []
  for net in (_JunkAtPadding(jnp.zeros_like(junk)), _JunkAtPadding(junk)):
    losses = implicit.ImplicitLosses(
        net, _energy(), primary=primary, energy_weight=1.0, num_samples=3,
        negatives="straight_through", temperature=0.5, include_net_output=True,
        margin_cost="l1", score="soft_f1", l2=0.0, net_l2=0.0)
    values.append((losses.aux(theta, phi, batch, jax.random.key(1))[0],
                   losses.prim(theta, phi, batch, jax.random.key(2))[0]))
  np.testing.assert_allclose(values[0], values[1], rtol=1e-5)


@pytest.mark.parametrize("build", [lambda: _seal("nce"), lambda: _implicit("cd")])
def test_training_improves_the_tagger(build):
  batch, mask, _ = testing.tiny_sequence_batch()
  objective = build()
  before = objective.init(jax.random.key(0), batch)
  after, _, _ = testing.fit_one_batch(objective, batch, num_steps=40)
  acc0 = _accuracy(objective.predict(before, batch["x"]), batch, mask)
  acc1 = _accuracy(objective.predict(after, batch["x"]), batch, mask)
  assert acc1 >= 0.9 and acc1 > acc0 + 0.2, (acc0, acc1)


def test_ranking_without_a_loss_net_on_sequences():
  batch, mask, _ = testing.tiny_sequence_batch()
  objective = seal.task_net_ranking(testing.tiny_tagger(), optax.adam(3e-2), num_samples=3,
                                    output="sequence")
  state, losses, _ = testing.fit_one_batch(objective, batch, num_steps=30)
  assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5]), losses
  assert _accuracy(objective.predict(state, batch["x"]), batch, mask) >= 0.9


def test_init_from_a_token_ce_tagger():
  batch, _, _ = testing.tiny_sequence_batch()
  prev = local_token_ce(testing.tiny_tagger(), optax.adam(1e-2)).init(jax.random.key(5),
                                                                      batch)
  state = _implicit().init_from(prev, jax.random.key(0), batch)
  testing.assert_trees_equal(state["inference_net"].params, prev["net"].params)
  testing.assert_trees_equal(state["energy"].params["local_net"], prev["net"].params)
  seal_state = _seal().init_from(prev, jax.random.key(0), batch)
  testing.assert_trees_equal(seal_state["task_net"].params, prev["net"].params)
