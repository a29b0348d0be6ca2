"""Tests of the input-convex multi-label energy (energynets/energies/icnn.py).

Oracles: the convexity inequality E(λy₁ + (1−λ)y₂) ≤ λE(y₁) + (1−λ)E(y₂) on random
pairs, the smallest eigenvalue of the exact Hessian in y (jax.hessian), both checked
with the constraint on and — as a negative control that shows the checks can fail — off,
with *the same* parameter values; a plain `MLP` for the local term; float64 central
finite differences for ∂E/∂y and the Hessian-vector product.
"""

import functools
import math

from absl.testing import absltest
from absl.testing import parameterized
import jax
import numpy as np
import optax

from energynets import testing
from energynets.energies import ICNNEnergy
from energynets.energies import SPENEnergy
from energynets.inference import GBIConfig
from energynets.inference import Projected
from energynets.nets import MLP
from energynets.objectives import ssvm

L, D, B = 4, 5, 6
ICNN = ICNNEnergy(L, feature_hidden=(6,), hidden=(8, 8))


def _inputs(seed, batch=B, dtype=np.float32, y_scale=1.0):
  """`(x [B, D], y [B, L])` as NumPy arrays (slicing them compiles nothing)."""
  rs = np.random.RandomState(seed)
  x = rs.randn(batch, D)
  y = rs.uniform(size=(batch, L)) if y_scale is None else y_scale * rs.randn(batch, L)
  return x.astype(dtype), y.astype(dtype)


def _params(module, seed, scale=1.0, dtype=np.float32):
  """Random params of the module's shapes, drawn by NumPy (no PRNG compilation).

  Every leaf, `raw_kernel`s and biases included, is `scale · N(0, 1) / sqrt(fan_in)`,
  so raw kernels take both signs: with the constraint on, softplus maps them to
  non-negative weights; with it off they are used as they are.
  """
  x, y = _inputs(0)
  shapes = jax.eval_shape(module.init, jax.random.key(0), x, y)["params"]
  rs = np.random.RandomState(seed)

  def fill(leaf):
    fan_in = math.prod(leaf.shape[:-1]) if leaf.ndim > 1 else 4.0
    return (scale * rs.randn(*leaf.shape) / math.sqrt(fan_in)).astype(dtype)

  return jax.tree.map(fill, shapes)


@functools.cache
def _jit(module, method="__call__"):
  """`(params, *args) -> module.apply(...)`, jitted once per module and method."""
  return jax.jit(lambda p, *a: module.apply({"params": p}, *a, method=method))


@functools.cache
def _hessians(module):
  """`(params, x [B, D], y [B, L]) -> [B, L, L]`: ∂²E/∂y² per example."""

  def one(p, xi, yi):
    return jax.hessian(lambda v: module.apply({"params": p}, xi[None], v[None])[0])(yi)

  return jax.jit(jax.vmap(one, in_axes=(None, 0, 0)))


def _convexity_gap(module, params, seed, num_pairs=64):
  """max over random (x, y₁, y₂, λ) of `E(λy₁ + (1−λ)y₂) − λE(y₁) − (1−λ)E(y₂)`, relative.

  Positive means a violation of convexity in y (up to rounding). y ~ N(0, 2²): the
  energy is convex on all of R^L, and a wide range makes violations easier to find.
  """
  rs = np.random.RandomState(seed)
  x = rs.randn(num_pairs, D)
  y1, y2 = 2.0 * rs.randn(2, num_pairs, L)
  lam = rs.uniform(size=(num_pairs, 1))
  e = functools.partial(_jit(module), params, x)
  gap = e(lam * y1 + (1 - lam) * y2) - (lam[:, 0] * e(y1) + (1 - lam[:, 0]) * e(y2))
  scale = 1.0 + np.max(np.abs(np.concatenate([e(y1), e(y2)])))
  return float(np.max(gap)) / scale


def _min_hessian_eigenvalue(module, params, seed):
  x, y = _inputs(seed, batch=16, dtype=np.float64, y_scale=2.0)
  return float(np.min(np.linalg.eigvalsh(np.asarray(_hessians(module)(params, x, y)))))


