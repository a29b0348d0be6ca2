"""Tests of `ssvm.search_statistics` (SPEN §7.4: GBI steps and search error).

Oracles: hand-built SPEN energies whose GBI outcome is known in closed form —
a linear energy (c2 = 0) whose minimizer over the box is the vertex 1[ℓ > 0], which
projected GBI reaches exactly (the clip lands on the face, then the iterate stops
moving); and a separable concave-global energy with a local minimum at 0 that GBI
falls into from 0.5 while the gold vertex 1 has lower energy. Step counts are checked
against `infer` (the test-time prediction the statistics must describe) and the
`[1, max_steps]` bounds.
"""

import functools

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from energynets.energies import SPENEnergy
from energynets.energies import protocol
from energynets.inference import GBIConfig
from energynets.inference import Mirror
from energynets.inference import Projected
from energynets.objectives import ssvm as ssvm_lib

PROJECTED = GBIConfig(parametrization=Projected(), max_steps=50)
KEYS = (
  "gbi_steps_mean",
  "gbi_steps_max",
  "gbi_converged_fraction",
  "search_error",
  "search_error_rounded",
  "energy_gap_mean",
)
# Reported too when {0, 1}^L can be enumerated (every energy here is that small).
EXACT_KEYS = ("exact_search_error", "exact_gap_mean")


def _init(energy, d, fill=np.zeros):
  """Parameters of `energy` for `d` input features, every leaf `fill(shape)`.

  Built from `jax.eval_shape` (no eager flax init to compile); the tests set the
  entries they rely on.
  """
  shapes = jax.eval_shape(
    lambda: protocol.as_energy(energy).init(jax.random.PRNGKey(0), jnp.zeros((1, d)), None)
  )
  return jax.tree.map(lambda a: jnp.asarray(fill(a.shape), a.dtype), shapes)


def _linear(logits):
  """E = −Σ y ℓ with ℓ = x K and x = I: example i's logits are `logits[i]`."""
  logits = np.asarray(logits, np.float32)
  b, l = logits.shape
  energy = SPENEnergy(l, (), num_measurements=2)
  params = _init(energy, b)
  params["global"]["weights"]["kernel"] = jnp.zeros_like(params["global"]["weights"]["kernel"])
  params["local_net"]["head"] = {"kernel": jnp.asarray(logits), "bias": jnp.zeros(l)}
  return energy, params, jnp.eye(b, dtype=jnp.float32)


def _trap(num_labels=3, batch=2):
  """Separable E = Σ_i [y_i − 0.2 softplus(40 y_i − 30)] (ℓ = −1, C1 = 40 I, c1 = −30).

  dE/dy_i = 1 − 8 σ(40 y_i − 30) > 0 on [0, 0.7], so GBI from 0.5 descends to the
  local minimum y = 0 (E ≈ 0), while the vertex y = 1 has E = L (1 − 0.2 softplus(10))
  ≈ −L: every example is a search error when the gold is all ones.
  """
  energy = SPENEnergy(num_labels, (), num_measurements=num_labels)
  params = _init(energy, 1)
  params["local_net"]["head"] = {
    "kernel": jnp.zeros((1, num_labels)),
    "bias": -jnp.ones(num_labels),
  }
  params["global"]["measurements"] = {
    "kernel": 40.0 * jnp.eye(num_labels),
    "bias": jnp.full((num_labels,), -30.0),
  }
  params["global"]["weights"]["kernel"] = jnp.full((num_labels, 1), -0.2)
  return energy, params, jnp.zeros((batch, 1)), jnp.ones((batch, num_labels))


# Jitted (the energy module, config and init static): eager while loops are slow.
_search_statistics = jax.jit(
  ssvm_lib.search_statistics, static_argnums=(0, 4), static_argnames=("init",)
)
_infer = jax.jit(ssvm_lib.infer, static_argnums=(0, 3), static_argnames=("init",))


def _stats(*args, **kwargs):
  return {k: float(v) for k, v in _search_statistics(*args, **kwargs).items()}


