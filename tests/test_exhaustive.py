"""Tests of exact inference by enumeration (energynets/inference/exhaustive.py) and its
use by the SSVM (`loss_aug_solver` / `predict_solver=ExhaustiveSolver()`).

Oracles: `itertools.product` for the enumeration order; a numpy brute force over
{0, 1}^L that evaluates the energy one labeling at a time through the ordinary batched
`energy_from_encoding` (so the table formula and the chunked scan are both checked
against the plain energy); `task_loss` for the affine Δ table; GBI's own output for the
exact search error (an energy's exact minimum can never be above GBI's rounded output).
"""

import itertools

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from energynets.data.synthetic import block_exclusivity
from energynets.energies import FieldOfExperts
from energynets.energies import SPENEnergy
from energynets.energies import protocol
from energynets.inference import GBIConfig
from energynets.inference import exhaustive
from energynets.nets import hardtanh
from energynets.nets import softplus
from energynets.objectives import ssvm as ssvm_lib
from energynets.objectives import task_losses


def _all_labelings(num_labels):
  return np.array(list(itertools.product((0.0, 1.0), repeat=num_labels)), np.float32)


def _random_energy(num_labels, num_conditional, seed=0, activation=hardtanh):
  energy = SPENEnergy(
    num_labels, (5,), num_measurements=3, activation=activation, num_conditional=num_conditional
  )
  x = jnp.asarray(np.random.RandomState(seed).randn(6, 7), jnp.float32)
  model = protocol.as_energy(energy)
  params = model.init_params(jax.random.key(seed), x, None)
  rs = np.random.RandomState(seed + 1)
  # Larger weights than the initialization, so that the global term matters.
  params = jax.tree.map(lambda a: jnp.asarray(rs.randn(*a.shape), a.dtype), params)
  return energy, model, params, x


def _brute_force(objective, batch, num_labels):
  """`[B]` argmin indices and minima of `objective(y [B, L]) -> [B]`, one labeling at a
  time in itertools order (the first minimum wins)."""
  values = np.stack(
    [
      np.asarray(objective(np.broadcast_to(c, (batch, num_labels))))
      for c in _all_labelings(num_labels)
    ],
    axis=1,
  )
  return values.argmin(axis=1), values.min(axis=1)


class LabelingsTest(absltest.TestCase):
  def test_order_matches_itertools(self):
    for num_labels in (1, 3, 5):
      np.testing.assert_array_equal(
        exhaustive.labelings(0, 2**num_labels, num_labels), _all_labelings(num_labels)
      )
    np.testing.assert_array_equal(exhaustive.labelings(4, 3, 4), _all_labelings(4)[4:7])

  def test_bad_sizes(self):
    y = jnp.zeros((2, exhaustive.MAX_LABELS + 1))
    with self.assertRaisesRegex(ValueError, "2\\^L labelings"):
      exhaustive.exhaustive_minimize(lambda p, i, c: jnp.zeros((2, c.shape[0])), None, None, y)
    with self.assertRaisesRegex(ValueError, "power of two"):
      exhaustive.exhaustive_minimize(
        lambda p, i, c: jnp.zeros((2, c.shape[0])), None, None, jnp.zeros((2, 3)), chunk_size=3
      )
    with self.assertRaisesRegex(ValueError, "\\[B, L\\]"):
      exhaustive.exhaustive_minimize(
        lambda p, i, c: jnp.zeros((2, c.shape[0])), None, None, jnp.zeros((2, 3, 1))
      )
    with self.assertRaisesRegex(ValueError, "table must be"):
      exhaustive.exhaustive_minimize(
        lambda p, i, c: jnp.zeros((c.shape[0],)), None, None, jnp.zeros((2, 3))
      )


