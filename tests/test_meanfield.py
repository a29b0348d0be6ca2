"""Tests of mean-field inference (energynets/inference/meanfield.py) and the DMF objective.

Oracles: σ(u) for the independent model, the fixed-point equation μ = σ(u + Wμ),
brute-force enumeration of 2^L assignments (exact marginals, log Z, and the reduction
of general pairwise tables), the variational bound F(μ) ≥ −log Z, float64 central
finite differences (gradients through the unroll), and the clamped MLP (the DMF at
initialization and its unchanged parameters).
"""

import itertools

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
import optax

from energynets.data.synthetic import block_exclusivity
from energynets.inference import meanfield
from energynets.nets import MLP
from energynets.objectives import dmf as dmf_lib
from energynets.objectives import local_bce
from energynets.objectives import scores

mean_field = jax.jit(meanfield.mean_field, static_argnames=("num_iters", "damping", "sequential"))
mean_field_logits = jax.jit(
  meanfield.mean_field_logits, static_argnames=("num_iters", "damping", "sequential")
)
exact_marginals = jax.jit(meanfield.exact_marginals)
exact_log_partition = jax.jit(meanfield.exact_log_partition)
free_energy = jax.jit(meanfield.mean_field_free_energy)


def random_crf(seed, batch, labels, scale, dtype=jnp.float32):
  """Unaries `[B, L]` and a symmetric zero-diagonal coupling with ‖W‖₂ = 4·scale."""
  rs = np.random.RandomState(seed)
  unary = rs.randn(batch, labels)
  w = np.asarray(meanfield.symmetrize_coupling(jnp.asarray(rs.randn(batch, labels, labels))))
  w = w / np.abs(np.linalg.eigvalsh(w)).max(axis=-1)[:, None, None] * 4.0 * scale
  return jnp.asarray(unary, dtype), jnp.asarray(w, dtype)


