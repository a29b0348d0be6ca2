"""Tests of implicit bilevel energy training (energynets/objectives/implicit/).

Oracles: the CD loss written out with numpy; float64 finite differences of the bilevel
value φ ↦ L_prim(θ*(φ), φ) with θ* from a long converged inner loop, against the
outer gradient an update steps on; the non-zero implicit term of every primary loss;
descent of L_prim on one batch; parameter identity across stages.
"""

import functools

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
import optax

from energynets import diff
from energynets import domains
from energynets import testing
from energynets.energies import SPENEnergy
from energynets.energies import protocol
from energynets.nets import MLP
from energynets.nets import softplus
from energynets.objectives import implicit
from energynets.objectives import local_bce
from energynets.objectives import seal
from experiments import configuration
from experiments.choices import implicit as choices

L, D, B = 4, 5, 8
_jit = functools.partial(jax.jit, compiler_options={"xla_backend_optimization_level": 0})


def _batch(seed=0, dtype=np.float32):
  rs = np.random.RandomState(seed)
  return {
    "x": jnp.asarray(rs.randn(B, D), dtype),
    "y": jnp.asarray(rs.uniform(size=(B, L)) < 0.5, dtype),
  }


def _energy():
  return SPENEnergy(L, (6,), feature_activation=softplus, num_measurements=3)


def _float64(tree):
  """Flax initializes float32 parameters even under x64; finite differences need 64."""
  return jax.tree.map(
    lambda a: a.astype(np.float64) if jnp.issubdtype(a.dtype, jnp.floating) else a, tree
  )


def _primary(name="cd", **kwargs):
  """The library's primary loss `name` ('ssvm', 'cd' or 'dvn'); CD with 4 samples unless
  `kwargs` say otherwise."""
  if name == "cd":
    return implicit.ImplicitCD(**dict(dict(num_samples=4), **kwargs))
  return {"ssvm": implicit.ImplicitSSVM, "dvn": implicit.ImplicitDVN}[name](**kwargs)


def _objective(primary="cd", net=None, optimizer=None, inner_optimizer=None, **options):
  """The objective on `_energy()` with `ImplicitOptions(**options)` (T_inner = 3, five
  Neumann terms unless given) and `primary` (a name for `_primary`, or a value)."""
  options = dict(dict(inner_steps=3, inverse_hvp=diff.Neumann(5, alpha=0.1)), **options)
  return implicit.implicit_objective(
    _energy(),
    net or MLP((6,), L, activation=jnp.tanh),
    optimizer or optax.adam(1e-2),
    inner_optimizer or optax.sgd(0.1),
    options=implicit.ImplicitOptions(**options),
    primary=_primary(primary) if isinstance(primary, str) else primary,
  )


class LossTest(parameterized.TestCase):
  def test_cd_loss_is_the_sign_corrected_formula(self):
    rs = np.random.RandomState(0)
    energies, costs = rs.randn(3, 5), rs.uniform(size=(3, 5))
    costs[:, 0] = 0.0
    expected = -np.log(np.exp(-energies[:, 0]) / np.exp(-energies + costs).sum(axis=1))
    np.testing.assert_allclose(
      implicit.contrastive_divergence_loss(energies, costs), expected, rtol=1e-6
    )
    # Lowering the gold's energy lowers the loss (the printed sign would raise it).
    grad = jax.grad(lambda e: implicit.contrastive_divergence_loss(e, costs).sum())(
      jnp.asarray(energies)
    )
    self.assertTrue(np.all(grad[:, 0] > 0))
    self.assertTrue(np.all(grad[:, 1:] < 0))

  def test_straight_through_negatives_are_hard_with_the_probability_gradient(self):
    logits = jnp.asarray(np.random.RandomState(1).randn(3, L), jnp.float32)
    draw = lambda lg: implicit.bernoulli_negatives(
      jax.random.key(0), lg, 6, implicit.StraightThroughNegatives()
    )
    samples = draw(logits)
    self.assertEqual(samples.shape, (3, 6, L))
    np.testing.assert_array_equal(np.unique(samples), [0.0, 1.0])
    grad = jax.grad(lambda lg: draw(lg).sum())(logits)
    np.testing.assert_allclose(
      grad, 6 * jax.nn.sigmoid(logits) * jax.nn.sigmoid(-logits), rtol=1e-6
    )

  def test_relaxed_negatives_are_soft_and_sharpen_with_temperature(self):
    logits = jnp.zeros((2, L))
    soft = implicit.bernoulli_negatives(
      jax.random.key(0), logits, 50, implicit.RelaxedNegatives(5.0)
    )
    sharp = implicit.bernoulli_negatives(
      jax.random.key(0), logits, 50, implicit.RelaxedNegatives(0.05)
    )
    self.assertTrue(np.all((soft > 0) & (soft < 1)))
    distance = lambda s: float(jnp.mean(jnp.minimum(s, 1 - s)))
    self.assertLess(distance(sharp), distance(soft) / 5)


