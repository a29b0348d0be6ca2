"""Tests of end-to-end SPEN training (energynets/objectives/e2e.py) and its config.

Oracles: the objective's own loss before and after a few steps; float64 central finite
differences of the loss (through encode, the differentiable start, the unroll and the
softplus step sizes); the three gradient strategies against each other (one update
each); a user's own strategy, passed in, is the one used; the implicit strategy against
the unrolled gradient and the closed form `A⁻¹b` on a strongly convex energy; and the
experiment driver end to end on the synthetic task.
"""

from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from energynets import diff
from energynets import domains
from energynets import testing
from energynets.energies import SPENEnergy
from energynets.energies import protocol
from energynets.inference import SGD
from energynets.inference import GBIConfig
from energynets.inference import Logit
from energynets.inference import Momentum
from energynets.inference import Projected
from energynets.inference import unrolled
from energynets.nets import hardtanh
from energynets.nets import softplus
from energynets.objectives import e2e
from energynets.objectives import task_losses
from energynets.testing import directional_derivatives

FAST_COMPILE = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}
STRATEGIES = {
  "scan": unrolled.Unrolled(),
  "remat": unrolled.Rematerialized(),
  "adjoint": unrolled.HVPAdjoint(),
}
GBI = GBIConfig(
  parametrization=Logit(),
  direction=Momentum(0.5),
  learning_rate=0.5,
  num_steps=4,
  entropy_weight=0.05,
)


def _batch(seed=0, batch=6, features=5, labels=4, dtype=np.float32):
  rs = np.random.RandomState(seed)
  x = rs.randn(batch, features).astype(dtype)
  y = (rs.uniform(size=(batch, labels)) < 0.5).astype(dtype)
  return {"x": jnp.asarray(x), "y": jnp.asarray(y)}


def _spen(labels=4):
  return SPENEnergy(
    labels,
    feature_hidden=(6,),
    feature_activation=jax.nn.relu,
    num_measurements=3,
    activation=softplus,
  )


def test_iterate_weights_follow_eq9():
  np.testing.assert_allclose(
    e2e.iterate_weights(4), np.array([1 / 4, 1 / 3, 1 / 2, 1]) / 4, rtol=1e-6
  )
  np.testing.assert_array_equal(e2e.iterate_weights(3, per_iterate=False), [0, 0, 1])


def test_step_sizes_start_at_the_learning_rate_and_stay_positive():
  rho = e2e.init_step_sizes(GBI)
  np.testing.assert_allclose(e2e.step_sizes({"step_sizes": rho}), np.full(4, 0.5), rtol=1e-6)
  assert float(jnp.min(e2e.step_sizes({"step_sizes": jnp.full(3, -50.0)}))) > 0
  with pytest.raises(ValueError, match="positive"):
    e2e.init_step_sizes(GBI._replace(learning_rate=0.0))


def test_a_few_steps_reduce_the_loss():
  batch = _batch()
  objective = e2e.e2e_objective(_spen(), optax.adam(3e-2), options=e2e.E2EOptions(gbi=GBI))
  state, losses, metrics = testing.fit_one_batch(objective, batch, 20)
  assert losses[-1] < 0.8 * losses[0], losses
  assert set(metrics) >= {"loss", "grad_norm", "final_loss", "initial_loss", "step_size_mean"}
  # The step sizes trained too, and stayed positive.
  assert not np.allclose(state["inference"].params["step_sizes"], e2e.init_step_sizes(GBI))
  assert float(metrics["step_size_mean"]) > 0
  y = jax.jit(objective.predict)(state, batch["x"])
  assert y.shape == batch["y"].shape and bool(jnp.all((y > 0) & (y < 1)))


