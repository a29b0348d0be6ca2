"""Tests of deep value networks (energynets/objectives/dvn.py).

Oracles: the closed-form cross-entropy and its minimizer σ(−E) = s; float64 central
finite differences of the loss at fixed samples; `jax.grad` of that loss at the
samples the update draws (the training gradient must not flow through either GBI);
the defining properties of the samples (inference lowers E, the adversarial ascent
raises the loss); test-time prediction equal to `ssvm.infer`.
"""

import dataclasses

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
import optax

from energynets import testing
from energynets.energies import SPENEnergy
from energynets.energies import protocol
from energynets.inference import Adam
from energynets.inference import GBIConfig
from energynets.inference import Projected
from energynets.inference import gbi as gbi_lib
from energynets.nets import MLP
from energynets.objectives import dvn
from energynets.objectives import local_bce
from energynets.objectives import scores
from energynets.objectives import ssvm

L, D, B = 4, 5, 8
TRAIN_GBI = GBIConfig(parametrization=Projected(), direction=Adam(), learning_rate=0.1, num_steps=5)
PREDICT_GBI = GBIConfig(
  parametrization=Projected(),
  direction=Adam(),
  learning_rate=0.05,
  max_steps=8,
  rel_tol=0.0,
  abs_tol=0.0,
)
SOURCES = (dvn.Inference(), dvn.Adversarial(), dvn.Gold(), dvn.Random())
NAMES = ("inference", "adversarial", "gold", "random")


def _energy():
  return SPENEnergy(L, (6,), feature_activation=jnp.tanh, num_measurements=3)


def _batch(seed=0, dtype=np.float32):
  rs = np.random.RandomState(seed)
  y = (rs.uniform(size=(B, L)) < 0.5).astype(dtype)
  return {"x": jnp.asarray(rs.randn(B, D).astype(dtype)), "y": jnp.asarray(y)}


def _objective(**kw):
  kw.setdefault("inference_gbi", TRAIN_GBI)
  kw.setdefault("predict_gbi", PREDICT_GBI)
  optimizer = kw.pop("optimizer", optax.sgd(1.0))
  return dvn.deep_value_network(_energy(), optimizer, options=dvn.DVNOptions(**kw))


class RegressionLossTest(parameterized.TestCase):
  def test_closed_form_and_its_minimizer(self):
    energy = jnp.array([-1.0, 0.3, 2.0])
    target = jnp.array([0.9, 0.5, 0.0])
    v = 1 / (1 + np.exp(np.asarray(energy)))  # σ(−E)
    expected = -(target * np.log(v) + (1 - target) * np.log(1 - v))
    np.testing.assert_allclose(dvn.value_regression_loss(energy, target), expected, rtol=1e-5)
    # Minimized exactly where the predicted value equals the score.
    at = -jnp.log(jnp.array([0.2, 0.5, 0.7]) / (1 - jnp.array([0.2, 0.5, 0.7])))
    grad = jax.grad(lambda e: jnp.sum(dvn.value_regression_loss(e, jnp.array([0.2, 0.5, 0.7]))))
    np.testing.assert_allclose(grad(at), 0.0, atol=1e-6)

  def test_loss_gradient_matches_finite_differences(self):
    with jax.enable_x64(True):
      energy = _energy()
      batch = _batch(1, np.float64)
      rs = np.random.RandomState(2)
      params = jax.tree.map(
        lambda a: a * 2.0 + 0.1 * rs.randn(*a.shape),
        jax.jit(protocol.as_energy(energy).init)(jax.random.key(0), batch["x"], None),
      )
      samples = {
        "inference": jnp.asarray(rs.uniform(size=(B, L))),
        "adversarial": jnp.asarray(rs.uniform(size=(B, L))),
        "gold": batch["y"],
      }
      weights = {"inference": 1.0, "adversarial": 0.5, "gold": 2.0}
      value_and_grad = jax.jit(
        jax.value_and_grad(
          lambda p: dvn.dvn_loss(
            energy, p, batch["x"], batch["y"], samples, sample_weights=weights
          ),
          has_aux=True,
        )
      )
      (value, metrics), grads = value_and_grad(params)
      np.testing.assert_allclose(
        float(value),
        sum(w * float(metrics[f"regression_{k}"]) for k, w in weights.items()),
        rtol=1e-12,
      )
      np.testing.assert_allclose(float(metrics["score_gold"]), 1.0)
      analytic, fd = testing.directional_derivatives(
        lambda p: value_and_grad(p)[0][0], lambda p: value_and_grad(p)[1], params, 3
      )
      np.testing.assert_allclose(analytic, fd, rtol=1e-6)


