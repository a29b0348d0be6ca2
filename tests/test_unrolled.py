"""Tests of differentiating through unrolled GBI (energynets/inference/unrolled.py).

Oracles: the three gradient strategies against each other (reverse mode through the
scan is the reference), and float64 central finite differences of the loss along a
random direction of (params, x, y0, step sizes). The loss touches every iterate (the
E2E per-iterate loss) and the final one, so the adjoint's cotangents for all of `ys`
are exercised. Each case compiles all of its gradients in one `jax.jit` (with XLA's
cheap CPU pipeline: the test cost is compilation, not running).

The strategies are values (`Unrolled`, `Rematerialized`, `HVPAdjoint`, `Implicit`) that
the names map to. The implicit strategy's oracles: at convergence on a strongly convex
quadratic energy it equals the unrolled gradient and `jax.grad` through
`jnp.linalg.solve` of the closed-form minimizer; on Box and Simplex with entropy
smoothing it equals the unrolled gradient of a converged run.
"""

import dataclasses
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from energynets import diff
from energynets import domains
from energynets.inference import unrolled
from energynets.inference.directions import SGD
from energynets.inference.directions import Adam
from energynets.inference.directions import Momentum
from energynets.inference.gbi import GBIConfig
from energynets.inference.parametrizations import Logit
from energynets.inference.parametrizations import Mirror
from energynets.inference.parametrizations import Projected
from energynets.testing import directional_derivatives

BOX, SIMPLEX = domains.Box(), domains.Simplex()
FAST_COMPILE = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}
B, D, L, M, T = 3, 4, 5, 6, 5


def spen_like(p, x, y):
  """Local + global (softplus measurements) + conditional term; `x = (features, mask)`.

  The integer `mask` leaf switches the conditional term off per example: an input pytree
  with a non-differentiable leaf, as a real feature encoding may have.
  """
  features, mask = x
  local = -jnp.sum(y * (features @ p["V"] + p["b"]), axis=-1)
  glob = jax.nn.softplus(y @ p["C"] + p["c"]) @ p["w"]
  cond = jax.nn.softplus(jnp.concatenate([y, features], axis=-1) @ p["D"]) @ p["d"]
  return local + glob + cond * mask


def chain(p, x, y):
  """A tagging energy on the simplex: y `[B, N, K]`, x `[B, N, K]` unaries."""
  pair = jnp.einsum("bnk,kl,bnl->b", y[:, :-1], p["P"], y[:, 1:])
  return -jnp.sum(x * y, axis=(1, 2)) + jnp.sum(jax.nn.softplus(pair[:, None] * p["s"]), -1)


def _problem(seed=0):
  rs = np.random.RandomState(seed)
  params = dict(
    V=rs.randn(D, L),
    b=rs.randn(L),
    C=rs.randn(L, M),
    c=rs.randn(M),
    w=rs.randn(M),
    D=0.5 * rs.randn(L + D, 3),
    d=rs.randn(3),
  )
  features = rs.randn(B, D)
  mask = jnp.array([1, 0, 1])
  y0 = rs.uniform(0.2, 0.8, (B, L))
  steps = rs.uniform(0.05, 0.3, T)
  target = rs.uniform(size=(B, L))
  return params, features, mask, y0, steps, target


# The cases name the strategies; these are the values the names stand for.
STRATEGIES = {
  "scan": unrolled.Unrolled(),
  "remat": unrolled.Rematerialized(),
  "adjoint": unrolled.HVPAdjoint(),
}


def _strategy(gradient):
  """A strategy value from its case name, or the value itself."""
  return STRATEGIES[gradient] if isinstance(gradient, str) else gradient


def _loss_fn(energy, domain, config, target, x_static):
  """`(params, features, y0, steps, gradient) -> scalar`: weighted per-iterate + final loss."""
  weights = 1.0 / (config.num_steps - jnp.arange(config.num_steps))

  def loss(params, features, y0, steps, gradient):
    x = (features,) + x_static if x_static else features
    y_final, ys = unrolled.unrolled_gbi(
      energy, params, x, y0, domain, config._replace(step_sizes=steps), _strategy(gradient)
    )
    per_iterate = jnp.sum(weights.reshape((-1,) + (1,) * (ys.ndim - 1)) * (ys - target) ** 2)
    return per_iterate + jnp.sum(jnp.sin(3.0 * y_final) * target)

  return loss


