"""Tests of SEAL's losses, states and predictions (energynets/objectives/seal.py).

Oracles: a hand-computed NCE ranking loss (gold in the normalizer) on 2 noise samples,
through the pure function and through the whole loss-net loss; numpy log-likelihoods
of Bernoulli samples; float64 central finite differences of every loss (the static
GBI samples are made parameter-independent with `num_steps=0`, so the full loss is a
smooth function). Training dynamics (descent, frozen groups) are in
tests/test_seal_training.py, kept apart so that each file compiles in under ~40 s.
"""

import math

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
import optax

from energynets import testing
from energynets.energies import SPENEnergy
from energynets.inference import GBIConfig
from energynets.nets import MLP
from energynets.objectives import energy_model
from energynets.objectives import local_bce
from energynets.objectives import seal
from energynets.objectives import ssvm

L, D, B = 4, 5, 8
TRAIN_GBI = GBIConfig(method="projected", optimizer="adam", learning_rate=0.1, num_steps=3)
PREDICT_GBI = GBIConfig(method="projected", optimizer="adam", learning_rate=0.05,
                        max_steps=6, rel_tol=0.0, abs_tol=0.0)


def _nets():
  # Smooth activations everywhere, so finite differences see no kinks.
  task_net = MLP((6,), L, activation="tanh")
  loss_net = SPENEnergy(L, (6,), feature_activation="tanh", num_measurements=3)
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
  return (task_net.init(jax.random.key(0), x)["params"],
          energy_model.init_params(loss_net, jax.random.key(1), x))


def _check_finite_differences(test, value_and_grad, params, seed):
  """`value_and_grad(params) -> ((value, aux), grads)` against float64 central differences."""
  analytic, fd = testing.directional_derivatives(lambda p: value_and_grad(p)[0][0],
                                                 lambda p: value_and_grad(p)[1], params, seed)
  test.assertGreater(abs(analytic), 1e-3)
  np.testing.assert_allclose(analytic, fd, rtol=1e-6)


def _objective(phase, objective, task_opt=None, loss_opt=None, **kw):
  task_net, loss_net = _nets()
  kw.setdefault("loss_aug_gbi", TRAIN_GBI)
  kw.setdefault("num_samples", 3)
  return seal.seal_objective(task_net, loss_net, task_opt or optax.sgd(0.05),
                             loss_opt or optax.sgd(0.05), phase=phase, objective=objective,
                             **kw)


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
      losses = seal.seal_losses(task_net, loss_net, objective="nce", num_samples=2)
      task_params, loss_params = _init_params(batch["x"])
      rng = jax.random.key(7)

      @jax.jit
      def run(p):
        """The loss and its gradient, and what the oracle needs, in one compiled call."""
        value_and_grad = jax.value_and_grad(
            lambda q: losses.loss_net(q, task_params, batch, rng), has_aux=True)(p)
        logits = task_net.apply({"params": task_params}, batch["x"])
        # The same noise: the loss splits rng into (dropout, sample) keys.
        noise = seal.bernoulli_samples(jax.random.split(rng)[1], logits, 2)
        energies = [loss_net.apply({"params": p}, batch["x"], out)
                    for out in (batch["y"], noise[:, 0], noise[:, 1])]
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
      np.testing.assert_allclose(float(metrics["gold_prob"]), np.mean(np.exp(-expected)),
                                 rtol=1e-10)
      _check_finite_differences(self, lambda p: run(p)[0], loss_params, seed=2)

  def test_bernoulli_log_prob_is_the_exact_log_likelihood(self):
    logits = jnp.array([[0.3, -1.2, 2.0]])
    ys = jnp.array([[[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]]])
    q = 1 / (1 + np.exp(-np.asarray(logits[0])))
    expected = [np.log(q[0]) + np.log(1 - q[1]) + np.log(q[2]),
                np.log(1 - q[0]) + np.log(q[1]) + np.log(1 - q[2])]
    np.testing.assert_allclose(seal.bernoulli_log_prob(logits, ys)[0], expected, rtol=1e-5)


