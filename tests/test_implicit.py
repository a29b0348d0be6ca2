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
from energynets.objectives import implicit
from energynets.objectives import local_bce

L, D, B = 4, 5, 8
_jit = functools.partial(jax.jit, compiler_options={"xla_backend_optimization_level": 0})


def _batch(seed=0, dtype=np.float32):
  rs = np.random.RandomState(seed)
  return {"x": jnp.asarray(rs.randn(B, D), dtype),
          "y": jnp.asarray(rs.uniform(size=(B, L)) < 0.5, dtype)}


def _energy():
  return SPENEnergy(L, (6,), feature_activation="softplus", num_measurements=3)


def _float64(tree):
  """Flax initializes float32 parameters even under x64; finite differences need 64."""
  return jax.tree.map(lambda a: a.astype(np.float64)
                      if jnp.issubdtype(a.dtype, jnp.floating) else a, tree)


def _objective(primary="cd", net=None, **kwargs):
  kwargs = dict(dict(inner_steps=3, inverse_hvp=diff.InverseHVP("neumann", 5, alpha=0.1),
                     num_samples=4), **kwargs)
  return implicit.implicit_objective(net or MLP((6,), L, activation="tanh"), _energy(),
                                     kwargs.pop("optimizer", optax.adam(1e-2)),
                                     kwargs.pop("inner_optimizer", optax.sgd(0.1)),
                                     primary=primary, **kwargs)


class LossTest(parameterized.TestCase):

  def test_cd_loss_is_the_sign_corrected_formula(self):
    rs = np.random.RandomState(0)
    energies, costs = rs.randn(3, 5), rs.uniform(size=(3, 5))
    costs[:, 0] = 0.0
    expected = -np.log(np.exp(-energies[:, 0])
                       / np.exp(-energies + costs).sum(axis=1))
    np.testing.assert_allclose(implicit.contrastive_divergence_loss(energies, costs),
                               expected, rtol=1e-6)
    # Lowering the gold's energy lowers the loss (the printed sign would raise it).
    grad = jax.grad(lambda e: implicit.contrastive_divergence_loss(e, costs).sum())(
        jnp.asarray(energies))
    self.assertTrue(np.all(grad[:, 0] > 0))
    self.assertTrue(np.all(grad[:, 1:] < 0))

  def test_straight_through_negatives_are_hard_with_the_probability_gradient(self):
    logits = jnp.asarray(np.random.RandomState(1).randn(3, L), jnp.float32)
    draw = lambda lg: implicit.bernoulli_negatives(jax.random.key(0), lg, 6,
                                                   "straight_through")
    samples = draw(logits)
    self.assertEqual(samples.shape, (3, 6, L))
    np.testing.assert_array_equal(np.unique(samples), [0.0, 1.0])
    grad = jax.grad(lambda lg: draw(lg).sum())(logits)
    np.testing.assert_allclose(grad, 6 * jax.nn.sigmoid(logits) * jax.nn.sigmoid(-logits),
                               rtol=1e-6)

  def test_relaxed_negatives_are_soft_and_sharpen_with_temperature(self):
    logits = jnp.zeros((2, L))
    soft = implicit.bernoulli_negatives(jax.random.key(0), logits, 50, "relaxed", 5.0)
    sharp = implicit.bernoulli_negatives(jax.random.key(0), logits, 50, "relaxed", 0.05)
    self.assertTrue(np.all((soft > 0) & (soft < 1)))
    distance = lambda s: float(jnp.mean(jnp.minimum(s, 1 - s)))
    self.assertLess(distance(sharp), distance(soft) / 5)


