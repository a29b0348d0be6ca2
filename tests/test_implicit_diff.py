"""Tests of the inverse-HVP solvers and implicit gradients (energynets/diff/implicit.py).

Oracles (float64): the exact solve with a materialized Hessian; the closed-form
gradient of a quadratic bilevel problem; differentiating through a long unrolled inner
gradient descent; central finite differences of φ ↦ L_prim(θ*(φ)) with the inner
problem solved by Newton's method.
"""

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import pytest

from energynets import diff
from energynets.diff import implicit
from experiments.choices import implicit as choices


def _tree(flat, like):
  return jax.flatten_util.ravel_pytree(like)[1](flat)


def _flat(tree):
  return np.asarray(jax.flatten_util.ravel_pytree(tree)[0])


class Quadratic:
  """L_aux = ½θᵀAθ − θᵀBφ (A SPD, eigenvalues in [0.5, 4]); L_prim = ½‖θ − c‖² + ½φᵀDφ.

  θ is a pytree {"a": [3], "b": [2, 2]} (7 numbers), φ a [4] vector. θ*(φ) = A⁻¹Bφ and
  dL_prim/dφ = Bᵀ A⁻¹ (θ* − c) + Dφ.
  """

  def __init__(self, seed=0):
    rs = np.random.RandomState(seed)
    q, _ = np.linalg.qr(rs.randn(7, 7))
    self.A = q @ np.diag(np.linspace(0.5, 4.0, 7)) @ q.T
    self.B = rs.randn(7, 4)
    self.c = rs.randn(7)
    self.D = np.diag(rs.uniform(0.1, 1.0, 4))
    self.like = {"a": np.zeros(3), "b": np.zeros((2, 2))}
    self.phi = rs.randn(4)
    self.v = _tree(rs.randn(7), self.like)

  def aux(self, theta, phi):
    t = jax.flatten_util.ravel_pytree(theta)[0]
    return 0.5 * t @ self.A @ t - t @ self.B @ phi

  def prim(self, theta, phi):
    t = jax.flatten_util.ravel_pytree(theta)[0]
    return 0.5 * jnp.sum((t - self.c) ** 2) + 0.5 * phi @ self.D @ phi

  def solution(self, phi):
    return _tree(np.linalg.solve(self.A, self.B @ phi), self.like)

  def exact_gradient(self, phi):
    t = np.linalg.solve(self.A, self.B @ phi)
    return self.B.T @ np.linalg.solve(self.A, t - self.c) + self.D @ phi


def _hvp_fn(problem):
  theta = problem.solution(problem.phi)
  return lambda u: diff.hvp(lambda t: problem.aux(t, problem.phi), theta, u)


def test_neumann_converges_to_the_exact_solve_as_terms_grow():
  with jax.enable_x64(True):
    problem = Quadratic()
    exact = np.linalg.solve(problem.A, _flat(problem.v))
    errors = []
    for num_terms in (0, 5, 20, 80, 300):
      w = diff.neumann_inverse_hvp(_hvp_fn(problem), problem.v, num_terms=num_terms, alpha=0.25)
      errors.append(np.linalg.norm(_flat(w) - exact) / np.linalg.norm(exact))
    assert all(b < a for a, b in zip(errors, errors[1:])), errors
    # Contraction 1 − 0.25·0.5 = 0.875 per term: 0.875^300 ≈ 4e-18.
    assert errors[-1] < 1e-10, errors
    assert errors[0] > 0.1, errors  # K = 0 (αv) is far off: the check can fail


def test_neumann_with_damping_solves_the_damped_system():
  with jax.enable_x64(True):
    problem = Quadratic()
    w = diff.neumann_inverse_hvp(_hvp_fn(problem), problem.v, num_terms=400, alpha=0.2, damping=0.7)
    exact = np.linalg.solve(problem.A + 0.7 * np.eye(7), _flat(problem.v))
    np.testing.assert_allclose(_flat(w), exact, rtol=1e-10)


def test_cg_matches_the_exact_solve():
  with jax.enable_x64(True):
    problem = Quadratic()
    w = diff.cg_inverse_hvp(_hvp_fn(problem), problem.v, num_terms=30, tol=1e-14)
    np.testing.assert_allclose(_flat(w), np.linalg.solve(problem.A, _flat(problem.v)), rtol=1e-9)
    # Too few iterations are not exact: the comparison above can fail.
    w2 = diff.cg_inverse_hvp(_hvp_fn(problem), problem.v, num_terms=2)
    assert not np.allclose(_flat(w2), np.linalg.solve(problem.A, _flat(problem.v)), rtol=1e-3)