class GradientTest(parameterized.TestCase):
  """Every loss against float64 central differences (NCE: in `NceTest`)."""

  @parameterized.named_parameters(
      ("margin_dynamic", "margin", "dynamic", "loss_net", {}),
      ("margin_static_score_cost", "margin", "loss_net", "loss_net", {"margin_cost": "score"}),
      ("regression_dynamic", "regression", "dynamic", "loss_net", {}),
      ("regression_static", "regression", "loss_net", "loss_net",
       {"dvn_samples": ("inference", "adversarial", "gold", "random")}),
      ("regression_s", "regression_s", "dynamic", "loss_net", {}),
      ("regression_dynamic_extra_samples", "regression", "dynamic", "loss_net",
       {"extra_samples": ("gold", "random", "other_gold"),
        "extra_sample_weights": (0.5, 1.0, 2.0)}),
      ("regression_s_extra_samples", "regression_s", "dynamic", "loss_net",
       {"extra_samples": ("other_gold",)}),
      ("task_net", "nce", "dynamic", "task_net", {"energy_weight": 0.7, "bce_weight": 0.3}),
      ("task_net_neg_value", "regression", "task_net", "task_net",
       {"energy_term": "neg_value"}),
  )
  def test_matches_finite_differences(self, objective, phase, which, options):
    with jax.enable_x64(True):
      task_net, loss_net = _nets()
      batch = _batch(4, np.float64)
      # num_steps=0: static GBI samples sit at their start, independent of Θ.
      losses = seal.seal_losses(task_net, loss_net, objective=objective, phase=phase,
                                num_samples=3, loss_aug_gbi=TRAIN_GBI._replace(num_steps=0),
                                **options)
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

  @parameterized.parameters("energy", "neg_value")
  def test_matches_finite_differences_and_the_closed_form_soft_f1_gradient(self, term):
    with jax.enable_x64(True):
      task_net, loss_net = _nets()
      batch = _batch(7, np.float64)
      task_params, loss_params = _init_params(batch["x"])
      losses = seal.seal_losses(task_net, loss_net, objective="regression",
                                score="soft_f1", energy_term=term)
      _, metrics = jax.jit(losses.task_net)(task_params, loss_params, batch,
                                             jax.random.key(0))
      logits = task_net.apply({"params": task_params}, batch["x"])
      p = np.asarray(jax.nn.sigmoid(logits))
      y = np.asarray(batch["y"])

      def term_of(v):
        energy = np.asarray(loss_net.apply({"params": loss_params}, batch["x"], v))
        return energy if term == "energy" else -1 / (1 + np.exp(energy))

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
      g_score = -(2 * y / total - 2 * overlap / total ** 2)
      cosine = (g_term * g_score).sum(-1) / np.sqrt(
          (g_term ** 2).sum(-1) * (g_score ** 2).sum(-1))
      np.testing.assert_allclose(float(metrics["score_grad_cosine"]), cosine.mean(),
                                 rtol=1e-6)
      self.assertLess(abs(float(metrics["score_grad_cosine"])), 1.0)


class ExtraSamplesTest(parameterized.TestCase):

  @parameterized.parameters("regression", "regression_s")
  def test_extra_samples_add_their_weighted_regression_to_a_hand_oracle(self, objective):
    with jax.enable_x64(True):
      task_net, loss_net = _nets()
      batch = _batch(2, np.float64)
      task_params, loss_params = _init_params(batch["x"])
      rng = jax.random.key(9)
      common = dict(objective=objective, num_samples=2, score="soft_f1")
      plain = seal.seal_losses(task_net, loss_net, **common)
      extra = seal.seal_losses(task_net, loss_net, extra_samples=("gold", "other_gold"),
                               extra_sample_weights=(0.5, 2.0), **common)

      @jax.jit
      def run(p):
        without = plain.loss_net(p, task_params, batch, rng)[0]
        with_extras, metrics = extra.loss_net(p, task_params, batch, rng)
        energy = lambda out: loss_net.apply({"params": p}, batch["x"], out)
        return without, with_extras, metrics, energy(batch["y"]), energy(
            jnp.roll(batch["y"], 1, axis=0))

      without, with_extras, metrics, e_gold, e_other = run(loss_params)
      y = np.asarray(batch["y"])
      other = np.roll(y, 1, axis=0)  # example i is scored with example i−1's gold

      def soft_f1(y_bar, gold):
        return 2 * np.sum(y_bar * gold, -1) / (np.sum(y_bar, -1) + np.sum(gold, -1))

      def cross_entropy(energy, score):
        value = 1 / (1 + np.exp(np.asarray(energy)))  # σ(−E)
        return -score * np.log(value) - (1 - score) * np.log(1 - value)

      expected = (0.5 * np.mean(cross_entropy(e_gold, 1.0))
                  + 2.0 * np.mean(cross_entropy(e_other, soft_f1(other, y))))
      np.testing.assert_allclose(float(with_extras - without), expected, rtol=1e-9)
      np.testing.assert_allclose(float(metrics["score_other_gold"]),
                                 np.mean(soft_f1(other, y)), rtol=1e-9)
      self.assertLess(float(metrics["score_other_gold"]), 1.0)  # the batch's labels differ


class TrainModeTest(parameterized.TestCase):
  """`train_mode`: dropout where SEAL's trainer has it, and only there."""

  def _losses(self, task_dropout, loss_dropout, train_mode, objective="nce"):
    task_net = MLP((6,), L, activation="tanh", dropout=task_dropout)
    loss_net = SPENEnergy(L, (6,), feature_activation="tanh", num_measurements=3,
                          dropout=loss_dropout)
    return seal.seal_losses(task_net, loss_net, objective=objective, num_samples=3,
                            train_mode=train_mode)

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
  def test_loss_net_samples_come_from_the_dropped_out_task_net_only_in_train_mode(
      self, objective):
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
      value_and_grad = jax.jit(jax.value_and_grad(
          lambda p: losses.task_net(p, loss_params, batch, rng), has_aux=True))
      _check_finite_differences(self, value_and_grad, task_params, seed=7)


