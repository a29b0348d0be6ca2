"""energynets/objectives/task_losses.py: the surrogates' closed forms, finite gradients
at the clipped faces, and the one-line error for an unknown name."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from energynets.objectives import task_losses


class SurrogateTest(absltest.TestCase):

  def test_closed_forms(self):
    y_hat = jnp.array([[0.2, 0.9, 0.5], [1.0, 0.0, 0.3]])
    y = jnp.array([[0.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    np.testing.assert_allclose(task_losses.task_loss(y_hat, y, "squared"),
                               [0.04 + 0.01 + 0.25, 0 + 1 + 0.09], rtol=1e-6)
    np.testing.assert_allclose(task_losses.task_loss(y_hat, y, "l1"), [0.8, 1.3], rtol=1e-6)
    eps = 1e-3
    log = task_losses.task_loss(y_hat, y, "log", eps)
    np.testing.assert_allclose(
        log, [-np.log(0.8) - np.log(0.9) - np.log(0.5),
              -np.log(1 - eps) - np.log(eps) - np.log(0.7)], rtol=1e-5)
    grad = jax.grad(lambda v: jnp.sum(task_losses.task_loss(v, y, "log", eps)))(y_hat)
    self.assertTrue(np.all(np.isfinite(grad)))
    with self.assertRaisesRegex(ValueError, "surrogate"):
      task_losses.task_loss(y_hat, y, "hamming")


if __name__ == "__main__":
  absltest.main()
