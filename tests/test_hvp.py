"""Tests of the Hessian-vector products (energynets/diff/hvp.py).

Oracles: the Hessian materialized by `jax.hessian` on small problems, and central
finite differences of the gradient (float64).
"""

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import pytest

from energynets import diff


def _energy(phi, y):
  """A small SPEN-like energy of `phi = {"W", "u", "b"}` and `y [B, L]`, scalar (batch sum)."""
  return jnp.sum(
    jax.nn.softplus(y @ phi["W"]) @ phi["u"]
    + y @ phi["b"]
    + 0.5 * jnp.sum(y * y, axis=-1) * jnp.sum(phi["b"] ** 2)
  )


def _problem(seed=0, batch=2, labels=4, hidden=3):
  rs = np.random.RandomState(seed)
  phi = {"W": rs.randn(labels, hidden), "u": rs.randn(hidden), "b": rs.randn(labels)}
  y = rs.uniform(size=(batch, labels))
  v = rs.randn(batch, labels)
  return phi, y, v


def _flat_hessian(f, x):
  """`[n, n]` Hessian of `f` over the flattened array `x`."""
  n = x.size
  return jax.hessian(lambda flat: f(flat.reshape(x.shape)))(x.reshape(n))


def test_hvp_matches_materialized_hessian():
  with jax.enable_x64(True):
    phi, y, v = _problem()
    f = lambda y_: _energy(phi, y_)
    both = jax.jit(
      lambda y, v: (diff.hvp(f, y, v), (_flat_hessian(f, y) @ v.reshape(-1)).reshape(y.shape))
    )
    got, expected = both(jnp.asarray(y), jnp.asarray(v))
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


def test_hvp_on_pytrees_matches_materialized_hessian():
  with jax.enable_x64(True):
    phi, _, _ = _problem(1)
    rs = np.random.RandomState(2)
    v = jax.tree.map(lambda a: jnp.asarray(rs.randn(*a.shape)), phi)
    y = jnp.asarray(rs.uniform(size=(2, 4)))
    f = lambda p: _energy(p, y)
    flat, unravel = jax.flatten_util.ravel_pytree(phi)

    @jax.jit
    def both(phi, v):
      hessian = jax.hessian(lambda w: f(unravel(w)))(flat)
      return diff.hvp(f, phi, v), unravel(hessian @ jax.flatten_util.ravel_pytree(v)[0])

    got, expected = both(phi, v)
    for key in phi:
      np.testing.assert_allclose(got[key], expected[key], rtol=1e-12, atol=1e-12)


def test_cross_hvp_matches_materialized_mixed_block():
  """`∂/∂φ ⟨∇_y f, v⟩` equals the φ-y block of the joint Hessian times v, and the VJP."""
  with jax.enable_x64(True):
    phi, y, v = _problem(3)
    flat_phi, unravel = jax.flatten_util.ravel_pytree(phi)
    n = flat_phi.size

    def joint(w):
      return _energy(unravel(w[:n]), w[n:].reshape(y.shape))

    @jax.jit
    def all_three(phi, y, v):
      hessian = jax.hessian(joint)(jnp.concatenate([flat_phi, y.reshape(-1)]))
      expected = unravel(hessian[:n, n:] @ v.reshape(-1))
      # The definition: the VJP of φ ↦ ∇_y f(φ, y) against v (reverse-over-reverse).
      _, vjp = jax.vjp(lambda p: jax.grad(_energy, argnums=1)(p, y), phi)
      return diff.cross_hvp(_energy, phi, y, v), vjp(v)[0], expected

    got, by_vjp, expected = all_three(phi, jnp.asarray(y), jnp.asarray(v))
    for key in phi:
      np.testing.assert_allclose(got[key], expected[key], rtol=1e-12, atol=1e-12)
      np.testing.assert_allclose(by_vjp[key], expected[key], rtol=1e-12, atol=1e-12)


def test_hvp_and_cross_hvp_returns_gradient_hessian_and_mixed_products():
  with jax.enable_x64(True):
    phi, y, v = _problem(4)
    y, v = jnp.asarray(y), jnp.asarray(v)

    @jax.jit
    def compare(phi, y, v):
      return (
        diff.hvp_and_cross_hvp(_energy, phi, y, v),
        jax.grad(_energy, argnums=1)(phi, y),
        diff.hvp(lambda y_: _energy(phi, y_), y, v),
        diff.cross_hvp(_energy, phi, y, v),
      )

    (grad_y, hess_v, cross), grad_expected, hess_expected, expected = compare(phi, y, v)
    np.testing.assert_allclose(grad_y, grad_expected, rtol=1e-12)
    np.testing.assert_allclose(hess_v, hess_expected, rtol=1e-12, atol=1e-12)
    for key in phi:
      np.testing.assert_allclose(cross[key], expected[key], rtol=1e-12, atol=1e-12)


def test_integer_leaves_get_float0_cross_products():
  phi = {"w": jnp.ones(3), "mask": jnp.array([1, 0, 1])}
  f = lambda p, y: jnp.sum(p["w"] * p["mask"] * y**3)
  _, hess_v, cross = diff.hvp_and_cross_hvp(f, phi, jnp.ones(3), jnp.ones(3))
  np.testing.assert_allclose(hess_v, [6.0, 0.0, 6.0])
  np.testing.assert_allclose(cross["w"], [3.0, 0.0, 3.0])
  assert cross["mask"].dtype == jax.dtypes.float0


@pytest.mark.parametrize("seed", [0, 5])
def test_hvp_agrees_with_finite_differences(seed):
  with jax.enable_x64(True):
    phi, y, v = _problem(seed, batch=3, labels=5, hidden=4)
    w = jax.tree.map(lambda a: jnp.ones_like(a) * 0.3, phi)

    @jax.jit
    def products(phi, y, v, w):
      f = lambda y_: _energy(phi, y_)
      g = lambda p: _energy(p, y)  # the HVP w.r.t. all of phi (a pytree)
      return (
        diff.hvp(f, y, v),
        diff.finite_difference_hvp(f, y, v, eps=1e-5),
        diff.hvp(g, phi, w),
        diff.finite_difference_hvp(g, phi, w, eps=1e-5),
      )

    exact, numeric, exact_phi, numeric_phi = products(phi, jnp.asarray(y), jnp.asarray(v), w)
    np.testing.assert_allclose(exact, numeric, rtol=1e-7, atol=1e-8)
    exact, numeric = exact_phi, numeric_phi
    for key in phi:
      np.testing.assert_allclose(exact[key], numeric[key], rtol=1e-7, atol=1e-8)


def test_tree_vdot():
  a = {"p": jnp.arange(3.0), "q": jnp.ones((2, 2))}
  assert float(diff.tree_vdot(a, a)) == pytest.approx(5.0 + 4.0)
