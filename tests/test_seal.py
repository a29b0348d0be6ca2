"""Tests of SEAL's losses, states and predictions (energynets/objectives/seal/).

Oracles: a hand-computed NCE ranking loss (gold in the normalizer) on 2 noise samples,
through the pure function and through the whole loss-net loss; numpy log-likelihoods
of Bernoulli samples; float64 central finite differences of every loss (the static
GBI samples are made parameter-independent with `num_steps=0`, so the full loss is a
smooth function); numpy formulas of the task-net loss's energy term and margin costs
for every option value that replaced a name. Training dynamics (descent, frozen groups)
are in tests/test_seal_training.py, kept apart so that each file compiles in under
~40 s. The config block's names (experiments/choices/seal.py) are tested here too.
"""

import math
from typing import NamedTuple

from absl.testing import absltest
from absl.testing import parameterized
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from energynets import domains
from energynets import testing
from energynets.energies import SPENEnergy
from energynets.energies import protocol
from energynets.inference import Adam
from energynets.inference import GBIConfig
from energynets.inference import Projected
from energynets.nets import MLP
from energynets.objectives import dvn
from energynets.objectives import local_bce
from energynets.objectives import scores
from energynets.objectives import seal
from energynets.objectives import ssvm
from energynets.objectives import task_losses
from experiments.choices import seal as seal_choices

L, D, B = 4, 5, 8
TRAIN_GBI = GBIConfig(parametrization=Projected(), direction=Adam(), learning_rate=0.1, num_steps=3)
PREDICT_GBI = GBIConfig(
  parametrization=Projected(),
  direction=Adam(),
  learning_rate=0.05,
  max_steps=6,
  rel_tol=0.0,
  abs_tol=0.0,
)
# Which networks each phase trains (the config's names for them).
PHASES = seal_choices.PHASES


def _nets():
  # Smooth activations everywhere, so finite differences see no kinks.
  task_net = MLP((6,), L, activation=jnp.tanh)
  loss_net = SPENEnergy(L, (6,), feature_activation=jnp.tanh, num_measurements=3)
  return task_net, loss_net


def _batch(seed=0, dtype=np.float32):
  rs = np.random.RandomState(seed)
  y = (rs.uniform(size=(B, L)) < 0.5).astype(dtype)
  return {"x": jnp.asarray(rs.randn(B, D).astype(dtype)), "y": jnp.asarray(y)}


def _assert_trees_equal(test, a, b):
  test.assertEqual(jax.tree.structure(a), jax.tree.structure(b))
  for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    np.testing.assert_array_equal(u, v)


@jax.jit
def _init_params(x):
  """(task-net, loss-net) params; one jitted call (eager init compiles op by op)."""
  task_net, loss_net = _nets()
  return (
    task_net.init(jax.random.key(0), x)["params"],
    protocol.as_energy(loss_net).init(jax.random.key(1), x, None),
  )


def _check_finite_differences(test, value_and_grad, params, seed):
  """`value_and_grad(params) -> ((value, aux), grads)` against float64 central differences."""
  analytic, fd = testing.directional_derivatives(
    lambda p: value_and_grad(p)[0][0], lambda p: value_and_grad(p)[1], params, seed
  )
  test.assertGreater(abs(analytic), 1e-3)
  np.testing.assert_allclose(analytic, fd, rtol=1e-6)


OPTION_FIELDS = set(seal_choices.field_names(seal.SealOptions))


def _values(objective, phase="dynamic", num_samples=3, loss_aug_gbi=TRAIN_GBI, **kw):
  """`(SealOptions, loss-net objective)`: keywords that are `SealOptions` fields go to the
  options, the others to the objective named `objective`; K and the GBI where it takes
  them."""
  options = seal.SealOptions(**PHASES[phase], **{k: v for k, v in kw.items() if k in OPTION_FIELDS})
  own = {k: v for k, v in kw.items() if k not in OPTION_FIELDS}
  cls = seal_choices.LOSS_NET_OBJECTIVES[objective]
  fields = seal_choices.field_names(cls)
  for key, value in (("num_samples", num_samples), ("loss_aug_gbi", loss_aug_gbi)):
    if key in fields:
      own[key] = value
  return options, cls(**own)


def _losses(task_net, loss_net, objective, **kw):
  options, loss_net_objective = _values(objective, **kw)
  return seal.seal_losses(
    loss_net, task_net, options=options, loss_net_objective=loss_net_objective
  )


def _objective(phase, objective, task_opt=None, loss_opt=None, **kw):
  task_net, loss_net = _nets()
  options, loss_net_objective = _values(objective, phase, **kw)
  return seal.seal_objective(
    loss_net,
    task_net,
    loss_opt or optax.sgd(0.05),
    task_opt or optax.sgd(0.05),
    options=options,
    loss_net_objective=loss_net_objective,
  )


