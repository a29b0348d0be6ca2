"""Tests of the differentiable task scores (energynets/objectives/scores.py; `soft_f1` is
`energynets.metrics.soft_f1`).

Oracles: `energynets.metrics.example_f1` (the reported metric) on binary inputs,
closed forms on soft inputs, and float64 central finite differences of the gradient.
"""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from energynets import metrics
from energynets.objectives import scores


class SoftF1Test(parameterized.TestCase):
  @parameterized.named_parameters(
    ("both_empty", [0, 0, 0, 0], [0, 0, 0, 0], 1.0),
    ("empty_gold", [0, 0, 0, 0], [0, 1, 0, 0], 0.0),
    ("empty_prediction", [1, 0, 1, 0], [0, 0, 0, 0], 0.0),
    ("exact", [1, 0, 1, 0], [1, 0, 1, 0], 1.0),
    ("partial", [1, 1, 0, 0], [0, 1, 1, 1], 2 * 1 / 5),
  )
  def test_equals_example_f1_on_binary_rows(self, gold, prediction, expected):
    y = np.asarray([gold], np.float32)
    p = np.asarray([prediction], np.float32)
    value = scores.soft_f1(jnp.asarray(p), jnp.asarray(y))
    self.assertEqual(value.shape, (1,))
    np.testing.assert_allclose(value, [expected], rtol=1e-6)
    self.assertAlmostEqual(float(value[0]), metrics.example_f1(y, p), places=6)

  def test_equals_example_f1_on_random_binary_batches_with_empty_rows(self):
    rs = np.random.RandomState(0)
    y = (rs.uniform(size=(64, 7)) < 0.3).astype(np.float32)
    p = (rs.uniform(size=(64, 7)) < 0.3).astype(np.float32)
    y[:4], p[:2] = 0.0, 0.0  # empty/empty, empty/empty, empty gold twice
    p[8:10] = 0.0  # empty predictions against (mostly) non-empty gold
    per_example = np.asarray(scores.soft_f1(jnp.asarray(p), jnp.asarray(y)))
    reference = [metrics.example_f1(y[i : i + 1], p[i : i + 1]) for i in range(len(y))]
    np.testing.assert_allclose(per_example, reference, rtol=1e-6)
    self.assertAlmostEqual(float(per_example.mean()), metrics.example_f1(y, p), places=6)

  def test_soft_closed_form_and_every_non_batch_axis(self):
    y_soft = jnp.array([[0.2, 0.9, 0.5]])
    y = jnp.array([[0.0, 1.0, 1.0]])
    np.testing.assert_allclose(scores.soft_f1(y_soft, y), [2 * 1.4 / (1.6 + 2.0)], rtol=1e-6)
    rs = np.random.RandomState(1)
    soft = jnp.asarray(rs.uniform(size=(3, 4, 5)), jnp.float32)
    gold = jnp.asarray(rs.uniform(size=(3, 4, 5)) < 0.5, jnp.float32)
    np.testing.assert_allclose(
      scores.soft_f1(soft, gold),
      scores.soft_f1(soft.reshape(3, 20), gold.reshape(3, 20)),
      rtol=1e-6,
    )

  def test_gradient_matches_finite_differences_and_is_finite_at_the_empty_point(self):
    with jax.enable_x64(True):
      rs = np.random.RandomState(2)
      y = jnp.asarray(rs.uniform(size=(4, 6)) < 0.5, jnp.float64).at[0].set(0.0)
      y_soft = jnp.asarray(rs.uniform(0.05, 0.95, size=(4, 6)))
      total = jax.jit(lambda v: jnp.sum(scores.soft_f1(v, y) * jnp.arange(1.0, 5.0)))
      grad = jax.grad(total)(y_soft)
      direction = jnp.asarray(rs.randn(4, 6))
      eps = 1e-6
      fd = (total(y_soft + eps * direction) - total(y_soft - eps * direction)) / (2 * eps)
      np.testing.assert_allclose(float(jnp.vdot(grad, direction)), float(fd), rtol=1e-7)
      # Empty gold with a non-empty prediction: score 0, gradient 0 (no 1/eps blow-up).
      np.testing.assert_array_equal(grad[0], 0.0)
      zeros = jnp.zeros((2, 6))
      at_empty = jax.grad(lambda v: jnp.sum(scores.soft_f1(v, zeros)))(zeros)
      self.assertTrue(np.all(np.isfinite(at_empty)))
      np.testing.assert_array_equal(scores.soft_f1(zeros, zeros), [1.0, 1.0])

  def test_bad_inputs_raise(self):
    with self.assertRaisesRegex(ValueError, "shape mismatch"):
      scores.soft_f1(jnp.zeros((2, 3)), jnp.zeros((2, 4)))
    with self.assertRaisesRegex(ValueError, "eps"):
      scores.soft_f1(jnp.zeros((2, 3)), jnp.zeros((2, 3)), eps=-1.0)

  def test_one_soft_f1_whose_eps_gives_each_form_bit_for_bit(self):
    self.assertIs(scores.soft_f1, metrics.soft_f1)
    rs = np.random.RandomState(3)
    y_soft = jnp.asarray(rs.uniform(size=(5, 4)), jnp.float32)
    y = jnp.asarray(rs.uniform(size=(5, 4)) < 0.4, jnp.float32).at[0].set(0.0)
    y_soft = y_soft.at[0].set(0.0)
    inter, total = jnp.sum(y_soft * y, axis=1), jnp.sum(y_soft, axis=1) + jnp.sum(y, axis=1)
    exact = jnp.where(total <= 0, 1.0, 2.0 * inter / jnp.where(total <= 0, 1.0, total))
    np.testing.assert_array_equal(scores.soft_f1(y_soft, y), exact)
    eps = 1e-7
    np.testing.assert_array_equal(
      metrics.soft_f1(y_soft, y, eps=eps),
      (2.0 * jnp.sum(y * y_soft, axis=-1) + eps)
      / (jnp.sum(y, axis=-1) + jnp.sum(y_soft, axis=-1) + eps),
    )


if __name__ == "__main__":
  absltest.main()
