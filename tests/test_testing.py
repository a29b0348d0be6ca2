"""The shared finite-difference oracle (energynets/testing.py) can pass and can fail."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from energynets import testing


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


if __name__ == "__main__":
  absltest.main()
