"""Tests of SPEN SSVM training (energynets/objectives/ssvm.py).

Oracles: closed-form surrogates; brute force over {0,1}^L for loss-augmented inference
with a linear energy (E − Δ is then concave or linear per coordinate, so its minimum
over the box is a vertex); the closed-form entropy-smoothed minimizer σ(ℓ/τ); a margin
constructed to be satisfied; float64 central finite differences of the hinge at a
fixed ŷ; and `jax.grad` of that hinge at the inferred ŷ (the training gradient must
not flow through inference).
"""

import itertools

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
import optax

from energynets import testing
from energynets.data.synthetic import block_exclusivity
from energynets.energies import FieldOfExperts
from energynets.energies import SPENEnergy
from energynets.energies import protocol
from energynets.inference import SGD
from energynets.inference import GBIConfig
from energynets.inference import Logit
from energynets.inference import Mirror
from energynets.inference import Momentum
from energynets.inference import Projected
from energynets.nets import MLP
from energynets.nets import hardtanh
from energynets.objectives import base
from energynets.objectives import local_bce
from energynets.objectives import ssvm as ssvm_lib
from energynets.objectives import task_losses

L = 4
PREDICT = GBIConfig(max_steps=50)


def _linear_energy(logits_dim=L):
  """Local term only once `_local_only` zeroes c2: E = −Σ y (x K + a)."""
  return SPENEnergy(logits_dim, (), num_measurements=2)


def _local_only(params, kernel, bias=None):
  params = jax.tree.map(lambda a: a, params)
  params["global"]["weights"]["kernel"] = jnp.zeros_like(params["global"]["weights"]["kernel"])
  params["local_net"]["head"] = {
    "kernel": jnp.asarray(kernel, jnp.float32),
    "bias": jnp.zeros(kernel.shape[1]) if bias is None else jnp.asarray(bias, jnp.float32),
  }
  return params


def _batch(x, y):
  return {"x": jnp.asarray(x, jnp.float32), "y": jnp.asarray(y, jnp.float32)}


def _randomize(params, seed, scale=0.5):
  rs = np.random.RandomState(seed)
  return jax.tree.map(lambda a: jnp.asarray(rs.randn(*a.shape) * scale, a.dtype), params)


def _assert_trees_equal(test, a, b):
  test.assertEqual(jax.tree.structure(a), jax.tree.structure(b))
  for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    np.testing.assert_array_equal(u, v)


SURROGATES = {"squared": task_losses.Squared(), "l1": task_losses.L1()}


