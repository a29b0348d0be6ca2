"""Tests of SEAL training steps (energynets/objectives/seal/): descent and freezing.

For every loss-net objective, dynamic and static: each step lowers the loss it steps
on, with the other network and the randomness held fixed (dynamic: L_E(Θ_{t+1}; Φ_t) <
L_E(Θ_t; Φ_t) on the same samples, and L_F(Φ_{t+1}; Θ_{t+1}) < L_F(Φ_t; Θ_{t+1}), the
task-net step taken against the updated loss-net as in Eq. 5; static: the same-key loss
of each phase falls step after step), and the group a phase does not train stays
bit-identical under an optimizer with weight decay.
"""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
import optax

from energynets.energies import SPENEnergy
from energynets.inference import Adam
from energynets.inference import GBIConfig
from energynets.inference import Projected
from energynets.nets import MLP
from energynets.objectives import seal

L, D, B = 4, 5, 8
TRAIN_GBI = GBIConfig(parametrization=Projected(), direction=Adam(), learning_rate=0.1, num_steps=3)
OBJECTIVES = {
  "margin": seal.SealMargin,
  "regression": seal.SealRegression,
  "regression_s": seal.SealRegressionS,
  "nce": seal.SealNCE,
}
PHASES = {
  "dynamic": seal.SealOptions(),
  "loss_net": seal.SealOptions(train_task_net=False),
  "task_net": seal.SealOptions(train_loss_net=False),
}


def _nets():
  task_net = MLP((6,), L, activation=jnp.tanh)
  loss_net = SPENEnergy(L, (6,), feature_activation=jnp.tanh, num_measurements=3)
  return task_net, loss_net


def _batch(seed=0):
  rs = np.random.RandomState(seed)
  y = (rs.uniform(size=(B, L)) < 0.5).astype(np.float32)
  return {"x": jnp.asarray(rs.randn(B, D).astype(np.float32)), "y": jnp.asarray(y)}


def _assert_trees_equal(test, a, b):
  test.assertEqual(jax.tree.structure(a), jax.tree.structure(b))
  for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    np.testing.assert_array_equal(u, v)


def _named(name):
  """The library's loss-net objective `name`: K = 3 samples and TRAIN_GBI where it takes
  them."""
  cls = OBJECTIVES[name]
  common = {"num_samples": 3, "loss_aug_gbi": TRAIN_GBI}
  return cls(**{k: v for k, v in common.items() if k in cls.__dataclass_fields__})


def _objective(phase, objective, task_opt=None, loss_opt=None):
  task_net, loss_net = _nets()
  return seal.seal_objective(
    loss_net,
    task_net,
    loss_opt or optax.sgd(0.05),
    task_opt or optax.sgd(0.05),
    options=PHASES[phase],
    loss_net_objective=_named(objective),
  )


class DescentTest(parameterized.TestCase):
  """A few steps: each trained group's own loss falls, the other group and rng fixed."""

  @parameterized.parameters(*OBJECTIVES)
  def test_dynamic_alternation_descends_both_losses(self, objective):
    task_net, loss_net = _nets()
    obj = _objective("dynamic", objective)
    losses = seal.seal_losses(loss_net, task_net, loss_net_objective=_named(objective))
    task_net_loss = jax.jit(lambda *a: losses.task_net(*a)[0])
    batch = _batch(2)
    state = obj.init(jax.random.key(0), batch)
    update = jax.jit(obj.update)
    for t in range(3):
      rng = jax.random.key(10 + t)
      new, metrics = update(state, batch, rng)
      theta0, phi0 = state["loss_net"].params, state["task_net"].params
      theta1, phi1 = new["loss_net"].params, new["task_net"].params
      # The update's first half on (Θ_{t+1}, Φ_t) with the same key evaluates
      # L_E(Θ_{t+1}; Φ_t) on the same samples.
      _, again = update({"loss_net": new["loss_net"], "task_net": state["task_net"]}, batch, rng)
      self.assertLess(
        float(again["loss_net_loss"]), float(metrics["loss_net_loss"]), f"L_E, step {t}"
      )
      # Eq. 5: the task-net step is taken against the updated loss-net Θ_{t+1}.
      task_rng = jax.random.split(rng)[1]
      before = task_net_loss(phi0, theta1, batch, task_rng)
      np.testing.assert_allclose(metrics["task_net_loss"], before, rtol=1e-5)
      self.assertLess(
        float(task_net_loss(phi1, theta1, batch, task_rng)), float(before), f"L_F, step {t}"
      )
      self.assertFalse(np.allclose(jax.tree.leaves(theta0)[0], jax.tree.leaves(theta1)[0]))
      np.testing.assert_allclose(
        metrics["loss"], metrics["loss_net_loss"] + metrics["task_net_loss"], rtol=1e-6
      )
      np.testing.assert_allclose(
        metrics["grad_norm"],
        np.hypot(metrics["loss_net_grad_norm"], metrics["task_net_grad_norm"]),
        rtol=1e-5,
      )
      state = new

  @parameterized.parameters(*OBJECTIVES)
  def test_static_phases_descend_and_keep_the_other_net_frozen(self, objective):
    # Frozen groups get optimizers with weight decay: any applied update would show.
    decay = optax.adamw(0.1, weight_decay=0.5)
    batch = _batch(3)
    rng = jax.random.key(5)  # the same key every step: the loss is one fixed function
    pretrain = _objective("loss_net", objective, task_opt=decay)
    state = pretrain.init(jax.random.key(0), batch)
    self.assertIsInstance(state["task_net"].opt_state, optax.EmptyState)
    update = jax.jit(pretrain.update)
    history = []
    for _ in range(4):
      new, metrics = update(state, batch, rng)
      _assert_trees_equal(self, new["task_net"].params, state["task_net"].params)
      self.assertNotIn("task_net_loss", metrics)
      history.append(float(metrics["loss"]))
      state = new
    self.assertTrue(np.all(np.diff(history) < 0), history)

    finetune = _objective("task_net", objective, loss_opt=decay)
    state = finetune.init_from(state, jax.random.key(1), batch)
    self.assertIsInstance(state["loss_net"].opt_state, optax.EmptyState)
    loss_params = state["loss_net"].params
    update = jax.jit(finetune.update)
    history = []
    for _ in range(4):
      state, metrics = update(state, batch, rng)
      self.assertNotIn("loss_net_loss", metrics)
      history.append(float(metrics["loss"]))
    _assert_trees_equal(self, state["loss_net"].params, loss_params)
    self.assertTrue(np.all(np.diff(history) < 0), history)


if __name__ == "__main__":
  absltest.main()