def _check_strategies(
  energy,
  domain,
  config,
  params,
  features,
  y0,
  steps,
  target,
  x_static=(),
  strategies=("scan", "adjoint"),
  fd_seeds=(0,),
):
  loss = _loss_fn(energy, domain, config, target, x_static)

  @jax.jit
  def run(params, features, y0, steps):
    return {
      g: jax.grad(loss, argnums=(0, 1, 2, 3))(params, features, y0, steps, g) for g in strategies
    }

  args = (params, features, y0, steps)
  grads = run.lower(*args).compile(FAST_COMPILE)(*args)
  reference = grads["scan"]
  for g in strategies[1:]:
    for name, want, got in zip(("params", "x", "y0", "step_sizes"), reference, grads[g]):
      for a, b in zip(jax.tree.leaves(want), jax.tree.leaves(got)):
        np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-11, err_msg=f"{g}: d/d{name}")
  # Every input gets a non-trivial gradient (else agreement would prove little).
  for part in reference:
    assert max(float(jnp.max(jnp.abs(a))) for a in jax.tree.leaves(part)) > 1e-6
  if not fd_seeds:
    return
  value = jax.jit(lambda a: loss(*a, "scan")).lower(args).compile(FAST_COMPILE)
  adjoint = grads[strategies[-1]]
  for seed in fd_seeds:
    analytic, numeric = directional_derivatives(value, lambda _: adjoint, args, seed, eps=1e-6)
    assert analytic == pytest.approx(numeric, rel=1e-6, abs=1e-8)


# Every method x optimizer pair. By default: scan vs adjoint for sgd and momentum
# (adam once, below), remat on two cases and finite differences on the momentum cases
# (compilation dominates the cost of these tests); `--runslow` runs the full grid with
# all three strategies and two finite-difference directions everywhere.
ALL_CASES = [(m, o) for m in ("projected", "mirror", "logit") for o in ("sgd", "momentum", "adam")]
CASES = [(m, o) for m in ("projected", "mirror", "logit") for o in ("sgd", "momentum")]


PARAMETRIZATIONS = {"projected": Projected(), "mirror": Mirror(), "logit": Logit()}
DIRECTIONS = {"sgd": SGD(), "momentum": Momentum(0.7), "adam": Adam()}


def _config(method, optimizer):
  # Projected steps go without entropy (its gradient is unbounded at the faces).
  return GBIConfig(
    parametrization=PARAMETRIZATIONS[method],
    direction=DIRECTIONS[optimizer],
    num_steps=T,
    entropy_weight=0.0 if method == "projected" else 0.1,
  )


@pytest.mark.parametrize("method,optimizer", CASES)
def test_adjoint_matches_scan_and_finite_differences(method, optimizer):
  with jax.enable_x64(True):
    params, features, mask, y0, steps, target = _problem()
    # 'remat' is jax.checkpoint around the same scan: checked on two cases by default.
    remat = (method, optimizer) in (("logit", "momentum"), ("mirror", "sgd"))
    strategies = ("scan", "remat", "adjoint") if remat else ("scan", "adjoint")
    fd_seeds = (0,) if optimizer == "momentum" else ()
    _check_strategies(
      spen_like,
      BOX,
      _config(method, optimizer),
      params,
      features,
      y0,
      steps,
      target,
      x_static=(mask,),
      strategies=strategies,
      fd_seeds=fd_seeds,
    )


@pytest.mark.slow
@pytest.mark.parametrize("method,optimizer", ALL_CASES)
def test_all_strategies_agree_everywhere(method, optimizer):
  with jax.enable_x64(True):
    params, features, mask, y0, steps, target = _problem(1)
    _check_strategies(
      spen_like,
      BOX,
      _config(method, optimizer),
      params,
      features,
      y0,
      steps,
      target,
      x_static=(mask,),
      strategies=("scan", "remat", "adjoint"),
      fd_seeds=(0, 1),
    )


