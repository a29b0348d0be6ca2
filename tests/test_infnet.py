"""Tests of joint energy / inference-network training (energynets/objectives/infnet/).

Oracles: float64 central finite differences of both players' losses; exact zeros where
a gradient must be blocked (the stacked F_Φ into A_Ψ, a truncated hinge into Θ); the
closed-form minimizer of a linear energy (A_Ψ must learn sign(ℓ)); descent of each
player's own loss over an update; eager vs. jitted updates; parameter identity across
stages; the config names (`experiments.choices.infnet`) against the values they stand for.
"""

import dataclasses
import functools

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
import optax

from energynets import domains
from energynets import testing
from energynets.energies import SPENEnergy
from energynets.energies import protocol
from energynets.nets import MLP
from energynets.nets import softplus
from energynets.objectives import base
from energynets.objectives import infnet
from energynets.objectives import local_bce
from energynets.objectives import ssvm as ssvm_lib
from energynets.objectives import task_losses
from experiments import configuration
from experiments.choices import infnet as infnet_choices

L, D, B = 4, 5, 8
# The problems are tiny, so XLA's compile time dominates these tests: skip LLVM's
# optimization passes (numerics are unchanged; about 40% less compile time).
_jit = functools.partial(jax.jit, compiler_options={"xla_backend_optimization_level": 0})
MARGIN, PERCEPTRON, COMPOUND = (
  infnet.InfNetMargin(),
  infnet.InfNetPerceptron(),
  infnet.InfNetCompound(),
)
SEPARATED, SHARED, STACKED = (
  infnet.InfNetSeparated(),
  infnet.InfNetShared(),
  infnet.InfNetStacked(),
)
ARCHITECTURES = {"separated": SEPARATED, "shared": SHARED, "stacked": STACKED}
# Every objective and every architecture (perceptron has no F_Φ: no architecture).
# Each pair is an XLA compilation of the whole update, so not the full product.
COMBINATIONS = (
  (MARGIN, SEPARATED),
  (PERCEPTRON, SEPARATED),
  (COMPOUND, SHARED),
  (COMPOUND, STACKED),
)


def _batch(seed=0, batch=B, dtype=np.float32):
  rs = np.random.RandomState(seed)
  return {
    "x": jnp.asarray(rs.randn(batch, D), dtype),
    "y": jnp.asarray(rs.uniform(size=(batch, L)) < 0.5, dtype),
  }


def _smooth_energy():
  """Smooth in Θ and ȳ (softplus everywhere), so finite differences are exact to O(ε²)."""
  return SPENEnergy(L, (6,), feature_activation=softplus, num_measurements=3, num_conditional=2)


def _smooth_net():
  return MLP((6,), L, activation=jnp.tanh)


def _assert_trees_equal(test, a, b):
  test.assertEqual(jax.tree.structure(a), jax.tree.structure(b))
  for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    np.testing.assert_array_equal(u, v)


def _randomize(params, seed, scale=0.7):
  rs = np.random.RandomState(seed)
  return jax.tree.map(lambda a: jnp.asarray(rs.randn(*a.shape) * scale, a.dtype), params)


def _directional_fd(fn, params, seed, grad_of=None, eps=1e-6):
  """(⟨∇, v⟩ by autodiff, by central differences of `fn`) along a random direction v.

  `grad_of` (default `fn`) is the function autodiff differentiates; tests pass another
  one where a `stop_gradient` makes autodiff's gradient differ from `fn`'s derivative.
  One jitted `value_and_grad` serves all three evaluations (one compilation).
  """
  value_and_grad = _jit(jax.value_and_grad(grad_of or fn))
  value = (lambda p: value_and_grad(p)[0]) if grad_of is None else _jit(fn)
  return testing.directional_derivatives(value, lambda p: value_and_grad(p)[1], params, seed, eps)


def _counting_sgd(lr):
  """SGD whose state counts its steps (plain `optax.sgd` keeps none)."""
  return optax.chain(optax.scale_by_schedule(lambda count: 1.0), optax.sgd(lr))


def _steps_taken(group) -> int:
  return int(group.opt_state[0].count)