class ObjectiveTest(parameterized.TestCase):
  @parameterized.parameters("ssvm", "cd", "dvn")
  def test_every_primary_loss_has_a_non_zero_implicit_term(self, primary):
    objective = _objective(primary)
    batch = _batch()
    state = objective.init(jax.random.key(0), batch)
    _, metrics = _jit(objective.update)(state, batch, jax.random.key(1))
    self.assertGreater(float(metrics["prim_grad_theta_norm"]), 1e-4)
    self.assertGreater(float(metrics["implicit_norm"]), 1e-6)
    self.assertGreater(float(metrics["explicit_norm"]), 1e-6)
    for name, value in metrics.items():
      self.assertTrue(np.all(np.isfinite(value)), name)

  @parameterized.parameters(
    (implicit.ImplicitDVN(),),
    (implicit.ImplicitCD(num_samples=4, negatives=implicit.RelaxedNegatives()),),
    (
      implicit.ImplicitCD(
        num_samples=4, negatives=implicit.RelaxedNegatives(), include_net_output=True
      ),
    ),
  )
  def test_outer_gradient_matches_finite_differences_of_the_bilevel_value(self, primary):
    """With a converged inner loop and an exact inverse-HVP, the step on φ is
    dL_prim(θ*(φ), φ)/dφ. SGD(1) outer: the step is φ − φ_new; `loss` is L_prim(θ*, φ)."""
    with jax.enable_x64(True):
      # Seed 1: every label takes both values, so the inner problem (logistic
      # regression with an L2 kernel penalty and unpenalized biases) has a finite minimum.
      batch = _batch(seed=1, dtype=np.float64)
      objective = _objective(
        primary,
        net=MLP((), L),
        optimizer=optax.sgd(1.0),
        inner_optimizer=optax.sgd(1.0),
        inner_steps=1500,
        net_l2=0.3,
        energy_weight=0.3,
        inverse_hvp=diff.ConjugateGradient(max_iter=60, tol=1e-14),
      )
      state = _float64(objective.init(jax.random.key(0), batch))
      update = _jit(objective.update)
      rng = jax.random.key(3)
      new_state, metrics = update(state, batch, rng)
      self.assertLess(float(metrics["aux_grad_norm"]), 1e-9)  # the inner loop converged
      self.assertLess(float(metrics["ihvp_residual"]), 1e-8)
      phi = state["energy"].params
      step = jax.tree.map(jnp.subtract, phi, new_state["energy"].params)

      def bilevel_value(p):
        shifted = dict(state, energy=state["energy"]._replace(params=p))
        return update(shifted, batch, rng)[1]["loss"]

      analytic, fd = testing.directional_derivatives(
        bilevel_value, lambda p: step, phi, seed=0, eps=1e-5
      )
      np.testing.assert_allclose(analytic, fd, rtol=1e-5)
      # The implicit term matters here: the explicit gradient alone is off.
      explicit = _objective(
        primary,
        net=MLP((), L),
        optimizer=optax.sgd(1.0),
        inner_optimizer=optax.sgd(1.0),
        inner_steps=1500,
        net_l2=0.3,
        energy_weight=0.3,
        implicit_term=False,
      )
      explicit_state, _ = _jit(explicit.update)(state, batch, rng)
      explicit_step = jax.tree.map(jnp.subtract, phi, explicit_state["energy"].params)
      explicit_analytic, _ = testing.directional_derivatives(
        bilevel_value, lambda p: explicit_step, phi, seed=0, eps=1e-5
      )
      self.assertGreater(abs(explicit_analytic - fd), 1e-3 * abs(fd))

  def test_updates_reduce_the_primary_loss_on_one_batch(self):
    objective = _objective(_primary("cd", num_samples=8), optimizer=optax.adam(3e-2))
    _, losses, metrics = testing.fit_one_batch(objective, _batch(), num_steps=30)
    self.assertLess(np.mean(losses[-5:]), np.mean(losses[:5]))
    self.assertTrue(np.isfinite(float(metrics["loss"])))

  def test_explicit_gradient_reports_no_implicit_term(self):
    objective = _objective("ssvm", implicit_term=False)
    batch = _batch()
    _, metrics = _jit(objective.update)(
      objective.init(jax.random.key(0), batch), batch, jax.random.key(1)
    )
    self.assertNotIn("implicit_norm", metrics)
    self.assertGreater(float(metrics["explicit_norm"]), 0.0)

  def test_a_failed_solve_falls_back_to_the_explicit_gradient(self):
    batch = _batch()
    explicit = _objective("cd", implicit_term=False)
    state = explicit.init(jax.random.key(0), batch)
    strict = _objective("cd", max_residual=1e-30)  # every solve counts as failed
    loose = _objective("cd")
    rng = jax.random.key(1)
    (want, _), (got, metrics), (other, loose_metrics) = (
      _jit(o.update)(state, batch, rng) for o in (explicit, strict, loose)
    )
    self.assertEqual(float(metrics["implicit_used"]), 0.0)
    self.assertEqual(float(loose_metrics["implicit_used"]), 1.0)
    for a, b in zip(jax.tree.leaves(want["energy"].params), jax.tree.leaves(got["energy"].params)):
      np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    self.assertFalse(
      all(
        np.allclose(a, b)
        for a, b in zip(
          jax.tree.leaves(want["energy"].params), jax.tree.leaves(other["energy"].params)
        )
      )
    )

  def test_init_from_a_local_bce_state_carries_the_mlp_into_both(self):
    net = MLP((6,), L)
    batch = _batch()
    bce = local_bce(net, optax.adam(1e-3))
    prev = bce.init(jax.random.key(5), batch)
    energy = SPENEnergy(L, (6,), num_measurements=3)
    objective = implicit.implicit_objective(energy, net, optax.adam(1e-3), optax.sgd(0.1))
    state = objective.init_from(prev, jax.random.key(0), batch)
    for a, b in zip(
      jax.tree.leaves(prev["net"].params), jax.tree.leaves(state["inference_net"].params)
    ):
      np.testing.assert_array_equal(a, b)
    for a, b in zip(
      jax.tree.leaves(prev["net"].params), jax.tree.leaves(state["energy"].params["local_net"])
    ):
      np.testing.assert_array_equal(a, b)
    # And an implicit state continues itself exactly.
    again = objective.init_from(state, jax.random.key(9), batch)
    for k in ("inference_net", "energy"):
      for a, b in zip(jax.tree.leaves(state[k].params), jax.tree.leaves(again[k].params)):
        np.testing.assert_array_equal(a, b)

  def test_a_config_solver_gives_the_update_of_the_solver_value(self):
    """The `inverse_hvp` block a config writes maps onto the solver value: the same
    update, bit for bit."""
    batch = _batch(3)
    states = {}
    for name, solver in (
      ("config", choices.inverse_hvp_from_config(dict(method="neumann", num_terms=5, alpha=0.1))),
      ("value", diff.Neumann(num_terms=5, alpha=0.1)),
    ):
      objective = _objective("ssvm", inverse_hvp=solver)
      state = objective.init(jax.random.key(0), batch)
      states[name] = _jit(objective.update)(state, batch, jax.random.key(1))
    for a, b in zip(jax.tree.leaves(states["config"]), jax.tree.leaves(states["value"])):
      np.testing.assert_array_equal(a, b)

  @parameterized.parameters(
    (dict(inverse_hvp="neumann"), "inverse-HVP solver"),
    (dict(inverse_hvp=diff.Neumann), "inverse-HVP solver"),
    (dict(implicit_term="explicit"), "implicit_term must be a bool"),
    (dict(primary="cd"), "primary must be a primary loss value"),
    (dict(negatives="relaxed"), "negatives must be a sampler"),
  )
  def test_names_where_values_belong_are_one_line_type_errors(self, kwargs, match):
    with self.assertRaisesRegex(TypeError, match) as raised:
      if "primary" in kwargs:
        implicit.implicit_objective(
          _energy(), MLP((6,), L), optax.adam(1e-2), optax.sgd(0.1), **kwargs
        )
      elif "negatives" in kwargs:
        implicit.ImplicitCD(**kwargs)
      else:
        _objective(**kwargs)
    self.assertNotIn("\n", str(raised.exception))

  @parameterized.parameters(
    (lambda: _objective(inner_steps=0), "inner_steps"),
    (lambda: _objective(inverse_hvp=diff.Neumann(alpha=-1.0)), "alpha"),
    (lambda: _objective(max_residual=0.0), "max_residual"),
    (lambda: implicit.ImplicitCD(num_samples=0), "num_samples"),
    (lambda: implicit.RelaxedNegatives(temperature=0.0), "temperature"),
  )
  def test_bad_values_are_named(self, make, match):
    with self.assertRaisesRegex(ValueError, match) as raised:
      make()
    self.assertNotIn("\n", str(raised.exception))

  def test_a_swapped_call_is_a_one_line_error_naming_the_order(self):
    net, energy = MLP((6,), L), _energy()
    with self.assertRaisesRegex(
      TypeError, r"takes \(energy, net, optimizer, inner_optimizer\)"
    ) as raised:
      implicit.implicit_objective(net, energy, optax.adam(1e-2), optax.sgd(0.1))
    self.assertNotIn("\n", str(raised.exception))
    with self.assertRaisesRegex(TypeError, "energy, net"):
      implicit.ImplicitLosses(net, energy)