def test_simplex_logit_mode_with_softmax_coordinates():
  """Softmax is not elementwise: the adjoint's coordinate-curvature term must be general."""
  with jax.enable_x64(True):
    rs = np.random.RandomState(3)
    params = {"P": rs.randn(3, 3), "s": rs.randn(2)}
    x = rs.randn(2, 4, 3)
    y0 = jax.nn.softmax(rs.randn(2, 4, 3))
    config = GBIConfig(
      parametrization=Logit(), direction=Momentum(0.5), num_steps=4, entropy_weight=0.2
    )
    _check_strategies(
      chain,
      SIMPLEX,
      config,
      params,
      x,
      y0,
      rs.uniform(0.1, 0.5, 4),
      rs.dirichlet(np.ones(3), (2, 4)),
      fd_seeds=(),
    )


def test_iterates_are_gbi_scans():
  """The adjoint's forward pass is gbi_scan's trajectory."""
  params, features, mask, y0, steps, _ = _problem()
  config = _config("mirror", "momentum")._replace(step_sizes=jnp.asarray(steps, jnp.float32))
  y0 = jnp.asarray(y0, jnp.float32)
  run = jax.jit(
    lambda g: unrolled.unrolled_gbi(spen_like, params, (features, mask), y0, BOX, config, g),
    static_argnums=0,
  )
  y_scan, ys_scan = run(unrolled.Unrolled())
  y_adj, ys_adj = run(unrolled.HVPAdjoint())
  # Same operations; XLA may fuse the two programs differently (last-bit differences).
  np.testing.assert_allclose(ys_adj, ys_scan, rtol=1e-6)
  np.testing.assert_allclose(y_adj, y_scan, rtol=1e-6)
  np.testing.assert_array_equal(ys_adj[-1], y_adj)
  assert ys_adj.shape == (T, B, L)


def test_bad_step_sizes_are_rejected():
  params, features, mask, y0, _, _ = _problem()
  with pytest.raises(ValueError, match="step_sizes must have shape"):
    unrolled.unrolled_gbi(
      spen_like,
      params,
      (features, mask),
      y0,
      BOX,
      _config("logit", "sgd")._replace(step_sizes=jnp.ones(2)),
      unrolled.HVPAdjoint(),
    )


def test_annealing_unrolls_by_scan_and_is_refused_by_the_adjoint():
  params, features, mask, y0, _, _ = _problem()
  y0 = jnp.asarray(y0, jnp.float32)  # the iterate's dtype, as a model's outputs would have
  config = _config("mirror", "momentum")._replace(entropy_anneal_init=1.0, entropy_anneal_steps=3)
  with pytest.raises(ValueError, match="entropy annealing"):
    unrolled.unrolled_gbi(
      spen_like, params, (features, mask), y0, BOX, config, unrolled.HVPAdjoint()
    )
  y_scan, _ = unrolled.unrolled_gbi(spen_like, params, (features, mask), y0, BOX, config)
  y_remat, _ = unrolled.unrolled_gbi(
    spen_like, params, (features, mask), y0, BOX, config, unrolled.Rematerialized()
  )
  np.testing.assert_allclose(y_remat, y_scan, rtol=1e-6)


# ---------------------------------------------------------------------------------------
# Strategies as values.


def test_the_default_strategy_is_unrolled():
  params, features, mask, y0, _, _ = _problem()
  y0 = jnp.asarray(y0, jnp.float32)  # the iterate's dtype, as a model's outputs would have
  config = _config("logit", "momentum")
  y_default, ys_default = unrolled.unrolled_gbi(
    spen_like, params, (features, mask), y0, BOX, config
  )
  y_scan, ys_scan = unrolled.Unrolled()(spen_like, params, (features, mask), y0, BOX, config)
  np.testing.assert_array_equal(ys_default, ys_scan)
  np.testing.assert_array_equal(y_default, y_scan)


def test_bad_strategies_are_rejected_naming_the_choices():
  params, features, mask, y0, _, _ = _problem()
  run = lambda g: unrolled.unrolled_gbi(
    spen_like, params, (features, mask), y0, BOX, _config("logit", "sgd"), g
  )
  with pytest.raises(TypeError, match=r"strategy value .*got 'scan'"):
    run("scan")  # names live in experiments/choices
  with pytest.raises(TypeError, match="strategy value"):
    run(3)
  with pytest.raises(TypeError, match="strategy value"):
    run(unrolled.Unrolled)  # the class, not a value