class UpdateTest(parameterized.TestCase):
  @parameterized.parameters(*COMBINATIONS)
  def test_each_update_lowers_each_players_own_loss(self, objective, architecture):
    """Under `jax.jit`: k I steps lower the nets' loss at the old energy, then the E step
    lowers the energy's loss at the nets' new outputs; k and 1 optimizer steps."""
    k = 3
    energy = SPENEnergy(L, (6,), feature_activation=softplus, num_measurements=3)
    obj = infnet.inference_network(
      energy,
      _smooth_net(),
      _counting_sgd(0.02),
      _counting_sgd(0.02),
      options=infnet.InfNetOptions(architecture=architecture, num_inner_steps=k),
      energy_objective=objective,
    )
    losses = infnet.infnet_losses(
      energy,
      _smooth_net(),
      options=infnet.InfNetOptions(architecture=architecture),
      energy_objective=objective,
    )
    batch = _batch(1)

    @_jit  # one compilation: the update and both players' losses around it
    def update_and_own_losses(state, rng):
      new, metrics = obj.update(state, batch, rng)
      nets = lambda s: {k: s[k].params for k in ("test_net", "cost_net") if k in s}
      old_energy = infnet.energy_evaluator(energy, state["energy"].params, batch["x"])
      inner = [
        losses.inference_loss(nets(s), old_energy, batch, rng)[0] for s in (state, new)
      ]  # no dropout anywhere: deterministic losses
      test_logits, cost_logits = losses.net_logits(nets(new), batch["x"], batch["y"])
      y_test = jax.nn.sigmoid(test_logits)
      y_cost = None if cost_logits is None else jax.nn.sigmoid(cost_logits)
      outer = [
        losses.energy_loss(s["energy"].params, batch, y_cost, y_test, rng)[0] for s in (state, new)
      ]
      return new, metrics, inner, outer

    net_groups = ("test_net",) + (("cost_net",) if objective.uses_cost_net else ())
    state = _jit(obj.init)(jax.random.key(0), batch)
    for t in range(3):
      state, metrics, inner, outer = update_and_own_losses(state, jax.random.key(t))
      self.assertEqual(set(state), {"energy", *net_groups})
      self.assertLess(float(inner[1]), float(inner[0]), f"I steps, update {t}")
      self.assertLess(float(outer[1]), float(outer[0]), f"E step, update {t}")
      # `loss` is the E step's loss, evaluated before its step.
      np.testing.assert_allclose(metrics["loss"], outer[0], rtol=1e-5)
      for name in ("loss", "grad_norm", "infnet_loss", "infnet_grad_norm"):
        self.assertTrue(np.isfinite(float(metrics[name])), name)
      self.assertEqual(_steps_taken(state["energy"]), t + 1)
      for name in net_groups:
        self.assertEqual(_steps_taken(state[name]), k * (t + 1), name)
    y_soft = _jit(obj.predict)(state, batch["x"])
    self.assertEqual(y_soft.shape, (B, L))
    self.assertTrue(np.all((y_soft > 0) & (y_soft < 1)))

  def test_test_net_learns_the_minimizer_of_a_fixed_linear_energy(self):
    """E = −Σ ȳ ℓ(x) is minimized over [0,1]^L at ȳ = [ℓ > 0]: with CE off and the
    energy frozen, A_Ψ must learn the sign of ℓ."""
    rs = np.random.RandomState(3)
    energy = SPENEnergy(L, (), num_measurements=2)
    batch = {"x": jnp.asarray(rs.randn(64, D), jnp.float32), "y": jnp.zeros((64, L), jnp.float32)}
    obj = infnet.inference_network(
      energy,
      MLP((16,), L),
      optax.set_to_zero(),
      optax.adam(3e-2),
      options=infnet.InfNetOptions(ce_weight=0.0),
      energy_objective=PERCEPTRON,
    )
    state = _jit(obj.init)(jax.random.key(0), batch)
    params = state["energy"].params
    params["global"]["weights"]["kernel"] = jnp.zeros_like(params["global"]["weights"]["kernel"])
    params["local_net"]["head"]["kernel"] = jnp.asarray(rs.randn(D, L) * 2, jnp.float32)
    state["energy"] = base.ParamGroup(params, state["energy"].opt_state)
    update = _jit(obj.update)
    for t in range(60):
      state, _ = update(state, batch, jax.random.key(t))
    _assert_trees_equal(self, state["energy"].params, params)  # frozen energy
    local = _jit(lambda p, x: energy.apply({"params": p}, x, method=SPENEnergy.local_logits))(
      params, batch["x"]
    )
    y_soft = _jit(obj.predict)(state, batch["x"])
    confident = np.abs(np.asarray(local)) > 0.5
    np.testing.assert_array_equal(
      (np.asarray(y_soft) > 0.5)[confident], (np.asarray(local) > 0)[confident]
    )
    logits = _jit(MLP((16,), L).apply)({"params": state["test_net"].params}, batch["x"])
    np.testing.assert_allclose(y_soft, jax.nn.sigmoid(logits), rtol=1e-6)


