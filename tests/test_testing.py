"""The shared finite-difference oracle (energynets/testing.py) can pass and can fail."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
import optax

from energynets import testing
from energynets.nets import MLP
from energynets.objectives import local_bce


class DirectionalDerivativesTest(absltest.TestCase):
  def test_agrees_with_the_true_gradient_and_exposes_a_wrong_one(self):
    with jax.enable_x64(True):
      params = {"a": jnp.arange(3.0), "b": jnp.ones((2, 2))}
      f = lambda p: jnp.sum(p["a"] ** 3) + jnp.sum(jnp.sin(p["b"]))
      analytic, numeric = testing.directional_derivatives(f, jax.grad(f), params, seed=0)
      np.testing.assert_allclose(analytic, numeric, rtol=1e-8)
      wrong = lambda p: jax.tree.map(lambda g: 2.0 * g, jax.grad(f)(p))
      analytic, numeric = testing.directional_derivatives(f, wrong, params, seed=0)
      self.assertGreater(abs(analytic - numeric), 1e-3)


class EnergyDerivativesTest(absltest.TestCase):
  def test_passes_a_per_example_energy_and_exposes_batch_coupling(self):
    y = np.random.RandomState(0).uniform(size=(3, 4))
    with jax.enable_x64(True):
      good = testing.energy_derivatives(lambda v: jnp.sum(jnp.cosh(v) ** 2, -1), y, seed=1)
      np.testing.assert_allclose(good.analytic, good.finite_difference, rtol=1e-7)
      np.testing.assert_array_equal(good.grad_other[0], good.grad_at_y[0])
      np.testing.assert_allclose(good.hvp, good.hvp_finite_difference, rtol=1e-6)
      # Batch statistics couple the examples: example 0's gradient sees the others.
      coupled = testing.energy_derivatives(lambda v: jnp.sum((v - v.mean(0)) ** 2, -1), y, seed=1)
      self.assertGreater(np.abs(coupled.grad_other[0] - coupled.grad_at_y[0]).max(), 1e-3)


class FitOneBatchTest(absltest.TestCase):
  def test_runs_the_objective_and_reports_each_loss(self):
    rs = np.random.RandomState(0)
    batch = {
      "x": rs.randn(8, 3).astype(np.float32),
      "y": (rs.uniform(size=(8, 2)) < 0.5).astype(np.float32),
    }
    state, losses, metrics = testing.fit_one_batch(local_bce(MLP((), 2), optax.sgd(0.5)), batch, 6)
    self.assertLen(losses, 6)
    self.assertLess(losses[-1], losses[0])
    self.assertEqual(float(metrics["loss"]), losses[-1])
    self.assertIn("net", state)


if __name__ == "__main__":
  absltest.main()