class ExhaustiveMinimizeTest(parameterized.TestCase):
  @parameterized.product(
    num_conditional=(0, 2), chunk_size=(2, 8, 4096), table=("candidate", "pairwise")
  )
  def test_matches_brute_force(self, num_conditional, chunk_size, table):
    num_labels = 5
    energy, model, params, x = _random_energy(num_labels, num_conditional)
    enc = model.encode(params, x)
    table_fn = (
      model.candidate_energy if table == "candidate" else exhaustive.pairwise_table(model.energy)
    )
    y_like = jnp.zeros((x.shape[0], num_labels))
    result = jax.jit(
      lambda p, e: exhaustive.exhaustive_minimize(table_fn, p, e, y_like, chunk_size=chunk_size)
    )(params, enc)
    index, minimum = _brute_force(
      lambda y: model.energy(params, enc, jnp.asarray(y)), x.shape[0], num_labels
    )
    np.testing.assert_array_equal(result.y, _all_labelings(num_labels)[index])
    np.testing.assert_allclose(result.objective, minimum, rtol=1e-5, atol=1e-5)
    # The minimum is attained at y: the plain energy there equals the reported value.
    np.testing.assert_allclose(
      model.energy(params, enc, result.y), result.objective, rtol=1e-5, atol=1e-5
    )

  def test_candidate_energies_equal_the_energy(self):
    energy, model, params, x = _random_energy(4, 3, seed=2, activation=softplus)
    enc = model.encode(params, x)
    candidates = jnp.asarray(_all_labelings(4))
    table = model.candidate_energy(params, enc, candidates)
    self.assertEqual(table.shape, (x.shape[0], 16))
    for k, c in enumerate(_all_labelings(4)):
      np.testing.assert_allclose(
        table[:, k],
        model.energy(params, enc, jnp.broadcast_to(c, (x.shape[0], 4))),
        rtol=1e-5,
        atol=1e-5,
      )
    with self.assertRaisesRegex(ValueError, "candidates must be"):
      model.candidate_energy(params, enc, candidates[:, :3])

  def test_ties_go_to_the_lowest_index_and_nan_is_reported(self):
    y_like = jnp.zeros((3, 4))
    flat = exhaustive.exhaustive_minimize(
      lambda p, i, c: jnp.zeros((3, c.shape[0])), None, None, y_like, chunk_size=4
    )
    np.testing.assert_array_equal(flat.y, np.zeros((3, 4)))

    def table(p, i, c):  # example 1 has a NaN at labeling 9 (in the third chunk)
      values = jnp.sum(c, axis=1)[None, :] * jnp.ones((3, 1))
      return values.at[1].set(
        jnp.where(c @ jnp.array([8.0, 4.0, 2.0, 1.0]) == 9.0, jnp.nan, values[1])
      )

    result = exhaustive.exhaustive_minimize(table, None, None, y_like, chunk_size=4)
    np.testing.assert_array_equal(np.isnan(result.objective), [False, True, False])
    np.testing.assert_array_equal(np.asarray(result.objective)[[0, 2]], [0.0, 0.0])

  def test_no_gradient_flows(self):
    energy, model, params, x = _random_energy(3, 0)

    def total(p):
      enc = model.encode(p, x)
      return jnp.sum(
        exhaustive.exhaustive_minimize(
          model.candidate_energy, p, enc, jnp.zeros((x.shape[0], 3))
        ).objective
      )

    grads = jax.grad(total)(params)
    for g in jax.tree.leaves(grads):
      np.testing.assert_array_equal(g, np.zeros_like(g))


