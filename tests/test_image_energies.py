"""Tests of the denoising energies (energynets/energies/image.py) and the CNN denoiser.

Oracles: closed forms (SoftAbs as a log-cosh, the data term alone when α = 0), an
independent NumPy field-of-experts (explicit correlation loops), single-example
evaluations (batch independence), float64 central finite differences for ∂E/∂y and for
the Hessian-vector product, and a toy denoising problem for the feed-forward baseline.
Sizes are tiny and shared between tests so that XLA compiles few programs.
"""

import functools
import math

from absl.testing import absltest
from absl.testing import parameterized
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from energynets import domains
from energynets import nets
from energynets import testing
from energynets.energies import DeepPriorEnergy
from energynets.energies import FieldOfExperts
from energynets.energies import soft_abs
from energynets.inference import GBIConfig
from energynets.inference import Momentum
from energynets.inference import Projected
from energynets.inference import gbi_scan
from energynets.nets import CNNDenoiser
from energynets.nets.cnn import PatchConv

B, H, W = 3, 8, 9
FOE = FieldOfExperts(num_filters=3, filter_size=3, noise_variance=0.02, init_weight=0.7)
DEEP = DeepPriorEnergy(features=(4, 4), kernel_size=3)  # the paper's shape, but cheap
PADDINGS = {"VALID": nets.VALID, "SAME": nets.SAME, "REFLECT": nets.REFLECT}
POOLINGS = {"sum": nets.sum_pool, "mean": nets.mean_pool}


def _images(seed, batch=B, h=H, w=W, dtype=np.float32):
  """`(x, y)`: a noisy image and a candidate, values around [0, 1]."""
  rs = np.random.RandomState(seed)
  y = rs.uniform(size=(batch, h, w))
  x = y + 0.1 * rs.randn(batch, h, w)
  return x.astype(dtype), y.astype(dtype)  # NumPy: slicing them compiles nothing


def _key(seed):
  """A PRNG key whose generator compiles ~3x faster on CPU than threefry's."""
  return jax.random.key(seed, impl="unsafe_rbg")


@functools.cache
def _jit(module, method="__call__"):
  """`(params, *args) -> module.apply(...)`, jitted once per module and method."""
  return jax.jit(lambda p, *a: module.apply({"params": p}, *a, method=method))


def _init(module, seed=0, h=H, w=W):
  """The module's own initialization, for tests of the initial values."""
  x, y = _images(seed, h=h, w=w)
  return module.init({"params": _key(seed)}, x, y)["params"]


def _params(module, seed=0, *args):
  """Random params of the module's shapes, drawn by NumPy (no PRNG compilation).

  Kernels are LeCun-scaled normals, biases small normals; `log_weights` and
  `log_noise_variance` get the module's configured initial values.
  """
  args = args or _images(seed)
  rs = np.random.RandomState(seed)
  shapes = jax.eval_shape(module.init, jax.random.key(0), *args)["params"]

  def fill(path, leaf):
    name = path[-1].key
    if name == "log_noise_variance":
      return np.full(leaf.shape, math.log(module.noise_variance), leaf.dtype)
    if name == "log_weights":
      return np.full(leaf.shape, math.log(module.init_weight), leaf.dtype)
    fan_in = math.prod(leaf.shape[:-1]) if leaf.ndim > 1 else 100.0
    return (rs.randn(*leaf.shape) / math.sqrt(fan_in)).astype(leaf.dtype)

  return jax.tree_util.tree_map_with_path(fill, shapes)


def _f64(params):
  return jax.tree.map(lambda a: np.asarray(a, np.float64), params)


def _foe_reference(params, x, y, temperature, noise_variance):
  """NumPy FoE energy with 'VALID' cross-correlation written as loops."""
  kernel = np.asarray(params["filters"]["kernel"], np.float64)[:, :, 0, :]  # [s, s, K]
  alpha = np.exp(np.asarray(params["log_weights"], np.float64))
  s = kernel.shape[0]
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  out = np.sum((y - x) ** 2, axis=(1, 2)) / (2 * noise_variance)
  beta = temperature
  for b in range(y.shape[0]):
    for i in range(y.shape[1] - s + 1):
      for j in range(y.shape[2] - s + 1):
        u = np.einsum("pq,pqk->k", y[b, i : i + s, j : j + s], kernel)
        # ½SoftPlus_β(u) + ½SoftPlus_β(−u) = log(2 + 2 cosh βu) / (2β)
        out[b] += np.sum(alpha * np.log(2 + 2 * np.cosh(beta * u)) / (2 * beta))
  return out