class NceTest(parameterized.TestCase):
  def test_ranking_loss_has_the_gold_in_its_normalizer(self):
    energies = jnp.array([[1.0, 0.5, 2.0]])
    log_noise = jnp.array([[-3.0, -1.0, -0.5]])
    s = [-1.0 + 3.0, -0.5 + 1.0, -2.0 + 0.5]  # s = −E − log P_N = [2, 0.5, −1.5]
    with_gold = -s[0] + math.log(math.exp(s[0]) + math.exp(s[1]) + math.exp(s[2]))
    printed = -s[0] + math.log(math.exp(s[1]) + math.exp(s[2]))  # Eq. 8 as printed
    value = float(seal.nce_ranking_loss(energies, log_noise)[0])
    self.assertAlmostEqual(value, with_gold, places=5)
    self.assertGreater(value, 0.0)
    self.assertGreater(abs(value - printed), 0.1)

  def test_loss_net_loss_matches_a_hand_oracle_and_finite_differences(self):
    with jax.enable_x64(True):
      task_net, loss_net = _nets()
      batch = _batch(1, np.float64)
      losses = seal.seal_losses(loss_net, task_net, loss_net_objective=seal.SealNCE(num_samples=2))
      task_params, loss_params = _init_params(batch["x"])
      rng = jax.random.key(7)

      @jax.jit
      def run(p):
        """The loss and its gradient, and what the oracle needs, in one compiled call."""
        value_and_grad = jax.value_and_grad(
          lambda q: losses.loss_net(q, task_params, batch, rng), has_aux=True
        )(p)
        logits = task_net.apply({"params": task_params}, batch["x"])
        # The same noise: the loss splits rng into (dropout, sample) keys.
        noise = seal.bernoulli_samples(jax.random.split(rng)[1], logits, 2)
        energies = [
          loss_net.apply({"params": p}, batch["x"], out)
          for out in (batch["y"], noise[:, 0], noise[:, 1])
        ]
        return value_and_grad, logits, noise, energies

      ((value, metrics), _), logits, noise, energies = run(loss_params)
      self.assertEqual(noise.shape, (B, 2, L))
      self.assertTrue(np.all((noise == 0) | (noise == 1)))
      q = 1.0 / (1.0 + np.exp(-np.asarray(logits)))
      y = np.asarray(batch["y"])
      s = []  # [3][B]: the gold, then the two noise samples
      for out, energy in zip((y, noise[:, 0], noise[:, 1]), energies):
        log_pn = np.sum(out * np.log(q) + (1 - out) * np.log(1 - q), axis=-1)
        s.append(-np.asarray(energy) - log_pn)
      expected = -s[0] + np.log(np.exp(s[0]) + np.exp(s[1]) + np.exp(s[2]))
      np.testing.assert_allclose(float(value), np.mean(expected), rtol=1e-10)
      np.testing.assert_allclose(
        float(metrics["gold_prob"]), np.mean(np.exp(-expected)), rtol=1e-10
      )
      _check_finite_differences(self, lambda p: run(p)[0], loss_params, seed=2)

  def test_bernoulli_log_prob_is_the_exact_log_likelihood(self):
    logits = jnp.array([[0.3, -1.2, 2.0]])
    ys = jnp.array([[[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]]])
    q = 1 / (1 + np.exp(-np.asarray(logits[0])))
    expected = [
      np.log(q[0]) + np.log(1 - q[1]) + np.log(q[2]),
      np.log(1 - q[0]) + np.log(q[1]) + np.log(1 - q[2]),
    ]
    np.testing.assert_allclose(seal.bernoulli_log_prob(logits, ys)[0], expected, rtol=1e-5)


class GradientTest(parameterized.TestCase):
  """Every loss against float64 central differences (NCE: in `NceTest`)."""

  @parameterized.named_parameters(
    ("margin_dynamic", "margin", "dynamic", "loss_net", {}),
    (
      "margin_static_score_cost",
      "margin",
      "loss_net",
      "loss_net",
      {"margin_cost": seal.OneMinusScore()},
    ),
    ("regression_dynamic", "regression", "dynamic", "loss_net", {}),
    (
      "regression_static",
      "regression",
      "loss_net",
      "loss_net",
      {"dvn_samples": (dvn.Inference(), dvn.Adversarial(), dvn.Gold(), dvn.Random())},
    ),
    ("regression_s", "regression_s", "dynamic", "loss_net", {}),
    (
      "regression_dynamic_extra_samples",
      "regression",
      "dynamic",
      "loss_net",
      {
        "extra_samples": (dvn.Gold(), dvn.Random(), dvn.OtherGold()),
        "extra_sample_weights": (0.5, 1.0, 2.0),
      },
    ),
    (
      "regression_s_extra_samples",
      "regression_s",
      "dynamic",
      "loss_net",
      {"extra_samples": (dvn.OtherGold(),)},
    ),
    ("task_net", "nce", "dynamic", "task_net", {"energy_weight": 0.7, "bce_weight": 0.3}),
    ("task_net_neg_value", "regression", "task_net", "task_net", {"neg_value_term": True}),
  )
  def test_matches_finite_differences(self, objective, phase, which, options):
    with jax.enable_x64(True):
      task_net, loss_net = _nets()
      batch = _batch(4, np.float64)
      # num_steps=0: static GBI samples sit at their start, independent of Θ.
      losses = _losses(
        task_net,
        loss_net,
        objective,
        phase=phase,
        num_samples=3,
        loss_aug_gbi=TRAIN_GBI._replace(num_steps=0),
        **options,
      )
      task_params, loss_params = _init_params(batch["x"])
      rs = np.random.RandomState(5)
      # Larger weights than the default init: energies of order 1, margins active.
      scale = lambda t: jax.tree.map(lambda a: a * 2.0 + 0.1 * rs.randn(*a.shape), t)
      task_params, loss_params = scale(task_params), scale(loss_params)
      rng = jax.random.key(3)
      if which == "loss_net":
        fn = lambda p: losses.loss_net(p, task_params, batch, rng)
        params = loss_params
      else:
        fn = lambda p: losses.task_net(p, loss_params, batch, rng)
        params = task_params
      value_and_grad = jax.jit(jax.value_and_grad(fn, has_aux=True))
      (value, metrics), grads = value_and_grad(params)
      self.assertTrue(np.isfinite(float(value)))
      if objective == "margin" and which == "loss_net":
        self.assertGreater(float(metrics["active"]), 0.0)
      _check_finite_differences(self, value_and_grad, params, seed=6)