# ---------------------------------------------------------------------------------------
# A user's own energy, reached only through the `Energy` protocol.


LowRankPairEnergy = testing.LowRankPairEnergy


def _module_energy(**kwargs):
  return protocol.energy_from_module(
    LowRankPairEnergy(L, **kwargs), domain=domains.Box(), y_shape=(L,)
  )


def _function_energy():
  return testing.low_rank_pair_function(D, L)


def _user_objective(energy, primary=implicit.ImplicitCD(num_samples=3)):
  return implicit.implicit_objective(
    energy,
    MLP((6,), L, activation=jnp.tanh),
    optax.adam(1e-2),
    optax.sgd(0.1),
    options=implicit.ImplicitOptions(
      inner_steps=2, inverse_hvp=diff.Neumann(num_terms=3, alpha=0.1)
    ),
    primary=primary,
  )


class UserEnergyTest(parameterized.TestCase):
  @parameterized.named_parameters(
    ("module", _module_energy, "cd"), ("function", _function_energy, "ssvm")
  )
  def test_a_user_energy_trains(self, make_energy, primary):
    objective = _user_objective(
      make_energy(), primary=_primary(primary, **(dict(num_samples=3) if primary == "cd" else {}))
    )
    batch = _batch(4)
    state = new = objective.init(jax.random.key(0), batch)
    update = _jit(objective.update)
    for t in range(2):
      new, metrics = update(new, batch, jax.random.key(t))
    for name in ("loss", "grad_norm", "implicit_norm"):
      self.assertTrue(np.isfinite(float(metrics[name])), name)
    self.assertFalse(
      all(
        np.allclose(a, b)
        for a, b in zip(
          jax.tree.leaves(state["energy"].params), jax.tree.leaves(new["energy"].params)
        )
      )
    )
    self.assertEqual(objective.predict(new, batch["x"]).shape, (B, L))

  def test_a_wrong_shaped_user_energy_fails_at_init(self):
    objective = _user_objective(_module_energy(per_label=True))
    with self.assertRaisesRegex(protocol.EnergyShapeError, r"expected \[B\]"):
      objective.init(jax.random.key(0), _batch())

  def test_an_energy_without_local_net_continues_itself(self):
    """No `local_net` group: nothing seeds the inference net from the energy; an
    implicit state continues exactly."""
    objective = _user_objective(_module_energy())
    batch = _batch()
    state = objective.init(jax.random.key(0), batch)
    again = objective.init_from(state, jax.random.key(9), batch)
    for k in ("inference_net", "energy"):
      for a, b in zip(jax.tree.leaves(state[k].params), jax.tree.leaves(again[k].params)):
        np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------------------------------