class MeanFieldTest(parameterized.TestCase):
  @parameterized.product(sequential=(False, True), num_iters=(1, 5))
  def test_zero_coupling_gives_sigmoid_of_unaries_exactly(self, sequential, num_iters):
    unary, _ = random_crf(0, 3, 6, 0.1)
    mu = mean_field(unary, jnp.zeros((3, 6, 6)), num_iters=num_iters, sequential=sequential)
    np.testing.assert_array_equal(np.asarray(mu), np.asarray(jax.nn.sigmoid(unary)))
    # A coupling shared by the batch ([L, L]) broadcasts.
    shared = mean_field(unary, jnp.zeros((6, 6)), num_iters=num_iters, sequential=sequential)
    np.testing.assert_array_equal(np.asarray(shared), np.asarray(mu))

  def test_zero_iterations_return_the_uniform_start(self):
    unary, w = random_crf(0, 2, 4, 0.2)
    np.testing.assert_array_equal(np.asarray(mean_field(unary, w, num_iters=0)), 0.5)

  @parameterized.product(sequential=(False, True), damping=(0.0, 0.4))
  def test_iterates_reach_the_fixed_point_for_small_couplings(self, sequential, damping):
    unary, w = random_crf(1, 4, 7, 0.3)  # ‖W‖₂/4 = 0.3: parallel sweeps contract
    self.assertLess(float(meanfield.contraction_bound(w).max()), 1.0)
    mu = mean_field(unary, w, num_iters=60, damping=damping, sequential=sequential)
    rhs = jax.nn.sigmoid(unary + jnp.einsum("bij,bj->bi", w, mu))
    np.testing.assert_allclose(np.asarray(mu), np.asarray(rhs), atol=1e-6)
    reference = mean_field(unary, w, num_iters=60)  # unique fixed point: same for all
    np.testing.assert_allclose(np.asarray(mu), np.asarray(reference), atol=1e-6)

  def test_error_to_exact_marginals_is_small_for_weak_couplings_and_grows(self):
    with jax.enable_x64(True):
      errors = []
      for scale in (0.01, 0.1, 0.5, 1.5):
        unary, w = random_crf(2, 8, 5, scale, jnp.float64)
        # Sequential sweeps converge for any coupling (monotone in the free energy).
        mu = mean_field(unary, w, num_iters=200, sequential=True)
        errors.append(float(jnp.abs(mu - exact_marginals(unary, w)).max()))
      self.assertLess(errors[0], 1e-3)
      self.assertEqual(errors, sorted(errors), msg=str(errors))
      self.assertGreater(errors[-1], 10 * errors[0])

  @parameterized.parameters(4, 6)
  def test_exact_marginals_match_enumeration(self, labels):
    unary, w = random_crf(3, 2, labels, 0.8, jnp.float32)
    ys = np.array(list(itertools.product((0.0, 1.0), repeat=labels)))
    for b in range(2):
      u, wb = np.asarray(unary[b], np.float64), np.asarray(w[b], np.float64)
      scores = ys @ u + 0.5 * np.einsum("si,ij,sj->s", ys, wb, ys)
      p = np.exp(scores - scores.max())
      p /= p.sum()
      np.testing.assert_allclose(
        np.asarray(exact_marginals(unary, w)[b]), p @ ys, rtol=1e-5, atol=1e-6
      )
      np.testing.assert_allclose(
        float(exact_log_partition(unary, w)[b]),
        scores.max() + np.log(np.exp(scores - scores.max()).sum()),
        rtol=1e-5,
      )

  def test_general_pairwise_tables_reduce_to_unaries_and_a_coupling(self):
    with jax.enable_x64(True):
      rs = np.random.RandomState(4)
      labels = 4
      tables = rs.randn(2, labels, labels, 2, 2)
      unary_tables = rs.randn(2, labels, 2)
      unary, w = meanfield.reduce_pairwise_tables(jnp.asarray(tables), jnp.asarray(unary_tables))
      np.testing.assert_allclose(np.asarray(w), np.swapaxes(np.asarray(w), -1, -2))
      np.testing.assert_array_equal(np.diagonal(np.asarray(w), axis1=-2, axis2=-1), 0.0)
      ys = np.array(list(itertools.product((0, 1), repeat=labels)))
      for b in range(2):
        direct = np.array(
          [
            sum(tables[b, i, j, y[i], y[j]] for i in range(labels) for j in range(labels))
            + sum(unary_tables[b, i, y[i]] for i in range(labels))
            for y in ys
          ]
        )
        reduced = ys @ np.asarray(unary[b]) + 0.5 * np.einsum(
          "si,ij,sj->s", ys, np.asarray(w[b]), ys
        )
        diff = direct - reduced  # a constant: the distributions are equal
        np.testing.assert_allclose(diff, diff[0], atol=1e-10)

  def test_free_energy_bounds_log_partition_and_sequential_sweeps_decrease_it(self):
    with jax.enable_x64(True):
      unary, w = random_crf(5, 4, 6, 0.8, jnp.float64)
      log_z = exact_log_partition(unary, w)
      values, eta = [], jnp.zeros_like(unary)
      for _ in range(7):  # one sweep at a time from the last field: one compilation
        eta = mean_field_logits(unary, w, num_iters=1, sequential=True, init=eta)
        values.append(free_energy(unary, w, jax.nn.sigmoid(eta)))
      for v in values:
        self.assertTrue(bool(jnp.all(v >= -log_z - 1e-10)))
      for before, after in zip(values, values[1:]):
        self.assertTrue(bool(jnp.all(after <= before + 1e-10)))
      # Without couplings q is the model itself: the bound is tight.
      zero = jnp.zeros_like(w)
      np.testing.assert_allclose(
        np.asarray(free_energy(unary, zero, jax.nn.sigmoid(unary))),
        -np.asarray(exact_log_partition(unary, zero)),
        rtol=1e-12,
      )

  @parameterized.product(sequential=(False, True), damping=(0.0, 0.3))
  def test_gradient_through_the_unroll_matches_finite_differences(self, sequential, damping):
    with jax.enable_x64(True):
      rs = np.random.RandomState(6)
      unary = jnp.asarray(rs.randn(2, 5))
      raw = jnp.asarray(rs.randn(2, 5, 5) * 0.5)
      target = jnp.asarray((rs.rand(2, 5) > 0.5).astype(np.float64))

      def loss(unary, raw):
        eta = meanfield.mean_field_logits(
          unary,
          meanfield.symmetrize_coupling(raw),
          num_iters=5,
          damping=damping,
          sequential=sequential,
        )
        return optax.sigmoid_binary_cross_entropy(eta, target).sum()

      value_and_grad = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
      _, grads = value_and_grad(unary, raw)
      eps = 1e-6
      for argnum, arg in enumerate((unary, raw)):
        d = jnp.asarray(rs.randn(*arg.shape))
        shifted = lambda sign: [
          (unary, raw)[k] + sign * eps * d if k == argnum else (unary, raw)[k] for k in range(2)
        ]
        fd = (value_and_grad(*shifted(1.0))[0] - value_and_grad(*shifted(-1.0))[0]) / (2 * eps)
        analytic = float(jnp.vdot(grads[argnum], d))
        self.assertGreater(abs(analytic), 1e-4)
        np.testing.assert_allclose(analytic, float(fd), rtol=1e-6, atol=1e-9)

  def test_invalid_options_raise(self):
    unary, w = random_crf(0, 1, 3, 0.1)
    with self.assertRaisesRegex(ValueError, "damping"):
      meanfield.mean_field(unary, w, damping=1.0)
    with self.assertRaisesRegex(ValueError, "rank"):
      dmf_lib.deep_mean_field(MLP((), 3), optax.adam(1e-2), rank=-1)
    with self.assertRaisesRegex(TypeError, "features"):
      dmf_lib.deep_mean_field(MLP((), 3), optax.adam(1e-2), features="penultimate")