class ScoreGradientCosineTest(parameterized.TestCase):
  @parameterized.parameters(False, True)
  def test_matches_finite_differences_and_the_closed_form_soft_f1_gradient(self, neg_value):
    with jax.enable_x64(True):
      task_net, loss_net = _nets()
      batch = _batch(7, np.float64)
      task_params, loss_params = _init_params(batch["x"])
      losses = seal.seal_losses(
        loss_net,
        task_net,
        options=seal.SealOptions(score=scores.soft_f1, neg_value_term=neg_value),
        loss_net_objective=seal.SealRegression(),
      )
      _, metrics = jax.jit(losses.task_net)(task_params, loss_params, batch, jax.random.key(0))
      logits = task_net.apply({"params": task_params}, batch["x"])
      p = np.asarray(jax.nn.sigmoid(logits))
      y = np.asarray(batch["y"])

      def term_of(v):
        energy = np.asarray(loss_net.apply({"params": loss_params}, batch["x"], v))
        return -1 / (1 + np.exp(energy)) if neg_value else energy

      # Central differences, one output coordinate at a time (examples are independent).
      eps = 1e-6
      g_term = np.zeros_like(p)
      for i in range(L):
        step = np.zeros_like(p)
        step[:, i] = eps
        g_term[:, i] = (term_of(p + step) - term_of(p - step)) / (2 * eps)
      # −∇ soft F1 in closed form: soft F1 = 2Σpy / S, S = Σp + Σy.
      total = p.sum(-1, keepdims=True) + y.sum(-1, keepdims=True)
      overlap = (p * y).sum(-1, keepdims=True)
      g_score = -(2 * y / total - 2 * overlap / total**2)
      cosine = (g_term * g_score).sum(-1) / np.sqrt((g_term**2).sum(-1) * (g_score**2).sum(-1))
      np.testing.assert_allclose(float(metrics["score_grad_cosine"]), cosine.mean(), rtol=1e-6)
      self.assertLess(abs(float(metrics["score_grad_cosine"])), 1.0)


class ExtraSamplesTest(parameterized.TestCase):
  @parameterized.parameters("regression", "regression_s")
  def test_extra_samples_add_their_weighted_regression_to_a_hand_oracle(self, objective):
    with jax.enable_x64(True):
      task_net, loss_net = _nets()
      batch = _batch(2, np.float64)
      task_params, loss_params = _init_params(batch["x"])
      rng = jax.random.key(9)
      common = dict(num_samples=2, score=scores.soft_f1)
      plain = _losses(task_net, loss_net, objective, **common)
      extra = _losses(
        task_net,
        loss_net,
        objective,
        extra_samples=(dvn.Gold(), dvn.OtherGold()),
        extra_sample_weights=(0.5, 2.0),
        **common,
      )

      @jax.jit
      def run(p):
        without = plain.loss_net(p, task_params, batch, rng)[0]
        with_extras, metrics = extra.loss_net(p, task_params, batch, rng)
        energy = lambda out: loss_net.apply({"params": p}, batch["x"], out)
        return (
          without,
          with_extras,
          metrics,
          energy(batch["y"]),
          energy(jnp.roll(batch["y"], 1, axis=0)),
        )

      without, with_extras, metrics, e_gold, e_other = run(loss_params)
      y = np.asarray(batch["y"])
      other = np.roll(y, 1, axis=0)  # example i is scored with example i−1's gold

      def soft_f1(y_bar, gold):
        return 2 * np.sum(y_bar * gold, -1) / (np.sum(y_bar, -1) + np.sum(gold, -1))

      def cross_entropy(energy, score):
        value = 1 / (1 + np.exp(np.asarray(energy)))  # σ(−E)
        return -score * np.log(value) - (1 - score) * np.log(1 - value)

      expected = 0.5 * np.mean(cross_entropy(e_gold, 1.0)) + 2.0 * np.mean(
        cross_entropy(e_other, soft_f1(other, y))
      )
      np.testing.assert_allclose(float(with_extras - without), expected, rtol=1e-9)
      np.testing.assert_allclose(
        float(metrics["score_other_gold"]), np.mean(soft_f1(other, y)), rtol=1e-9
      )
      self.assertLess(float(metrics["score_other_gold"]), 1.0)  # the batch's labels differ


class TrainModeTest(parameterized.TestCase):
  """`train_mode`: dropout where SEAL's trainer has it, and only there."""

  def _losses(self, task_dropout, loss_dropout, train_mode, objective="nce"):
    task_net = MLP((6,), L, activation=jnp.tanh, dropout=task_dropout)
    loss_net = SPENEnergy(
      L, (6,), feature_activation=jnp.tanh, num_measurements=3, dropout=loss_dropout
    )
    return _losses(task_net, loss_net, objective, num_samples=3, train_mode=train_mode)

  def test_task_net_loss_sees_the_loss_nets_dropout_only_in_train_mode(self):
    batch = _batch(1)
    task_params, loss_params = _init_params(batch["x"])

    def energies(losses):
      fn = jax.jit(lambda r: losses.task_net(task_params, loss_params, batch, r)[1]["energy"])
      return [float(fn(jax.random.key(k))) for k in range(3)]

    # No task-net dropout, so only the loss-net's dropout can move the energy term.
    on = energies(self._losses(0.0, 0.5, True))
    self.assertGreater(np.ptp(on), 1e-4)
    off = energies(self._losses(0.0, 0.5, False))
    self.assertEqual(np.ptp(off), 0.0)
    # Without dropout in the loss-net the flag changes nothing.
    np.testing.assert_allclose(energies(self._losses(0.0, 0.0, True)), off, rtol=1e-6)

  @parameterized.parameters("nce", "regression", "regression_s", "margin")
  def test_loss_net_samples_come_from_the_dropped_out_task_net_only_in_train_mode(self, objective):
    batch = _batch(2)
    task_params, loss_params = _init_params(batch["x"])
    rng = jax.random.key(4)

    def loss(task_dropout, train_mode):
      losses = self._losses(task_dropout, 0.0, train_mode, objective)
      return float(jax.jit(losses.loss_net)(loss_params, task_params, batch, rng)[0])

    self.assertNotAlmostEqual(loss(0.5, True), loss(0.5, False), places=4)
    # Off, the task-net's dropout is never drawn: the same loss as with none.
    self.assertEqual(loss(0.5, False), loss(0.0, False))
    self.assertAlmostEqual(loss(0.0, True), loss(0.0, False), places=6)

  def test_task_net_loss_with_a_fixed_dropout_mask_matches_finite_differences(self):
    with jax.enable_x64(True):
      losses = self._losses(0.5, 0.5, True)
      batch = _batch(4, np.float64)
      task_params, loss_params = _init_params(batch["x"])
      rng = jax.random.key(3)
      value_and_grad = jax.jit(
        jax.value_and_grad(lambda p: losses.task_net(p, loss_params, batch, rng), has_aux=True)
      )
      _check_finite_differences(self, value_and_grad, task_params, seed=7)