class SearchStatisticsTest(absltest.TestCase):
  def test_gbi_reaches_gold_minimizer_no_search_error(self):
    logits = [[3.0, -2.0, 1.0, -4.0], [-1.0, 2.5, -3.0, 0.5], [2.0, 2.0, -2.0, -2.0]]
    energy, params, x = _linear(logits)
    gold = (np.asarray(logits) > 0).astype(np.float32)
    result = _infer(energy, params, x, PROJECTED)
    np.testing.assert_array_equal(result.y, gold)  # the premise: GBI lands on the gold
    stats = _stats(energy, params, x, gold, PROJECTED)
    self.assertEqual(set(stats), set(KEYS + EXACT_KEYS))
    self.assertEqual(stats["search_error"], 0.0)
    self.assertEqual(stats["search_error_rounded"], 0.0)
    self.assertEqual(stats["energy_gap_mean"], 0.0)
    self.assertEqual(stats["gbi_converged_fraction"], 1.0)
    self.assertEqual(stats["exact_search_error"], 0.0)
    self.assertEqual(stats["exact_gap_mean"], 0.0)

  def test_gbi_beats_a_non_minimal_gold_no_search_error(self):
    # Gold is the worst vertex; GBI finds the minimizer, whose energy is lower.
    logits = [[3.0, -2.0, 1.0, -4.0], [-1.0, 2.5, -3.0, 0.5], [2.0, 2.0, -2.0, -2.0]]
    energy, params, x = _linear(logits)
    gold = (np.asarray(logits) < 0).astype(np.float32)
    stats = _stats(energy, params, x, gold, PROJECTED)
    self.assertEqual(stats["search_error"], 0.0)
    self.assertEqual(stats["search_error_rounded"], 0.0)
    # E(ŷ) − E(gold) = −Σ|ℓ| per example.
    np.testing.assert_allclose(stats["energy_gap_mean"], -(10.0 + 7.0 + 8.0) / 3, rtol=1e-6)

  def test_gbi_stuck_in_local_minimum_is_search_error(self):
    energy, params, x, gold = _trap()
    config = GBIConfig(parametrization=Mirror(), max_steps=100)
    stats = _stats(energy, params, x, gold, config)
    self.assertEqual(stats["search_error"], 1.0)
    self.assertEqual(stats["search_error_rounded"], 1.0)
    # E(ŷ) − E(gold) ≈ 0 − (−3): GBI ended at the local minimum y ≈ 0, not near gold.
    self.assertGreater(stats["energy_gap_mean"], 2.5)
    # The gold is the exact minimizer here, so the exact statistics agree.
    self.assertEqual(stats["exact_search_error"], 1.0)
    np.testing.assert_allclose(stats["exact_gap_mean"], stats["energy_gap_mean"], atol=0.05)

  def test_steps_match_infer_and_are_bounded(self):
    energy = SPENEnergy(6, (8,), num_measurements=4)
    rs = np.random.RandomState(0)
    x = jnp.asarray(rs.randn(16, 5), jnp.float32)
    y = jnp.asarray(rs.rand(16, 6) < 0.3, jnp.float32)
    params = _init(energy, 5, fill=lambda shape: rs.randn(*shape))
    # A cap that binds for some examples, early stopping and the 'local' start.
    for config, init in ((GBIConfig(max_steps=12, stop_fraction=0.5), "local"),):
      result = _infer(energy, params, x, config, init=init)
      stats = _stats(energy, params, x, y, config, init=init)
      steps = np.asarray(result.steps)
      np.testing.assert_allclose(stats["gbi_steps_mean"], steps.mean(), rtol=1e-6)
      self.assertEqual(stats["gbi_steps_max"], steps.max())
      self.assertEqual(stats["gbi_converged_fraction"], np.mean(result.converged))
      self.assertGreaterEqual(steps.min(), 1)
      self.assertLessEqual(steps.max(), config.max_steps)
      self.assertLessEqual(stats["gbi_steps_mean"], stats["gbi_steps_max"])
      for k in ("gbi_converged_fraction", "search_error", "search_error_rounded"):
        self.assertTrue(0.0 <= stats[k] <= 1.0, (k, stats[k]))

  def test_jit(self):
    # `_stats` jits with the config static; here the config is a traced pytree argument.
    energy, params, x, gold = _trap()
    config = GBIConfig(parametrization=Mirror(), max_steps=100)
    static = _stats(energy, params, x, gold, config)
    as_arg = jax.jit(functools.partial(ssvm_lib.search_statistics, energy))
    out = {k: float(v) for k, v in as_arg(params, x, gold, config).items()}
    self.assertEqual(set(out), set(KEYS + EXACT_KEYS))
    for k in KEYS + EXACT_KEYS:
      np.testing.assert_allclose(out[k], static[k], rtol=1e-5, err_msg=k)
    self.assertEqual(out["search_error"], 1.0)

  def test_unknown_init(self):
    energy, params, x, gold = _trap()
    with self.assertRaisesRegex(ValueError, "unknown init"):
      ssvm_lib.search_statistics(energy, params, x, gold, PROJECTED, init="zeros")


if __name__ == "__main__":
  absltest.main()