def _check_independent(test, fn, params, x, y, x2, y2, rtol=1e-5):
  """`fn(params, x, y) [B]` is per example: batch-mates and their order do not matter.

  Permuting the batch permutes the energies, and replacing every other example leaves
  example 0's energy unchanged (same shapes, so no recompilation).
  """
  batch = fn(params, x, y)
  test.assertEqual(batch.shape, (x.shape[0],))
  test.assertTrue(np.all(np.isfinite(batch)))
  np.testing.assert_allclose(fn(params, x[::-1], y[::-1]), batch[::-1], rtol=rtol, atol=1e-6)
  mixed = fn(params, np.concatenate([x[:1], x2[1:]]), np.concatenate([y[:1], y2[1:]]))
  np.testing.assert_allclose(mixed[0], batch[0], rtol=rtol, atol=1e-6)
  test.assertFalse(np.allclose(mixed[1:], batch[1:]))


class SoftAbsTest(absltest.TestCase):
  def test_closed_form_and_limits(self):
    u = np.linspace(-1.0, 1.0, 41).astype(np.float32)
    sa = jax.jit(soft_abs, static_argnums=1)
    for beta in (1.0, 25.0):
      np.testing.assert_allclose(
        sa(u, beta), np.log(2 + 2 * np.cosh(beta * u)) / (2 * beta), rtol=1e-5
      )
    np.testing.assert_allclose(sa(u, 25.0), sa(-u, 25.0), rtol=1e-6)
    edges = sa(np.array([0.0, -3.0, 3.0] + [0.0] * 38, np.float32), 25.0)[:3]
    # SoftAbs(0) = log(2)/β, and far from 0 it is |u|/2 (Eq. 14 halves |·|; α absorbs it).
    np.testing.assert_allclose(edges, [math.log(2) / 25, 1.5, 1.5], rtol=1e-6)
    # Smooth and strictly convex: the second derivative is in (0, β/4].
    d2 = jax.jit(jax.vmap(jax.grad(jax.grad(lambda v: soft_abs(v, 25.0)))))(u)
    self.assertTrue(np.all(d2 > 0) and np.all(d2 <= 25.0 / 4 * (1 + 1e-6)))