class ObjectiveTest(parameterized.TestCase):

  @parameterized.parameters("ssvm", "cd", "dvn")
  def test_every_primary_loss_has_a_non_zero_implicit_term(self, primary):
    objective = _objective(primary, margin_cost="l1")
    batch = _batch()
    state = objective.init(jax.random.key(0), batch)
    _, metrics = _jit(objective.update)(state, batch, jax.random.key(1))
    self.assertGreater(float(metrics["prim_grad_theta_norm"]), 1e-4)
    self.assertGreater(float(metrics["implicit_norm"]), 1e-6)
    self.assertGreater(float(metrics["explicit_norm"]), 1e-6)
    for name, value in metrics.items():
      self.assertTrue(np.all(np.isfinite(value)), name)

  @parameterized.parameters(("dvn", {}), ("cd", dict(negatives="relaxed")),
                            ("cd", dict(negatives="relaxed", include_net_output=True)))
  def test_outer_gradient_matches_finite_differences_of_the_bilevel_value(self, primary,
                                                                         kwargs):
    """With a converged inner loop and an exact inverse-HVP, the step on φ is
    dL_prim(θ*(φ), φ)/dφ. SGD(1) outer: the step is φ − φ_new; `loss` is L_prim(θ*, φ)."""
    with jax.enable_x64(True):
      # Seed 1: every label takes both values, so the inner problem (logistic
      # regression with an L2 kernel penalty and unpenalized biases) has a finite minimum.
      batch = _batch(seed=1, dtype=np.float64)
      objective = _objective(
          primary, net=MLP((), L), optimizer=optax.sgd(1.0),
          inner_optimizer=optax.sgd(1.0), inner_steps=1500, net_l2=0.3, energy_weight=0.3,
          inverse_hvp=diff.InverseHVP("cg", num_terms=60, tol=1e-14), **kwargs)
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

      analytic, fd = testing.directional_derivatives(bilevel_value, lambda p: step, phi,
                                                     seed=0, eps=1e-5)
      np.testing.assert_allclose(analytic, fd, rtol=1e-5)
      # The implicit term matters here: the explicit gradient alone is off.
      explicit = _objective(
          primary, net=MLP((), L), optimizer=optax.sgd(1.0), inner_optimizer=optax.sgd(1.0),
          inner_steps=1500, net_l2=0.3, energy_weight=0.3, gradient="explicit", **kwargs)
      explicit_state, _ = _jit(explicit.update)(state, batch, rng)
      explicit_step = jax.tree.map(jnp.subtract, phi, explicit_state["energy"].params)
      explicit_analytic, _ = testing.directional_derivatives(
          bilevel_value, lambda p: explicit_step, phi, seed=0, eps=1e-5)
      self.assertGreater(abs(explicit_analytic - fd), 1e-3 * abs(fd))

  def test_updates_reduce_the_primary_loss_on_one_batch(self):
    objective = _objective("cd", optimizer=optax.adam(3e-2), num_samples=8)
    _, losses, metrics = testing.fit_one_batch(objective, _batch(), num_steps=30)
    self.assertLess(np.mean(losses[-5:]), np.mean(losses[:5]))
    self.assertTrue(np.isfinite(float(metrics["loss"])))

  def test_explicit_gradient_reports_no_implicit_term(self):
    objective = _objective("ssvm", gradient="explicit")
    batch = _batch()
    _, metrics = _jit(objective.update)(objective.init(jax.random.key(0), batch), batch,
                                        jax.random.key(1))
    self.assertNotIn("implicit_norm", metrics)
    self.assertGreater(float(metrics["explicit_norm"]), 0.0)

  def test_a_failed_solve_falls_back_to_the_explicit_gradient(self):
    batch = _batch()
    explicit = _objective("cd", gradient="explicit")
    state = explicit.init(jax.random.key(0), batch)
    strict = _objective("cd", max_residual=1e-30)  # every solve counts as failed
    loose = _objective("cd")
    rng = jax.random.key(1)
    (want, _), (got, metrics), (other, loose_metrics) = (
        _jit(o.update)(state, batch, rng) for o in (explicit, strict, loose))
    self.assertEqual(float(metrics["implicit_used"]), 0.0)
    self.assertEqual(float(loose_metrics["implicit_used"]), 1.0)
    for a, b in zip(jax.tree.leaves(want["energy"].params),
                    jax.tree.leaves(got["energy"].params)):
      np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    self.assertFalse(all(np.allclose(a, b) for a, b in zip(
        jax.tree.leaves(want["energy"].params), jax.tree.leaves(other["energy"].params))))

  def test_init_from_a_local_bce_state_carries_the_mlp_into_both(self):
    net = MLP((6,), L)
    batch = _batch()
    bce = local_bce(net, optax.adam(1e-3))
    prev = bce.init(jax.random.key(5), batch)
    energy = SPENEnergy(L, (6,), num_measurements=3)
    objective = implicit.implicit_objective(net, energy, optax.adam(1e-3), optax.sgd(0.1))
    state = objective.init_from(prev, jax.random.key(0), batch)
    for a, b in zip(jax.tree.leaves(prev["net"].params),
                    jax.tree.leaves(state["inference_net"].params)):
      np.testing.assert_array_equal(a, b)
    for a, b in zip(jax.tree.leaves(prev["net"].params),
                    jax.tree.leaves(state["energy"].params["local_net"])):
      np.testing.assert_array_equal(a, b)
    # And an implicit state continues itself exactly.
    again = objective.init_from(state, jax.random.key(9), batch)
    for k in ("inference_net", "energy"):
      for a, b in zip(jax.tree.leaves(state[k].params), jax.tree.leaves(again[k].params)):
        np.testing.assert_array_equal(a, b)

  def test_solver_values_give_the_update_of_the_equivalent_record(self):
    batch = _batch(3)
    states = {}
    for name, solver in (("record", diff.InverseHVP("neumann", 5, alpha=0.1)),
                         ("value", diff.Neumann(num_terms=5, alpha=0.1))):
      objective = _objective("ssvm", inverse_hvp=solver)
      state = objective.init(jax.random.key(0), batch)
      states[name] = _jit(objective.update)(state, batch, jax.random.key(1))
    for a, b in zip(jax.tree.leaves(states["record"]), jax.tree.leaves(states["value"])):
      np.testing.assert_array_equal(a, b)
    with self.assertRaisesRegex(TypeError, "inverse-HVP solver"):
      _objective(inverse_hvp="neumann")

  @parameterized.parameters(
      (dict(primary="nce"), "unknown primary loss"),
      (dict(gradient="unrolled"), "unknown gradient"),
      (dict(negatives="gumbel"), "unknown negatives"),
      (dict(inner_steps=0), "inner_steps"),
      (dict(num_samples=0), "num_samples"),
      (dict(inverse_hvp=diff.InverseHVP("neumann", alpha=-1.0)), "alpha"),
      (dict(max_residual=0.0), "max_residual"),
  )
  def test_bad_arguments_are_named(self, kwargs, match):
    with self.assertRaisesRegex(ValueError, match):
      _objective(**kwargs)