def test_strategies_give_the_same_update_and_it_matches_finite_differences():
  """The training update's gradient (energy and step sizes) by scan, remat and adjoint."""
  with jax.enable_x64(True):
    batch = _batch(1, dtype=np.float64)
    rng = jax.random.key(0)
    fns = {
      name: e2e.e2e_losses(_spen(), options=e2e.E2EOptions(gbi=GBI, gradient=g, l2=1e-3))
      for name, g in STRATEGIES.items()
    }
    energy_params = jax.tree.map(
      lambda a: a.astype(jnp.float64),
      fns["scan"].model.init_params(jax.random.key(0), batch["x"], batch["y"]),
    )
    params = (
      energy_params,
      {"step_sizes": jnp.asarray(fns["scan"].initial_step_sizes, jnp.float64)},
    )

    @jax.jit
    def gradients(params):
      return {g: jax.grad(lambda p: f.loss_fn(p, batch, rng)[0])(params) for g, f in fns.items()}

    grads = gradients.lower(params).compile(FAST_COMPILE)(params)
    for gradient in ("remat", "adjoint"):
      for a, b in zip(jax.tree.leaves(grads["scan"]), jax.tree.leaves(grads[gradient])):
        np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-12, err_msg=gradient)
    assert float(jnp.max(jnp.abs(grads["adjoint"][1]["step_sizes"]))) > 0
    value = (
      jax.jit(lambda p: fns["adjoint"].loss_fn(p, batch, rng)[0])
      .lower(params)
      .compile(FAST_COMPILE)
    )
    analytic, numeric = directional_derivatives(value, lambda _: grads["adjoint"], params, seed=3)
    assert analytic == pytest.approx(numeric, rel=1e-6)


class _TinyImageEnergy(nn.Module):
  """`x, y [B, H, W] -> [B]`: data term + a smooth conv prior (what image.py's look like)."""

  activation: Callable[[jax.Array], jax.Array] = jax.nn.softplus

  @nn.compact
  def __call__(self, x, y):
    h = nn.Conv(2, (3, 3), padding="VALID")(y[..., None])
    prior = jnp.sum(self.activation(h), axis=(1, 2, 3))
    return 0.5 * jnp.sum((y - x) ** 2, axis=(1, 2)) + prior


def _tiny_image_energy(**kw):
  return protocol.energy_from_module(_TinyImageEnergy(**kw), domain=domains.Real())


def test_image_energy_module_plugs_in():
  """A Flax module E(x, y) on the Real domain, y0 = x, squared loss, adjoint gradient."""
  rs = np.random.RandomState(0)
  clean = rs.uniform(size=(3, 6, 6)).astype(np.float32)
  batch = {
    "x": jnp.asarray(clean + 0.1 * rs.randn(3, 6, 6).astype(np.float32)),
    "y": jnp.asarray(clean),
  }
  gbi = GBIConfig(
    parametrization=Projected(), direction=Momentum(0.25), learning_rate=0.1, num_steps=3
  )
  objective = e2e.e2e_objective(
    _tiny_image_energy(),
    optax.adam(1e-2),
    options=e2e.E2EOptions(
      gbi=gbi,
      loss=task_losses.Squared(),
      init="input",
      gradient=unrolled.HVPAdjoint(),
      loss_reduction=e2e.Mean(),
    ),
  )
  state = objective.init(jax.random.key(0), batch)
  update = jax.jit(objective.update)
  first = None
  for i in range(10):
    state, metrics = update(state, batch, jax.random.key(i))
    first = first if first is not None else float(metrics["loss"])
  assert float(metrics["loss"]) < first
  assert objective.predict(state, batch["x"]).shape == (3, 6, 6)
  # Continuing a stage carries the energy and the learned step sizes.
  carried = objective.init_from(state, jax.random.key(1), batch)
  np.testing.assert_array_equal(
    carried["inference"].params["step_sizes"], state["inference"].params["step_sizes"]
  )


class _CountingScaledUnrolled:
  """A user's own strategy: `Unrolled` whose cotangents a `jax.custom_vjp` scales, and
  which counts its calls (e2e only calls it; nothing checks its type)."""

  def __init__(self, scale):
    self.scale, self.calls = scale, 0

  def __call__(self, energy, params, x, y0, domain, config):
    self.calls += 1

    @jax.custom_vjp
    def scaled(outputs):
      return outputs

    scaled.defvjp(
      lambda outputs: (outputs, None), lambda _, ct: (jax.tree.map(lambda c: self.scale * c, ct),)
    )
    return scaled(unrolled.Unrolled()(energy, params, x, y0, domain, config))