# --- the DMF objective ----------------------------------------------------------------------

LABELS = 8  # 2 blocks of 4 mutually exclusive labels


def _data(n=256, seed=0):
  x, y = block_exclusivity(n, seed=seed, num_features=12, num_blocks=2, block_size=4)
  return {"x": jnp.asarray(x), "y": jnp.asarray(y)}


def _pretrained_local(data, steps=150):
  """A small `local_bce` MLP trained on the full batch: the DMF's unaries."""
  obj = local_bce(MLP((16,), LABELS), optax.adam(3e-2))
  state = jax.jit(obj.init)(jax.random.key(0), data)
  update = jax.jit(obj.update)
  for step in range(steps):
    state, _ = update(state, data, jax.random.key(step))
  return obj, state


class DMFTest(parameterized.TestCase):
  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.data = _data()
    cls.local, cls.local_state = _pretrained_local(cls.data)

  def _dmf(self, **kw):
    return dmf_lib.deep_mean_field(MLP((16,), LABELS), optax.adam(kw.pop("lr", 3e-2)), **kw)

  @parameterized.parameters(0, 2, None)
  def test_couplings_are_symmetric_zero_diagonal_with_the_documented_count(self, rank):
    net = dmf_lib.PairwiseCouplings(LABELS, rank)
    features = jax.random.normal(jax.random.key(1), (3, 5))
    params = net.init(jax.random.key(2), features)["params"]
    params = jax.tree.map(lambda p: jax.random.normal(jax.random.key(3), p.shape), params)
    w = np.asarray(jax.jit(net.apply)({"params": params}, features))
    self.assertEqual(w.shape, (3, LABELS, LABELS))
    np.testing.assert_allclose(w, np.swapaxes(w, -1, -2), atol=1e-6)
    np.testing.assert_array_equal(np.diagonal(w, axis1=-2, axis2=-1), 0.0)
    stored = sum(p.size for p in jax.tree.leaves(params))
    self.assertEqual(dmf_lib.num_pairwise_params(LABELS, 5, rank)[0], stored)
    if rank != 0:  # data-dependent: examples get different couplings
      self.assertGreater(np.abs(w[0] - w[1]).max(), 1e-3)

  @parameterized.product(rank=(0, 2, None), sequential=(False, True))
  def test_factored_couplings_give_the_dense_mean_field(self, rank, sequential):
    """`LowRankCoupling.matvec` is `W μ` of the formed W (non-symmetric bases with a
    diagonal, so the symmetrization and the diagonal removal are both exercised)."""
    net = dmf_lib.PairwiseCouplings(LABELS, rank)
    features = jax.random.normal(jax.random.key(1), (3, 5))
    params = net.init(jax.random.key(2), features)["params"]
    params = jax.tree.map(lambda p: 0.3 * jax.random.normal(jax.random.key(3), p.shape), params)
    factors = net.apply({"params": params}, features, method="factors")
    self.assertIsInstance(factors, meanfield.LowRankCoupling)
    dense = np.asarray(net.apply({"params": params}, features))
    np.testing.assert_allclose(factors.dense(), dense, rtol=1e-6, atol=1e-6)
    mu = jax.random.uniform(jax.random.key(4), (3, LABELS))
    np.testing.assert_allclose(
      factors.matvec(mu), np.einsum("bij,bj->bi", dense, mu), rtol=1e-5, atol=1e-5
    )
    unary = jax.random.normal(jax.random.key(5), (3, LABELS))
    np.testing.assert_allclose(
      mean_field_logits(unary, factors, num_iters=4, sequential=sequential),
      mean_field_logits(unary, jnp.asarray(dense), num_iters=4, sequential=sequential),
      rtol=1e-5,
      atol=1e-5,
    )

  def test_bibtex_parameter_counts(self):
    # Documented in dmf.py: L = 159 labels, probabilities as features (H = 159).
    self.assertEqual(dmf_lib.num_pairwise_params(159, 159, 4), (127_045, 63_445))
    self.assertEqual(dmf_lib.num_pairwise_params(159, 159, None)[0], 4_044_960)

  def test_init_from_copies_local_params_and_starts_at_the_mlp(self):
    obj = self._dmf()
    state = jax.jit(obj.init_from)(self.local_state, jax.random.key(5), self.data)
    for a, b in zip(
      jax.tree.leaves(state["net"].params), jax.tree.leaves(self.local_state["net"].params)
    ):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    self.assertEqual(jax.tree.leaves(state["net"].opt_state), [])  # clamped: no optimizer
    np.testing.assert_array_equal(  # W = 0 at the start: one sweep gives σ(u) exactly
      np.asarray(jax.jit(obj.predict)(state, self.data["x"])),
      np.asarray(jax.jit(self.local.predict)(self.local_state, self.data["x"])),
    )
    # A fine-tuning stage continues a DMF state: both groups carried, both optimized.
    state["pairwise"] = state["pairwise"]._replace(
      params=jax.tree.map(lambda p: p + 1.0, state["pairwise"].params)
    )
    tuned = jax.jit(self._dmf(train_unary=True).init_from)(state, jax.random.key(6), self.data)
    for group in ("net", "pairwise"):
      for a, b in zip(jax.tree.leaves(tuned[group].params), jax.tree.leaves(state[group].params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
      self.assertNotEmpty(jax.tree.leaves(tuned[group].opt_state))

  @parameterized.parameters(dmf_lib.Probs(), dmf_lib.Logits(), dmf_lib.Hidden(), dmf_lib.RawInput())
  def test_every_feature_choice_starts_at_the_mlp_and_trains(self, features):
    obj = self._dmf(features=features, rank=1)
    state = jax.jit(obj.init_from)(self.local_state, jax.random.key(5), self.data)
    x = self.data["x"][:16]
    np.testing.assert_array_equal(
      np.asarray(jax.jit(obj.predict)(state, x)),
      np.asarray(jax.jit(self.local.predict)(self.local_state, x)),
    )
    _, metrics = jax.jit(obj.update)(state, self.data, jax.random.key(6))
    self.assertTrue(np.isfinite(float(metrics["loss"])))

  @parameterized.parameters(False, True)
  def test_update_moves_only_the_trained_groups(self, train_unary):
    obj = self._dmf(train_unary=train_unary, l2=1e-3)
    state = jax.jit(obj.init_from)(self.local_state, jax.random.key(5), self.data)
    update = jax.jit(obj.update)
    new, metrics = update(state, self.data, jax.random.key(6))
    new, metrics = update(new, self.data, jax.random.key(7))  # bases move from step 2
    self.assertContainsSubset({"loss", "bce", "mean_abs_coupling", "grad_norm"}, metrics)
    self.assertTrue(all(np.isfinite(float(v)) for v in metrics.values()))
    self.assertGreater(float(metrics["mean_abs_coupling"]), 0.0)
    net_moved = any(
      not np.array_equal(np.asarray(a), np.asarray(b))
      for a, b in zip(jax.tree.leaves(new["net"].params), jax.tree.leaves(state["net"].params))
    )
    self.assertEqual(net_moved, train_unary)
    for name, p in new["pairwise"].params.items():
      self.assertFalse(
        np.array_equal(np.asarray(p), np.asarray(state["pairwise"].params[name])), msg=name
      )

  def test_training_lowers_the_loss_below_the_clamped_mlp(self):
    obj = self._dmf(rank=2)
    state = jax.jit(obj.init_from)(self.local_state, jax.random.key(5), self.data)
    update = jax.jit(obj.update)
    losses = []
    for step in range(60):
      state, metrics = update(state, self.data, jax.random.key(100 + step))
      losses.append(float(metrics["bce"]))
    logits = MLP((16,), LABELS).apply({"params": self.local_state["net"].params}, self.data["x"])
    mlp_bce = float(optax.sigmoid_binary_cross_entropy(logits, self.data["y"]).sum(-1).mean())
    self.assertAlmostEqual(losses[0], mlp_bce, delta=1e-3)  # starts at the MLP
    self.assertLess(losses[-1], 0.8 * losses[0], msg=f"{losses[0]} -> {losses[-1]}")
    # Block exclusivity: the learned couplings within a block are mostly repulsive.
    w = dmf_lib.PairwiseCouplings(LABELS, 2).apply(
      {"params": state["pairwise"].params},
      jax.nn.sigmoid(MLP((16,), LABELS).apply({"params": state["net"].params}, self.data["x"])),
    )
    within = np.asarray(w)[:, :4, :4][:, ~np.eye(4, dtype=bool)]
    self.assertLess(float(np.mean(within)), 0.0)

  def test_a_task_score_is_subtracted_from_the_mean_field_bce(self):
    """`score=soft_f1`: the loss is BCE − w·mean soft F1 of σ(η) (an independent numpy
    recomputation from the mean-field logits), and training raises the soft F1."""
    obj = self._dmf(rank=2, score=scores.soft_f1, score_weight=5.0)
    state = jax.jit(obj.init_from)(self.local_state, jax.random.key(5), self.data)
    # The pairwise parameters away from 0, so η is not the unaries.
    state["pairwise"] = state["pairwise"]._replace(
      params=jax.tree.map(
        lambda p: 0.3 * jax.random.normal(jax.random.key(8), p.shape), state["pairwise"].params
      )
    )
    _, logged = jax.jit(obj.update)(state, self.data, jax.random.key(6))
    # η from the parts the mean-field tests check: the unaries, the couplings of σ(u).
    unary = MLP((16,), LABELS).apply({"params": state["net"].params}, self.data["x"])
    coupling = dmf_lib.PairwiseCouplings(LABELS, 2).apply(
      {"params": state["pairwise"].params}, jax.nn.sigmoid(unary)
    )
    eta = np.asarray(mean_field_logits(unary, coupling, num_iters=5), np.float64)
    p, y = 1 / (1 + np.exp(-eta)), np.asarray(self.data["y"], np.float64)
    bce = np.mean(np.sum(np.logaddexp(0, eta) - y * eta, axis=-1))
    denominator = p.sum(-1) + y.sum(-1)
    f1 = np.where(denominator > 0, 2 * (p * y).sum(-1) / np.maximum(denominator, 1e-12), 1.0)
    np.testing.assert_allclose(logged["bce"], bce, rtol=1e-3)
    np.testing.assert_allclose(logged["score"], f1.mean(), rtol=1e-4)
    np.testing.assert_allclose(logged["loss"], bce - 5.0 * f1.mean(), rtol=1e-3)
    soft = lambda s: float(jnp.mean(scores.soft_f1(obj.predict(s, self.data["x"]), self.data["y"])))
    trained = state
    update = jax.jit(obj.update)
    for step in range(40):
      trained, _ = update(trained, self.data, jax.random.key(100 + step))
    self.assertGreater(soft(trained), soft(state) + 0.01)
    with self.assertRaisesRegex(ValueError, "needs a score"):
      self._dmf(score_weight=1.0)
    with self.assertRaisesRegex(ValueError, "must be positive"):
      self._dmf(score=scores.soft_f1)


if __name__ == "__main__":
  absltest.main()