class FieldOfExpertsTest(parameterized.TestCase):
  def test_matches_numpy_reference(self):
    params = _params(FOE)
    x, y = _images(1)
    np.testing.assert_allclose(
      _jit(FOE)(params, x, y), _foe_reference(params, x, y, 25.0, 0.02), rtol=1e-5
    )

  def test_parameters(self):
    params = _init(FOE)
    self.assertEqual(params["filters"]["kernel"].shape, (3, 3, 1, 3))
    self.assertNotIn("bias", params["filters"])
    np.testing.assert_allclose(np.exp(params["log_weights"]), [0.7] * 3, rtol=1e-6)
    np.testing.assert_allclose(np.exp(params["data_term"]["log_noise_variance"]), 0.02, rtol=1e-6)
    x, y = _images(0, h=12, w=12)
    shapes = jax.eval_shape(FieldOfExperts().init, jax.random.key(0), x, y)["params"]
    self.assertEqual(shapes["filters"]["kernel"].shape, (5, 5, 1, 24))  # the defaults
    fixed = jax.eval_shape(
      FieldOfExperts(learn_noise_variance=False).init, jax.random.key(0), x, y
    )["params"]
    self.assertNotIn("data_term", fixed)
    # A fixed σ² is the configured constant: E = ‖y − x‖²/(2σ²) + prior.
    fixed_foe = FieldOfExperts(
      num_filters=3, filter_size=3, noise_variance=0.05, learn_noise_variance=False
    )
    x, y = _images(2)
    fixed_params = {k: v for k, v in params.items() if k != "data_term"}
    np.testing.assert_allclose(
      _jit(fixed_foe)(fixed_params, x, y) - _jit(FOE)(params, x, y),
      np.sum((np.asarray(y) - np.asarray(x)) ** 2, (1, 2)) * (1 / 0.1 - 1 / 0.04),
      rtol=1e-4,
    )

  @parameterized.parameters("VALID", "REFLECT", "SAME")
  def test_shapes_and_examples_are_independent(self, padding):
    energy = FOE.clone(padding=PADDINGS[padding])
    params = _params(energy)
    for h, w in ((H, W), (5, 4)):
      x, y = _images(2, h=h, w=w)
      x2, y2 = _images(3, h=h, w=w)
      _check_independent(self, _jit(energy), params, x, y, x2, y2)
    responses = _jit(energy, "filter_responses")(params, y)
    self.assertEqual(responses.shape, (B,) + ((3, 2) if padding == "VALID" else (5, 4)) + (3,))

  def test_without_experts_the_minimizer_is_x(self):
    with jax.enable_x64(True):
      params = _f64(_params(FOE))
      # α = exp(−1e4) is exactly 0.
      params["log_weights"] = np.full_like(params["log_weights"], -1e4)
      x, y = _images(4, dtype=np.float64)
      energy_and_grad = jax.jit(
        jax.vmap(
          jax.value_and_grad(lambda v, xi: FOE.apply({"params": params}, xi[None], v[None])[0])
        )
      )
      np.testing.assert_allclose(
        energy_and_grad(y, x)[0],
        np.sum((np.asarray(y) - np.asarray(x)) ** 2, (1, 2)) / 0.04,
        rtol=1e-12,
      )
      energy, grad = energy_and_grad(x, x)
      np.testing.assert_array_equal(energy, np.zeros(B))
      np.testing.assert_array_equal(grad, np.zeros(x.shape))

  def test_gradient_descent_from_x_lowers_the_energy(self):
    params = _params(FOE)
    params["log_weights"] = params["log_weights"] + math.log(3.0)  # a strong prior
    x, _ = _images(5)
    e = lambda v: _jit(FOE)(params, x, v)
    grad = jax.jit(jax.grad(lambda v: jnp.sum(FOE.apply({"params": params}, x, v))))
    self.assertGreater(float(np.max(np.abs(grad(x)))), 0.0)  # x is not a minimizer
    y, energies = x, [e(x)]
    for _ in range(15):
      # 4e-3 < 2/L, L ≈ 1/σ² + Σ α_k (β/4) ‖f_k‖₁²: a descent step.
      y = y - 4e-3 * np.asarray(grad(y))
      energies.append(e(y))
    energies = np.stack(energies)
    self.assertTrue(np.all(np.diff(energies, axis=0) <= 1e-5 * np.abs(energies[:-1])))
    self.assertTrue(np.all(energies[-1] < 0.95 * energies[0]))

  def test_bad_arguments_raise(self):
    params = _params(FOE)
    x, y = _images(6)
    apply = lambda *a: FOE.apply({"params": params}, *a)
    with self.assertRaisesRegex(ValueError, "one shape"):
      apply(x, y[:, :-1])
    with self.assertRaisesRegex(ValueError, "one shape"):
      apply(x[..., None], y[..., None])
    small_x, small_y = _images(6, h=2, w=9)
    with self.assertRaisesRegex(ValueError, "at least 3x3"):
      apply(small_x, small_y)
    with self.assertRaisesRegex(TypeError, "padding"):
      _params(FOE.clone(padding="VALID"))
    with self.assertRaisesRegex(ValueError, "noise_variance"):
      _params(FOE.clone(noise_variance=0.0))