def test_a_user_strategy_plugs_in_and_is_used():
  batch = _batch(2)
  rng = jax.random.key(0)
  user = _CountingScaledUnrolled(2.0)
  fns = {
    "scan": e2e.e2e_losses(_spen(), options=e2e.E2EOptions(gbi=GBI, gradient=unrolled.Unrolled())),
    "user": e2e.e2e_losses(_spen(), options=e2e.E2EOptions(gbi=GBI, gradient=user)),
  }
  params = (
    fns["scan"].model.init_params(jax.random.key(0), batch["x"], batch["y"]),
    {"step_sizes": fns["scan"].initial_step_sizes},
  )
  grads = (
    jax.jit(
      lambda p: {k: jax.grad(lambda q: f.loss_fn(q, batch, rng)[0])(p) for k, f in fns.items()}
    )
    .lower(params)
    .compile(FAST_COMPILE)(params)
  )
  assert user.calls == 1
  for a, b in zip(jax.tree.leaves(grads["scan"]), jax.tree.leaves(grads["user"])):
    np.testing.assert_allclose(b, 2.0 * a, rtol=1e-5, atol=1e-7)
  # Through e2e_objective: a zero cotangent scale leaves plain SGD nothing to step on.
  frozen = _CountingScaledUnrolled(0.0)
  objective = e2e.e2e_objective(
    _spen(), optax.sgd(1.0), options=e2e.E2EOptions(gbi=GBI, gradient=frozen)
  )
  state = objective.init(rng, batch)
  new_state, _ = jax.jit(objective.update)(state, batch, rng)
  assert frozen.calls == 1
  for group in ("energy", "inference"):
    for a, b in zip(jax.tree.leaves(state[group].params), jax.tree.leaves(new_state[group].params)):
      np.testing.assert_array_equal(a, b)


class _QuadraticEnergy(nn.Module):
  """`E(x, y) = ½ yᵀA y − (xW)ᵀy`, `A = M Mᵀ + I`: strongly convex in y, `y* = A⁻¹ W ᵀx`."""

  @nn.compact
  def __call__(self, x, y):
    n = y.shape[-1]
    m = self.param("M", nn.initializers.normal(0.3), (n, n))
    w = self.param("W", nn.initializers.normal(1.0), (n, n))
    a = m @ m.T + jnp.eye(n, dtype=m.dtype)
    return 0.5 * jnp.einsum("bi,ij,bj->b", y, a, y) - jnp.sum((x @ w) * y, axis=-1)


def test_implicit_strategy_equals_unrolled_at_convergence():
  """e2e on a strongly convex energy (Real domain, 300 steps of contraction ≤ 0.7): the
  update by `Implicit` (CG and Neumann) equals the unrolled one and `jax.grad` through
  `jnp.linalg.solve`; with the per-iterate loss only its last term (weight 1/T) trains."""
  with jax.enable_x64(True):
    rs = np.random.RandomState(0)
    batch = {"x": jnp.asarray(rs.randn(3, 4)), "y": jnp.asarray(rs.randn(3, 4))}
    rng = jax.random.key(0)
    gbi = GBIConfig(parametrization=Projected(), direction=SGD(), learning_rate=0.3, num_steps=300)
    common = dict(gbi=gbi, loss=task_losses.Squared(), init="input", learn_step_sizes=False)
    strategies = {
      "unrolled": unrolled.Unrolled(),
      "cg": unrolled.Implicit(diff.ConjugateGradient(max_iter=20, tol=1e-14)),
      "neumann": unrolled.Implicit(diff.Neumann(num_terms=400, alpha=0.25)),
    }
    energy = protocol.energy_from_module(_QuadraticEnergy(), domain=domains.Real())
    fns = {
      k: e2e.e2e_losses(energy, options=e2e.E2EOptions(per_iterate=False, gradient=s, **common))
      for k, s in strategies.items()
    }
    fns["cg_per_iterate"] = e2e.e2e_losses(
      energy, options=e2e.E2EOptions(per_iterate=True, gradient=strategies["cg"], **common)
    )
    energy_params = jax.tree.map(
      lambda a: a.astype(jnp.float64), fns["cg"].model.init_params(rng, batch["x"], batch["y"])
    )
    params = (energy_params, {"step_sizes": jnp.asarray(fns["cg"].initial_step_sizes, jnp.float64)})

    def closed_form(p):
      a = p["M"] @ p["M"].T + jnp.eye(4)
      y_star = jnp.linalg.solve(a, (batch["x"] @ p["W"]).T).T
      return jnp.mean(jnp.sum((y_star - batch["y"]) ** 2, axis=-1))

    @jax.jit
    def run(params):
      grads = {
        k: jax.grad(lambda q: f.loss_fn(q, batch, rng)[0])(params)[0] for k, f in fns.items()
      }
      return grads, jax.grad(closed_form)(params[0])

    grads, reference = run.lower(params).compile(FAST_COMPILE)(params)
    assert min(float(jnp.max(jnp.abs(a))) for a in jax.tree.leaves(reference)) > 1e-2
    for name in strategies:
      for a, b in zip(jax.tree.leaves(reference), jax.tree.leaves(grads[name])):
        np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-11, err_msg=name)
    # (The iterate weights are float32: 1/T to about 1e-8.)
    for a, b in zip(jax.tree.leaves(grads["cg"]), jax.tree.leaves(grads["cg_per_iterate"])):
      np.testing.assert_allclose(b, a / gbi.num_steps, rtol=1e-6)