def _x64_setup(losses, energy, seed):
  """A float64 batch, energy and nets, random; shapes from `jax.eval_shape` (nothing
  compiles, and flax would create float32 parameters)."""
  batch = _batch(seed, dtype=np.float64)
  rs = np.random.RandomState(seed + 1)
  random64 = lambda tree: jax.tree.map(
    lambda a: jnp.asarray(rs.randn(*a.shape) * 0.7, jnp.float64), tree
  )
  energy_params = random64(
    jax.eval_shape(energy.init, jax.random.key(0), batch["x"], batch["y"])["params"]
  )
  nets = random64(jax.eval_shape(losses.init_nets, jax.random.key(1), batch))
  return batch, energy_params, nets


class GradientTest(parameterized.TestCase):
  @parameterized.parameters(
    (SEPARATED, infnet.InfNetTruncation()),
    (SHARED, infnet.InfNetTruncation(inference_step=True)),
    (STACKED, infnet.InfNetTruncation()),
  )
  def test_inference_loss_gradient_matches_finite_differences(self, architecture, truncate):
    with jax.enable_x64(True):
      energy, net = _smooth_energy(), _smooth_net()
      losses = infnet.infnet_losses(
        energy,
        net,
        options=infnet.InfNetOptions(architecture=architecture, truncate=truncate, net_l2=0.1),
        energy_objective=infnet.InfNetCompound(compound_weight=0.7),
      )
      batch, energy_params, nets = _x64_setup(losses, energy, 4)
      energy_of = infnet.energy_evaluator(energy, energy_params, batch["x"])
      rng = jax.random.key(2)
      full = lambda p: losses.inference_loss(p, energy_of, batch, rng)[0]
      if architecture != STACKED:
        # 'shared': the cost terms reach the shared feature network (part of test_net).
        analytic, numeric = _directional_fd(full, nets, 7)
        np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-8)
        return
      # Stacked: F_Φ reads A_Ψ(x) through a stop_gradient, so autodiff's gradient is the
      # full derivative in Φ (Ψ held) and, in Ψ, the derivative of A_Ψ's terms alone.
      cost_only = lambda phi: full(dict(nets, cost_net=phi))
      analytic, numeric = _directional_fd(cost_only, nets["cost_net"], 7)
      np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-8)
      test_terms = infnet.infnet_losses(
        energy,
        net,
        options=infnet.InfNetOptions(energy_weight=0.7, net_l2=0.1),
        energy_objective=PERCEPTRON,
      )
      a_only = lambda psi: test_terms.inference_loss({"test_net": psi}, energy_of, batch, rng)[0]
      test_only = lambda psi: full(dict(nets, test_net=psi))
      analytic, numeric = _directional_fd(a_only, nets["test_net"], 8, grad_of=test_only)
      np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-8)
      # ... and yet the full loss does depend on Ψ through F_Φ: the block is real.
      _, numeric_full = _directional_fd(test_only, nets["test_net"], 8)
      self.assertGreater(abs(numeric_full - numeric), 1e-3)

  # 'compound' is the margin term plus λ_c times the perceptron term: it covers both.
  @parameterized.parameters(
    (infnet.InfNetTruncation(),), (infnet.InfNetTruncation(energy_step=False),)
  )
  def test_energy_loss_gradient_matches_finite_differences(self, truncate):
    with jax.enable_x64(True):
      energy = _smooth_energy()
      losses = infnet.infnet_losses(
        energy,
        _smooth_net(),
        options=infnet.InfNetOptions(truncate=truncate, l2=0.05),
        energy_objective=infnet.InfNetCompound(compound_weight=0.6),
      )
      batch, params, _ = _x64_setup(losses, energy, 8)
      rs = np.random.RandomState(9)
      # Net outputs strictly inside (0, 1): Δ = L1 is smooth there.
      y_cost = jnp.asarray(rs.uniform(0.05, 0.95, size=(B, L)))
      y_test = jnp.asarray(rs.uniform(0.05, 0.95, size=(B, L)))
      fn = lambda p: losses.energy_loss(p, batch, y_cost, y_test, jax.random.key(3))[0]
      analytic, numeric = _directional_fd(fn, params, 11)
      np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-8)
      self.assertNotEqual(analytic, 0.0)