class DeepPriorEnergyTest(parameterized.TestCase):
  def test_paper_architecture(self):
    x, y = _images(0, h=16, w=16)
    shapes = jax.eval_shape(DeepPriorEnergy().init, jax.random.key(0), x, y)["params"]
    self.assertEqual(set(shapes), {"prior", "data_term"})
    shapes = jax.tree.map(jnp.shape, shapes["prior"])
    self.assertEqual(
      shapes,
      {
        "conv_0": {"kernel": (7, 7, 1, 32), "bias": (32,)},
        "conv_1": {"kernel": (7, 7, 32, 32), "bias": (32,)},
        "readout": {"kernel": (1, 1, 32, 1)},
      },
    )
    # The feed-forward baseline has the same kernels (and a readout bias).
    net = jax.eval_shape(CNNDenoiser().init, jax.random.key(0), x)["params"]["net"]
    self.assertEqual(
      {k: v["kernel"].shape for k, v in net.items()}, {k: v["kernel"] for k, v in shapes.items()}
    )

  @parameterized.parameters(("VALID", "sum"), ("REFLECT", "mean"))
  def test_shapes_and_examples_are_independent(self, padding, pooling):
    energy = DEEP.clone(padding=PADDINGS[padding], pooling=POOLINGS[pooling])
    params = _params(energy)
    for h, w in ((H, W), (5, 6)):
      x, y = _images(7, h=h, w=w)
      x2, y2 = _images(8, h=h, w=w)
      _check_independent(self, _jit(energy), params, x, y, x2, y2)

  def test_prior_sees_only_y_and_pooling(self):
    energy = DEEP.clone(noise_variance=0.04, learn_noise_variance=False)
    params = _params(energy)
    self.assertEqual(set(params), {"prior"})
    x, y = _images(9)
    x2, _ = _images(10)
    prior = _jit(energy, "prior_energy")(params, y)
    np.testing.assert_allclose(
      _jit(energy)(params, x, y) - _jit(energy)(params, x2, y),
      (np.sum((y - x) ** 2, (1, 2)) - np.sum((y - x2) ** 2, (1, 2))) / 0.08,
      rtol=1e-4,
    )
    np.testing.assert_allclose(
      _jit(energy)(params, x, y), _jit(energy, "data_energy")(params, x, y) + prior, rtol=1e-6
    )
    # 'VALID' 3×3 twice on 8×9: a 4×5 map; mean pooling is the sum / 20.
    mean = _jit(energy.clone(pooling=nets.mean_pool), "prior_energy")(params, y)
    np.testing.assert_allclose(mean, prior / 20, rtol=1e-5)

  def test_input_normalization_reparametrizes_only_the_prior(self):
    """With (mean, std) the trunk sees (y − mean)/std: the prior equals the plain
    energy's prior on the standardized image, the data term stays in the image scale."""
    energy = DEEP.clone(noise_variance=0.04, learn_noise_variance=False)
    normalized = energy.clone(input_mean=0.6, input_std=0.2)
    params = _params(energy)
    x, y = _images(11)
    np.testing.assert_allclose(
      _jit(normalized, "prior_energy")(params, y),
      _jit(energy, "prior_energy")(params, (y - 0.6) / 0.2),
      rtol=1e-5,
    )
    np.testing.assert_allclose(
      _jit(normalized, "data_energy")(params, x, y),
      _jit(energy, "data_energy")(params, x, y),
      rtol=1e-6,
    )
    self.assertFalse(np.allclose(_jit(normalized)(params, x, y), _jit(energy)(params, x, y)))

  def test_bad_arguments_raise(self):
    x, y = _images(0, h=12, w=20)
    with self.assertRaisesRegex(ValueError, "positive std"):
      jax.eval_shape(
        DeepPriorEnergy(input_std=0.0).init, jax.random.key(0), *_images(0, h=16, w=16)
      )
    with self.assertRaisesRegex(ValueError, "at least 13x13"):
      jax.eval_shape(DeepPriorEnergy().init, jax.random.key(0), x, y)
    with self.assertRaisesRegex(TypeError, "pooling"):
      jax.eval_shape(DeepPriorEnergy(pooling="sum").init, jax.random.key(0), x, y)