def test_damped_cg_solves_the_shifted_system_of_an_indefinite_hessian():
  # The bibtex inner Hessian is indefinite (implicit_sensitivity.md: plain CG's residual
  # was 4-78). A shift δ > |λ_min| makes H + δI positive definite, where CG is exact.
  with jax.enable_x64(True):
    rs = np.random.RandomState(3)
    q, _ = np.linalg.qr(rs.randn(7, 7))
    hessian = q @ np.diag(np.linspace(-2.0, 4.0, 7)) @ q.T
    v = rs.randn(7)
    hvp_fn = lambda u: jnp.asarray(hessian) @ u
    damped = diff.cg_inverse_hvp(hvp_fn, v, num_terms=30, damping=3.0, tol=1e-14)
    np.testing.assert_allclose(damped, np.linalg.solve(hessian + 3.0 * np.eye(7), v), rtol=1e-9)
    # Undamped, the same iterations do not solve H w = v: the check above can fail.
    undamped = diff.cg_inverse_hvp(hvp_fn, v, num_terms=30, tol=1e-14)
    assert np.linalg.norm(hessian @ np.asarray(undamped) - v) > 1e-3 * np.linalg.norm(v)


@pytest.mark.parametrize(
  "solver",
  [
    diff.ConjugateGradient(max_iter=30, tol=1e-14),
    diff.Neumann(num_terms=400, alpha=0.25),
  ],
)
def test_implicit_gradient_matches_the_closed_form(solver):
  with jax.enable_x64(True):
    problem = Quadratic()
    theta = problem.solution(problem.phi)
    grads = jax.jit(lambda t, p: diff.implicit_gradient(problem.aux, problem.prim, t, p, solver))(
      theta, problem.phi
    )
    np.testing.assert_allclose(grads.total, problem.exact_gradient(problem.phi), rtol=1e-9)
    np.testing.assert_allclose(grads.explicit, problem.D @ problem.phi, rtol=1e-12)
    assert np.linalg.norm(grads.implicit) > 0.1
    assert float(grads.residual) < 1e-9


def test_custom_vjp_solution_gives_the_implicit_gradient():
  with jax.enable_x64(True):
    problem = Quadratic()
    solver = diff.ConjugateGradient(max_iter=30, tol=1e-14)
    solution = diff.implicit_solution(lambda t, p: problem.aux(t, p), solver)
    theta = problem.solution(problem.phi)

    def outer(theta, phi):
      return problem.prim(solution(theta, phi), phi)

    g_theta, g_phi = jax.jit(jax.grad(outer, argnums=(0, 1)))(theta, problem.phi)
    np.testing.assert_allclose(g_phi, problem.exact_gradient(problem.phi), rtol=1e-9)
    np.testing.assert_array_equal(_flat(g_theta), 0.0)  # no path through the initial θ
    # The forward pass is the identity.
    np.testing.assert_array_equal(_flat(solution(theta, problem.phi)), _flat(theta))


# ---------------------------------------------------------------------------------------
# A logistic problem: per-feature L2 weights exp(φ) tuned on held-out data.


def _logistic_problem(seed=0, n=40, d=5):
  rs = np.random.RandomState(seed)
  x, x_val = rs.randn(n, d), rs.randn(n, d)
  w_true = rs.randn(d)
  y = (x @ w_true + 0.5 * rs.randn(n) > 0).astype(float)
  y_val = (x_val @ w_true + 0.5 * rs.randn(n) > 0).astype(float)
  phi = rs.uniform(-2.0, 0.0, d)

  def logistic(w, x, y):
    z = x @ w
    return jnp.mean(jnp.logaddexp(0.0, z) - y * z)

  def aux(theta, phi, x=x, y=y):
    return logistic(theta["w"], x, y) + 0.5 * jnp.sum(jnp.exp(phi) * theta["w"] ** 2)

  def prim(theta, phi):
    return logistic(theta["w"], x_val, y_val)

  @jax.jit
  def newton_solve(phi, x=x):
    def newton_step(_, w):
      f = lambda w_: aux({"w": w_}, phi, x)
      return w - jnp.linalg.solve(jax.hessian(f)(w), jax.grad(f)(w))

    return {"w": jax.lax.fori_loop(0, 30, newton_step, jnp.zeros(d))}

  return aux, prim, newton_solve, phi, (x, y)