class TruncationTest(parameterized.TestCase):
  """An energy that separates every output: local logits 10(2y − 1) (x = 2y − 1, K = 10 I,
  no global term), so every margin Δ − E(F) + E(y) = Δ − 10‖F − y‖₁ is negative."""

  def _setup(self, truncate, **kwargs):
    energy, net = SPENEnergy(L, (), num_measurements=2), MLP((), L)
    y = (np.random.RandomState(13).uniform(size=(B, L)) < 0.5).astype(np.float32)
    batch = {"x": jnp.asarray(2 * y - 1), "y": jnp.asarray(y)}
    options = infnet.InfNetOptions(
      architecture=SEPARATED, truncate=truncate, ce_weight=0.0, energy_weight=0.0
    )
    obj = infnet.inference_network(
      energy,
      net,
      optax.sgd(0.1),
      optax.sgd(0.1),
      options=dataclasses.replace(options, **kwargs),
      energy_objective=MARGIN,
    )
    losses = infnet.infnet_losses(energy, net, options=options, energy_objective=MARGIN)
    # Random parameters of the right shapes (eval_shape: nothing to compile), then the
    # separating energy.
    rs = np.random.RandomState(14)
    shapes = jax.eval_shape(obj.init, jax.random.key(0), batch)
    params = {
      k: jax.tree.map(lambda a: jnp.asarray(rs.randn(*a.shape), jnp.float32), group.params)
      for k, group in shapes.items()
    }
    params["energy"]["global"]["weights"]["kernel"] = jnp.zeros((2, 1))
    params["energy"]["local_net"]["head"] = {"kernel": 10 * jnp.eye(L), "bias": jnp.zeros(L)}
    state = {k: base.init_group(p, optax.sgd(0.1)) for k, p in params.items()}
    return obj, losses, energy, batch, state

  # The default, the energy step only, is the next test (through `update`).
  @parameterized.parameters(
    (infnet.InfNetTruncation(inference_step=True), True, True),
    (infnet.InfNetTruncation(energy_step=False), False, False),
  )
  def test_truncation_applies_only_where_configured(self, truncate, energy_blocked, cost_blocked):
    _, losses, energy, batch, state = self._setup(truncate)

    @_jit
    def both_players_grads(energy_params, nets):
      rng = jax.random.key(1)
      _, cost_logits = losses.net_logits(nets, batch["x"], batch["y"])
      y_cost = jax.nn.sigmoid(cost_logits)
      energy_grads, energy_metrics = jax.grad(losses.energy_loss, has_aux=True)(
        energy_params, batch, y_cost, None, rng
      )
      energy_of = infnet.energy_evaluator(energy, energy_params, batch["x"])
      net_grads = jax.grad(lambda p: losses.inference_loss(p, energy_of, batch, rng)[0])(nets)
      return energy_grads, net_grads, energy_metrics

    energy_grads, net_grads, metrics = both_players_grads(
      state["energy"].params, {k: state[k].params for k in ("test_net", "cost_net")}
    )
    self.assertEqual(float(metrics["active_margin"]), 0.0)  # every margin is satisfied
    self.assertEqual(float(optax.tree.norm(energy_grads)) == 0.0, energy_blocked)
    self.assertEqual(float(optax.tree.norm(net_grads["cost_net"])) == 0.0, cost_blocked)

  def test_default_update_moves_the_cost_net_but_not_the_energy(self):
    obj, _, _, batch, state = self._setup(infnet.InfNetTruncation(), num_inner_steps=2)
    new, metrics = _jit(obj.update)(state, batch, jax.random.key(1))
    self.assertEqual(float(metrics["active_margin"]), 0.0)
    self.assertEqual(float(metrics["loss"]), 0.0)
    self.assertEqual(float(metrics["grad_norm"]), 0.0)
    self.assertGreater(float(metrics["infnet_grad_norm"]), 0.0)
    _assert_trees_equal(self, new["energy"].params, state["energy"].params)
    self.assertFalse(
      np.allclose(
        new["cost_net"].params["head"]["kernel"], state["cost_net"].params["head"]["kernel"]
      )
    )