class SmoothnessTest(parameterized.TestCase):
  """∂E/∂y and the HVP (jvp of grad, what unrolled GBI training differentiates)."""

  @parameterized.named_parameters(
    ("foe", FOE), ("foe_reflect", FOE.clone(padding=nets.REFLECT)), ("deep_prior", DEEP)
  )
  def test_gradient_and_hvp_match_finite_differences(self, energy):
    with jax.enable_x64(True):
      params = _f64(_params(energy, 11))
      x, y = _images(12, batch=2, dtype=np.float64)
      d = testing.energy_derivatives(lambda v: energy.apply({"params": params}, x, v), y, seed=13)
      np.testing.assert_allclose(d.analytic, d.finite_difference, rtol=1e-6)
      # Per-example gradient: example 0's gradient ignores example 1's y.
      np.testing.assert_allclose(d.grad_other[0], d.grad_at_y[0], rtol=1e-12)
      self.assertTrue(np.all(np.isfinite(d.hvp)))
      np.testing.assert_allclose(
        d.hvp, d.hvp_finite_difference, rtol=1e-5, atol=1e-6 * float(np.max(np.abs(d.hvp)))
      )

  def test_unrolled_gbi_is_differentiable_in_params(self):
    """The E2E use (FOE-3): a loss of T unrolled GBI steps from x, differentiated in φ."""
    params = _params(FOE)
    x, y = _images(15)
    config = GBIConfig(
      parametrization=Projected(), direction=Momentum(0.25), learning_rate=1e-3, num_steps=3
    )
    fn = lambda p, xx, v: FOE.apply({"params": p}, xx, v)

    def loss(p):
      y_hat, _ = gbi_scan(fn, p, x, x, domains.Real(), config)
      return jnp.mean(jnp.square(y_hat - y))

    value, grads = jax.jit(jax.value_and_grad(loss))(params)
    self.assertTrue(np.isfinite(value))
    self.assertTrue(all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grads)))
    for g in jax.tree.leaves(grads):  # σ², α and the filters are all trained through it
      self.assertGreater(float(np.max(np.abs(g))), 0.0)


class ConvImplTest(parameterized.TestCase):
  """`PatchConv` (im2col) is `nn.Conv`: same parameters, values and derivatives.

  The module constants above resolve `conv_impl=auto_conv` to `patch_conv` on CPU, so the
  finite-difference and NumPy-reference tests already check it; these compare the two
  implementations against each other, including the second derivatives E2E training uses.
  """

  @parameterized.parameters(
    ("VALID", (3, 3), 1, 4), ("SAME", (3, 3), 2, 3), ("VALID", (2, 4), 3, 5), ("SAME", (4, 2), 1, 2)
  )
  def test_patch_conv_is_flax_conv(self, padding, kernel, channels, features):
    v = np.random.RandomState(21).randn(2, 7, 6, channels).astype(np.float32)
    lax_conv = nn.Conv(features, kernel, padding=padding)
    patch_conv = PatchConv(features, kernel, padding=padding)
    params = lax_conv.init(_key(3), v)
    self.assertEqual(
      jax.tree.map(np.shape, patch_conv.init(_key(3), v)), jax.tree.map(np.shape, params)
    )
    # The same initializers: the same draw from the same key.
    for a, b in zip(jax.tree.leaves(patch_conv.init(_key(3), v)), jax.tree.leaves(params)):
      np.testing.assert_array_equal(a, b)
    params = jax.tree.map(
      lambda a: a + 0.1 * np.random.RandomState(4).randn(*a.shape).astype(a.dtype), params
    )  # non-zero bias too
    np.testing.assert_allclose(
      patch_conv.apply(params, v), lax_conv.apply(params, v), rtol=1e-5, atol=1e-5
    )
    loss = lambda conv: lambda p, u: jnp.sum(jnp.sin(conv.apply(p, u)))
    g_patch = jax.grad(loss(patch_conv), argnums=(0, 1))(params, v)
    g_lax = jax.grad(loss(lax_conv), argnums=(0, 1))(params, v)
    for a, b in zip(jax.tree.leaves(g_patch), jax.tree.leaves(g_lax)):
      np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)

  @parameterized.named_parameters(
    ("foe", FOE), ("deep_prior", DEEP), ("deep_prior_reflect", DEEP.clone(padding=nets.REFLECT))
  )
  def test_energies_and_their_hvps_agree(self, energy):
    params = _params(energy, 22)
    x, y = _images(23)
    v = np.random.RandomState(24).randn(*y.shape).astype(np.float32)

    def derivatives(impl):
      fn = lambda p, u: jnp.sum(energy.clone(conv_impl=impl).apply({"params": p}, x, u))
      grad_y = jax.grad(fn, argnums=1)
      hvp = jax.jvp(lambda u: grad_y(params, u), (y,), (v,))[1]
      cross = jax.grad(lambda p: jnp.vdot(grad_y(p, y), v))(params)  # ∂/∂φ ⟨∇_y E, v⟩
      return [fn(params, y), grad_y(params, y), hvp, *jax.tree.leaves(cross)]

    for a, b in zip(derivatives(nets.patch_conv), derivatives(nets.lax_conv)):
      np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4 * float(np.max(np.abs(b))))

  def test_auto_and_bad_values(self):
    auto = nets.auto_conv(2, (3, 3), padding="SAME")
    self.assertIsInstance(auto, PatchConv if jax.default_backend() == "cpu" else nn.Conv)
    self.assertIsInstance(nets.lax_conv(2, (3, 3)), nn.Conv)
    with self.assertRaisesRegex(TypeError, "conv_impl"):
      jax.eval_shape(FOE.clone(conv_impl="lax").init, _key(0), *_images(0))
    with self.assertRaisesRegex(ValueError, "padding"):
      PatchConv(2, (3, 3), padding="CIRCULAR").init(_key(0), np.zeros((1, 5, 5, 1)))