class LossAugmentedInferenceTest(parameterized.TestCase):
  @parameterized.parameters(
    ("squared", "mirror", "momentum", "uniform"),
    ("squared", "projected", "sgd", "uniform"),
    ("l1", "mirror", "momentum", "local"),
    ("l1", "logit", "sgd", "uniform"),
  )
  def test_linear_energy_matches_brute_force(self, surrogate, method, optimizer, init):
    rs = np.random.RandomState(0)
    batch = 6
    # logits = x (K = I): away from the ties |ℓ| = 1 of both surrogates.
    x = rs.choice([-1, 1], size=(batch, L)) * rs.choice([0.2, 0.5, 1.5, 2.5], size=(batch, L))
    y = (rs.uniform(size=(batch, L)) < 0.5).astype(np.float32)
    energy = _linear_energy()
    params = _local_only(
      protocol.as_energy(energy).init(jax.random.key(0), jnp.zeros((1, L)), None), np.eye(L)
    )
    lr = {"mirror": 0.1, "projected": 0.2, "logit": 2.0}[method]
    config = GBIConfig(
      parametrization={"mirror": Mirror(), "projected": Projected(), "logit": Logit()}[method],
      direction={"momentum": Momentum(), "sgd": SGD()}[optimizer],
      learning_rate=lr,
      num_steps=40,
    )
    infer = jax.jit(
      lambda p, a, b: ssvm_lib.loss_augmented_inference(
        energy, p, a, b, config, surrogate=SURROGATES[surrogate], init=init
      )
    )
    y_hat = np.asarray(infer(params, jnp.asarray(x, jnp.float32), jnp.asarray(y)))
    self.assertTrue(np.all((y_hat >= 0) & (y_hat <= 1)))
    cands = np.array(list(itertools.product((0.0, 1.0), repeat=L)))
    for b in range(batch):
      dist = np.abs(cands - y[b])
      values = -cands @ x[b] - np.sum(dist**2 if surrogate == "squared" else dist, -1)
      np.testing.assert_array_equal(
        np.round(y_hat[b]), cands[np.argmin(values)], err_msg=f"example {b}"
      )
      np.testing.assert_allclose(np.abs(y_hat[b] - cands[np.argmin(values)]).max(), 0, atol=0.05)

  def test_several_starts_keep_the_most_violating_final_iterate(self):
    rs = np.random.RandomState(4)
    energy = SPENEnergy(L, (), num_measurements=3, activation=hardtanh)
    x = jnp.asarray(rs.randn(16, 5), jnp.float32)
    y = jnp.asarray(rs.uniform(size=(16, L)) > 0.5, jnp.float32)
    params = _randomize(protocol.as_energy(energy).init(jax.random.key(0), x, None), 5, scale=2.0)
    config = GBIConfig(num_steps=15)

    def run(starts):
      return np.asarray(
        jax.jit(
          lambda p: ssvm_lib.loss_augmented_inference(
            energy, p, x, y, config, init="local", loss_aug_init=starts
          )
        )(params)
      )

    def objective(y_hat):
      return np.asarray(
        energy.apply({"params": params}, x, jnp.asarray(y_hat))
        - task_losses.task_loss(jnp.asarray(y_hat), y)
      )

    singles = {s: run(s) for s in ("uniform", "local", "gold")}
    np.testing.assert_array_equal(run(None), singles["local"])  # default: `init`
    np.testing.assert_array_equal(run(("local",)), singles["local"])
    best = run(("uniform", "local", "gold"))
    values = np.stack([objective(v) for v in singles.values()])
    np.testing.assert_allclose(objective(best), values.min(0), rtol=1e-5, atol=1e-5)
    chosen = np.stack(list(singles.values()))[values.argmin(0), np.arange(len(best))]
    np.testing.assert_allclose(best, chosen, atol=1e-6)
    with self.assertRaisesRegex(ValueError, "loss-augmented init"):
      run(("uniform", "random"))
    with self.assertRaisesRegex(ValueError, "loss-augmented init"):
      ssvm_lib.ssvm_hinge(
        energy,
        optax.sgd(1.0),
        options=ssvm_lib.SSVMOptions(
          loss_aug_gbi=config, predict_gbi=PREDICT, loss_aug_init=("gold", "nowhere")
        ),
      )

  def test_no_gradient_flows_through_inference(self):
    energy = SPENEnergy(L, (3,), num_measurements=2)
    x = jnp.asarray(np.random.RandomState(1).randn(3, 5), jnp.float32)
    y = jnp.asarray(np.random.RandomState(2).uniform(size=(3, L)) > 0.5, jnp.float32)
    params = protocol.as_energy(energy).init(jax.random.key(1), x, None)
    grads = jax.grad(
      lambda p: jnp.sum(ssvm_lib.loss_augmented_inference(energy, p, x, y, GBIConfig(num_steps=3)))
    )(params)
    for g in jax.tree.leaves(grads):
      np.testing.assert_array_equal(g, 0.0)