class StagesTest(parameterized.TestCase):
  def test_init_from_local_bce_carries_every_matching_group(self):
    batch = _batch(14)
    energy, net = SPENEnergy(L, (6,), num_measurements=3), MLP((6,), L)
    lb = local_bce(net, optax.adam(1e-2))
    lb_state, _ = _jit(lambda k: lb.update(lb.init(k, batch), batch, k))(jax.random.key(0))
    pretrained = lb_state["net"].params
    objs = {
      name: infnet.inference_network(
        energy,
        net,
        optax.adam(1e-3),
        optax.adam(1e-3),
        options=infnet.InfNetOptions(architecture=architecture),
      )
      for name, architecture in ARCHITECTURES.items()
    }
    fresh_energy = infnet.inference_network(
      energy,
      net,
      optax.adam(1e-3),
      optax.adam(1e-3),
      options=infnet.InfNetOptions(carry_energy=False),
    )

    @_jit  # one compilation for every architecture
    def fresh_and_carried(lb_state, rng):
      return {
        a: (
          obj.init(rng, batch),
          obj.init_from(lb_state, rng, batch),
          obj.predict(obj.init_from(lb_state, rng, batch), batch["x"]),
        )
        for a, obj in objs.items()
      }, fresh_energy.init_from(lb_state, rng, batch)

    states, uncarried = fresh_and_carried(lb_state, jax.random.key(2))
    # carry_energy=False: the energy as `init` makes it, the nets carried all the same.
    _assert_trees_equal(self, uncarried["energy"].params, states["stacked"][0]["energy"].params)
    _assert_trees_equal(self, uncarried["test_net"].params, pretrained)
    for architecture, (fresh, state, y_soft) in states.items():
      _assert_trees_equal(self, state["energy"].params["local_net"], pretrained)
      _assert_trees_equal(self, state["energy"].params["global"], fresh["energy"].params["global"])
      _assert_trees_equal(self, state["test_net"].params, pretrained)
      np.testing.assert_allclose(y_soft, lb.predict(lb_state, batch["x"]), rtol=1e-6)
      cost = {
        "separated": pretrained,
        "shared": {"head": pretrained["head"]},
        "stacked": fresh["cost_net"].params,
      }[architecture]
      _assert_trees_equal(self, state["cost_net"].params, cost)
      _assert_trees_equal(self, state["test_net"].opt_state, fresh["test_net"].opt_state)

  def test_init_from_spen_and_infnet_states(self):
    batch = _batch(15)
    energy, net = SPENEnergy(L, (6,), num_measurements=3), MLP((6,), L)
    spen = ssvm_lib.spen_pretrain(energy, optax.adam(1e-2))
    spen_state, _ = _jit(lambda k: spen.update(spen.init(k, batch), batch, k))(jax.random.key(0))
    obj = infnet.inference_network(
      energy,
      net,
      optax.adam(1e-3),
      optax.adam(1e-3),
      options=infnet.InfNetOptions(architecture=SHARED, num_inner_steps=1),
    )
    finetune = infnet.inference_network(
      energy,
      net,
      optax.sgd(0.0),
      optax.adam(1e-4),
      options=infnet.InfNetOptions(architecture=SHARED),
      energy_objective=MARGIN,
    )
    other_net = local_bce(MLP((3,), L), optax.adam(1e-2))

    @_jit  # one compilation for the three continuations
    def continuations(spen_state, rng):
      state = obj.init_from(spen_state, rng, batch)
      # A trained infnet state (the cost net moved away from its copy of the test net).
      cost = jax.tree.map(lambda a: a + 1.0, state["cost_net"].params)
      trained = dict(state, cost_net=base.ParamGroup(cost, state["cost_net"].opt_state))
      fresh = obj.init(rng, batch)
      from_other = obj.init_from(other_net.init(rng, batch), rng, batch)
      return state, trained, finetune.init_from(trained, rng, batch), fresh, from_other

    state, trained, cont, fresh, from_other = continuations(spen_state, jax.random.key(2))
    _assert_trees_equal(self, state["energy"].params, spen_state["energy"].params)
    # The energy's pretrained local classifier initializes A_Ψ (same MLP shape).
    _assert_trees_equal(self, state["test_net"].params, spen_state["energy"].params["local_net"])
    # infnet -> infnet (e.g. fine-tuning A_Ψ): every group carried, optimizers restarted.
    for group in ("energy", "test_net", "cost_net"):
      _assert_trees_equal(self, cont[group].params, trained[group].params)
    _assert_trees_equal(
      self, cont["test_net"].opt_state, optax.adam(1e-4).init(trained["test_net"].params)
    )
    # A local net of another shape is not carried into A_Ψ or the energy: fresh.
    _assert_trees_equal(self, from_other["test_net"].params, fresh["test_net"].params)
    _assert_trees_equal(self, from_other["energy"].params, fresh["energy"].params)
    # A SPEN energy of another shape cannot be carried; an unknown state is an error
    # (both raised while tracing: `eval_shape` compiles nothing).
    small = ssvm_lib.spen_pretrain(SPENEnergy(L, (3,), num_measurements=3), optax.adam(1e-2))
    small_state = jax.eval_shape(small.init, jax.random.key(0), batch)
    with self.assertRaisesRegex(ValueError, "cannot carry the previous energy"):
      jax.eval_shape(obj.init_from, small_state, jax.random.key(0), batch)
    with self.assertRaisesRegex(ValueError, "cannot continue"):
      jax.eval_shape(obj.init_from, {"task_net": {}}, jax.random.key(0), batch)