class StatesAndPredictionTest(parameterized.TestCase):
  def test_init_from_carries_local_bce_and_spen_states(self):
    task_net, loss_net = _nets()
    batch = _batch(6)
    lb = local_bce(task_net, optax.adam(1e-2))
    lb_state = lb.init(jax.random.key(0), batch)
    spen_state = {
      "energy": ssvm.spen_pretrain(loss_net, optax.adam(1e-2)).init(jax.random.key(1), batch)[
        "energy"
      ]
    }
    # Static stage 1 from the pretrained noise net; the loss-net is fresh.
    stage1 = _objective("loss_net", "nce")
    state = stage1.init_from(lb_state, jax.random.key(2), batch)
    _assert_trees_equal(self, state["task_net"].params, lb_state["net"].params)
    # A SPEN state becomes the loss-net (e.g. an SSVM-trained SPEN for static margin).
    stage2 = _objective("task_net", "margin", fresh_task_net=True)
    cont = stage2.init_from({**lb_state, **spen_state}, jax.random.key(3), batch)
    _assert_trees_equal(self, cont["loss_net"].params, spen_state["energy"].params)
    fresh = task_net.init(jax.random.split(jax.random.key(3))[0], batch["x"])["params"]
    _assert_trees_equal(self, cont["task_net"].params, fresh)
    carried = _objective("task_net", "margin").init_from(state, jax.random.key(3), batch)
    _assert_trees_equal(self, carried["task_net"].params, lb_state["net"].params)
    _assert_trees_equal(self, carried["loss_net"].params, state["loss_net"].params)
    with self.assertRaisesRegex(ValueError, "init_from"):
      stage2.init(jax.random.key(0), batch)
    with self.assertRaisesRegex(ValueError, "trained loss-net"):
      stage2.init_from(lb_state, jax.random.key(0), batch)
    with self.assertRaisesRegex(ValueError, "cannot continue"):
      stage2.init_from({"pairwise": None}, jax.random.key(0), batch)
    other = local_bce(MLP((3,), L), optax.adam(1e-2)).init(jax.random.key(0), batch)
    with self.assertRaisesRegex(ValueError, "cannot carry"):
      stage1.init_from(other, jax.random.key(0), batch)

  def test_predict_task_net_and_gbi(self):
    task_net, loss_net = _nets()
    batch = _batch(7)
    obj = _objective("dynamic", "nce", predict_gbi=PREDICT_GBI)
    state = obj.init(jax.random.key(0), batch)
    y_gbi, expected = jax.jit(
      lambda st, x: (
        obj.predict(st, x),
        ssvm.infer(loss_net, st["loss_net"].params, x, PREDICT_GBI).y,
      )
    )(state, batch["x"])
    logits = task_net.apply({"params": state["task_net"].params}, batch["x"])
    plain = _objective("dynamic", "nce")
    np.testing.assert_allclose(plain.predict(state, batch["x"]), jax.nn.sigmoid(logits), rtol=1e-6)
    no_steps = _objective(
      "dynamic", "nce", predict_from_task_net=True, predict_gbi=PREDICT_GBI._replace(max_steps=0)
    )
    np.testing.assert_allclose(
      no_steps.predict(state, batch["x"]), jax.nn.sigmoid(logits), rtol=1e-6
    )

  def test_rounds_of_loss_net_steps_match_a_hand_loop(self):
    # Dynamic regression draws no random samples, so the update is a deterministic
    # sequence of plain SGD steps: t=2 rounds of (s=3 loss-net steps, 1 task-net step).
    task_net, loss_net = _nets()
    batch = _batch(8)
    obj = _objective("dynamic", "regression", loss_net_steps=3, rounds=2)
    state = obj.init(jax.random.key(0), batch)
    new, metrics = jax.jit(obj.update)(state, batch, jax.random.key(1))
    losses = _losses(
      task_net, loss_net, "regression", phase="dynamic", loss_aug_gbi=TRAIN_GBI, num_samples=3
    )
    grad = lambda fn, p, q: jax.grad(lambda p_: fn(p_, q, batch, jax.random.key(2))[0])(p)
    sgd = lambda p, g: jax.tree.map(lambda a, b: a - 0.05 * b, p, g)
    task, loss = state["task_net"].params, state["loss_net"].params
    for _ in range(2):
      for _ in range(3):
        loss = sgd(loss, grad(losses.loss_net, loss, task))
      task = sgd(task, grad(losses.task_net, task, loss))
    for got, want in ((new["task_net"].params, task), (new["loss_net"].params, loss)):
      for u, v in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(u, v, rtol=2e-5, atol=1e-6)
    self.assertEqual(np.shape(metrics["loss"]), ())

  def test_bad_options_raise_naming_them(self):
    option_cases = [
      (dict(train_loss_net=False, train_task_net=False), ValueError, "both False"),
      (dict(score="soft_f1"), TypeError, "'soft_f1'"),
      (dict(loss_net_steps=0), ValueError, "loss_net_steps"),
      (dict(rounds=0), ValueError, "rounds"),
      (dict(energy_weight=-1.0), ValueError, "energy_weight"),
      (dict(predict_gbi=PREDICT_GBI._replace(stop_fraction=2.0)), ValueError, "stop_fraction"),
    ]
    for options, error, message in option_cases:
      with self.assertRaisesRegex(error, message, msg=str(options)):
        seal.SealOptions(**options)
    objective_cases = [
      (lambda: seal.SealNCE(num_samples=0), "num_samples"),
      (lambda: seal.SealRegressionS(noise_std=0.0), "noise_std"),
      (
        lambda: seal.SealRegression(extra_samples=(dvn.Gold(), dvn.Inference())),
        "'inference'.*need GBI",
      ),
      (lambda: seal.SealRegression(extra_samples=(dvn.Gold(), dvn.Gold())), "'gold'"),
    ]
    for build, message in objective_cases:
      with self.assertRaisesRegex(ValueError, message):
        build()
    # What depends on the phase fails when the objective is built.
    build_cases = [
      (
        dict(phase="loss_net", objective="regression", extra_samples=(dvn.Gold(),)),
        ValueError,
        "dvn_samples",
      ),
      (dict(phase="loss_net", objective="margin", loss_aug_gbi=None), ValueError, "loss_aug_gbi"),
      (
        dict(
          phase="loss_net",
          objective="margin",
          loss_aug_gbi=TRAIN_GBI._replace(parametrization="newton"),
        ),
        TypeError,
        "'newton'",
      ),
    ]
    for options, error, message in build_cases:
      options = dict(options)
      phase = options.pop("phase", "dynamic")
      objective = options.pop("objective", "nce")
      with self.assertRaisesRegex(error, message, msg=str(options)):
        _objective(phase, objective, **options)
    with self.assertRaisesRegex(ValueError, "num_samples"):
      seal.task_net_ranking(MLP((), L), optax.sgd(1.0), num_samples=0)
    with self.assertRaisesRegex(TypeError, "OutputStructure"):
      seal.task_net_ranking(MLP((), L), optax.sgd(1.0), output="sequence")

  def test_a_call_with_the_task_net_first_is_refused_in_one_line_naming_the_order(self):
    task_net, loss_net = _nets()
    sgd = optax.sgd(0.1)
    for call in (
      lambda: seal.seal_objective(task_net, loss_net, sgd, sgd),
      lambda: seal.seal_losses(task_net, loss_net),
      lambda: seal.seal_objective(task_net, protocol.as_energy(loss_net), sgd, sgd),
    ):
      with self.assertRaisesRegex(
        TypeError,
        r"\(loss_net, task_net, .*the loss-net, an "
        r"energy, first; got MLP there: .*look swapped",
      ) as caught:
        call()
      self.assertNotIn("\n", str(caught.exception))
    # A plain module in the loss-net's place, in the right order: how to wrap it.
    with self.assertRaisesRegex(TypeError, "energy_from_module"):
      seal.seal_objective(LowRankLabelEnergy(L), task_net, sgd, sgd)
    # One way to give the options: values, not their fields as keywords.
    flat = {"num_samples": 3}
    with self.assertRaises(TypeError):
      seal.seal_objective(loss_net, task_net, sgd, sgd, **flat)


