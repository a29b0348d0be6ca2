"""Implicit bilevel training (energynets/objectives/implicit/) on sequence labeling:
a BiLSTM `PackedTagger` as the inference net, a `SequenceEnergy` over the same tagger.

Oracles: per-token distributions of the predictions; one-hot per-token negatives, zero
at padding, with the softmax's gradient; invariance of L_aux, L_prim and their gradients
to the logits at padded positions; the train-batch token accuracy after training; exact
parameter identity across stages (`local_token_ce`, `crf_objective` -> implicit).

Every update is compiled once per configuration (`_compiled`) with XLA's backend
optimizations off: the LSTM's second-order terms make compilation the cost of this file.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from energynets import diff
from energynets import energies
from energynets import nets
from energynets import testing
from energynets.objectives import crf_objective
from energynets.objectives import implicit
from energynets.objectives import local_token_ce
from energynets.objectives import outputs

B, T, L, HIDDEN = 4, 6, 4, 8
_jit = functools.partial(jax.jit, compiler_options={"xla_backend_optimization_level": 0})


def _batch():
  """`testing.tiny_sequence_batch` (lengths 6, 4, 1, 3) with L = 4 tags."""
  batch, mask, tags = testing.tiny_sequence_batch()
  tags = tags % L
  y = np.eye(L, dtype=np.float32)[tags] * mask[..., None]
  return {"x": batch["x"], "y": jnp.asarray(y)}, mask, tags


def _tagger():
  return nets.PackedTagger(
    embedder=nets.TokenEmbedder(
      vocab_size=testing.SEQ_VOCAB, word_dim=6, char_vocab_size=7, char_dim=4, char_filters=3
    ),
    encoder=nets.BiLSTM(hidden_size=HIDDEN),
    num_tags=L,
  )


def _energy():
  return energies.SequenceEnergy(_tagger(), pairwise_scale=0.3)


NEGATIVES = {
  "straight_through": implicit.StraightThroughNegatives(),
  "relaxed": implicit.RelaxedNegatives(0.5),
}


def _primary(name, negatives="straight_through", include_net_output=False):
  """The library's primary loss `name` ('ssvm', 'cd' or 'dvn'); CD with 3 samples."""
  if name == "cd":
    return implicit.ImplicitCD(
      num_samples=3, negatives=NEGATIVES[negatives], include_net_output=include_net_output
    )
  return {"ssvm": implicit.ImplicitSSVM, "dvn": implicit.ImplicitDVN}[name]()


def _objective(primary):
  options = implicit.ImplicitOptions(inner_steps=2, inverse_hvp=diff.Neumann(3, alpha=1e-3))
  return implicit.implicit_objective(
    _energy(), _tagger(), optax.adam(1e-2), optax.adam(2e-2), options=options, primary=primary
  )


@functools.cache
def _compiled(primary, negatives="straight_through", include_net_output=False):
  """`(objective, jitted update)`, shared by the tests of one configuration."""
  objective = _objective(_primary(primary, negatives, include_net_output))
  return objective, _jit(objective.update)


def _accuracy(probs, batch, mask):
  pred, gold = np.asarray(probs).argmax(-1), np.asarray(batch["y"]).argmax(-1)
  return float(np.mean((pred == gold)[mask]))


def test_sequence_negatives_are_one_hot_per_real_token():
  batch, mask, _ = _batch()
  logits = jnp.asarray(np.random.RandomState(0).randn(B, T, L), jnp.float32)
  draw = lambda lg, kind: implicit.sampled_negatives(
    outputs.SEQUENCE, jax.random.key(0), lg, 5, NEGATIVES[kind], batch["y"]
  )
  hard = np.asarray(draw(logits, "straight_through"))
  assert hard.shape == (B, 5, T, L)
  np.testing.assert_array_equal(np.unique(hard), [0.0, 1.0])
  np.testing.assert_array_equal(hard.sum(-1), np.broadcast_to(mask[:, None], (B, 5, T)))
  # The straight-through gradient is that of the per-token softmax (zero at padding).
  weights = jnp.asarray(np.random.RandomState(1).randn(L), jnp.float32)
  grad = jax.grad(lambda lg: jnp.sum(draw(lg, "straight_through") @ weights))(logits)
  real = jnp.asarray(mask)[..., None]
  want = jax.grad(lambda lg: 5 * jnp.sum(jnp.where(real, jax.nn.softmax(lg, -1), 0.0) @ weights))(
    logits
  )
  np.testing.assert_allclose(grad, want, rtol=1e-5, atol=1e-6)
  relaxed = np.asarray(draw(logits, "relaxed"))
  np.testing.assert_allclose(relaxed.sum(-1), np.broadcast_to(mask[:, None], (B, 5, T)), rtol=1e-5)
  assert np.all(relaxed[np.broadcast_to(mask[:, None], (B, 5, T))] < 1.0)


