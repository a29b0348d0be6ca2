"""Tests of the multi-label SPEN energy (energynets/energies/mlc.py).

Oracles: single-example evaluations (batch independence), the closed-form local term
`−Σ y·logits`, a plain `MLP` with the same params, and float64 central finite
differences for ∂E/∂y.
"""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from energynets.energies import SPENEnergy
from energynets.energies import param_groups
from energynets.nets import MLP
from energynets.nets import hardtanh
from energynets.nets import mlp as mlp_lib
from energynets.nets import softplus

L, D, B = 5, 7, 4


def _inputs(seed=0, batch=B, dtype=np.float32):
  rs = np.random.RandomState(seed)
  x = rs.randn(batch, D).astype(dtype)
  y = rs.uniform(size=(batch, L)).astype(dtype)
  return jnp.asarray(x), jnp.asarray(y)


def _init(energy, seed=0):
  x, y = _inputs(seed)
  return energy.init({"params": jax.random.key(seed)}, x, y)["params"]


def _apply(energy, params, x, y, **kw):
  return energy.apply({"params": params}, x, y, **kw)


def _randomize(params, seed, scale=0.5):
  """Non-zero values everywhere (biases start at zero)."""
  rs = np.random.RandomState(seed)
  return jax.tree.map(lambda a: jnp.asarray(rs.randn(*a.shape) * scale, a.dtype), params)


def _zero_weights(params, groups=("global", "conditional")):
  params = dict(params)
  for g in groups:
    if g in params:
      zero = jnp.zeros_like(params[g]["weights"]["kernel"])
      params[g] = dict(params[g], weights={"kernel": zero})
  return params