class PredictTest(parameterized.TestCase):
  def test_entropy_smoothed_linear_energy_gives_sigmoid_and_local_init_starts_there(self):
    rs = np.random.RandomState(3)
    energy = _linear_energy()
    kernel = rs.randn(L, L)
    params = _local_only(
      protocol.as_energy(energy).init(jax.random.key(0), jnp.zeros((1, L)), None),
      kernel,
      rs.randn(L),
    )
    x = jnp.asarray(rs.randn(5, L), jnp.float32)
    tau = 2.0
    config = GBIConfig(
      parametrization=Mirror(),
      direction=SGD(),
      learning_rate=0.25,
      entropy_weight=tau,
      rel_tol=0.0,
      abs_tol=1e-7,
      max_steps=300,
    )
    logits = energy.apply({"params": params}, x, method=SPENEnergy.local_logits)
    run = jax.jit(lambda p, v: ssvm_lib.infer(energy, p, v, config))
    result = run(params, x)
    np.testing.assert_allclose(result.y, jax.nn.sigmoid(logits / tau), atol=1e-4)
    self.assertTrue(np.all(result.converged))
    # With τ = 1 the local init is already the minimizer: one step and done.
    one = config._replace(entropy_weight=1.0)
    local = jax.jit(lambda p, v: ssvm_lib.infer(energy, p, v, one, init="local"))(params, x)
    self.assertTrue(np.all(local.steps <= 1))
    np.testing.assert_allclose(local.y, jax.nn.sigmoid(logits), atol=1e-5)


class HingeTest(parameterized.TestCase):
  def test_hinge_is_exactly_zero_when_the_margin_is_satisfied(self):
    rs = np.random.RandomState(4)
    y = (rs.uniform(size=(8, L)) < 0.5).astype(np.float32)
    energy = _linear_energy()
    obj = ssvm_lib.ssvm_hinge(
      energy,
      optax.sgd(0.1),
      options=ssvm_lib.SSVMOptions(loss_aug_gbi=GBIConfig(num_steps=20), predict_gbi=PREDICT),
    )
    batch = _batch(2 * y - 1, y)  # logits = 5 (2y − 1): E(ŷ) − E(y) = 5‖ŷ − y‖₁ ≥ Δ
    state = obj.init(jax.random.key(0), batch)
    params = _local_only(state["energy"].params, 5 * np.eye(L))
    state = {"energy": base.init_group(params, optax.sgd(0.1))}
    new, metrics = jax.jit(obj.update)(state, batch, jax.random.key(1))
    for name in ("loss", "hinge", "active", "grad_norm"):
      self.assertEqual(float(metrics[name]), 0.0, name)
    self.assertGreaterEqual(float(metrics["energy_gap"]), float(metrics["delta"]))
    _assert_trees_equal(self, new["energy"].params, params)

  def test_hinge_gradient_matches_finite_differences(self):
    with jax.enable_x64(True):
      rs = np.random.RandomState(5)
      energy = SPENEnergy(L, (6,), num_measurements=3, num_conditional=2)
      x = jnp.asarray(rs.randn(3, 5))
      y = jnp.asarray((rs.uniform(size=(3, L)) < 0.5).astype(np.float64))
      y_hat = jnp.abs(1.0 - y - 0.2 * rs.uniform(size=y.shape))  # far from y: Δ ≈ 2.6
      params = jax.tree.map(
        lambda a: a.astype(jnp.float64),
        _randomize(protocol.as_energy(energy).init(jax.random.key(0), x, None), 6, 0.3),
      )

      def loss(p):
        m = ssvm_lib.margins(energy, p, x, y, y_hat, surrogate=task_losses.Squared())
        return jnp.mean(jax.nn.relu(m.margin)), m.margin

      value_and_grad = jax.jit(jax.value_and_grad(loss, has_aux=True))
      (_, margin), grads = value_and_grad(params)
      self.assertGreater(float(jnp.min(margin)), 0.1)  # every example active, off the kink
      analytic, fd = testing.directional_derivatives(
        lambda p: value_and_grad(p)[0][0], lambda p: value_and_grad(p)[1], params, 8
      )
      np.testing.assert_allclose(analytic, fd, rtol=1e-6)

  def test_update_differentiates_the_hinge_at_the_inferred_output(self):
    rs = np.random.RandomState(7)
    energy = SPENEnergy(L, (5,), num_measurements=3)
    batch = _batch(rs.randn(6, 3), rs.uniform(size=(6, L)) < 0.5)
    aug = GBIConfig(num_steps=10)
    obj = ssvm_lib.ssvm_hinge(
      energy,
      optax.sgd(1.0),
      options=ssvm_lib.SSVMOptions(
        loss_aug_gbi=aug, predict_gbi=PREDICT, surrogate=task_losses.Log()
      ),
    )
    state = obj.init(jax.random.key(2), batch)
    params = state["energy"].params
    new, metrics = jax.jit(obj.update)(state, batch, jax.random.key(3))

    @jax.jit
    def reference(p):
      y_hat = ssvm_lib.loss_augmented_inference(
        energy, p, batch["x"], batch["y"], aug, surrogate=task_losses.Log()
      )
      hinge = lambda q: jnp.mean(
        jax.nn.relu(
          ssvm_lib.margins(
            energy, q, batch["x"], batch["y"], y_hat, surrogate=task_losses.Log()
          ).margin
        )
      )
      return jax.value_and_grad(hinge)(p)

    hinge, grads = reference(params)
    self.assertGreater(float(metrics["active"]), 0.0)
    np.testing.assert_allclose(metrics["hinge"], hinge, rtol=1e-4)
    np.testing.assert_allclose(metrics["loss"], hinge, rtol=1e-4)
    stepped = jax.tree.map(lambda a, b: a - b, params, new["energy"].params)  # sgd(1): = grad
    for g, s in zip(jax.tree.leaves(grads), jax.tree.leaves(stepped)):
      np.testing.assert_allclose(s, g, rtol=1e-3, atol=1e-5)