def _sigmoid(a):
  return 1 / (1 + np.exp(-np.asarray(a, np.float64)))


def _soft_iou(p, y):
  overlap = np.sum(p * y, -1)
  return overlap / (np.sum(p, -1) + np.sum(y, -1) - overlap)


class OptionValuesTest(parameterized.TestCase):
  """Each value that replaced a name computes that name's formula (float64 numpy)."""

  @parameterized.named_parameters(
    ("energy", False, 0.7, 0.3, 0.0),
    ("neg_value", True, 0.7, 0.3, 0.0),
    ("neg_value_unit_weights", True, 1.0, 1.0, 0.0),
    ("energy_and_soft_f1", False, 0.7, 0.3, 2.5),
  )
  def test_the_task_net_loss_is_eq_1_with_the_chosen_energy_term(self, neg_value, w1, w2, w3):
    with jax.enable_x64(True):
      task_net, loss_net = _nets()
      batch = _batch(16, np.float64)
      task_params, loss_params = _init_params(batch["x"])
      options = seal.SealOptions(
        neg_value_term=neg_value, energy_weight=w1, bce_weight=w2, score_weight=w3
      )
      losses = seal.seal_losses(loss_net, task_net, options=options)
      value, metrics = jax.jit(losses.task_net)(task_params, loss_params, batch, jax.random.key(0))
      q = _sigmoid(task_net.apply({"params": task_params}, batch["x"]))
      y = np.asarray(batch["y"])
      energy = np.asarray(loss_net.apply({"params": loss_params}, batch["x"], q))
      term = -1 / (1 + np.exp(energy)) if neg_value else energy  # −σ(−E) or E
      bce = np.mean(np.sum(-(y * np.log(q) + (1 - y) * np.log(1 - q)), -1))
      soft_f1 = np.mean(2 * np.sum(q * y, -1) / (np.sum(q, -1) + np.sum(y, -1)))
      expected = w1 * np.mean(term) + w2 * bce - w3 * soft_f1
      np.testing.assert_allclose(float(value), expected, rtol=1e-12)
      np.testing.assert_allclose(float(metrics["energy"]), np.mean(energy), rtol=1e-12)
      assert ("score" in metrics) == bool(w3)

  @parameterized.named_parameters(
    ("l1", task_losses.L1(), scores.soft_f1, lambda q, y: np.sum(np.abs(q - y), -1)),
    ("squared", task_losses.Squared(), scores.soft_f1, lambda q, y: np.sum((q - y) ** 2, -1)),
    (
      "log",
      task_losses.Log(0.01),
      scores.soft_f1,
      lambda q, y: np.sum(
        -(y * np.log(np.clip(q, 0.01, 0.99)) + (1 - y) * np.log(1 - np.clip(q, 0.01, 0.99))), -1
      ),
    ),
    ("score_soft_iou", seal.OneMinusScore(), scores.soft_iou, lambda q, y: 1 - _soft_iou(q, y)),
  )
  def test_the_dynamic_margin_matches_its_formula_for_each_cost(self, cost, score, delta):
    with jax.enable_x64(True):
      task_net, loss_net = _nets()
      batch = _batch(17, np.float64)
      task_params, loss_params = _init_params(batch["x"])
      losses = seal.seal_losses(
        loss_net,
        task_net,
        options=seal.SealOptions(score=score),
        loss_net_objective=seal.SealMargin(margin_cost=cost),
      )
      value, metrics = jax.jit(losses.loss_net)(loss_params, task_params, batch, jax.random.key(0))
      q = _sigmoid(task_net.apply({"params": task_params}, batch["x"]))
      y = np.asarray(batch["y"])
      energy = lambda out: np.asarray(loss_net.apply({"params": loss_params}, batch["x"], out))
      bracket = delta(q, y) - energy(q) + energy(y)
      np.testing.assert_allclose(float(value), np.mean(np.maximum(bracket, 0)), rtol=1e-12)
      np.testing.assert_allclose(float(metrics["delta"]), np.mean(delta(q, y)), rtol=1e-12)