class _Quadratic:
  """`E(y) = ½ yᵀA y − bᵀy`, `A = M Mᵀ + I` (eigenvalues in [1, ~3]), `b = x W`:
  strongly convex, with minimizer `y* = A⁻¹ b` per example."""

  n, d = 4, 3

  @classmethod
  def problem(cls, seed=0, batch=2):
    rs = np.random.RandomState(seed)
    params = {"M": 0.3 * rs.randn(cls.n, cls.n), "W": rs.randn(cls.d, cls.n)}
    return params, rs.randn(batch, cls.d), rs.randn(batch, cls.n)

  @classmethod
  def matrix(cls, p):
    return p["M"] @ p["M"].T + jnp.eye(cls.n)

  @classmethod
  def energy(cls, p, x, y):
    return 0.5 * jnp.einsum("bi,ij,bj->b", y, cls.matrix(p), y) - jnp.sum((x @ p["W"]) * y, -1)

  @classmethod
  def minimizer(cls, p, x):
    return jnp.linalg.solve(cls.matrix(p), (x @ p["W"]).T).T


def test_implicit_equals_unrolled_and_closed_form_at_convergence():
  """On a strongly convex energy, 300 steps converge (contraction ≤ 0.7 per step): the
  unrolled gradient, the implicit one (CG and Neumann) and `jax.grad` through
  `jnp.linalg.solve` agree w.r.t. the energy's parameters and its input."""
  with jax.enable_x64(True):
    params, x, target = _Quadratic.problem()
    config = GBIConfig(
      parametrization=Projected(), direction=SGD(), learning_rate=0.3, num_steps=300
    )
    y0 = jnp.zeros_like(target)
    task = lambda y: jnp.sum((y - target) ** 2) + jnp.sum(jnp.sin(y))
    strategies = {
      "unrolled": unrolled.Unrolled(),
      "cg": unrolled.Implicit(diff.ConjugateGradient(max_iter=20, tol=1e-14)),
      "neumann": unrolled.Implicit(diff.Neumann(num_terms=400, alpha=0.25)),
    }

    @jax.jit
    def run(params, x):
      def loss(p, x_, strategy):
        return task(
          unrolled.unrolled_gbi(_Quadratic.energy, p, x_, y0, domains.Real(), config, strategy)[0]
        )

      grads = {k: jax.grad(loss, argnums=(0, 1))(params, x, s) for k, s in strategies.items()}
      grads["closed_form"] = jax.grad(
        lambda p, x_: task(_Quadratic.minimizer(p, x_)), argnums=(0, 1)
      )(params, x)
      return grads

    grads = run.lower(params, x).compile(FAST_COMPILE)(params, x)
    reference = grads.pop("closed_form")
    assert min(float(jnp.max(jnp.abs(a))) for a in jax.tree.leaves(reference)) > 1e-2
    for name, got in grads.items():
      for a, b in zip(jax.tree.leaves(reference), jax.tree.leaves(got)):
        np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-11, err_msg=name)


@pytest.mark.parametrize("domain,method", [(BOX, "mirror"), (BOX, "logit"), (SIMPLEX, "mirror")])
def test_implicit_in_logit_coordinates_equals_unrolled_at_convergence(domain, method):
  """Box and Simplex: the minimizer of the entropy-smoothed energy is interior, a
  stationary point in the domain's logit coordinates (x with an integer leaf on Box)."""
  with jax.enable_x64(True):
    if domain is BOX:
      params, features, mask, y0, _, target = _problem()
      energy, x, tau = spen_like, (features, mask), 2.0
    else:
      rs = np.random.RandomState(3)
      params = {"P": rs.randn(3, 3), "s": rs.randn(2)}
      energy, x, tau = chain, rs.randn(2, 4, 3), 1.0
      y0, target = jax.nn.softmax(rs.randn(2, 4, 3)), rs.dirichlet(np.ones(3), (2, 4))
    config = GBIConfig(
      parametrization=PARAMETRIZATIONS[method],
      direction=Momentum(0.5),
      learning_rate=0.5,
      num_steps=400,
      entropy_weight=tau,
    )

    def loss(p, strategy):
      y_final, _ = unrolled.unrolled_gbi(energy, p, x, y0, domain, config, strategy)
      return jnp.sum((y_final - target) ** 2)

    run = jax.jit(
      lambda p: [
        jax.grad(loss)(p, s)
        for s in (
          unrolled.Unrolled(),
          unrolled.Implicit(diff.ConjugateGradient(max_iter=100, tol=1e-14)),
        )
      ]
    )
    want, got = run.lower(params).compile(FAST_COMPILE)(params)
    for a, b in zip(jax.tree.leaves(want), jax.tree.leaves(got)):
      np.testing.assert_allclose(b, a, rtol=1e-8, atol=1e-10)