class StagesTest(parameterized.TestCase):
  def _setup(self, seed=8):
    rs = np.random.RandomState(seed)
    energy = SPENEnergy(L, (5,), num_measurements=3, num_conditional=2)
    batch = _batch(rs.randn(8, 3), rs.uniform(size=(8, L)) < 0.5)
    return energy, batch

  def test_clamped_groups_do_not_move(self):
    energy, batch = self._setup()
    obj = ssvm_lib.ssvm_hinge(
      energy,
      optax.adamw(1e-2, weight_decay=0.5),
      options=ssvm_lib.SSVMOptions(
        loss_aug_gbi=GBIConfig(num_steps=5), predict_gbi=PREDICT, trainable=("global",), l2=0.1
      ),
    )
    state = obj.init(jax.random.key(0), batch)
    before = state["energy"].params
    update = jax.jit(obj.update)
    new, metrics = update(state, batch, jax.random.key(1))
    new, metrics = update(new, batch, jax.random.key(2))
    after = new["energy"].params
    for group in ("local_net", "conditional"):
      _assert_trees_equal(self, after[group], before[group])
    self.assertFalse(
      np.allclose(
        after["global"]["measurements"]["kernel"], before["global"]["measurements"]["kernel"]
      )
    )
    # l2 covers the trained group only (the penalty is taken before the step).
    penalty = 0.1 * base.l2_penalty({"global": before["global"]})
    _, first = update(state, batch, jax.random.key(1))
    np.testing.assert_allclose(first["loss"] - first["hinge"], penalty, rtol=1e-4)

  def test_bad_trainable_groups_raise(self):
    energy, _ = self._setup()
    kw = dict(loss_aug_gbi=GBIConfig(), predict_gbi=PREDICT)
    with self.assertRaisesRegex(ValueError, "trainable"):
      ssvm_lib.ssvm_hinge(
        energy, optax.sgd(1.0), options=ssvm_lib.SSVMOptions(trainable=("globl",), **kw)
      )
    with self.assertRaisesRegex(TypeError, "string"):
      ssvm_lib.ssvm_hinge(
        energy, optax.sgd(1.0), options=ssvm_lib.SSVMOptions(trainable="global", **kw)
      )
    with self.assertRaisesRegex(ValueError, "trainable"):
      ssvm_lib.ssvm_hinge(
        SPENEnergy(L, ()),
        optax.sgd(1.0),
        options=ssvm_lib.SSVMOptions(trainable=("conditional",), **kw),
      )

  def test_pretrain_trains_local_net_only(self):
    energy, batch = self._setup()
    obj = ssvm_lib.spen_pretrain(energy, optax.adam(1e-2), l2=1e-3)
    state = obj.init(jax.random.key(0), batch)
    new, metrics = jax.jit(obj.update)(state, batch, jax.random.key(1))
    before, after = state["energy"].params, new["energy"].params
    _assert_trees_equal(self, after["global"], before["global"])
    _assert_trees_equal(self, after["conditional"], before["conditional"])
    self.assertFalse(
      np.allclose(after["local_net"]["head"]["kernel"], before["local_net"]["head"]["kernel"])
    )
    self.assertGreater(float(metrics["bce"]), 0.0)
    logits = energy.apply({"params": after}, batch["x"], method=SPENEnergy.local_logits)
    np.testing.assert_allclose(obj.predict(new, batch["x"]), jax.nn.sigmoid(logits))

  def test_init_from_carries_local_bce_and_spen_params(self):
    energy, batch = self._setup()
    mlp = MLP((5,), L)
    lb = local_bce(mlp, optax.adam(1e-2))
    lb_state = lb.init(jax.random.key(0), batch)
    lb_state, _ = jax.jit(lb.update)(lb_state, batch, jax.random.key(1))
    obj = ssvm_lib.ssvm_hinge(
      energy,
      optax.adam(1e-2),
      options=ssvm_lib.SSVMOptions(
        loss_aug_gbi=GBIConfig(num_steps=3),
        predict_gbi=PREDICT,
        trainable=("global", "conditional"),
      ),
    )
    init_from = jax.jit(obj.init_from)
    state = init_from(lb_state, jax.random.key(2), batch)
    _assert_trees_equal(self, state["energy"].params["local_net"], lb_state["net"].params)
    np.testing.assert_allclose(
      jax.nn.sigmoid(
        energy.apply({"params": state["energy"].params}, batch["x"], method=SPENEnergy.local_logits)
      ),
      lb.predict(lb_state, batch["x"]),
      rtol=1e-6,
    )
    fresh = obj.init(jax.random.key(2), batch)
    _assert_trees_equal(self, state["energy"].opt_state, fresh["energy"].opt_state)
    # SPEN -> SPEN (fine-tuning): every parameter carried, optimizer restarted.
    trained, _ = jax.jit(obj.update)(state, batch, jax.random.key(3))
    finetune = ssvm_lib.ssvm_hinge(
      energy,
      optax.adam(1e-3),
      options=ssvm_lib.SSVMOptions(loss_aug_gbi=GBIConfig(num_steps=3), predict_gbi=PREDICT),
    )
    cont = jax.jit(finetune.init_from)(trained, jax.random.key(4), batch)
    _assert_trees_equal(self, cont["energy"].params, trained["energy"].params)
    _assert_trees_equal(
      self, cont["energy"].opt_state, optax.adam(1e-3).init(trained["energy"].params)
    )
    # A local net of another shape cannot be carried.
    other = local_bce(MLP((4,), L), optax.adam(1e-2)).init(jax.random.key(0), batch)
    with self.assertRaisesRegex(ValueError, "cannot carry"):
      obj.init_from(other, jax.random.key(0), batch)
    with self.assertRaisesRegex(ValueError, "cannot continue"):
      obj.init_from({"task_net": None}, jax.random.key(0), batch)