@pytest.mark.parametrize("activation", [jax.nn.relu, hardtanh])
def test_non_smooth_energies_are_rejected(activation):
  energy = SPENEnergy(4, feature_hidden=(), activation=activation)
  with pytest.raises(ValueError, match="not smooth.*softplus"):
    e2e.e2e_objective(energy, optax.adam(1e-3), options=e2e.E2EOptions(gbi=GBI))
  with pytest.raises(ValueError, match="not smooth"):
    e2e.e2e_objective(
      _TinyImageEnergy(activation=nn.relu),
      optax.adam(1e-3),
      options=e2e.E2EOptions(gbi=GBI, loss=task_losses.Squared(), init="input"),
    )


def test_bad_options_are_rejected():
  with pytest.raises(TypeError, match="gradient is a strategy value"):
    e2e.e2e_objective(
      _spen(), optax.adam(1e-3), options=e2e.E2EOptions(gbi=GBI, gradient="implicit")
    )
  with pytest.raises(TypeError, match="E2EOptions"):
    e2e.e2e_objective(_spen(), optax.adam(1e-3))
  with pytest.raises(ValueError, match="unknown init"):
    e2e.e2e_objective(_spen(), optax.adam(1e-3), options=e2e.E2EOptions(gbi=GBI, init="input"))
  with pytest.raises(ValueError, match="Real domain takes loss=Squared"):
    e2e.e2e_objective(
      _tiny_image_energy(), optax.adam(1e-3), options=e2e.E2EOptions(gbi=GBI, init="input")
    )
  with pytest.raises(ValueError, match="at least one"):
    e2e.e2e_objective(
      _spen(), optax.adam(1e-3), options=e2e.E2EOptions(gbi=GBI._replace(num_steps=0))
    )
  with pytest.raises(ValueError, match="trainable must name"):
    e2e.e2e_objective(
      _spen(), optax.adam(1e-3), options=e2e.E2EOptions(gbi=GBI, trainable=("features",))
    )


def test_e2e_config_trains_on_synthetic(tmp_path):
  from experiments import configuration
  from experiments import train

  config = configuration.get_config(
    "e2e",
    "synthetic",
    [
      "train.steps=4",
      "train.eval_every=4",
      "train.log_every=4",
      "train.tensorboard=False",
      "train.batch_size=32",
      "train.eval_batch_size=500",
      "data.num_train=200",
      "gbi.num_steps=3",
      "stage_order=pretrain,joint",
    ],
  )  # all three: test_experiments.py
  with config.unlocked():
    for name in config.stages.keys():
      config.stages[name].train.steps = 3 if name == "pretrain" else 4
  results = train.train_and_evaluate(config, str(tmp_path))
  assert [s["method"] for s in results["meta"]["stages"]] == ["spen_pretrain", "e2e"]
  assert 0.0 <= results["test/example_f1"] <= 1.0
  assert results["meta"]["config"]["energy"]["activation"] == "softplus"


def test_implicit_updates_log_the_residual_of_their_solve():
  batch = _batch()
  metrics = {}
  for name, gradient in (("implicit", unrolled.Implicit()), ("scan", unrolled.Unrolled())):
    objective = e2e.e2e_objective(
      _spen(), optax.adam(1e-3), options=e2e.E2EOptions(gbi=GBI, gradient=gradient)
    )
    state = objective.init(jax.random.key(0), batch)
    _, metrics[name] = jax.jit(objective.update)(state, batch, jax.random.key(1))
  assert 0.0 <= float(metrics["implicit"]["implicit_residual"]) < 1e-4
  assert "implicit_residual" not in metrics["scan"]
  assert np.isfinite(float(metrics["implicit"]["grad_norm"]))