class SPENEnergyTest(parameterized.TestCase):
  @parameterized.parameters(
    (softplus, 0, ()),
    (softplus, 3, (6,)),
    (jax.nn.relu, 0, (6,)),
    (jax.nn.relu, 3, ()),
    (hardtanh, 0, ()),
    (hardtanh, 3, (6,)),
  )
  def test_shape_and_examples_are_independent(self, activation, num_conditional, feature_hidden):
    energy = SPENEnergy(
      L, feature_hidden, num_measurements=4, activation=activation, num_conditional=num_conditional
    )
    params = _randomize(_init(energy), 1)
    self.assertEqual(set(params), set(param_groups(energy)))
    x, y = _inputs(2)
    e = jax.jit(lambda p, a, b: _apply(energy, p, a, b))
    batch = e(params, x, y)
    self.assertEqual(batch.shape, (B,))
    self.assertTrue(np.all(np.isfinite(batch)))
    alone = np.array([e(params, x[i : i + 1], y[i : i + 1])[0] for i in range(B)])
    np.testing.assert_allclose(batch, alone, rtol=1e-5, atol=1e-6)
    # Other batch-mates (and their order) do not change example 0's energy.
    x2, y2 = _inputs(3)
    mixed = e(params, jnp.concatenate([x[:1], x2[1:]]), jnp.concatenate([y[:1], y2[1:]]))
    np.testing.assert_allclose(mixed[0], batch[0], rtol=1e-6)

  @parameterized.parameters(0, 2)
  def test_local_term_is_minus_inner_product_with_logits(self, num_conditional):
    energy = SPENEnergy(L, (6,), num_measurements=3, num_conditional=num_conditional)
    params = _zero_weights(_randomize(_init(energy), 4))
    x, y = _inputs(5)
    logits = energy.apply({"params": params}, x, method=SPENEnergy.local_logits)
    np.testing.assert_allclose(
      _apply(energy, params, x, y), -jnp.sum(y * logits, -1), rtol=1e-5, atol=1e-6
    )
    # Low energy for the labels the local classifier believes in.
    likely = (logits > 0).astype(jnp.float32)
    self.assertTrue(
      np.all(_apply(energy, params, x, likely) <= _apply(energy, params, x, 1.0 - likely))
    )

  def test_local_net_is_a_plain_mlp(self):
    energy = SPENEnergy(L, (6, 3), feature_activation=jnp.tanh, num_measurements=3)
    params = _randomize(_init(energy), 6)
    x, y = _inputs(7)
    mlp = MLP((6, 3), L, activation=jnp.tanh)
    expected = mlp.apply({"params": params["local_net"]}, x)
    np.testing.assert_allclose(
      energy.apply({"params": params}, x, method=SPENEnergy.local_logits), expected, rtol=1e-6
    )
    enc = energy.apply({"params": params}, x, method=SPENEnergy.encode)
    np.testing.assert_allclose(enc.logits, expected, rtol=1e-6)
    self.assertEqual(enc.features.shape, (B, 3))
    np.testing.assert_allclose(
      energy.apply({"params": params}, enc, y, method=SPENEnergy.energy_from_encoding),
      _apply(energy, params, x, y),
      rtol=1e-6,
    )
    # MLP's features output is what its head sees, and the default call is unchanged.
    logits, feats = mlp.apply({"params": params["local_net"]}, x, return_features=True)
    np.testing.assert_allclose(logits, expected)
    head = params["local_net"]["head"]
    np.testing.assert_allclose(
      feats @ head["kernel"] + head["bias"], expected, rtol=1e-5, atol=1e-6
    )

  def test_linear_feature_network_has_features_equal_to_x(self):
    energy = SPENEnergy(L, (), num_measurements=2)
    params = _init(energy)
    self.assertEqual(set(params["local_net"]), {"head"})
    x, _ = _inputs(8)
    enc = energy.apply({"params": params}, x, method=SPENEnergy.encode)
    np.testing.assert_array_equal(enc.features, x)

  def test_measurements_are_affine(self):
    energy = SPENEnergy(L, (), num_measurements=3, num_conditional=2)
    params = _randomize(_init(energy), 9)
    for group, width in (("global", 3), ("conditional", 2)):
      self.assertEqual(params[group]["measurements"]["bias"].shape, (width,))
      self.assertNotIn("bias", params[group]["weights"])
    # At y = 0 the global term is c2ᵀg(c1): only the bias reaches it.
    x, _ = _inputs(10)
    zeros = jnp.zeros((B, L))
    shifted = jax.tree.map(lambda a: a, params)
    shifted["global"]["measurements"]["bias"] = params["global"]["measurements"]["bias"] + 1.0
    self.assertFalse(
      np.allclose(_apply(energy, params, x, zeros), _apply(energy, shifted, x, zeros))
    )

  def test_conditional_term_depends_on_features(self):
    energy = SPENEnergy(L, (4,), num_measurements=2, num_conditional=3)
    params = _randomize(_init(energy), 11)
    params = _zero_weights(params, ("global",))
    params["local_net"]["head"] = jax.tree.map(jnp.zeros_like, params["local_net"]["head"])
    x, y = _inputs(12)
    e = _apply(energy, params, x, y)
    self.assertFalse(np.allclose(e, 0.0))
    self.assertFalse(np.allclose(e, _apply(energy, params, x[::-1], y)))

  @parameterized.parameters((softplus, 0), (softplus, 2), (jax.nn.relu, 2), (hardtanh, 0))
  def test_gradient_wrt_y_matches_finite_differences(self, activation, num_conditional):
    with jax.enable_x64(True):
      energy = SPENEnergy(
        L, (6,), num_measurements=4, activation=activation, num_conditional=num_conditional
      )
      params = jax.tree.map(lambda a: a.astype(jnp.float64), _randomize(_init(energy), 13))
      x, y = _inputs(14, batch=2, dtype=np.float64)
      total = jax.jit(lambda v: jnp.sum(_apply(energy, params, x, v)))
      grad = jax.grad(total)(y)
      direction = jnp.asarray(np.random.RandomState(15).randn(*y.shape))
      eps = 1e-6
      fd = (total(y + eps * direction) - total(y - eps * direction)) / (2 * eps)
      np.testing.assert_allclose(float(jnp.vdot(grad, direction)), float(fd), rtol=1e-6, atol=1e-9)
      # Per-example gradient: example 0's gradient ignores example 1's y.
      other = y.at[1].set(1.0 - y[1])
      np.testing.assert_allclose(jax.grad(total)(other)[0], grad[0], rtol=1e-12)

  def test_dropout_only_in_training(self):
    energy = SPENEnergy(L, (8,), num_measurements=3, dropout=0.5, num_conditional=2)
    params = _randomize(_init(energy), 16)
    x, y = _inputs(17)
    clean = _apply(energy, params, x, y)
    np.testing.assert_array_equal(clean, _apply(energy, params, x, y))
    noisy = _apply(energy, params, x, y, train=True, rngs={"dropout": jax.random.key(0)})
    self.assertFalse(np.allclose(clean, noisy))

  def test_bad_arguments_raise(self):
    energy = SPENEnergy(L, (), num_measurements=2)
    params = _init(energy)
    x, _ = _inputs(18)
    with self.assertRaisesRegex(ValueError, "y must be"):
      _apply(energy, params, x, jnp.zeros((B, L + 1)))
    with self.assertRaisesRegex(TypeError, r"^SPENEnergy\.activation='softplus' is not a function"):
      _init(SPENEnergy(L, (), activation="softplus"))
    with self.assertRaisesRegex(TypeError, r"^SPENEnergy\.feature_activation='relu' is not"):
      _init(SPENEnergy(L, (4,), feature_activation="relu"))
    with self.assertRaisesRegex(ValueError, "sizes"):
      _init(SPENEnergy(L, (), num_measurements=0))