class EndToEndTest(parameterized.TestCase):
  def test_staged_training_on_block_exclusivity_decreases_the_loss(self):
    x, y = block_exclusivity(256, seed=0, num_features=12, num_blocks=2, block_size=3)
    labels = y.shape[1]
    # The paper's synthetic set-up (§7.3): linear local term, 4 HardTanh measurements.
    energy = SPENEnergy(labels, (), num_measurements=4, activation=hardtanh)
    batches = [_batch(x[i : i + 32], y[i : i + 32]) for i in range(0, 256, 32)]
    aug = GBIConfig(num_steps=10)
    stages = [
      (ssvm_lib.spen_pretrain(energy, optax.adam(3e-2)), 16, "bce"),
      (
        ssvm_lib.ssvm_hinge(
          energy,
          optax.adam(1e-1),
          options=ssvm_lib.SSVMOptions(
            loss_aug_gbi=aug, predict_gbi=PREDICT, trainable=("global",)
          ),
        ),
        32,
        "loss",
      ),
      (
        ssvm_lib.ssvm_hinge(
          energy,
          optax.adam(1e-2),
          options=ssvm_lib.SSVMOptions(loss_aug_gbi=aug, predict_gbi=PREDICT, l2=1e-4),
        ),
        32,
        "loss",
      ),
    ]
    state = None
    for k, (obj, steps, name) in enumerate(stages):
      rng = jax.random.key(10 + k)
      state = (
        jax.jit(obj.init)(rng, batches[0])
        if state is None
        else jax.jit(obj.init_from)(state, rng, batches[0])
      )
      update = jax.jit(obj.update)
      history = []
      for t in range(steps):
        state, metrics = update(state, batches[t % len(batches)], jax.random.fold_in(rng, t))
        history.append(float(metrics[name]))
      self.assertTrue(np.all(np.isfinite(history)), k)
      if k > 0:
        first, last = np.mean(history[:8]), np.mean(history[-8:])
        self.assertLess(last, first, f"stage {k}: {history}")
    y_soft = jax.jit(stages[-1][0].predict)(state, jnp.asarray(x[:64]))
    self.assertEqual(y_soft.shape, (64, labels))
    self.assertTrue(np.all((y_soft >= 0) & (y_soft <= 1)))