class SquaredScoreError(NamedTuple):
  """A user's loss-net objective: `weight · mean (σ(−E(x, ŷ)) − s(ŷ, y))²`, ŷ the
  task-net's output (DVN's regression with a squared error in place of the
  cross-entropy)."""

  weight: float = 1.0

  def loss(self, inputs: seal.LossNetInputs):
    y_hat = inputs.structure.link(inputs.task_logits)
    energy = inputs.energy.energy(inputs.params, inputs.encoding, y_hat)
    target = jax.lax.stop_gradient(inputs.score(y_hat, inputs.y))
    error = jnp.mean(jnp.square(jax.nn.sigmoid(-energy) - target))
    return self.weight * error, {"squared_error": error}


class LossNetObjectiveValuesTest(parameterized.TestCase):
  """Loss-net objectives are values; a user's own plugs in as the library's do."""

  def test_a_users_loss_net_objective_matches_its_formula_and_trains(self):
    task_net, loss_net = _nets()
    batch = _batch(14)
    task_params, loss_params = _init_params(batch["x"])
    losses = seal.seal_losses(loss_net, task_net, loss_net_objective=SquaredScoreError(2.0))
    value, metrics = jax.jit(losses.loss_net)(loss_params, task_params, batch, jax.random.key(0))
    q = np.asarray(jax.nn.sigmoid(task_net.apply({"params": task_params}, batch["x"])))
    y = np.asarray(batch["y"])
    energy = np.asarray(loss_net.apply({"params": loss_params}, batch["x"], q))
    soft_f1 = 2 * np.sum(q * y, -1) / (np.sum(q, -1) + np.sum(y, -1))
    expected = np.mean((1 / (1 + np.exp(energy)) - soft_f1) ** 2)
    np.testing.assert_allclose(float(metrics["squared_error"]), expected, rtol=1e-5)
    np.testing.assert_allclose(float(value), 2.0 * expected, rtol=1e-5)
    # Plugged into SEAL-dynamic, it trains the loss-net (its error falls on a fixed batch
    # and key) and the task-net against it.
    objective = seal.seal_objective(
      loss_net, task_net, optax.adam(1e-2), optax.adam(1e-2), loss_net_objective=SquaredScoreError()
    )
    start = state = objective.init(jax.random.key(0), batch)
    update = jax.jit(objective.update)
    errors = []
    for _ in range(8):
      state, metrics = update(state, batch, jax.random.key(1))
      errors.append(float(metrics["loss_net_squared_error"]))
    self.assertTrue(np.all(np.isfinite(errors)))
    self.assertLess(errors[-1], 0.5 * errors[0], errors)
    for group in ("task_net", "loss_net"):
      self.assertFalse(
        all(
          np.array_equal(u, v)
          for u, v in zip(
            jax.tree.leaves(start[group].params), jax.tree.leaves(state[group].params)
          )
        ),
        group,
      )


