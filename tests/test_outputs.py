"""Output structures (`objectives.outputs`) and the padding-aware SSVM task loss.

Oracles: numpy log-probabilities; sample frequencies against the link's probabilities
(law of large numbers); the straight-through estimator's forward value and gradient
written out; Δ over real tokens in numpy.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from energynets import domains
from energynets import energies
from energynets import testing
from energynets.energies import protocol
from energynets.objectives import outputs
from energynets.objectives import task_losses


def _logits_and_gold(seed=0):
  batch, mask, _ = testing.tiny_sequence_batch(seed)
  logits = jnp.asarray(np.random.RandomState(seed).randn(*batch["y"].shape), jnp.float32)
  return logits, batch["y"], mask


def test_categorical_samples_follow_the_softmax_and_are_zero_at_padding():
  logits, y, mask = _logits_and_gold()
  samples = np.asarray(outputs.SEQUENCE.sample(jax.random.key(0), logits, 4000, y))
  assert samples.shape == (y.shape[0], 4000) + y.shape[1:]
  np.testing.assert_array_equal(samples.sum(-1), np.broadcast_to(mask[:, None], samples.shape[:-1]))
  freq = samples.mean(1)
  probs = np.asarray(jax.nn.softmax(logits, -1))
  np.testing.assert_allclose(freq[mask], probs[mask], atol=0.03)


def test_log_probs_match_numpy():
  logits, y, mask = _logits_and_gold()
  ys = outputs.SEQUENCE.sample(jax.random.key(1), logits, 3, y)
  log_p = np.log(np.asarray(jax.nn.softmax(logits, -1)))
  expected = np.einsum("bstl,btl->bs", np.asarray(ys), log_p)
  np.testing.assert_allclose(outputs.SEQUENCE.log_prob(logits, ys), expected, rtol=1e-5)
  # The gold itself (zero rows at padding) scores its real tokens only.
  gold = outputs.SEQUENCE.log_prob(logits, y[:, None])[:, 0]
  np.testing.assert_allclose(gold, np.sum(np.asarray(y) * log_p, axis=(1, 2)), rtol=1e-5)
  # Multi-label: Bernoulli.
  mlc_logits = logits[:, 0]
  bits = outputs.MULTILABEL.sample(jax.random.key(2), mlc_logits, 5)
  p = np.asarray(jax.nn.sigmoid(mlc_logits))[:, None]
  b = np.asarray(bits)
  expected = np.sum(b * np.log(p) + (1 - b) * np.log1p(-p), -1)
  np.testing.assert_allclose(outputs.MULTILABEL.log_prob(mlc_logits, bits), expected, rtol=1e-5)


@pytest.mark.parametrize("structure", [outputs.SEQUENCE, outputs.MULTILABEL])
def test_straight_through_is_hard_forward_and_the_link_gradient_backward(structure):
  logits, y, _ = _logits_and_gold()
  if structure is outputs.MULTILABEL:
    logits, y = logits[:, 0], None
  weights = jnp.asarray(np.random.RandomState(3).randn(*logits.shape), jnp.float32)
  rng = jax.random.key(4)
  hard = structure.sample(rng, logits, 2, y)
  st = outputs.straight_through_samples(structure, rng, logits, 2, y)
  np.testing.assert_array_equal(st, hard)
  f = lambda z: jnp.sum(
    outputs.straight_through_samples(structure, rng, z, 2, y) * weights[:, None]
  )
  g = lambda z: 2 * jnp.sum(structure.link(z) * weights)
  np.testing.assert_allclose(jax.grad(f)(logits), jax.grad(g)(logits), rtol=1e-5, atol=1e-6)


def test_gumbel_softmax_is_on_the_simplex_and_sharpens_with_temperature():
  logits, y, mask = _logits_and_gold()
  soft = np.asarray(outputs.SEQUENCE.relaxed_sample(jax.random.key(5), logits, 2000, 0.05, y))
  np.testing.assert_allclose(
    soft.sum(-1), np.broadcast_to(mask[:, None], soft.shape[:-1]), rtol=1e-5
  )
  assert np.mean(soft.max(-1)[np.broadcast_to(mask[:, None], soft.shape[:-1])]) > 0.95
  freq = np.eye(y.shape[-1])[soft.argmax(-1)].mean(1)  # Gumbel-max: argmax ~ softmax
  np.testing.assert_allclose(freq[mask], np.asarray(jax.nn.softmax(logits, -1))[mask], atol=0.04)


def test_structures_are_picked_from_the_energy():
  seq = energies.SequenceEnergy(testing.tiny_tagger())
  assert outputs.for_energy(seq) is outputs.SEQUENCE
  assert outputs.for_energy(protocol.as_energy(seq)) is outputs.SEQUENCE
  spen = energies.SPENEnergy(num_labels=3, feature_hidden=(4,))
  assert outputs.for_energy(spen) is outputs.MULTILABEL
  assert outputs.for_domain(domains.Simplex()) is outputs.SEQUENCE


@pytest.mark.parametrize("surrogate", [task_losses.L1(), task_losses.Squared(), task_losses.Log()])
def test_structured_task_loss_counts_real_tokens_only(surrogate):
  logits, y, mask = _logits_and_gold()
  y_hat = jax.nn.softmax(logits, -1)
  junk = jax.nn.softmax(3 * logits[::-1], -1)
  padded = jnp.where(mask[..., None], y_hat, junk)
  simplex = domains.Simplex()
  value = task_losses.structured_task_loss(simplex, padded, y, surrogate)
  real = task_losses.task_loss(y_hat * mask[..., None], y, surrogate)
  np.testing.assert_allclose(value, real, rtol=1e-5)
  if surrogate == task_losses.L1():
    expected = np.sum(np.abs(np.asarray(y_hat) - np.asarray(y)) * mask[..., None], (1, 2))
    np.testing.assert_allclose(value, expected, rtol=1e-5)
  # On the Box every position is real: an all-zero gold row is an example with no labels.
  box_y = jnp.zeros_like(y[:, 0])
  np.testing.assert_allclose(
    task_losses.structured_task_loss(domains.Box(), y_hat[:, 0], box_y, surrogate),
    task_losses.task_loss(y_hat[:, 0], box_y, surrogate),
    rtol=1e-6,
  )