class ImageEnergyTest(parameterized.TestCase):
  """The same SSVM objective on a denoising energy (Real domain, y shaped like x)."""

  def test_surrogate_sums_over_every_pixel(self):
    rs = np.random.RandomState(0)
    y_hat, y = rs.randn(2, 3, 4, 5), rs.randn(2, 3, 4, 5)
    np.testing.assert_allclose(
      task_losses.task_loss(y_hat, y, task_losses.Squared()),
      ((y_hat - y) ** 2).sum(axis=(1, 2, 3)),
      rtol=1e-6,
    )

  def test_field_of_experts_ssvm_lowers_its_hinge(self):
    rs = np.random.RandomState(1)
    clean = rs.uniform(size=(4, 12, 12)).astype(np.float32)
    batch = {"x": clean + 0.1 * rs.randn(4, 12, 12).astype(np.float32), "y": clean}
    energy = FieldOfExperts(num_filters=3, filter_size=3, noise_variance=0.01)
    gbi = GBIConfig(
      parametrization=Projected(),
      direction=SGD(),
      learning_rate=0.003,
      num_steps=4,
      max_steps=4,
      rel_tol=0.0,
      abs_tol=0.0,
    )
    objective = ssvm_lib.ssvm_hinge(
      energy,
      optax.adam(3e-2),
      options=ssvm_lib.SSVMOptions(
        loss_aug_gbi=gbi, predict_gbi=gbi, init="input", loss_aug_init=("input", "gold")
      ),
    )
    state, losses, _ = testing.fit_one_batch(objective, batch, 12)
    self.assertLess(np.mean(losses[-3:]), 0.8 * np.mean(losses[:3]))
    self.assertEqual(objective.predict(state, batch["x"]).shape, (4, 12, 12))
    with self.assertRaisesRegex(ValueError, "'local'"):
      ssvm_lib.ssvm_hinge(
        energy,
        optax.adam(1e-2),
        options=ssvm_lib.SSVMOptions(loss_aug_gbi=gbi, predict_gbi=gbi, init="local"),
      )


if __name__ == "__main__":
  absltest.main()