def test_implicit_gradient_matches_unrolled_and_finite_differences():
  with jax.enable_x64(True):
    aux, prim, newton_solve, phi, _ = _logistic_problem()
    theta = newton_solve(phi)
    solver = diff.ConjugateGradient(max_iter=20, tol=1e-14)
    grads = diff.implicit_gradient(aux, prim, theta, phi, solver)
    assert np.abs(grads.explicit).max() == 0.0  # L_prim does not read φ
    assert np.linalg.norm(grads.total) > 1e-3

    def unrolled_outer(phi):
      def step(theta, _):
        return jax.tree.map(lambda t, g: t - 1.0 * g, theta, jax.grad(aux)(theta, phi)), None

      theta, _ = jax.lax.scan(step, {"w": jnp.zeros(5)}, None, length=3000)
      return prim(theta, phi)

    unrolled = jax.jit(jax.grad(unrolled_outer))(phi)
    np.testing.assert_allclose(grads.total, unrolled, rtol=1e-6, atol=1e-10)

    eps = 1e-5
    fd = np.array(
      [
        (prim(newton_solve(phi + eps * e), None) - prim(newton_solve(phi - eps * e), None))
        / (2 * eps)
        for e in np.eye(5)
      ]
    )
    np.testing.assert_allclose(grads.total, fd, rtol=1e-6, atol=1e-10)


def test_neumann_implicit_gradient_approaches_the_exact_one():
  with jax.enable_x64(True):
    aux, prim, newton_solve, phi, _ = _logistic_problem(seed=1)
    theta = newton_solve(phi)
    exact = diff.implicit_gradient(
      aux, prim, theta, phi, diff.ConjugateGradient(20, tol=1e-14)
    ).total
    errors = [
      np.linalg.norm(
        diff.implicit_gradient(aux, prim, theta, phi, diff.Neumann(k, alpha=1.0)).total - exact
      )
      for k in (0, 1, 3, 10, 40)
    ]
    assert all(b < a for a, b in zip(errors, errors[1:])), errors
    assert errors[-1] < 1e-6 * np.linalg.norm(exact), errors


def test_custom_vjp_differentiates_the_extra_arguments():
  """The data arguments of L_aux get the implicit cotangent too (checked by finite
  differences on x), and an integer argument gets a float0 zero without failing."""
  with jax.enable_x64(True):
    aux, prim, newton_solve, phi, (x, y) = _logistic_problem(seed=2)
    solver = diff.ConjugateGradient(max_iter=20, tol=1e-14)
    solution = diff.implicit_solution(lambda t, p, x_, y_, k: aux(t, p, x_, y_) + 0.0 * k, solver)

    solve = lambda x_: newton_solve(phi, x_)

    theta = solve(x)
    k = jnp.asarray(3)
    g_x = jax.grad(lambda x_: prim(solution(theta, phi, x_, y, k), phi))(x)
    direction = np.random.RandomState(0).randn(*x.shape)
    eps = 1e-6
    fd = (prim(solve(x + eps * direction), phi) - prim(solve(x - eps * direction), phi)) / (2 * eps)
    np.testing.assert_allclose(np.sum(g_x * direction), fd, rtol=1e-6)


def test_truncated_neumann_stays_finite_on_an_indefinite_hessian():
  with jax.enable_x64(True):
    h = np.diag([2.0, 0.5, -0.3])
    w = diff.neumann_inverse_hvp(lambda u: h @ u, np.ones(3), num_terms=20, alpha=0.4)
    assert np.all(np.isfinite(w))


# ---------------------------------------------------------------------------------------
# Solvers as values.


def test_solver_values_solve_a_small_spd_system():
  with jax.enable_x64(True):
    rs = np.random.RandomState(0)
    m = rs.randn(5, 5)
    a = m @ m.T / 5 + np.eye(5)  # SPD, eigenvalues in [1, ~4]
    v = rs.randn(5)
    exact = np.linalg.solve(a, v)
    apply_a = lambda u: a @ u
    for solver in (
      diff.ConjugateGradient(max_iter=20, tol=1e-14),
      diff.Neumann(num_terms=600, alpha=0.2),
    ):
      np.testing.assert_allclose(
        solver.solve(apply_a, v), jnp.linalg.solve(a, v), rtol=1e-9, err_msg=repr(solver)
      )
    damped = diff.ConjugateGradient(max_iter=20, tol=1e-14, damping=0.5).solve(apply_a, v)
    np.testing.assert_allclose(damped, np.linalg.solve(a + 0.5 * np.eye(5), v), rtol=1e-9)
    assert not np.allclose(damped, exact)