class OptionsTest(parameterized.TestCase):
  @parameterized.parameters(
    ("num_inner_steps", lambda: infnet.InfNetOptions(num_inner_steps=0)),
    ("num_inner_steps", lambda: infnet.InfNetOptions(num_inner_steps=2.5)),
    ("ce_weight", lambda: infnet.InfNetOptions(ce_weight=-1.0)),
    ("compound_weight", lambda: infnet.InfNetCompound(compound_weight=-0.5)),
    ("energy_weight", lambda: infnet.InfNetOptions(energy_weight=float("nan"))),
    ("net_l2", lambda: infnet.InfNetOptions(net_l2=-1e-3)),
  )
  def test_bad_option_raises_naming_it(self, name, make):
    with self.assertRaisesRegex(ValueError, name) as raised:
      make()
    self.assertNotIn("\n", str(raised.exception))

  @parameterized.parameters(
    dict(architecture="stacked"), dict(truncate="both"), dict(surrogate="l1")
  )
  def test_a_name_where_a_value_belongs_is_a_type_error(self, **kwargs):
    """Names are for configs (`experiments.choices.infnet`); the library takes values."""
    (name,) = kwargs.values()
    with self.assertRaisesRegex(TypeError, repr(name)) as raised:
      infnet.InfNetOptions(**kwargs)
    self.assertNotIn("\n", str(raised.exception))

  def test_truncation_fields_are_bools(self):
    with self.assertRaisesRegex(TypeError, "energy_step"):
      infnet.InfNetTruncation(energy_step="yes")


# ---------------------------------------------------------------------------------------
# A user's own energy, reached only through the `Energy` protocol.


LowRankPairEnergy = testing.LowRankPairEnergy


def _low_rank_function():
  return testing.low_rank_pair_function(D, L)


class UserEnergyTest(parameterized.TestCase):
  @parameterized.named_parameters(
    (
      "module",
      lambda: protocol.energy_from_module(LowRankPairEnergy(L), domain=domains.Box(), y_shape=(L,)),
    ),
    ("function", _low_rank_function),
  )
  def test_a_user_energy_trains(self, make_energy):
    obj = infnet.inference_network(
      make_energy(),
      _smooth_net(),
      optax.sgd(0.05),
      optax.sgd(0.05),
      options=infnet.InfNetOptions(num_inner_steps=2),
    )
    batch = _batch(21)
    state = new = obj.init(jax.random.key(0), batch)
    update = _jit(obj.update)
    for t in range(2):
      new, metrics = update(new, batch, jax.random.key(t))
    for name in ("loss", "grad_norm", "infnet_loss"):
      self.assertTrue(np.isfinite(float(metrics[name])), name)
    self.assertFalse(
      all(
        np.allclose(a, b)
        for a, b in zip(
          jax.tree.leaves(state["energy"].params), jax.tree.leaves(new["energy"].params)
        )
      )
    )
    self.assertEqual(obj.predict(new, batch["x"]).shape, (B, L))

  def test_a_wrong_shaped_user_energy_fails_at_init(self):
    energy = protocol.energy_from_module(
      LowRankPairEnergy(L, per_label=True), domain=domains.Box(), y_shape=(L,)
    )
    obj = infnet.inference_network(energy, _smooth_net(), optax.sgd(0.05), optax.sgd(0.05))
    with self.assertRaisesRegex(protocol.EnergyShapeError, r"expected \[B\]"):
      obj.init(jax.random.key(0), _batch())

  def test_init_from_local_bce_seeds_the_nets_but_not_an_energy_without_local_net(self):
    batch = _batch(22)
    net = MLP((6,), L)
    lb_state = local_bce(net, optax.adam(1e-2)).init(jax.random.key(1), batch)
    energy = protocol.energy_from_module(LowRankPairEnergy(L), domain=domains.Box(), y_shape=(L,))
    obj = infnet.inference_network(
      energy,
      net,
      optax.adam(1e-3),
      optax.adam(1e-3),
      options=infnet.InfNetOptions(architecture=SEPARATED),
    )
    rng = jax.random.key(2)
    state = obj.init_from(lb_state, rng, batch)
    _assert_trees_equal(self, state["test_net"].params, lb_state["net"].params)
    _assert_trees_equal(self, state["cost_net"].params, lb_state["net"].params)
    _assert_trees_equal(self, state["energy"].params, obj.init(rng, batch)["energy"].params)


# ---------------------------------------------------------------------------------------
# The energy objective and the options as values.


class SoftMargin:
  """A user's energy objective: the margin hinge smoothed by softplus (no library base
  class, no `uses_cost_net`: F_Φ is built, as by default)."""

  def loss(self, inputs):
    margin = inputs.delta - inputs.energy_of(inputs.y_cost) + inputs.energy_gold
    soft = jnp.mean(jax.nn.softplus(margin))
    return soft, {"soft_margin": soft}


