"""energynets/objectives/task_losses.py: the surrogates' closed forms, finite gradients
at the clipped faces, a surrogate of one's own, and the one-line error for a name."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from energynets.objectives import task_losses


class SurrogateTest(absltest.TestCase):
  def test_closed_forms(self):
    y_hat = jnp.array([[0.2, 0.9, 0.5], [1.0, 0.0, 0.3]])
    y = jnp.array([[0.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    np.testing.assert_allclose(
      task_losses.task_loss(y_hat, y, task_losses.Squared()),
      [0.04 + 0.01 + 0.25, 0 + 1 + 0.09],
      rtol=1e-6,
    )
    np.testing.assert_allclose(
      task_losses.task_loss(y_hat, y, task_losses.L1()), [0.8, 1.3], rtol=1e-6
    )
    eps = 1e-3
    log = task_losses.task_loss(y_hat, y, task_losses.Log(eps))
    np.testing.assert_allclose(
      log,
      [-np.log(0.8) - np.log(0.9) - np.log(0.5), -np.log(1 - eps) - np.log(eps) - np.log(0.7)],
      rtol=1e-5,
    )
    grad = jax.grad(lambda v: jnp.sum(task_losses.task_loss(v, y, task_losses.Log(eps))))(y_hat)
    self.assertTrue(np.all(np.isfinite(grad)))
    self.assertEqual(task_losses.Log(), task_losses.Log(task_losses.DEFAULT_SURROGATE_EPS))
    self.assertEqual(hash(task_losses.L1()), hash(task_losses.L1()))

  def test_values_match_the_formulas_bit_for_bit(self):
    rs = np.random.RandomState(0)
    y_hat = jnp.asarray(rs.uniform(size=(4, 3, 5)), jnp.float32)
    y = jnp.asarray(rs.uniform(size=(4, 3, 5)) < 0.5, jnp.float32)
    eps = 1e-3
    p = jnp.clip(y_hat, eps, 1.0 - eps)
    formulas = {
      task_losses.Squared(): jnp.square(y_hat - y),
      task_losses.L1(): jnp.abs(y_hat - y),
      task_losses.Log(eps): -(y * jnp.log(p) + (1.0 - y) * jnp.log1p(-p)),
    }
    for surrogate, terms in formulas.items():
      np.testing.assert_array_equal(surrogate(y_hat, y), terms)
      np.testing.assert_array_equal(
        task_losses.task_loss(y_hat, y, surrogate), jnp.sum(terms, axis=(1, 2))
      )

  def test_a_surrogate_of_ones_own_plugs_in(self):
    cubed = lambda y_hat, y: jnp.abs(y_hat - y) ** 3
    y_hat = jnp.array([[0.5, 0.0]])
    y = jnp.array([[1.0, 1.0]])
    np.testing.assert_allclose(task_losses.task_loss(y_hat, y, cubed), [0.125 + 1.0])
    candidates = jnp.array([[0.0, 0.0], [1.0, 0.0]])
    np.testing.assert_allclose(task_losses.task_loss_table(candidates, y, cubed), [[2.0, 1.0]])

  def test_a_name_is_refused(self):
    y = jnp.zeros((1, 2))
    with self.assertRaisesRegex(TypeError, "surrogate"):
      task_losses.task_loss(y, y, "hamming")


if __name__ == "__main__":
  absltest.main()