def test_implicit_gives_only_the_last_iterate_a_gradient():
  with jax.enable_x64(True):
    params, x, target = _Quadratic.problem()
    config = GBIConfig(
      parametrization=Mirror(), direction=Momentum(0.5), learning_rate=0.3, num_steps=6
    )
    steps = jnp.full((6,), 0.3)
    strategy = unrolled.Implicit(diff.ConjugateGradient(max_iter=10, tol=1e-14))

    def run(p, x_, y0, steps, which):
      y_final, ys = unrolled.unrolled_gbi(
        _Quadratic.energy, p, x_, y0, domains.Real(), config._replace(step_sizes=steps), strategy
      )
      return jnp.sum(ys[:-1] ** 2) if which == "early" else jnp.sum(y_final * target)

    y0 = jnp.asarray(target)
    early = jax.grad(run, argnums=(0, 1, 2, 3))(params, x, y0, steps, "early")
    assert all(float(jnp.max(jnp.abs(a))) == 0.0 for a in jax.tree.leaves(early))
    g_params, g_x, g_y0, g_steps = jax.grad(run, argnums=(0, 1, 2, 3))(params, x, y0, steps, "last")
    assert float(jnp.max(jnp.abs(g_params["W"]))) > 0 and float(jnp.max(jnp.abs(g_x))) > 0
    assert float(jnp.max(jnp.abs(g_y0))) == 0.0 and float(jnp.max(jnp.abs(g_steps))) == 0.0
    # The values are gbi_scan's.
    y_scan, ys_scan = unrolled.unrolled_gbi(
      _Quadratic.energy, params, x, y0, domains.Real(), config
    )
    y_imp, ys_imp = unrolled.unrolled_gbi(
      _Quadratic.energy, params, x, y0, domains.Real(), config, strategy
    )
    np.testing.assert_array_equal(y_imp, y_scan)
    np.testing.assert_array_equal(ys_imp, ys_scan)
    with pytest.raises(ValueError, match="pick_best=False"):
      unrolled.unrolled_gbi(
        _Quadratic.energy, params, x, y0, domains.Real(), config._replace(pick_best=True), strategy
      )


# ---------------------------------------------------------------------------------------
# User-written choices through the adjoint.


@dataclasses.dataclass(frozen=True)
class _LogitByHand:
  """A user's logit parametrization on the box (no `optimizes_y`: the adjoint
  differentiates its coordinate map)."""

  def to_z(self, y, domain):
    return jnp.log(y) - jnp.log1p(-y)

  def to_y(self, z, domain):
    return jax.nn.sigmoid(z)

  def update(self, z, d, lr, domain):
    return z - lr * d


@dataclasses.dataclass(frozen=True)
class _AveragedGradient:
  """A user's direction whose state is a dict: `d = a ← β a + (1 − β) g`, plus a count."""

  beta: float = 0.6

  def init(self, z):
    return {"average": jnp.zeros_like(z), "count": jnp.zeros(z.shape[:1], jnp.int32)}

  def update(self, g, state):
    average = self.beta * state["average"] + (1.0 - self.beta) * g
    return average, {"average": average, "count": state["count"] + 1}


def test_user_written_parametrization_and_direction_through_the_adjoint():
  with jax.enable_x64(True):
    params, features, mask, y0, steps, target = _problem()
    config = GBIConfig(
      parametrization=_LogitByHand(), direction=_AveragedGradient(), num_steps=T, entropy_weight=0.1
    )
    _check_strategies(
      spen_like,
      BOX,
      config,
      params,
      features,
      y0,
      3.0 * steps,
      target,
      x_static=(mask,),
      fd_seeds=(),
    )


# ---------------------------------------------------------------------------------------
# The implicit strategy's solve: its residual, the warning, the default solver.


def _implicit_grads(strategy, energy, params, x, y0, domain, config, target):
  """`(d loss / d params, relative residual)` of `Σ (y_T − target)²` by `strategy`."""

  def loss(p, probe):
    y_final, _ = strategy(energy, p, x, y0, domain, config, residual_probe=probe)
    return jnp.sum((y_final - target) ** 2)

  return jax.jit(jax.grad(loss, argnums=(0, 1)))(params, jnp.zeros(()))