class ObjectiveValueTest(parameterized.TestCase):
  def test_a_user_energy_objective_plugs_in_and_trains(self):
    obj = infnet.inference_network(
      _smooth_energy(),
      _smooth_net(),
      optax.sgd(0.05),
      optax.sgd(0.05),
      energy_objective=SoftMargin(),
      options=infnet.InfNetOptions(num_inner_steps=2),
    )
    batch = _batch(23)
    state = new = obj.init(jax.random.key(0), batch)
    self.assertEqual(set(state), {"energy", "test_net", "cost_net"})
    update = _jit(obj.update)
    for t in range(2):
      new, metrics = update(new, batch, jax.random.key(t))
    for name in ("loss", "grad_norm", "soft_margin", "energy_gold", "infnet_loss"):
      self.assertTrue(np.isfinite(float(metrics[name])), name)
    self.assertFalse(
      all(
        np.allclose(a, b)
        for a, b in zip(
          jax.tree.leaves(state["energy"].params), jax.tree.leaves(new["energy"].params)
        )
      )
    )

  def test_a_user_architecture_plugs_in(self):
    """A value with `InfNetArchitecture`'s methods, no library base class: F_Φ a copy of
    `net` that also reads y, as `InfNetSeparated` with a different input."""

    class SeparatedOnXY:
      def init_cost_net(self, net, rng, x, y, test_params):
        del y, test_params
        return net.init({"params": rng}, x)["params"]

      def logits(self, net, net_params, x, y, link, train, test_rng, cost_rng):
        del link
        test_logits = net.apply(
          {"params": net_params["test_net"]},
          x,
          train=train,
          rngs={"dropout": test_rng} if train else None,
        )
        cost_logits = net.apply(
          {"params": net_params["cost_net"]},
          x,
          train=train,
          rngs={"dropout": cost_rng} if train else None,
        )
        return test_logits, cost_logits + y

      def cost_net_from_test_net(self, test_params):
        return None

    obj = infnet.inference_network(
      _smooth_energy(),
      _smooth_net(),
      optax.sgd(0.05),
      optax.sgd(0.05),
      options=infnet.InfNetOptions(architecture=SeparatedOnXY(), num_inner_steps=1),
    )
    batch = _batch(25)
    state = obj.init(jax.random.key(0), batch)
    new, metrics = _jit(obj.update)(state, batch, jax.random.key(1))
    self.assertTrue(np.isfinite(float(metrics["infnet_loss"])))
    self.assertFalse(
      np.allclose(
        new["cost_net"].params["head"]["kernel"], state["cost_net"].params["head"]["kernel"]
      )
    )


# ---------------------------------------------------------------------------------------
# The config names (`experiments.choices.infnet`) and the values they stand for.