class StatesAndPredictionTest(parameterized.TestCase):

  def test_init_from_carries_local_bce_and_spen_states(self):
    task_net, loss_net = _nets()
    batch = _batch(6)
    lb = local_bce(task_net, optax.adam(1e-2))
    lb_state = lb.init(jax.random.key(0), batch)
    spen_state = {"energy": ssvm.spen_pretrain(loss_net, optax.adam(1e-2)).init(
        jax.random.key(1), batch)["energy"]}
    # Static stage 1 from the pretrained noise net; the loss-net is fresh.
    stage1 = _objective("loss_net", "nce")
    state = stage1.init_from(lb_state, jax.random.key(2), batch)
    _assert_trees_equal(self, state["task_net"].params, lb_state["net"].params)
    # A SPEN state becomes the loss-net (e.g. an SSVM-trained SPEN for static margin).
    stage2 = _objective("task_net", "margin", task_net_init="fresh")
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
    obj = _objective("dynamic", "nce", predict="gbi", predict_gbi=PREDICT_GBI)
    state = obj.init(jax.random.key(0), batch)
    y_gbi, expected = jax.jit(lambda st, x: (obj.predict(st, x), ssvm.infer(
        loss_net, st["loss_net"].params, x, PREDICT_GBI).y))(state, batch["x"])
    logits = task_net.apply({"params": state["task_net"].params}, batch["x"])
    plain = _objective("dynamic", "nce")
    np.testing.assert_allclose(plain.predict(state, batch["x"]), jax.nn.sigmoid(logits),
                               rtol=1e-6)
    no_steps = _objective("dynamic", "nce", predict="gbi", predict_init="task_net",
                          predict_gbi=PREDICT_GBI._replace(max_steps=0))
    np.testing.assert_allclose(no_steps.predict(state, batch["x"]), jax.nn.sigmoid(logits),
                               rtol=1e-6)

  def test_rounds_of_loss_net_steps_match_a_hand_loop(self):
    # Dynamic regression draws no random samples, so the update is a deterministic
    # sequence of plain SGD steps: t=2 rounds of (s=3 loss-net steps, 1 task-net step).
    task_net, loss_net = _nets()
    batch = _batch(8)
    obj = _objective("dynamic", "regression", loss_net_steps=3, rounds=2)
    state = obj.init(jax.random.key(0), batch)
    new, metrics = jax.jit(obj.update)(state, batch, jax.random.key(1))
    losses = seal.seal_losses(task_net, loss_net, phase="dynamic", objective="regression",
                              loss_aug_gbi=TRAIN_GBI, num_samples=3)
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
    cases = [
        (dict(objective="contrastive"), "'contrastive'"),
        (dict(phase="static"), "'static'"),
        (dict(energy_term="score"), "'score'"),
        (dict(margin_cost="hamming"), "'hamming'"),
        (dict(score="soft_iouu"), "'soft_iouu'"),
        (dict(predict="argmax"), "'argmax'"),
        (dict(predict_init="gold"), "'gold'"),
        (dict(task_net_init="pretrained"), "'pretrained'"),
        (dict(loss_net_steps=0), "loss_net_steps"),
        (dict(rounds=0), "rounds"),
        (dict(num_samples=0), "num_samples"),
        (dict(noise_std=0.0), "noise_std"),
        (dict(energy_weight=-1.0), "energy_weight"),
        (dict(predict="gbi"), "predict_gbi"),
        (dict(dvn_samples=("inference", "nearby")), "'nearby'"),
        (dict(objective="regression", extra_samples=("gold", "inference")),
         "'inference'.*need GBI"),
        (dict(objective="regression", extra_samples=("gold", "gold")), "'gold'"),
        (dict(extra_samples=("gold",)), "not to 'nce'"),
        (dict(phase="loss_net", objective="regression", extra_samples=("gold",)),
         "dvn_samples"),
        (dict(phase="loss_net", objective="margin", loss_aug_gbi=None), "loss_aug_gbi"),
        (dict(phase="loss_net", objective="margin",
              loss_aug_gbi=TRAIN_GBI._replace(method="newton")), "'newton'"),
    ]
    for options, message in cases:
      options = dict(options)
      phase = options.pop("phase", "dynamic")
      objective = options.pop("objective", "nce")
      with self.assertRaisesRegex(ValueError, message, msg=str(options)):
        _objective(phase, objective, **options)
    with self.assertRaisesRegex(ValueError, "num_samples"):
      seal.task_net_ranking(MLP((), L), optax.sgd(1.0), num_samples=0)


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
      ranking = np.mean([
          -log_p(b, y[b]) + math.log(sum(math.exp(log_p(b, o))
                                         for o in (y[b], noise[b, 0], noise[b, 1])))
          for b in range(B)])
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


if __name__ == "__main__":
  absltest.main()