class TrainingTest(parameterized.TestCase):
  def test_update_is_the_gradient_at_the_drawn_samples_which_carry_no_gradient(self):
    energy = _energy()
    batch = _batch(3)
    obj = _objective(samples=SOURCES, sample_weights=(1.0, 1.0, 0.5, 0.25))
    state = obj.init(jax.random.key(0), batch)
    params = state["energy"].params
    rng = jax.random.key(4)
    weights = dict(zip(NAMES, (1.0, 1.0, 0.5, 0.25)))
    energy_fn = protocol.as_energy(energy).energy

    def draw(p):
      encoding = protocol.as_energy(energy).encode(p, batch["x"])
      return dvn.draw_samples(
        protocol.as_energy(energy),
        p,
        encoding,
        batch["x"],
        batch["y"],
        jax.random.split(rng)[1],
        sources=SOURCES,
        inference_gbi=TRAIN_GBI,
        adversarial_gbi=TRAIN_GBI,
        score=scores.soft_f1,
      )

    @jax.jit
    def reference(p):
      samples = draw(p)
      (loss, metrics), grads = jax.value_and_grad(
        lambda q: dvn.dvn_loss(energy, q, batch["x"], batch["y"], samples, sample_weights=weights),
        has_aux=True,
      )(p)
      leak = jax.grad(lambda q: sum(jnp.sum(v) for v in draw(q).values()))(p)
      return samples, loss, metrics, grads, leak

    samples, loss, metrics, grads, leak = reference(params)
    for g in jax.tree.leaves(leak):
      np.testing.assert_array_equal(g, 0.0)
    new, update_metrics = jax.jit(obj.update)(state, batch, rng)
    np.testing.assert_allclose(update_metrics["loss"], loss, rtol=1e-5)
    np.testing.assert_allclose(
      update_metrics["regression_adversarial"], metrics["regression_adversarial"], rtol=1e-5
    )
    stepped = jax.tree.map(lambda a, b: a - b, params, new["energy"].params)  # sgd(1) = grad
    for g, s in zip(jax.tree.leaves(grads), jax.tree.leaves(stepped)):
      np.testing.assert_allclose(s, g, rtol=1e-4, atol=1e-6)
    # What the samples are: GBI lowers E from the uniform start; the ascent raises ℓ
    # from the prediction; gold is y; random lies in the box.
    encoding = protocol.as_energy(energy).encode(params, batch["x"])
    start = jnp.full((B, L), 0.5)
    self.assertLess(
      float(jnp.mean(energy_fn(params, encoding, samples["inference"]))),
      float(jnp.mean(energy_fn(params, encoding, start))),
    )
    self.assertGreater(
      float(metrics["regression_adversarial"]), float(metrics["regression_inference"])
    )
    np.testing.assert_array_equal(samples["gold"], batch["y"])
    for name in NAMES:
      self.assertTrue(np.all((samples[name] >= 0) & (samples[name] <= 1)), name)

  def test_other_gold_is_the_previous_examples_gold_and_needs_no_gbi(self):
    energy = _energy()
    batch = _batch(6)
    params = protocol.as_energy(energy).init(jax.random.key(0), batch["x"], None)
    encoding = protocol.as_energy(energy).encode(params, batch["x"])
    draw = lambda y: dvn.draw_samples(
      protocol.as_energy(energy),
      params,
      encoding,
      batch["x"],
      y,
      jax.random.key(1),
      sources=(dvn.OtherGold(),),
      inference_gbi=None,
      adversarial_gbi=None,
      score=scores.soft_f1,
    )
    np.testing.assert_array_equal(draw(batch["y"])["other_gold"], np.roll(batch["y"], 1, axis=0))
    with self.assertRaisesRegex(ValueError, "at least 2 examples"):
      draw(batch["y"][:1])

  def test_a_few_steps_reduce_the_loss_and_prediction_is_test_time_gbi(self):
    energy = _energy()
    batch = _batch(5)
    obj = _objective(optimizer=optax.adam(0.05))
    state, history, _ = testing.fit_one_batch(obj, batch, 12)
    self.assertLess(np.mean(history[-3:]), np.mean(history[:3]), history)
    y_pred, expected = jax.jit(
      lambda st, x: (obj.predict(st, x), ssvm.infer(energy, st["energy"].params, x, PREDICT_GBI).y)
    )(state, batch["x"])
    np.testing.assert_allclose(y_pred, expected, rtol=1e-6)
    self.assertEqual(y_pred.shape, (B, L))

  def test_seal_public_options_random_starts_and_best_iterates(self):
    # SEAL's public DVN: GBI from U[0,1] starts, each keeping its best iterate; the ascent
    # from its own random start.
    energy = _energy()
    batch = _batch(7)
    best_gbi = TRAIN_GBI._replace(pick_best=True, learning_rate=0.3)
    params = protocol.as_energy(energy).init(jax.random.key(3), batch["x"], None)
    params = jax.tree.map(lambda a: 3.0 * a, params)  # a rugged energy
    encoding = protocol.as_energy(energy).encode(params, batch["x"])
    energy_fn = protocol.as_energy(energy).energy

    @jax.jit
    def draw(rng):
      return dvn.draw_samples(
        protocol.as_energy(energy),
        params,
        encoding,
        batch["x"],
        batch["y"],
        rng,
        sources=(dvn.Inference(), dvn.Adversarial(random_start=True)),
        inference_gbi=best_gbi,
        adversarial_gbi=best_gbi,
        score=scores.soft_f1,
        init="random",
      )

    rng = jax.random.key(5)
    samples = draw(rng)
    # The inference start is U[0,1] from a key of rng; its sample is the lowest-energy
    # point of the 'last' trajectory from that start (the trajectory's own oracle).
    start = protocol.as_energy(energy).start(encoding, None, "random", jax.random.fold_in(rng, 1))
    self.assertGreater(float(jnp.std(start)), 0.2)
    _, trace = jax.jit(
      lambda y0: gbi_lib.gbi_scan(
        energy_fn, params, encoding, y0, protocol.BOX, best_gbi._replace(pick_best=False)
      )
    )(start)
    np.testing.assert_allclose(
      samples["inference"], testing.trajectory_best(start, trace)[1], atol=1e-6
    )
    # The ascent starts elsewhere than the prediction and raises the loss from its start.
    adv_start = protocol.as_energy(energy).start(
      encoding, None, "random", jax.random.fold_in(rng, 2)
    )
    loss = lambda y_bar: dvn.value_regression_loss(
      energy_fn(params, encoding, y_bar), scores.soft_f1(y_bar, batch["y"])
    )
    self.assertTrue(np.all(loss(samples["adversarial"]) >= loss(adv_start) - 1e-6))
    self.assertFalse(np.allclose(samples["adversarial"], samples["inference"]))
    # Another key, other starts, other samples.
    self.assertFalse(np.allclose(draw(jax.random.key(6))["inference"], samples["inference"]))
    # Training with these options lowers the loss; test time starts from the fixed key.
    obj = _objective(
      optimizer=optax.adam(0.05),
      inference_gbi=best_gbi,
      init="random",
      samples=(dvn.Inference(), dvn.Adversarial(random_start=True), dvn.Gold()),
      predict_gbi=PREDICT_GBI._replace(pick_best=True),
    )
    state, history, _ = testing.fit_one_batch(obj, batch, 12)
    self.assertLess(np.mean(history[-3:]), np.mean(history[:3]), history)
    predict = jax.jit(obj.predict)
    y_pred = predict(state, batch["x"])
    np.testing.assert_array_equal(predict(state, batch["x"]), y_pred)
    expected = ssvm.infer(
      energy,
      state["energy"].params,
      batch["x"],
      PREDICT_GBI._replace(pick_best=True),
      init="random",
    ).y
    np.testing.assert_allclose(y_pred, expected, rtol=1e-6)

  def test_init_from_carries_a_spen_state(self):
    batch = _batch(6)
    spen = ssvm.spen_pretrain(_energy(), optax.adam(1e-2)).init(jax.random.key(1), batch)
    state = _objective().init_from(spen, jax.random.key(2), batch)
    for a, b in zip(
      jax.tree.leaves(state["energy"].params), jax.tree.leaves(spen["energy"].params)
    ):
      np.testing.assert_array_equal(a, b)

  def test_init_from_puts_a_local_bce_network_into_the_local_term(self):
    # `stage_order=pretrain,dvn` (experiments/configs/dvn.py): the MLP trained on BCE
    # becomes local_net exactly; the global term starts fresh.
    batch = _batch(7)
    net = MLP(hidden=(6,), num_outputs=L, activation=jnp.tanh)
    bce = local_bce(net, optax.adam(1e-2)).init(jax.random.key(1), batch)
    state = _objective().init_from(bce, jax.random.key(2), batch)
    carried = state["energy"].params["local_net"]
    self.assertEqual(jax.tree.structure(carried), jax.tree.structure(bce["net"].params))
    for a, b in zip(jax.tree.leaves(carried), jax.tree.leaves(bce["net"].params)):
      np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(
      protocol.as_energy(_energy()).encode(state["energy"].params, batch["x"]).logits,
      net.apply({"params": bce["net"].params}, batch["x"]),
    )

  def test_each_source_draws_its_formula_and_a_source_of_your_own_plugs_in(self):
    energy = protocol.as_energy(_energy())
    batch = _batch(4)
    params = energy.init(jax.random.key(0), batch["x"], None)
    encoding = energy.encode(params, batch["x"])
    rng = jax.random.key(3)

    @dataclasses.dataclass(frozen=True)
    class Flipped:  # a source of one's own: the complement of the gold output
      name = "flipped"
      needs_gbi = False
      needs_prediction = False

      def __call__(self, context):
        return 1.0 - context.y

    draw = jax.jit(
      lambda p: dvn.draw_samples(
        energy,
        p,
        encoding,
        batch["x"],
        batch["y"],
        rng,
        sources=(dvn.Inference(), dvn.Gold(), dvn.Random(), dvn.OtherGold(), Flipped()),
        inference_gbi=TRAIN_GBI,
        adversarial_gbi=None,
        score=scores.soft_f1,
      )
    )
    samples = draw(params)
    self.assertCountEqual(samples, ["inference", "gold", "random", "other_gold", "flipped"])
    start = energy.start(encoding, batch["x"], "uniform", jax.random.fold_in(rng, 1))
    prediction, _ = jax.jit(
      lambda p: gbi_lib.gbi_scan(energy.energy, p, encoding, start, energy.domain, TRAIN_GBI)
    )(params)
    np.testing.assert_array_equal(samples["inference"], prediction)
    np.testing.assert_array_equal(samples["gold"], batch["y"])
    np.testing.assert_array_equal(
      samples["random"], energy.start(encoding, batch["x"], protocol.RANDOM, rng)
    )
    np.testing.assert_array_equal(samples["other_gold"], np.roll(batch["y"], 1, axis=0))
    np.testing.assert_array_equal(samples["flipped"], 1.0 - batch["y"])
    obj = _objective(samples=(dvn.Gold(), Flipped()))
    _, metrics = jax.jit(obj.update)(obj.init(jax.random.key(1), batch), batch, rng)
    np.testing.assert_allclose(
      metrics["score_flipped"], jnp.mean(scores.soft_f1(1.0 - batch["y"], batch["y"]))
    )

  def test_a_sampler_and_a_score_of_your_own_are_what_the_update_regresses(self):
    energy = _energy()
    batch = _batch(5)
    calls = []

    def sampler(model, params, encoding, x, y, rng):
      calls.append(model.name)
      half = jnp.full_like(y, 0.5)
      return {"half": half + 0.1 * jax.random.uniform(rng, y.shape), "gold": y}

    def overlap(y_soft, y):  # a score in [0, 1] that is not the soft F1
      return jnp.mean(y_soft * y + (1 - y_soft) * (1 - y), axis=-1)

    options = dvn.DVNOptions(
      predict_gbi=PREDICT_GBI, sampler=sampler, sample_weights=(2.0, 0.5), score=overlap
    )
    obj = dvn.deep_value_network(energy, optax.sgd(1.0), options=options)
    state = obj.init(jax.random.key(0), batch)
    params = state["energy"].params
    rng = jax.random.key(7)
    samples = sampler(
      protocol.as_energy(energy), params, None, batch["x"], batch["y"], jax.random.split(rng)[1]
    )
    (loss, _), grads = jax.value_and_grad(
      lambda q: dvn.dvn_loss(
        energy,
        q,
        batch["x"],
        batch["y"],
        samples,
        sample_weights={"half": 2.0, "gold": 0.5},
        score=overlap,
      ),
      has_aux=True,
    )(params)
    new, metrics = obj.update(state, batch, rng)
    self.assertIn("regression_half", metrics)
    np.testing.assert_allclose(metrics["loss"], loss, rtol=1e-5)
    np.testing.assert_allclose(metrics["score_gold"], 1.0, rtol=1e-6)  # overlap(y, y)
    stepped = jax.tree.map(lambda a, b: a - b, params, new["energy"].params)
    for g, s in zip(jax.tree.leaves(grads), jax.tree.leaves(stepped)):
      np.testing.assert_allclose(s, g, rtol=1e-4, atol=1e-6)
    self.assertTrue(calls)
    with self.assertRaisesRegex(ValueError, "3 weights for the sampler's 2 samples"):
      dvn.deep_value_network(
        energy,
        optax.sgd(1.0),
        options=dvn.DVNOptions(
          predict_gbi=PREDICT_GBI, sampler=sampler, sample_weights=(1.0, 1.0, 1.0)
        ),
      ).update(state, batch, rng)
    with self.assertRaisesRegex(ValueError, "either samples"):
      dvn.DVNOptions(predict_gbi=PREDICT_GBI, sampler=sampler, samples=(dvn.Gold(),))

  def test_bad_options_raise_naming_them(self):
    cases = [
      (dict(samples=(dvn.Gold(), dvn.Gold())), "distinct"),
      (dict(samples=()), "DVN samples"),
      (dict(sample_weights=(1.0, 1.0)), "sample_weights"),
      (dict(sample_weights=(1.0, -1.0, 1.0)), "sample_weights"),
      (dict(init="gold"), "'gold'"),
    ]
    for options, message in cases:
      with self.assertRaisesRegex(ValueError, message, msg=str(options)):
        _objective(**options)
    for options, message in (
      (dict(samples="gold"), "sequence of sources"),
      (dict(samples=(dvn.Inference(), "neighbours")), "'neighbours'"),
      (dict(score="soft_iouu"), "score is a function"),
      (dict(inference_gbi=TRAIN_GBI._replace(direction="lbfgs")), "'lbfgs'"),
    ):
      with self.assertRaisesRegex(TypeError, message, msg=str(options)):
        _objective(**options)
    with self.assertRaisesRegex(TypeError, "'sample'"):
      _objective(sample=(dvn.Gold(),))
    with self.assertRaisesRegex(TypeError, "DVNOptions"):
      dvn.deep_value_network(_energy(), optax.sgd(1.0))
    with self.assertRaisesRegex(ValueError, "needs predict_gbi"):
      dvn.deep_value_network(
        _energy(), optax.sgd(1.0), options=dvn.DVNOptions(inference_gbi=TRAIN_GBI)
      )


if __name__ == "__main__":
  absltest.main()