class PerLayerDropoutTest(parameterized.TestCase):
  """`MLP.dropout` as one rate per hidden layer (SEAL's public `(0.5, 0.0)`)."""

  def _train_outputs(self, dropout, seed=0):
    net = MLP(hidden=(16, 12), num_outputs=L, activation=softplus, dropout=dropout)
    x, _ = _inputs(19)
    params = net.init({"params": jax.random.key(3)}, x)["params"]
    run = lambda train: net.apply(
      {"params": params},
      x,
      train=train,
      return_features=True,
      rngs={"dropout": jax.random.key(seed)},
    )
    return run(True), run(False)

  def test_equal_rates_match_a_single_float(self):
    (out_pair, _), _ = self._train_outputs((0.3, 0.3))
    (out_float, _), _ = self._train_outputs(0.3)
    np.testing.assert_array_equal(out_pair, out_float)

  def test_zero_rates_are_deterministic_in_training(self):
    (train_out, _), (eval_out, _) = self._train_outputs((0.0, 0.0))
    np.testing.assert_allclose(train_out, eval_out, rtol=1e-6)

  def test_only_the_first_layer_drops_out(self):
    (train_out, train_features), (eval_out, _) = self._train_outputs((0.5, 0.0))
    # Softplus features are strictly positive: a zero is a dropped unit.
    self.assertEqual(int(np.sum(np.asarray(train_features) == 0.0)), 0)
    self.assertFalse(np.allclose(train_out, eval_out))  # the first layer did drop out
    (_, last_features), _ = self._train_outputs((0.0, 0.5))
    self.assertGreater(int(np.sum(np.asarray(last_features) == 0.0)), 0)

  @parameterized.parameters(((0.5,),), ((0.5, 0.0, 0.1),), ((1.0, 0.0),), (-0.1,))
  def test_bad_rates_raise(self, dropout):
    with self.assertRaisesRegex(ValueError, "dropout"):
      self._train_outputs(dropout)

  def test_rates_per_layer(self):
    self.assertEqual(mlp_lib.hidden_dropout_rates(0.2, 3), (0.2, 0.2, 0.2))
    self.assertEqual(mlp_lib.hidden_dropout_rates([0.5, 0], 2), (0.5, 0.0))
    self.assertEqual(mlp_lib.hidden_dropout_rates(0.5, 0), ())


if __name__ == "__main__":
  absltest.main()