class CNNDenoiserTest(parameterized.TestCase):
  @parameterized.parameters("REFLECT", "SAME")
  def test_shapes_and_starts_at_identity(self, padding):
    net = CNNDenoiser(features=(8, 8), kernel_size=3, padding=PADDINGS[padding])
    x, _ = _images(16)
    params = jax.jit(net.init)(_key(0), x)["params"]  # one program, not op by op
    apply = _jit(net)
    np.testing.assert_array_equal(apply(params, x), x)  # zero-initialized readout: ŷ = x
    # With a non-zero readout it adds a correction, per example, at any size.
    params["net"]["readout"]["kernel"] = np.ones(
      params["net"]["readout"]["kernel"].shape, np.float32
    )
    for h, w in ((H, W), (4, 5)):
      xs, _ = _images(17, h=h, w=w)
      out = apply(params, xs)
      self.assertEqual(out.shape, xs.shape)
      self.assertFalse(np.allclose(out, xs))
      np.testing.assert_allclose(apply(params, xs[::-1]), out[::-1], rtol=1e-5)
    with self.assertRaisesRegex(ValueError, "size-preserving"):
      jax.eval_shape(CNNDenoiser(padding=nets.VALID).init, jax.random.key(0), x)
    with self.assertRaisesRegex(ValueError, r"\[B, H, W\]"):
      net.apply({"params": params}, x[..., None])

  def test_input_normalization(self):
    """ŷ = x + std · trunk((x − mean)/std): the same parameters give the plain net's
    correction on the standardized image, scaled back; zero readout is still ŷ = x."""
    net = CNNDenoiser(features=(8, 8), kernel_size=3)
    normalized = net.clone(input_mean=0.6, input_std=0.2)
    x, _ = _images(19)
    params = jax.jit(net.init)(_key(2), x)["params"]
    np.testing.assert_array_equal(_jit(normalized)(params, x), x)
    params["net"]["readout"]["kernel"] = np.full(
      params["net"]["readout"]["kernel"].shape, 0.3, np.float32
    )
    standardized = (x - 0.6) / 0.2
    np.testing.assert_allclose(
      _jit(normalized)(params, x),
      x + 0.2 * (_jit(net)(params, standardized) - standardized),
      rtol=1e-5,
      atol=1e-6,
    )
    with self.assertRaisesRegex(ValueError, "positive std"):
      jax.eval_shape(net.clone(input_std=-1.0).init, jax.random.key(0), x)

  def test_trains_on_toy_denoising(self):
    """Piecewise-constant images plus noise: Adam steps lower the MSE to the clean image."""
    rs = np.random.RandomState(18)
    clean = np.zeros((16, 12, 12), np.float32)
    for b in range(16):
      r, c = rs.randint(3, 9, size=2)
      clean[b] = rs.uniform(0.0, 0.4)
      clean[b, :r, :c] = rs.uniform(0.6, 1.0)
    noisy = clean + 0.1 * rs.randn(*clean.shape).astype(np.float32)
    net = CNNDenoiser(features=(8, 8), kernel_size=3)
    params = _params(net, 1, noisy)
    params["net"]["readout"] = jax.tree.map(np.zeros_like, params["net"]["readout"])
    loss_fn = lambda p: jnp.mean(jnp.square(net.apply({"params": p}, noisy) - clean))
    params, losses = testing.minimize(loss_fn, params, 50, 2e-3)
    # It starts at the identity (MSE = the noise variance, ≈ 0.01) and improves on it.
    np.testing.assert_allclose(losses[0], np.mean(np.square(noisy - clean)), rtol=1e-5)
    self.assertLess(losses[-1], 0.9 * losses[0])


if __name__ == "__main__":
  absltest.main()
