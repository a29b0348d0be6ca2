"""Inference networks (`objectives.infnet`) on sequence labeling: the same objective with a
`SequenceEnergy` and BiLSTM taggers as nets (Tu et al. 2020's POS / NER setting).

Oracles: per-token distributions; Δ and the hinges computed on real tokens only (the
padded positions of the nets' outputs can be anything); the stacked F_Φ acting per
position; descent on one batch; `init_from` a token-CE tagger.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from energynets import energies
from energynets import testing
from energynets.objectives import infnet
from energynets.objectives import local_token_ce
from energynets.objectives import outputs

L = testing.SEQ_TAGS


OBJECTIVES = {
  "margin": infnet.InfNetMargin(),
  "perceptron": infnet.InfNetPerceptron(),
  "compound": infnet.InfNetCompound(),
}
ARCHITECTURES = {
  "separated": infnet.InfNetSeparated(),
  "shared": infnet.InfNetShared(),
  "stacked": infnet.InfNetStacked(),
}


def _objective(objective="compound", architecture="stacked"):
  return infnet.inference_network(
    energies.SequenceEnergy(testing.tiny_tagger()),
    testing.tiny_tagger(),
    optax.adam(1e-2),
    optax.adam(2e-2),
    options=infnet.InfNetOptions(architecture=ARCHITECTURES[architecture], num_inner_steps=2),
    energy_objective=OBJECTIVES[objective],
  )


def _token_accuracy(probs, batch, mask):
  return float(np.mean((np.asarray(probs).argmax(-1) == np.asarray(batch["y"]).argmax(-1))[mask]))


# The default (compound, stacked) runs in the default suite; the other variants, 10-15 s
# of compiling each, with --runslow (the multi-label tests cover every variant).
@pytest.mark.parametrize(
  "objective,architecture",
  [
    pytest.param("margin", "separated", marks=pytest.mark.slow),
    pytest.param("perceptron", "separated", marks=pytest.mark.slow),
    ("compound", "stacked"),
    pytest.param("compound", "shared", marks=pytest.mark.slow),
  ],
)
def test_every_variant_trains_per_token_distributions(objective, architecture):
  batch, mask, _ = testing.tiny_sequence_batch()
  state, losses, metrics = testing.fit_one_batch(
    _objective(objective, architecture), batch, num_steps=3
  )
  assert all(np.isfinite(losses)) and all(np.isfinite(float(v)) for v in metrics.values())
  probs = np.asarray(_objective(objective, architecture).predict(state, batch["x"]))
  assert probs.shape == batch["y"].shape
  np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-5)


def test_the_structure_follows_the_energy():
  losses = infnet.infnet_losses(
    energies.SequenceEnergy(testing.tiny_tagger()), testing.tiny_tagger()
  )
  assert losses.structure is outputs.SEQUENCE
  mlc = infnet.infnet_losses(
    energies.SPENEnergy(num_labels=3, feature_hidden=(4,)), testing.tiny_tagger()
  )
  assert mlc.structure is outputs.MULTILABEL


def test_energy_loss_and_delta_ignore_padded_positions():
  batch, mask, _ = testing.tiny_sequence_batch()
  energy = energies.SequenceEnergy(testing.tiny_tagger(), pairwise_scale=0.3)
  losses = infnet.infnet_losses(
    energy, testing.tiny_tagger(), energy_objective=infnet.InfNetCompound()
  )
  objective = _objective()
  state = objective.init(jax.random.key(0), batch)
  params = state["energy"].params
  rs = np.random.RandomState(1)
  y_cost = jax.nn.softmax(jnp.asarray(rs.randn(*batch["y"].shape)), -1)
  y_test = jax.nn.softmax(jnp.asarray(rs.randn(*batch["y"].shape)), -1)
  junk = jax.nn.softmax(jnp.asarray(rs.randn(*batch["y"].shape) * 5), -1)
  pad = ~mask[..., None]
  value, metrics = losses.energy_loss(params, batch, y_cost, y_test, jax.random.key(2))
  value2, metrics2 = losses.energy_loss(
    params, batch, jnp.where(pad, junk, y_cost), jnp.where(pad, junk, y_test), jax.random.key(2)
  )
  np.testing.assert_allclose(value, value2, rtol=1e-6)
  # Δ is the L1 distance over real tokens: numpy oracle.
  expected = np.sum(np.abs(np.asarray(y_cost) - np.asarray(batch["y"])) * ~pad, axis=(1, 2))
  np.testing.assert_allclose(metrics["delta"], expected.mean(), rtol=1e-5)
  np.testing.assert_allclose(metrics2["delta"], expected.mean(), rtol=1e-5)


def test_stacked_cost_net_acts_per_position():
  batch, _, _ = testing.tiny_sequence_batch()
  losses = infnet.infnet_losses(
    energies.SequenceEnergy(testing.tiny_tagger()),
    testing.tiny_tagger(),
    options=infnet.InfNetOptions(architecture=infnet.InfNetStacked()),
  )
  params = losses.init_nets(jax.random.key(0), batch)
  _, cost = losses.net_logits(params, batch["x"], batch["y"])
  y2 = batch["y"].at[:, 0].set(jnp.roll(batch["y"][:, 0], 1, axis=-1))
  _, cost2 = losses.net_logits(params, batch["x"], y2)
  np.testing.assert_allclose(cost[:, 1:], cost2[:, 1:], rtol=1e-6)
  assert not np.allclose(cost[:, 0], cost2[:, 0])


def test_training_improves_the_test_time_tagger():
  batch, mask, _ = testing.tiny_sequence_batch()
  objective = _objective()
  before = objective.init(jax.random.key(0), batch)
  after, _, metrics = testing.fit_one_batch(objective, batch, num_steps=60)
  acc0 = _token_accuracy(objective.predict(before, batch["x"]), batch, mask)
  acc1 = _token_accuracy(objective.predict(after, batch["x"]), batch, mask)
  assert acc1 >= 0.9 and acc1 > acc0 + 0.2, (acc0, acc1)
  assert float(metrics["infnet_ce_test"]) < 0.5


def test_init_from_a_token_ce_tagger_seeds_the_nets_and_the_local_energy():
  batch, _, _ = testing.tiny_sequence_batch()
  prev = local_token_ce(testing.tiny_tagger(), optax.adam(1e-2)).init(jax.random.key(5), batch)
  state = _objective(architecture="separated").init_from(prev, jax.random.key(0), batch)
  for group in (
    state["test_net"].params,
    state["cost_net"].params,
    state["energy"].params["local_net"],
  ):
    testing.assert_trees_equal(group, prev["net"].params)