class ConfigBlockTest(parameterized.TestCase):
  """experiments/choices/seal.py: a config's `seal` block, by name, onto the values."""

  def _parse(self, **block):
    return seal_choices.seal_options_from_config(
      dict(seal_choices.seal_config_defaults(), **block),
      loss_aug_gbi=TRAIN_GBI,
      predict_gbi=PREDICT_GBI,
    )

  def test_the_defaults_are_the_librarys_for_every_objective(self):
    defaults = seal_choices.seal_config_defaults()
    self.assertEqual(tuple(defaults), seal_choices.KEYS)
    self.assertEqual(
      seal_choices.seal_options_from_config(defaults), (seal.SealOptions(), seal.SealNCE())
    )
    for name, cls in seal_choices.LOSS_NET_OBJECTIVES.items():
      self.assertEqual(
        seal_choices.seal_options_from_config(dict(defaults, objective=name)),
        (seal.SealOptions(), cls()),
        name,
      )

  def test_every_name_maps_onto_its_value(self):
    cases = [
      ("phase", "dynamic", seal.SealOptions()),
      ("phase", "loss_net", seal.SealOptions(train_task_net=False)),
      ("phase", "task_net", seal.SealOptions(train_loss_net=False)),
      ("energy_term", "energy", seal.SealOptions()),
      ("energy_term", "neg_value", seal.SealOptions(neg_value_term=True)),
      ("score", "soft_f1", seal.SealOptions(score=scores.soft_f1)),
      ("score", "soft_iou", seal.SealOptions(score=scores.soft_iou)),
      ("predict", "task_net", seal.SealOptions()),
      ("predict", "gbi", seal.SealOptions(predict_gbi=PREDICT_GBI)),
      ("predict_init", "uniform", seal.SealOptions()),
      ("predict_init", "task_net", seal.SealOptions(predict_from_task_net=True)),
      ("task_net_init", "carry", seal.SealOptions()),
      ("task_net_init", "fresh", seal.SealOptions(fresh_task_net=True)),
    ]
    tables = {
      "phase": seal_choices.PHASES,
      "energy_term": seal_choices.ENERGY_TERMS,
      "predict": seal_choices.PREDICTIONS,
      "predict_init": seal_choices.PREDICT_INITS,
      "task_net_init": seal_choices.TASK_NET_INITS,
    }
    self.assertEqual(
      {(k, n) for k, n, _ in cases if k in tables},
      {(k, n) for k, table in tables.items() for n in table},
    )
    for key, name, options in cases:
      self.assertEqual(self._parse(**{key: name})[0], options, f"{key}={name}")
    margin_costs = [
      ("l1", task_losses.L1()),
      ("squared", task_losses.Squared()),
      ("log", task_losses.Log(0.01)),
      ("score", seal.OneMinusScore()),
    ]
    for name, cost in margin_costs:
      self.assertEqual(
        self._parse(objective="margin", margin_cost=name, surrogate_eps=0.01)[1],
        seal.SealMargin(margin_cost=cost, loss_aug_gbi=TRAIN_GBI),
        name,
      )
    self.assertEqual(
      self._parse(
        objective="regression",
        dvn_samples="inference+gold,random",
        dvn_sample_weights="1,0.5,2",
        extra_samples="gold,other_gold",
        extra_sample_weights="0.5,2",
      )[1],
      seal.SealRegression(
        loss_aug_gbi=TRAIN_GBI,
        dvn_samples=(dvn.Inference(), dvn.Gold(), dvn.Random()),
        dvn_sample_weights=(1.0, 0.5, 2.0),
        extra_samples=(dvn.Gold(), dvn.OtherGold()),
        extra_sample_weights=(0.5, 2.0),
      ),
    )
    self.assertEqual(
      self._parse(objective="regression_s", num_samples=3, noise_std=0.5, extra_samples="random")[
        1
      ],
      seal.SealRegressionS(3, 0.5, extra_samples=(dvn.Random(),)),
    )
    # The numbers pass through; the GBI goes only to the objectives that take one.
    self.assertEqual(
      self._parse(
        energy_weight=0.3,
        bce_weight=0.7,
        train_mode=True,
        loss_net_steps=3,
        rounds=2,
        num_samples=4,
      ),
      (
        seal.SealOptions(
          energy_weight=0.3, bce_weight=0.7, train_mode=True, loss_net_steps=3, rounds=2
        ),
        seal.SealNCE(4),
      ),
    )
    self.assertEqual(
      seal_choices.get_loss_net_objective("nce", num_samples=2), seal.SealNCE(num_samples=2)
    )

  def test_unknown_names_and_keys_fail_in_one_line_naming_the_known_ones(self):
    cases = [
      (dict(objective="contrastive"), ("contrastive", "margin", "nce")),
      (dict(phase="static"), ("static", "dynamic", "loss_net", "task_net")),
      (dict(energy_term="score"), ("score", "energy", "neg_value")),
      (dict(score="soft_iouu"), ("soft_iouu", "soft_f1", "soft_iou")),
      (dict(predict="argmax"), ("argmax", "task_net", "gbi")),
      (dict(predict_init="gold"), ("gold", "uniform", "task_net")),
      (dict(task_net_init="pretrained"), ("pretrained", "carry", "fresh")),
      (dict(objective="margin", margin_cost="hamming"), ("hamming", "l1")),
      (dict(objective="regression", dvn_samples="inference,nearby"), ("nearby",)),
      (dict(num_sample=3), ("num_sample", "num_samples", "energy_weight", "objective")),
    ]
    for block, names in cases:
      with self.assertRaises(ValueError, msg=str(block)) as caught:
        self._parse(**block)
      message = str(caught.exception)
      self.assertNotIn("\n", message)
      for name in names:
        self.assertIn(f"'{name}'", message, block)
    for call, names in (
      (
        lambda: seal_choices.get_loss_net_objective("contrastive"),
        tuple(seal_choices.LOSS_NET_OBJECTIVES),
      ),
      (
        lambda: seal_choices.get_loss_net_objective("margin", num_samples=3),
        ("num_samples", "margin_cost"),
      ),
      (
        lambda: seal_choices.get_loss_net_objective("nce", extra_samples=(dvn.Gold(),)),
        ("extra_samples", "nce"),
      ),
    ):
      with self.assertRaises(ValueError) as caught:
        call()
      self.assertNotIn("\n", str(caught.exception))
      for name in names:
        self.assertIn(f"'{name}'", str(caught.exception))

  def test_a_key_of_another_objective_or_gbi_without_its_options_is_refused(self):
    defaults = seal_choices.seal_config_defaults()
    with self.assertRaisesRegex(ValueError, r"noise_std=0\.5 .*'regression_s'.*not to 'nce'"):
      seal_choices.seal_options_from_config(dict(defaults, noise_std=0.5))
    with self.assertRaisesRegex(ValueError, r"margin_cost='score' .*not to 'regression'"):
      seal_choices.seal_options_from_config(
        dict(defaults, objective="regression", margin_cost="score")
      )
    # The same list written another way is still the default.
    self.assertEqual(
      seal_choices.seal_options_from_config(
        dict(defaults, dvn_samples="inference+adversarial+gold")
      )[1],
      seal.SealNCE(),
    )
    with self.assertRaisesRegex(ValueError, "predict_gbi"):
      seal_choices.seal_options_from_config(dict(defaults, predict="gbi"))


class RankingAblationTest(parameterized.TestCase):
  def test_ranking_loss_on_the_task_net_matches_an_oracle_and_finite_differences(self):
    with jax.enable_x64(True):
      task_net = MLP((), L)
      batch = _batch(8, np.float64)
      # sgd(1): the step is minus the gradient, so `update` alone gives loss and gradient.
      obj = seal.task_net_ranking(task_net, optax.sgd(1.0), num_samples=2, bce_weight=0.5)
      state = obj.init(jax.random.key(0), batch)
      params = state["task_net"].params
      rng = jax.random.key(4)

      # The same noise as the update's (rng -> (dropout, sample) keys), drawn in the same
      # jitted call from the same logits, so that XLA compiles the sampler once.
      def update_and_noise(p):
        logits = task_net.apply({"params": p}, batch["x"])
        noise = seal.bernoulli_samples(jax.random.split(rng)[1], logits, 2)
        new_state = obj.update({"task_net": state["task_net"]._replace(params=p)}, batch, rng)
        return new_state, noise, logits

      update = jax.jit(update_and_noise)
      (new, metrics), noise, logits = update(params)
      logits, noise = np.asarray(logits), np.asarray(noise)
      q = 1 / (1 + np.exp(-logits))
      y = np.asarray(batch["y"])
      log_p = lambda b, out: np.sum(out * np.log(q[b]) + (1 - out) * np.log(1 - q[b]))
      ranking = np.mean(
        [
          -log_p(b, y[b])
          + math.log(sum(math.exp(log_p(b, o)) for o in (y[b], noise[b, 0], noise[b, 1])))
          for b in range(B)
        ]
      )
      bce = np.mean(np.sum(-(y * np.log(q) + (1 - y) * np.log(1 - q)), axis=-1))
      np.testing.assert_allclose(float(metrics["ranking"]), ranking, rtol=1e-10)
      np.testing.assert_allclose(float(metrics["loss"]), ranking + 0.5 * bce, rtol=1e-10)
      grads = jax.tree.map(lambda a, b: a - b, params, new["task_net"].params)
      value_and_grad = lambda p: ((update(p)[0][1]["loss"], None), grads)
      _check_finite_differences(self, value_and_grad, params, seed=9)
      # A small step along −gradient lowers the same (same-rng) loss.
      stepped = jax.tree.map(lambda a, g: a - 0.05 * g, params, grads)
      self.assertLess(float(update(stepped)[0][1]["loss"]), float(metrics["loss"]))
      self.assertEqual(obj.predict(new, batch["x"]).shape, (B, L))