@pytest.mark.parametrize(
  "primary,negatives,include_net_output",
  [
    # These compile the largest programs of the suite: they run with --runslow; the
    # multi-label tests cover each primary in the default suite.
    pytest.param("ssvm", "straight_through", False, marks=pytest.mark.slow),
    pytest.param("dvn", "straight_through", False, marks=pytest.mark.slow),
    pytest.param("cd", "straight_through", False, marks=pytest.mark.slow),
    # 35 s of compiling; test_losses_and_gradients_ignore_padded_positions runs the
    # implicit objective on taggers in the default suite.
    pytest.param("cd", "relaxed", True, marks=pytest.mark.slow),
  ],
)
def test_updates_run_on_taggers(primary, negatives, include_net_output):
  batch, _, _ = _batch()
  objective, update = _compiled(primary, negatives, include_net_output)
  state = objective.init(jax.random.key(0), batch)
  for t in range(3):
    state, metrics = update(state, batch, jax.random.key(t))
  for name, value in metrics.items():
    assert np.all(np.isfinite(value)), name
  # A gradient path from L_prim to θ through the per-token outputs: an implicit term.
  assert float(metrics["prim_grad_theta_norm"]) > 1e-5
  assert float(metrics["implicit_norm"]) > 0.0
  probs = np.asarray(objective.predict(state, batch["x"]))
  assert probs.shape == (B, T, L)
  np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-5)


class _JunkAtPadding:
  """The tagger with params `{"tagger": ..., "junk": [B, T, L]}`: its logits at padded
  positions are replaced by `junk` (a parameter, so one compilation serves every junk)."""

  def __init__(self):
    self.tagger = _tagger()

  def apply(self, variables, x, **kwargs):
    params = variables["params"]
    logits = self.tagger.apply({"params": params["tagger"]}, x, **kwargs)
    return jnp.where((x[..., 0] > 0)[..., None], logits, params["junk"])


def test_losses_and_gradients_ignore_padded_positions():
  batch, mask, _ = _batch()
  state = _objective(_primary("cd")).init(jax.random.key(0), batch)
  tagger, phi = state["inference_net"].params, state["energy"].params
  options = implicit.ImplicitOptions(energy_weight=1.0, l2=0.0, net_l2=0.0)

  @_jit
  def values_and_grads(junk):
    theta = {"tagger": tagger, "junk": junk}
    out = {}
    for primary in ("ssvm", "cd", "dvn"):
      losses = implicit.ImplicitLosses(
        _energy(),
        _JunkAtPadding(),
        options=options,
        primary=_primary(primary, include_net_output=True),
      )
      for name, fn in (("aux", losses.aux), ("prim", losses.prim)):
        loss = lambda t, p: fn(t, p, batch, jax.random.key(1))[0]
        value, (g_theta, g_phi) = jax.value_and_grad(loss, argnums=(0, 1))(theta, phi)
        out[primary, name] = (value, g_theta["tagger"], g_phi)
    return out

  junk = 5.0 * np.random.RandomState(0).randn(B, T, L).astype(np.float32)
  junk[np.broadcast_to(mask[..., None], junk.shape)] = 0.0
  zero, noisy = values_and_grads(jnp.zeros_like(junk)), values_and_grads(jnp.asarray(junk))
  for key in zero:
    assert np.isfinite(float(zero[key][0])), key
    for a, b in zip(jax.tree.leaves(zero[key]), jax.tree.leaves(noisy[key])):
      np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6, err_msg=str(key))


def test_training_improves_the_train_batch_token_accuracy():
  batch, mask, _ = _batch()
  objective, update = _compiled("cd", "relaxed", True)
  state = objective.init(jax.random.key(0), batch)
  before = _accuracy(objective.predict(state, batch["x"]), batch, mask)
  for t in range(50):
    state, metrics = update(state, batch, jax.random.key(t))
  after = _accuracy(objective.predict(state, batch["x"]), batch, mask)
  assert after >= 0.85 and after > before + 0.3, (before, after)
  assert np.isfinite(float(metrics["loss"]))


def test_init_from_a_token_ce_tagger_carries_it_into_both():
  batch, _, _ = _batch()
  objective = _objective(_primary("cd"))
  prev = local_token_ce(_tagger(), optax.adam(1e-2)).init(jax.random.key(5), batch)
  state = objective.init_from(prev, jax.random.key(0), batch)
  testing.assert_trees_equal(state["inference_net"].params, prev["net"].params)
  testing.assert_trees_equal(state["energy"].params["local_net"], prev["net"].params)
  # An implicit state continues itself exactly.
  again = objective.init_from(state, jax.random.key(9), batch)
  for k in ("inference_net", "energy"):
    testing.assert_trees_equal(again[k].params, state[k].params)
  # A CRF stage: its tagger seeds both nets, its transitions the energy's pairwise term.
  crf = crf_objective(_tagger(), L, optax.adam(1e-2)).init(jax.random.key(6), batch)
  state = objective.init_from(crf, jax.random.key(0), batch)
  testing.assert_trees_equal(state["inference_net"].params, crf["net"].params["tagger"])
  testing.assert_trees_equal(state["energy"].params["local_net"], crf["net"].params["tagger"])