# The primary loss and the options as values.


class SquaredValue:
  """A user's primary loss: the squared error of σ(−E(x, ȳ_A)) to the score of ȳ_A (no
  library base class); ȳ_A keeps its path to θ, so the implicit term is not zero."""

  def loss(self, inputs):
    value = jax.nn.sigmoid(-inputs.energies(inputs.y_net[:, None])[:, 0])
    error = jnp.mean(jnp.square(value - inputs.score(inputs.y_net, inputs.y)))
    return error, {"squared_error": error}


class PrimaryValueTest(parameterized.TestCase):
  def test_a_user_primary_loss_plugs_in_and_trains(self):
    objective = implicit.implicit_objective(
      _energy(),
      MLP((6,), L, activation=jnp.tanh),
      optax.adam(1e-2),
      optax.sgd(0.1),
      primary=SquaredValue(),
      options=implicit.ImplicitOptions(
        inner_steps=2, inverse_hvp=diff.Neumann(num_terms=3, alpha=0.1)
      ),
    )
    batch = _batch(5)
    state = new = objective.init(jax.random.key(0), batch)
    update = _jit(objective.update)
    for t in range(2):
      new, metrics = update(new, batch, jax.random.key(t))
    for name in ("loss", "grad_norm", "squared_error", "gold_energy", "implicit_norm"):
      self.assertTrue(np.isfinite(float(metrics[name])), name)
    self.assertGreater(float(metrics["prim_grad_theta_norm"]), 0.0)
    self.assertFalse(
      all(
        np.allclose(a, b)
        for a, b in zip(
          jax.tree.leaves(state["energy"].params), jax.tree.leaves(new["energy"].params)
        )
      )
    )

  def test_a_config_block_gives_the_losses_of_the_values(self):
    """Every config name maps onto the value it stands for: the same losses, bit for bit."""
    net, energy, batch = MLP((6,), L, activation=jnp.tanh), _energy(), _batch(6)
    state = _objective("cd").init(jax.random.key(0), batch)
    theta, phi = state["inference_net"].params, state["energy"].params
    options = implicit.ImplicitOptions(energy_weight=0.5, l2=0.1, net_l2=0.2)
    flat = dict(energy_weight=0.5, l2=0.1, net_l2=0.2)
    relaxed = implicit.RelaxedNegatives(temperature=0.3)
    for value, named in (
      (
        implicit.ImplicitSSVM(margin_cost=seal.OneMinusScore()),
        dict(primary="ssvm", margin_cost="score"),
      ),
      (implicit.ImplicitSSVM(), dict(primary="ssvm", margin_cost="l1")),
      (
        implicit.ImplicitCD(num_samples=3, negatives=relaxed, include_net_output=True),
        dict(
          primary="cd", num_samples=3, negatives="relaxed", temperature=0.3, include_net_output=True
        ),
      ),
      (
        implicit.ImplicitCD(num_samples=3),
        dict(primary="cd", num_samples=3, negatives="straight_through", temperature=0.3),
      ),
      (implicit.ImplicitDVN(), dict(primary="dvn", num_samples=7)),
    ):  # CD's key: ignored
      config_options, config_primary = choices.implicit_options_from_config({**named, **flat})
      self.assertEqual((config_options, config_primary), (options, value))
      a = implicit.ImplicitLosses(energy, net, options=options, primary=value)
      b = implicit.ImplicitLosses(energy, net, options=config_options, primary=config_primary)
      for name in ("aux", "prim"):
        np.testing.assert_array_equal(
          getattr(a, name)(theta, phi, batch, jax.random.key(1))[0],
          getattr(b, name)(theta, phi, batch, jax.random.key(1))[0],
        )

  def test_a_config_block_maps_onto_the_values(self):
    options, primary = choices.implicit_options_from_config(
      dict(
        primary="ssvm",
        num_samples=10,
        include_net_output=True,
        gradient="explicit",
        inverse_hvp=dict(method="cg", num_terms=3),
      )
    )
    self.assertEqual(primary, implicit.ImplicitSSVM())
    self.assertEqual(
      options,
      implicit.ImplicitOptions(implicit_term=False, inverse_hvp=diff.ConjugateGradient(max_iter=3)),
    )
    self.assertEqual(choices.implicit_options_from_config({})[1], implicit.ImplicitCD())
    self.assertTrue(
      choices.implicit_options_from_config(dict(gradient="implicit"))[0].implicit_term
    )
    self.assertEqual(
      choices.get_primary_loss("cd", num_samples=4), implicit.ImplicitCD(num_samples=4)
    )

  def test_every_config_writes_a_block_the_mapping_takes(self):
    for dataset in ("synthetic", "conll2003", "weizmann_horse"):
      config = configuration.get_config("implicit", dataset)
      options, primary = choices.implicit_options_from_config(config.implicit, l2=config.loss.l2)
      self.assertEqual(options.inverse_hvp, diff.Neumann(num_terms=10, alpha=0.002))
      self.assertEqual(
        primary,
        choices.get_primary_loss(
          config.implicit.primary,
          **{k: config.implicit[k] for k in choices.PRIMARY_KEYS[config.implicit.primary]},
        ),
      )

  @parameterized.parameters(
    (lambda: choices.get_primary_loss("nce"), r"unknown primary loss 'nce'.*'cd'"),
    (lambda: choices.get_primary_loss("dvn", num_samples=4), r"\['num_samples'\]"),
    (
      lambda: choices.implicit_options_from_config({"inner_stpes": 2}),
      r"unknown implicit options \['inner_stpes'\]; known: \('primary', 'energy_weight'",
    ),
    (
      lambda: choices.implicit_options_from_config({"gradient": "unrolled"}),
      r"unknown gradient 'unrolled'; known: \('implicit', 'explicit'\)",
    ),
    (
      lambda: choices.implicit_options_from_config({"negatives": "gumbel"}),
      r"unknown negatives 'gumbel'",
    ),
    (
      lambda: choices.implicit_options_from_config({"primary": "ssvm", "margin_cost": "l3"}),
      r"unknown surrogate 'l3'",
    ),
    (
      lambda: choices.implicit_options_from_config({"primary": "nce"}),
      r"unknown primary loss 'nce'",
    ),
    (
      lambda: choices.inverse_hvp_from_config({"method": "newton"}),
      r"unknown inverse-HVP method 'newton'; known: \('neumann', 'cg'\)",
    ),
    (
      lambda: choices.inverse_hvp_from_config({"num_term": 3}),
      r"unknown inverse_hvp options \['num_term'\]",
    ),
    (lambda: choices.inverse_hvp_from_config({"method": "cg", "num_terms": 0}), "max_iter"),
  )
  def test_unknown_names_and_keys_are_one_line_errors(self, make, match):
    with self.assertRaisesRegex(ValueError, match) as raised:
      make()
    self.assertNotIn("\n", str(raised.exception))


if __name__ == "__main__":
  absltest.main()