class ICNNEnergyTest(parameterized.TestCase):
  @parameterized.parameters(True, False)
  def test_shape_and_examples_are_independent(self, conditional):
    energy = ICNN.clone(conditional=conditional)
    params = _params(energy, 1)
    self.assertEqual(set(params), {"local_net", "global"})
    x, y = _inputs(2, y_scale=None)
    x2, y2 = _inputs(3, y_scale=None)
    e = _jit(energy)
    batch = e(params, x, y)
    self.assertEqual(batch.shape, (B,))
    self.assertTrue(np.all(np.isfinite(batch)))
    np.testing.assert_allclose(e(params, x[::-1], y[::-1]), batch[::-1], rtol=1e-5, atol=1e-6)
    mixed = e(params, np.concatenate([x[:1], x2[1:]]), np.concatenate([y[:1], y2[1:]]))
    np.testing.assert_allclose(mixed[0], batch[0], rtol=1e-6)
    # The global term sees x only when conditional.
    x_only = e(params, x2, y) - e(params, x, y)
    logits = lambda xx: _jit(energy, "local_logits")(params, xx)
    local_only = -np.sum(y * (logits(x2) - logits(x)), axis=-1)
    self.assertEqual(np.allclose(x_only, local_only, rtol=1e-4, atol=1e-5), not conditional)

  def test_local_hooks_match_spen(self):
    """Same local term and `local_net` params as `SPENEnergy` (a drop-in alternative)."""
    params = _params(ICNN, 4)
    x, y = _inputs(5, y_scale=None)
    mlp = MLP((6,), L)
    logits = _jit(ICNN, "local_logits")(params, x)
    np.testing.assert_allclose(
      logits, mlp.apply({"params": params["local_net"]}, x), rtol=1e-5, atol=1e-6
    )
    spen = SPENEnergy(L, (6,))
    spen_params = jax.eval_shape(spen.init, jax.random.key(0), x, y)["params"]
    self.assertEqual(
      jax.tree.map(np.shape, params["local_net"]), jax.tree.map(np.shape, spen_params["local_net"])
    )
    encoding = _jit(ICNN, "encode")(params, x)
    self.assertEqual(encoding.features.shape, (B, 6))
    energy = _jit(ICNN)(params, x, y)
    np.testing.assert_allclose(
      _jit(ICNN, "energy_from_encoding")(params, encoding, y), energy, rtol=1e-6
    )
    # With the output weights at exactly 0 (softplus(−1e4) = 0) only −Σ ȳ_i ℓ_i(x) remains.
    params["global"]["output"]["raw_kernel"] = np.full((8, 1), -1e4, np.float32)
    np.testing.assert_allclose(
      _jit(ICNN)(params, x, y), -np.sum(y * logits, -1), rtol=1e-5, atol=1e-6
    )

  def test_initial_weights_are_non_negative_and_scaled(self):
    x, y = _inputs(6)
    params = jax.jit(ICNN.init)(jax.random.key(0, impl="unsafe_rbg"), x, y)["params"]
    for name in ("z_1", "output"):
      w = jax.nn.softplus(params["global"][name]["raw_kernel"])
      self.assertTrue(np.all(w > 0))
      # softplus(raw) ≈ exp(0.5·N(0, 1)) / fan_in: the weights average about 1.13/8.
      self.assertBetween(float(np.mean(w)) * 8, 0.7, 1.6)
    self.assertNotIn("z_0", params["global"])  # the first layer has no z input

  @parameterized.parameters(True, False)
  def test_gradient_and_hvp_match_finite_differences(self, enforce):
    with jax.enable_x64(True):
      energy = ICNN.clone(enforce_convexity=enforce)
      params = _params(energy, 7, dtype=np.float64)
      x, y = _inputs(8, batch=2, dtype=np.float64, y_scale=None)
      d = testing.energy_derivatives(lambda v: energy.apply({"params": params}, x, v), y, seed=9)
      np.testing.assert_allclose(d.analytic, d.finite_difference, rtol=1e-6)
      np.testing.assert_allclose(d.grad_other[0], d.grad_at_y[0], rtol=1e-12)
      self.assertTrue(np.all(np.isfinite(d.hvp)))
      np.testing.assert_allclose(d.hvp, d.hvp_finite_difference, rtol=1e-5, atol=1e-8)

  def test_convex_in_y_and_the_check_detects_non_convexity(self):
    """Convexity holds for random params; the same params without the constraint fail."""
    with jax.enable_x64(True):
      convex, free = ICNN, ICNN.clone(enforce_convexity=False)
      for seed in range(3):
        # scale 3: raw kernels far into both signs, large biases, strong curvature.
        params = _params(convex, seed, scale=3.0, dtype=np.float64)
        self.assertLessEqual(_convexity_gap(convex, params, seed), 1e-12)
        self.assertGreaterEqual(_min_hessian_eigenvalue(convex, params, seed), -1e-5)
      # Negative control: seed 0's parameter values, used as signed weights, give a
      # non-convex energy, and both checks see it (by far more than rounding).
      params = _params(free, 0, scale=3.0, dtype=np.float64)
      self.assertGreater(_convexity_gap(free, params, 0), 1e-3)
      self.assertLess(_min_hessian_eigenvalue(free, params, 0), -1e-3)

  def test_unconstrained_init_is_non_convex(self):
    """The flag alone (ordinary LeCun init, no scaling) already breaks convexity."""
    with jax.enable_x64(True):
      free = ICNN.clone(enforce_convexity=False)
      x, y = _inputs(11)
      params = jax.jit(free.init)(jax.random.key(0, impl="unsafe_rbg"), x, y)["params"]
      params = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
      self.assertLess(_min_hessian_eigenvalue(free, params, 12), -1e-3)

  def test_plugs_into_the_ssvm_objective(self):
    """A drop-in for SPENEnergy: SSVM training with loss-augmented GBI lowers the hinge."""
    objective = ssvm.ssvm_hinge(
      ICNN,
      optax.adam(1e-2),
      options=ssvm.SSVMOptions(
        loss_aug_gbi=GBIConfig(parametrization=Projected(), num_steps=5),
        predict_gbi=GBIConfig(parametrization=Projected(), max_steps=5),
      ),
    )
    x, _ = _inputs(15)
    y = (np.random.RandomState(15).uniform(size=(B, L)) < 0.5).astype(np.float32)
    batch = {"x": x, "y": y}
    state, losses, _ = testing.fit_one_batch(objective, batch, 15)
    self.assertLess(np.mean(losses[-3:]), 0.7 * np.mean(losses[:3]))
    self.assertEqual(objective.predict(state, x).shape, (B, L))

  def test_bad_arguments_raise(self):
    params = _params(ICNN, 13)
    x, y = _inputs(14)
    with self.assertRaisesRegex(ValueError, "y must be"):
      ICNN.apply({"params": params}, x, np.zeros((B, L + 1), np.float32))
    with self.assertRaisesRegex(ValueError, "sizes"):
      jax.eval_shape(ICNNEnergy(L, hidden=()).init, jax.random.key(0), x, y)


if __name__ == "__main__":
  absltest.main()