@pytest.mark.parametrize(
  "block, solver, solve",
  [
    (
      dict(method="neumann", num_terms=7, alpha=0.1, damping=0.2, tol=1e-6),
      diff.Neumann(7, 0.1, 0.2),
      lambda h, v: diff.neumann_inverse_hvp(h, v, num_terms=7, alpha=0.1, damping=0.2),
    ),
    (
      dict(method="cg", num_terms=3, alpha=0.01, damping=0.1, tol=1e-3),
      diff.ConjugateGradient(3, 1e-3, 0.1),
      lambda h, v: diff.cg_inverse_hvp(h, v, num_terms=3, damping=0.1, tol=1e-3),
    ),
  ],
)
def test_a_config_block_maps_to_the_solver_with_the_same_numbers(block, solver, solve):
  """A config's `inverse_hvp` block (all five keys, as the configs write it) maps onto the
  solver value, which solves, bit for bit, as the solver function with those numbers."""
  assert choices.inverse_hvp_from_config(block) == solver
  with jax.enable_x64(True):
    problem = Quadratic()
    by_function = solve(_hvp_fn(problem), problem.v)
    by_value = diff.inverse_hvp(_hvp_fn(problem), problem.v, solver)
    for a, b in zip(jax.tree.leaves(by_function), jax.tree.leaves(by_value)):
      np.testing.assert_array_equal(a, b)
    g = lambda s: implicit.implicit_gradient(
      problem.aux, problem.prim, problem.solution(problem.phi), problem.phi, s
    )
    for a, b in zip(
      jax.tree.leaves(g(solver)), jax.tree.leaves(g(choices.inverse_hvp_from_config(block)))
    ):
      np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
  "block, match",
  [
    (dict(method="newton"), r"unknown inverse-HVP method 'newton'; known: \('neumann', 'cg'\)"),
    (dict(method="cg", max_iter=3), r"unknown inverse_hvp options \['max_iter'\]"),
    (dict(method="neumann", alpha=0.0), "alpha must be > 0"),
    (dict(method="cg", num_terms=0), "max_iter"),
    (dict(method="neumann", damping=-1.0), "damping"),
  ],
)
def test_bad_config_blocks_are_one_line_errors(block, match):
  with pytest.raises(ValueError, match=match) as raised:
    choices.inverse_hvp_from_config(block)
  assert "\n" not in str(raised.value)


def test_a_user_solver_plugs_in_and_bad_solvers_are_named():
  class Exact:
    """Materializes the Hessian: a solver is anything with `solve(hvp_fn, v)`."""

    def solve(self, hvp_fn, v):
      h = jax.vmap(hvp_fn)(jnp.eye(v.shape[0]))
      return jnp.linalg.solve(h, v)

  with jax.enable_x64(True):
    a = np.diag([1.0, 2.0, 4.0])
    np.testing.assert_allclose(
      diff.inverse_hvp(lambda u: a @ u, np.ones(3), Exact()), [1.0, 0.5, 0.25], rtol=1e-12
    )
  for not_a_solver in ("cg", diff.Neumann):  # a name; the class, not a value
    for call in (
      lambda: diff.inverse_hvp(lambda u: u, np.ones(3), not_a_solver),
      lambda: diff.implicit_solution(lambda t, p: jnp.sum(t * p), not_a_solver),
      lambda: diff.implicit_gradient(
        lambda t, p: jnp.sum(t * p), lambda t, p: jnp.sum(t), np.ones(2), np.ones(2), not_a_solver
      ),
    ):
      with pytest.raises(TypeError, match="inverse-HVP solver") as raised:
        call()
      assert "\n" not in str(raised.value)
  for make, match in (
    (lambda: diff.Neumann(alpha=0.0), "alpha must be > 0"),
    (lambda: diff.Neumann(num_terms=-1), "num_terms"),
    (lambda: diff.ConjugateGradient(max_iter=0), "max_iter"),
    (lambda: diff.ConjugateGradient(damping=-1.0), "damping"),
  ):
    with pytest.raises(ValueError, match=match):
      make()