class SSVMExhaustiveTest(parameterized.TestCase):
  @parameterized.parameters(task_losses.Squared(), task_losses.L1(), task_losses.Log())
  def test_task_loss_table(self, surrogate):
    rs = np.random.RandomState(0)
    candidates = jnp.asarray(_all_labelings(4))
    for y in (rs.rand(3, 4) < 0.5, rs.rand(3, 4)):  # binary and soft gold labels
      y = jnp.asarray(y, jnp.float32)
      table = task_losses.task_loss_table(candidates, y, surrogate)
      expected = np.stack(
        [task_losses.task_loss(jnp.broadcast_to(c, y.shape), y, surrogate) for c in candidates],
        axis=1,
      )
      np.testing.assert_allclose(table, expected, rtol=1e-5, atol=1e-5)

  @parameterized.parameters(task_losses.Squared(), task_losses.L1())
  def test_loss_augmented_matches_brute_force(self, surrogate):
    energy, model, params, x = _random_energy(5, 1, seed=3)
    y = jnp.asarray(np.random.RandomState(4).rand(x.shape[0], 5) < 0.4, jnp.float32)
    y_hat = ssvm_lib.loss_augmented_inference(
      energy, params, x, y, GBIConfig(), surrogate=surrogate, solver=ssvm_lib.ExhaustiveSolver()
    )
    enc = model.encode(params, x)
    index, _ = _brute_force(
      lambda c: (
        model.energy(params, enc, jnp.asarray(c))
        - task_losses.task_loss(jnp.asarray(c), y, surrogate)
      ),
      x.shape[0],
      5,
    )
    np.testing.assert_array_equal(y_hat, _all_labelings(5)[index])

  def test_exact_search_statistics(self):
    energy, model, params, x = _random_energy(5, 0, seed=5)
    y = jnp.asarray(np.random.RandomState(6).rand(x.shape[0], 5) < 0.4, jnp.float32)
    stats = ssvm_lib.search_statistics(energy, params, x, y, GBIConfig(max_steps=30))
    e_min = ssvm_lib.exact_infer(energy, params, x).objective
    result = ssvm_lib.infer(energy, params, x, GBIConfig(max_steps=30))
    enc = model.encode(params, x)
    e_rounded = np.asarray(model.energy(params, enc, (result.y >= 0.5).astype(jnp.float32)))
    self.assertTrue(np.all(e_rounded >= np.asarray(e_min) - 1e-5))
    np.testing.assert_allclose(
      stats["exact_gap_mean"], np.mean(e_rounded - e_min), rtol=1e-5, atol=1e-6
    )
    missed = e_rounded > np.asarray(e_min) + 1e-4 * np.maximum(1.0, np.abs(e_min))
    self.assertAlmostEqual(float(stats["exact_search_error"]), missed.mean(), places=6)
    # Not reported where enumeration is impossible.
    big = SPENEnergy(exhaustive.MAX_LABELS + 1, (), num_measurements=2)
    xb = jnp.ones((2, 3))
    pb = protocol.as_energy(big).init_params(jax.random.key(0), xb, None)
    stats = ssvm_lib.search_statistics(
      big, pb, xb, jnp.zeros((2, big.num_labels)), GBIConfig(max_steps=3)
    )
    self.assertNotIn("exact_search_error", stats)

  @pytest.mark.optimized_xla  # exhaustive search over 2^L labelings: run time dominates
  def test_training_with_exact_inference(self):
    """The discrete SSVM on the block-exclusivity task: the hinge falls and exact
    prediction beats the untrained energy's on the training batch."""
    x, y = block_exclusivity(128, seed=0)
    batch = {"x": jnp.asarray(x, jnp.float32), "y": jnp.asarray(y, jnp.float32)}
    energy = SPENEnergy(y.shape[1], (), num_measurements=4, activation=hardtanh)
    obj = ssvm_lib.ssvm_hinge(
      energy,
      optax.adam(3e-2),
      options=ssvm_lib.SSVMOptions(
        loss_aug_gbi=GBIConfig(num_steps=2),
        predict_gbi=GBIConfig(max_steps=2),
        loss_aug_solver=ssvm_lib.ExhaustiveSolver(),
        predict_solver=ssvm_lib.ExhaustiveSolver(),
        l2=1e-4,
      ),
    )
    state = obj.init(jax.random.key(0), batch)
    update = jax.jit(obj.update)
    _, first = update(state, batch, jax.random.key(1))
    hamming = lambda s: float(jnp.mean(jnp.abs(obj.predict(s, batch["x"]) - batch["y"])))
    before = hamming(state)
    for i in range(150):
      state, metrics = update(state, batch, jax.random.key(i))
    self.assertLess(float(metrics["hinge"]), 0.5 * float(first["hinge"]))
    prediction = np.asarray(obj.predict(state, batch["x"]))
    self.assertTrue(set(np.unique(prediction)) <= {0.0, 1.0})
    self.assertLess(hamming(state), 0.5 * before)

  def test_solver_errors(self):
    energy = SPENEnergy(3, (), num_measurements=2)
    with self.assertRaisesRegex(TypeError, "predict_solver is a value"):
      ssvm_lib.ssvm_hinge(
        energy,
        optax.sgd(1.0),
        options=ssvm_lib.SSVMOptions(
          loss_aug_gbi=GBIConfig(), predict_gbi=GBIConfig(), predict_solver="exact"
        ),
      )
    with self.assertRaisesRegex(ValueError, "needs the Box domain"):
      ssvm_lib.ssvm_hinge(
        FieldOfExperts(num_filters=2, filter_size=3),
        optax.sgd(1.0),
        options=ssvm_lib.SSVMOptions(
          loss_aug_gbi=GBIConfig(),
          predict_gbi=GBIConfig(),
          loss_aug_solver=ssvm_lib.ExhaustiveSolver(),
        ),
      )


if __name__ == "__main__":
  absltest.main()