class ConfigNamesTest(parameterized.TestCase):
  @parameterized.parameters(
    (MARGIN, SEPARATED, dict(objective="margin", architecture="separated")),
    (PERCEPTRON, STACKED, dict(objective="perceptron")),
    (
      infnet.InfNetCompound(compound_weight=0.6),
      SHARED,
      dict(compound_weight=0.6, architecture="shared"),
    ),
  )
  def test_names_give_the_same_losses_as_the_values(self, objective, architecture, names):
    energy, net = _smooth_energy(), _smooth_net()
    truncation = infnet.InfNetTruncation(inference_step=True)
    options = infnet.InfNetOptions(
      architecture=architecture, truncate=truncation, l2=0.05, net_l2=0.1
    )
    named = infnet_choices.infnet_options_from_config(
      dict(names, truncate="both", net_l2=0.1, surrogate="l1"), l2=0.05
    )
    self.assertEqual(named, (options, objective))
    by_value = infnet.infnet_losses(energy, net, options=options, energy_objective=objective)
    by_name = infnet.infnet_losses(energy, net, options=named[0], energy_objective=named[1])
    batch = _batch(24)
    energy_params = energy.init(jax.random.key(0), batch["x"], batch["y"])["params"]
    nets = by_value.init_nets(jax.random.key(1), batch)
    testing.assert_trees_equal(nets, by_name.init_nets(jax.random.key(1), batch))
    self.assertEqual("cost_net" in nets, objective.uses_cost_net)
    energy_of = infnet.energy_evaluator(energy, energy_params, batch["x"])
    rng = jax.random.key(2)
    test_logits, cost_logits = by_value.net_logits(nets, batch["x"], batch["y"])
    y_cost = None if cost_logits is None else jax.nn.sigmoid(cost_logits)
    y_test = jax.nn.sigmoid(test_logits)
    a, b = by_value, by_name
    np.testing.assert_array_equal(
      a.inference_loss(nets, energy_of, batch, rng)[0],
      b.inference_loss(nets, energy_of, batch, rng)[0],
    )
    np.testing.assert_array_equal(
      a.energy_loss(energy_params, batch, y_cost, y_test, rng)[0],
      b.energy_loss(energy_params, batch, y_cost, y_test, rng)[0],
    )

  def test_every_name_maps_to_its_value_and_back(self):
    expected = {
      "architecture": {"separated": SEPARATED, "shared": SHARED, "stacked": STACKED},
      "truncate": {
        "energy": infnet.InfNetTruncation(),
        "both": infnet.InfNetTruncation(inference_step=True),
        "none": infnet.InfNetTruncation(energy_step=False),
      },
      "surrogate": {
        "squared": task_losses.Squared(),
        "log": task_losses.Log(),
        "l1": task_losses.L1(),
      },
    }
    for field, table in expected.items():
      for name, value in table.items():
        options, _ = infnet_choices.infnet_options_from_config({field: name})
        self.assertEqual(getattr(options, field), value, (field, name))
        self.assertEqual(infnet_choices.config_name(field, value), name)
    for name, value in (("margin", MARGIN), ("perceptron", PERCEPTRON), ("compound", COMPOUND)):
      _, objective = infnet_choices.infnet_options_from_config({"objective": name})
      self.assertEqual(objective, value)
    self.assertEqual(
      infnet_choices.get_energy_objective("compound", compound_weight=0.5),
      infnet.InfNetCompound(compound_weight=0.5),
    )

  def test_a_config_block_maps_onto_the_values(self):
    options, objective = infnet_choices.infnet_options_from_config(
      dict(objective="margin", compound_weight=2.0, architecture="shared", energy_weight=None),
      l2=1e-4,
    )
    self.assertEqual(objective, MARGIN)  # compound_weight: compound's
    self.assertEqual(options, infnet.InfNetOptions(architecture=SHARED, l2=1e-4))

  @parameterized.parameters("synthetic", "twitter_pos")
  def test_the_configs_block_maps_onto_the_default_values(self, dataset):
    """The configs write every default by its name; `--config.infnet.<key>=<name>` maps."""
    config = configuration.get_config("infnet", dataset)
    options, objective = infnet_choices.infnet_options_from_config(config.infnet, l2=config.loss.l2)
    self.assertEqual(objective, COMPOUND)
    self.assertEqual(options, infnet.InfNetOptions(l2=config.loss.l2, net_l2=config.infnet.net_l2))
    config = configuration.get_config(
      "infnet",
      dataset,
      [
        "infnet.objective=perceptron",
        "infnet.architecture=separated",
        "infnet.truncate=none",
        "infnet.energy_weight=0.5",
      ],
    )
    options, objective = infnet_choices.infnet_options_from_config(config.infnet)
    self.assertEqual(objective, PERCEPTRON)
    self.assertEqual(
      (options.architecture, options.truncate, options.energy_weight),
      (SEPARATED, infnet.InfNetTruncation(energy_step=False), 0.5),
    )

  @parameterized.parameters(
    (
      lambda: infnet_choices.get_energy_objective("hinge"),
      r"unknown InfNet energy objective 'hinge'; known: \('margin'",
    ),
    (
      lambda: infnet_choices.get_energy_objective("margin", compound_weight=1.0),
      r"\['compound_weight'\].*'margin'",
    ),
    (
      lambda: infnet_choices.infnet_options_from_config({"objective": "hinge"}),
      r"unknown InfNet energy objective 'hinge'",
    ),
    (
      lambda: infnet_choices.infnet_options_from_config({"architecture": "tower"}),
      r"unknown InfNet architecture 'tower'; known: \('separated', 'shared', 'stacked'\)",
    ),
    (
      lambda: infnet_choices.infnet_options_from_config({"truncate": "yes"}),
      r"unknown InfNet truncation 'yes'; known: \('energy', 'both', 'none'\)",
    ),
    (
      lambda: infnet_choices.infnet_options_from_config({"surrogate": "hamming"}),
      r"unknown surrogate 'hamming'",
    ),
    (
      lambda: infnet_choices.infnet_options_from_config({"objektive": "margin"}),
      r"unknown InfNet options \['objektive'\]; known: \('objective', 'architecture'",
    ),
    (
      lambda: infnet_choices.infnet_options_from_config({}, net_l3=0.1),
      r"unknown InfNet options \['net_l3'\]",
    ),
  )
  def test_unknown_names_and_keys_are_one_line_errors(self, make, match):
    with self.assertRaisesRegex(ValueError, match) as raised:
      make()
    self.assertNotIn("\n", str(raised.exception))


if __name__ == "__main__":
  absltest.main()