class LowRankLabelEnergy(nn.Module):
  """A user's own multi-label energy, E(x, y) = −⟨W x + b, y⟩ − yᵀ U Vᵀ y: a local
  linear term and a low-rank label-pair term (`wrong_shape`: returns the per-label
  terms `[B, L]` instead of their sum)."""

  num_labels: int
  rank: int = 2
  wrong_shape: bool = False

  @nn.compact
  def __call__(self, x, y):
    local = nn.Dense(self.num_labels, name="local")(x)
    u = self.param("u", nn.initializers.normal(0.1), (self.num_labels, self.rank))
    v = self.param("v", nn.initializers.normal(0.1), (self.num_labels, self.rank))
    per_label = -local * y - y * ((y @ v) @ u.T)
    return per_label if self.wrong_shape else jnp.sum(per_label, axis=-1)


def low_rank_label_energy(params, x, y):
  """The same energy as a plain function of a parameter dict."""
  local = x @ params["w"] + params["b"]
  return -jnp.sum(local * y, axis=-1) - jnp.einsum("bi,ir,jr,bj->b", y, params["u"], params["v"], y)


def _init_low_rank(rng, x, y, rank=2):
  keys = jax.random.split(rng, 3)
  d, num_labels = x.shape[-1], y.shape[-1]
  return {
    "w": 0.3 * jax.random.normal(keys[0], (d, num_labels)),
    "b": jnp.zeros(num_labels),
    "u": 0.1 * jax.random.normal(keys[1], (num_labels, rank)),
    "v": 0.1 * jax.random.normal(keys[2], (num_labels, rank)),
  }


def _user_energy(wrong_shape=False):
  return protocol.energy_from_module(
    LowRankLabelEnergy(L, wrong_shape=wrong_shape), domain=domains.Box(), y_shape=(L,)
  )


def _user_seal(energy, phase="dynamic", objective="nce", **kw):
  options, loss_net_objective = _values(objective, phase, **kw)
  return seal.seal_objective(
    energy,
    MLP((6,), L, activation=jnp.tanh),
    optax.sgd(0.05),
    optax.sgd(0.05),
    options=options,
    loss_net_objective=loss_net_objective,
  )


def _fit(objective, batch, num_steps):
  """`(initial state, state, losses, last metrics)` of `num_steps` jitted updates."""
  start = state = jax.jit(objective.init)(jax.random.key(0), batch)
  update = jax.jit(objective.update)
  losses = []
  for t in range(num_steps):
    state, metrics = update(state, batch, jax.random.key(t))
    losses.append(float(metrics["loss"]))
  return start, state, losses, metrics


def _assert_trained(test, objective, batch, num_steps=2):
  """A few updates: finite losses and metrics, and the loss-net's params moved."""
  start, state, losses, metrics = _fit(objective, batch, num_steps)
  test.assertTrue(np.all(np.isfinite(losses)), losses)
  test.assertTrue(all(np.isfinite(float(v)) for v in metrics.values()), metrics)
  moved = [
    not np.array_equal(u, v)
    for u, v in zip(
      jax.tree.leaves(start["loss_net"].params), jax.tree.leaves(state["loss_net"].params)
    )
  ]
  test.assertTrue(all(moved), moved)
  return state


class UserEnergyTest(parameterized.TestCase):
  """SEAL's loss-net is any `Energy`: a user's plain Flax module or function."""

  @parameterized.parameters("margin", "regression", "regression_s", "nce")
  def test_a_users_module_trains_as_the_loss_net(self, objective):
    batch = _batch(11)
    state = _assert_trained(self, _user_seal(_user_energy(), objective=objective), batch)
    self.assertEqual(set(state["loss_net"].params), {"local", "u", "v"})

  def test_a_users_function_trains_as_the_loss_net(self):
    energy = protocol.energy_from_function(
      low_rank_label_energy, domain=domains.Box(), y_shape=(L,), init=_init_low_rank
    )
    _assert_trained(self, _user_seal(energy, objective="regression_s"), _batch(12))

  def test_a_users_energy_runs_the_static_stages(self):
    # DVN's GBI samples on the user's energy, then the task-net against it, predicting
    # by GBI on it.
    energy = protocol.energy_from_function(
      low_rank_label_energy, domain=domains.Box(), y_shape=(L,), init=_init_low_rank
    )
    batch = _batch(12)
    stage1 = _user_seal(
      energy,
      phase="loss_net",
      objective="regression",
      dvn_samples=(dvn.Inference(), dvn.Gold(), dvn.Random()),
    )
    _, state, losses, _ = _fit(stage1, batch, num_steps=1)
    self.assertTrue(np.all(np.isfinite(losses)))
    stage2 = _user_seal(energy, phase="task_net", objective="margin", predict_gbi=PREDICT_GBI)
    cont = stage2.init_from(state, jax.random.key(1), batch)
    _assert_trees_equal(self, cont["loss_net"].params, state["loss_net"].params)
    y = jax.jit(stage2.predict)(cont, batch["x"])
    self.assertEqual(y.shape, (B, L))
    self.assertTrue(np.all((np.asarray(y) >= 0) & (np.asarray(y) <= 1)))

  def test_a_wrong_shaped_energy_fails_at_init_in_one_line(self):
    batch = _batch(13)
    objective = _user_seal(_user_energy(wrong_shape=True))
    with self.assertRaisesRegex(protocol.EnergyShapeError, r"expected \[B\]") as caught:
      objective.init(jax.random.key(0), batch)
    self.assertNotIn("\n", str(caught.exception))
    wrong_y = _user_seal(
      protocol.energy_from_module(LowRankLabelEnergy(L), domain=domains.Box(), y_shape=(L + 1,))
    )
    with self.assertRaisesRegex(protocol.EnergyShapeError, "y_shape"):
      wrong_y.init(jax.random.key(0), batch)


if __name__ == "__main__":
  absltest.main()