def test_implicit_reports_a_small_residual_on_a_convex_energy():
  with jax.enable_x64(True):
    params, x, target = _Quadratic.problem()
    config = GBIConfig(
      parametrization=Projected(), direction=SGD(), learning_rate=0.3, num_steps=100
    )
    with warnings.catch_warnings():
      warnings.simplefilter("error")  # no warning below the tolerance
      _, residual = _implicit_grads(
        unrolled.Implicit(),
        _Quadratic.energy,
        params,
        x,
        jnp.zeros_like(target),
        domains.Real(),
        config,
        target,
      )
      jax.effects_barrier()
    assert 0.0 <= float(residual) < 1e-6


def test_implicit_warns_when_the_residual_exceeds_the_tolerance():
  params, x, target = _Quadratic.problem()
  config = GBIConfig(parametrization=Projected(), direction=SGD(), learning_rate=0.3, num_steps=20)
  one_term = unrolled.Implicit(diff.Neumann(num_terms=1, alpha=0.01), residual_tolerance=0.1)
  with pytest.warns(RuntimeWarning, match="residual_tolerance=0.1"):
    _, residual = _implicit_grads(
      one_term, _Quadratic.energy, params, x, jnp.zeros_like(target), domains.Real(), config, target
    )
    jax.effects_barrier()
  assert float(residual) > 0.5
  quiet = dataclasses.replace(one_term, residual_tolerance=None)
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    _implicit_grads(
      quiet, _Quadratic.energy, params, x, jnp.zeros_like(target), domains.Real(), config, target
    )
    jax.effects_barrier()


def test_default_implicit_solver_converges_where_undamped_short_cg_does_not():
  """A non-convex SPEN-like energy after 3 logit steps (far from converged): CG with 10
  undamped iterations leaves a large residual; the default damped CG solves its system
  and equals the exact solve `(H + δI)⁻¹ v` by `jnp.linalg.solve` of the dense Hessian."""
  with jax.enable_x64(True):
    rs = np.random.RandomState(1)
    params = dict(
      V=rs.randn(D, L),
      b=rs.randn(L),
      C=3 * rs.randn(L, M),
      c=rs.randn(M),
      w=3 * rs.randn(M),
      D=0.5 * rs.randn(L + D, 3),
      d=rs.randn(3),
    )
    x = (jnp.asarray(rs.randn(B, D)), jnp.array([1, 0, 1]))
    y0, target = jnp.asarray(rs.uniform(0.2, 0.8, (B, L))), rs.uniform(size=(B, L))
    config = GBIConfig(
      parametrization=Logit(), direction=Momentum(0.5), learning_rate=0.5, num_steps=3
    )
    _, old_residual = _implicit_grads(
      unrolled.Implicit(diff.ConjugateGradient(max_iter=10), residual_tolerance=None),
      spen_like,
      params,
      x,
      y0,
      BOX,
      config,
      target,
    )
    got, residual = _implicit_grads(
      unrolled.Implicit(), spen_like, params, x, y0, BOX, config, target
    )
    assert float(old_residual) > 1e-2 and float(residual) < 1e-6

    # The oracle, dense: H = ∇²_zz Σ E at z_T, v = ∂L/∂z_T, dL/dφ = −∂_φ⟨∇_z Σ E, w⟩.
    y_final, _ = unrolled.unrolled_gbi(spen_like, params, x, y0, BOX, config)
    z = BOX.to_logits(y_final)
    total = lambda p, z_: jnp.sum(spen_like(p, x, BOX.from_logits(z_)))
    v = jax.grad(lambda z_: jnp.sum((BOX.from_logits(z_) - target) ** 2))(z).ravel()
    hessian = jax.hessian(total, argnums=1)(params, z).reshape(z.size, z.size)
    damping = unrolled.DEFAULT_IMPLICIT_SOLVER.damping
    w = jnp.linalg.solve(hessian + damping * jnp.eye(z.size), v).reshape(z.shape)
    want = jax.grad(lambda p: -jnp.vdot(jax.grad(total, argnums=1)(p, z), w))(params)
    for a, b in zip(jax.tree.leaves(want), jax.tree.leaves(got)):
      np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-9)