# ---------------------------------------------------------------------------------------
# A user's own energy, reached only through the `Energy` protocol.


LowRankPairEnergy = testing.LowRankPairEnergy


def _module_energy(**kwargs):
  return protocol.energy_from_module(LowRankPairEnergy(L, **kwargs), domain=domains.Box(),
                                     y_shape=(L,))


def _function_energy():
  return testing.low_rank_pair_function(D, L)


def _user_objective(energy, **kwargs):
  return implicit.implicit_objective(
      MLP((6,), L, activation="tanh"), energy, optax.adam(1e-2), optax.sgd(0.1),
      inner_steps=2, num_samples=3, inverse_hvp=diff.Neumann(num_terms=3, alpha=0.1),
      **kwargs)


class UserEnergyTest(parameterized.TestCase):

  @parameterized.named_parameters(("module", _module_energy, "cd"),
                                  ("function", _function_energy, "ssvm"))
  def test_a_user_energy_trains(self, make_energy, primary):
    objective = _user_objective(make_energy(), primary=primary)
    batch = _batch(4)
    state = new = objective.init(jax.random.key(0), batch)
    update = _jit(objective.update)
    for t in range(2):
      new, metrics = update(new, batch, jax.random.key(t))
    for name in ("loss", "grad_norm", "implicit_norm"):
      self.assertTrue(np.isfinite(float(metrics[name])), name)
    self.assertFalse(all(np.allclose(a, b) for a, b in zip(
        jax.tree.leaves(state["energy"].params), jax.tree.leaves(new["energy"].params))))
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
        MLP((6,), L, activation="tanh"), _energy(), optax.adam(1e-2), optax.sgd(0.1),
        primary=SquaredValue(),
        options=implicit.ImplicitOptions(inner_steps=2,
                                         inverse_hvp=diff.Neumann(num_terms=3, alpha=0.1)))
    batch = _batch(5)
    state = new = objective.init(jax.random.key(0), batch)
    update = _jit(objective.update)
    for t in range(2):
      new, metrics = update(new, batch, jax.random.key(t))
    for name in ("loss", "grad_norm", "squared_error", "gold_energy", "implicit_norm"):
      self.assertTrue(np.isfinite(float(metrics[name])), name)
    self.assertGreater(float(metrics["prim_grad_theta_norm"]), 0.0)
    self.assertFalse(all(np.allclose(a, b) for a, b in zip(
        jax.tree.leaves(state["energy"].params), jax.tree.leaves(new["energy"].params))))

  def test_values_and_flat_keywords_give_the_same_losses(self):
    """The flat keywords are mapped onto the same values (`implicit_options_from_config`)."""
    net, energy, batch = MLP((6,), L, activation="tanh"), _energy(), _batch(6)
    state = _objective("cd").init(jax.random.key(0), batch)
    theta, phi = state["inference_net"].params, state["energy"].params
    options = implicit.ImplicitOptions(energy_weight=0.5, l2=0.1, net_l2=0.2)
    flat = dict(energy_weight=0.5, l2=0.1, net_l2=0.2)
    for value, named in (
        (implicit.ImplicitSSVM(margin_cost="score"), dict(primary="ssvm", margin_cost="score")),
        (implicit.ImplicitCD(num_samples=3, negatives="relaxed", include_net_output=True),
         dict(primary="cd", num_samples=3, negatives="relaxed", include_net_output=True)),
        (implicit.ImplicitDVN(), dict(primary="dvn", num_samples=7))):  # CD's key: ignored
      a = implicit.ImplicitLosses(net, energy, options=options, primary=value)
      b = implicit.ImplicitLosses(net, energy, **named, **flat)
      self.assertEqual(b.primary, value)
      for name in ("aux", "prim"):
        np.testing.assert_array_equal(getattr(a, name)(theta, phi, batch, jax.random.key(1))[0],
                                      getattr(b, name)(theta, phi, batch, jax.random.key(1))[0])

  def test_a_config_block_maps_onto_the_values(self):
    solver = diff.ConjugateGradient(max_iter=3)
    options, primary = implicit.implicit_options_from_config(
        dict(primary="ssvm", num_samples=10, include_net_output=True, gradient="explicit"),
        inverse_hvp=solver)
    self.assertEqual(primary, implicit.ImplicitSSVM())
    self.assertEqual(options, implicit.ImplicitOptions(gradient="explicit", inverse_hvp=solver))
    self.assertEqual(implicit.get_primary_loss("cd", num_samples=4),
                     implicit.ImplicitCD(num_samples=4))

  @parameterized.parameters(
      (lambda: implicit.get_primary_loss("nce"), r"unknown primary loss 'nce'.*'cd'"),
      (lambda: implicit.get_primary_loss("dvn", num_samples=4), r"\['num_samples'\].*'dvn'"),
      (lambda: implicit.implicit_options_from_config({"inner_stpes": 2}),
       r"unknown implicit options \['inner_stpes'\]; known: \('primary', 'energy_weight'"),
      (lambda: _objective(primary=SquaredValue(), num_samples=2), "num_samples"))
  def test_unknown_names_and_keys_are_one_line_errors(self, make, match):
    with self.assertRaisesRegex(ValueError, match) as raised:
      make()
    self.assertNotIn("\n", str(raised.exception))


if __name__ == "__main__":
  absltest.main()
