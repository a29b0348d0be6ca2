"""Tests of the output domains (energynets/domains.py) against closed forms and numpy."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from energynets import domains

BOX, SIMPLEX, REAL = domains.Box(), domains.Simplex(), domains.Real()
ALL = [BOX, SIMPLEX, REAL]
IDS = ["box", "simplex", "real"]
SHAPES = [(3, 5), (2, 4, 3), (2, 3, 4, 2)]  # [B, L], [B, T, K], [B, H, W, K]


@functools.cache
def _jitted(domain, method):
  return jax.jit(getattr(domain, method))


def _call(domain, method, *args, **kwargs):
  """`domain.method(*args)` under jit: one compilation instead of one per eager op."""
  return _jitted(domain, method)(*args, **kwargs)


def _unconstrained(shape, seed=0):
  return np.random.RandomState(seed).randn(*shape).astype(np.float32) * 2.0


def _interior(domain, shape, seed=0):
  """A random point strictly inside the domain."""
  z = _unconstrained(shape, seed)
  if isinstance(domain, domains.Box):
    return 1.0 / (1.0 + np.exp(-z))
  if isinstance(domain, domains.Simplex):
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)
  return z


def _in_domain(domain, y, atol=1e-6):
  y = np.asarray(y)
  if isinstance(domain, domains.Box):
    return bool(np.all(y >= 0) and np.all(y <= 1))
  if isinstance(domain, domains.Simplex):
    return bool(np.all(y >= 0) and np.allclose(y.sum(-1), 1.0, atol=atol))
  return bool(np.all(np.isfinite(y)))


def _np_simplex_projection(v):
  """Reference projection by bisection on the threshold θ of `max(v − θ, 0)`."""
  out = np.empty_like(v, dtype=np.float64)
  flat_v, flat_out = v.reshape(-1, v.shape[-1]).astype(np.float64), out.reshape(-1, v.shape[-1])
  for i, row in enumerate(flat_v):
    lo, hi = row.min() - 1.0, row.max()
    for _ in range(200):
      mid = 0.5 * (lo + hi)
      if np.maximum(row - mid, 0).sum() > 1.0:
        lo = mid
      else:
        hi = mid
    flat_out[i] = np.maximum(row - 0.5 * (lo + hi), 0)
  return out


# --- projection ---------------------------------------------------------------------------


@pytest.mark.parametrize("domain", ALL, ids=IDS)
@pytest.mark.parametrize("shape", SHAPES)
def test_project_lands_in_domain_and_is_idempotent(domain, shape):
  v = jnp.asarray(_unconstrained(shape))
  p = _call(domain, "project", v)
  assert p.shape == v.shape
  assert _in_domain(domain, p)
  np.testing.assert_allclose(_call(domain, "project", p), p, atol=1e-6)


@pytest.mark.parametrize("shape", SHAPES)
def test_simplex_projection_matches_bisection_reference(shape):
  v = _unconstrained(shape, seed=3)
  np.testing.assert_allclose(
    _call(SIMPLEX, "project", jnp.asarray(v)), _np_simplex_projection(v), atol=1e-5
  )


def test_simplex_projection_keeps_points_on_the_simplex():
  y = _interior(SIMPLEX, (4, 6))
  np.testing.assert_allclose(_call(SIMPLEX, "project", jnp.asarray(y)), y, atol=1e-6)


def test_box_projection_is_clip():
  v = _unconstrained((4, 7))
  np.testing.assert_array_equal(_call(BOX, "project", jnp.asarray(v)), np.clip(v, 0, 1))


# --- logits -------------------------------------------------------------------------------


@pytest.mark.parametrize("domain", ALL, ids=IDS)
@pytest.mark.parametrize("shape", SHAPES)
def test_from_logits_inverts_to_logits(domain, shape):
  y = _interior(domain, shape)
  np.testing.assert_allclose(
    _call(domain, "from_logits", _call(domain, "to_logits", jnp.asarray(y))),
    y,
    rtol=1e-4,
    atol=1e-5,
  )


@pytest.mark.parametrize("domain", [BOX, REAL], ids=["box", "real"])
def test_to_logits_inverts_from_logits(domain):
  z = _unconstrained((3, 6))
  np.testing.assert_allclose(
    _call(domain, "to_logits", _call(domain, "from_logits", jnp.asarray(z))),
    z,
    rtol=1e-4,
    atol=1e-4,
  )


def test_simplex_logits_are_log_probabilities_up_to_a_constant():
  z = _unconstrained((3, 2, 5))
  back = np.asarray(_call(SIMPLEX, "to_logits", _call(SIMPLEX, "from_logits", jnp.asarray(z))))
  diff = back - z
  np.testing.assert_allclose(diff, diff[..., :1] * np.ones_like(diff), atol=1e-4)


@pytest.mark.parametrize("domain", [BOX, SIMPLEX], ids=["box", "simplex"])
def test_logits_and_entropy_are_finite_at_the_boundary(domain):
  y = jnp.asarray(np.eye(4, dtype=np.float32)[None].repeat(2, 0))  # one-hot rows
  assert np.all(np.isfinite(_call(domain, "to_logits", y)))
  assert np.all(np.isfinite(_call(domain, "entropy", y)))
  np.testing.assert_allclose(_call(domain, "entropy", y), 0.0, atol=1e-5)
  grad = jax.grad(lambda v: jnp.sum(_call(domain, "entropy", v)))(y)
  assert np.all(np.isfinite(grad))
  assert np.all(np.isfinite(_call(domain, "mirror_step", y, jnp.ones_like(y), 0.1)))


# --- mirror steps -------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
def test_simplex_mirror_step_stays_on_simplex_and_matches_closed_form(shape):
  y = _interior(SIMPLEX, shape, seed=1)
  g = _unconstrained(shape, seed=2)
  lr = 0.3
  out = np.asarray(_call(SIMPLEX, "mirror_step", jnp.asarray(y), jnp.asarray(g), lr))
  assert np.all(out > 0)
  np.testing.assert_allclose(out.sum(-1), 1.0, atol=1e-6)
  w = y * np.exp(-lr * g)
  np.testing.assert_allclose(out, w / w.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", SHAPES)
def test_box_mirror_step_matches_per_coordinate_closed_form(shape):
  y = _interior(BOX, shape, seed=1)
  g = _unconstrained(shape, seed=2)
  lr = 0.3
  out = np.asarray(_call(BOX, "mirror_step", jnp.asarray(y), jnp.asarray(g), lr))
  w = y * np.exp(-lr * g)
  np.testing.assert_allclose(out, w / (w + (1.0 - y)), rtol=1e-5, atol=1e-6)
  assert np.all((out > 0) & (out < 1))


def test_box_mirror_step_equals_the_logit_form_with_its_gradients():
  # mirror_step is computed without logs (one exp); it must stay σ(logit(clip y) − ηg)
  # in value and derivatives, at zero and huge gradients and at y = 0 or 1 too.
  rs = np.random.RandomState(0)
  y = jnp.asarray(
    np.concatenate([rs.uniform(size=(6, 5)), np.zeros((1, 5)), np.ones((1, 5))]), jnp.float32
  )
  logit_form = lambda y_, g_: jax.nn.sigmoid(BOX.to_logits(y_) - 0.3 * g_)
  weights = jnp.arange(5.0)
  for scale in (1e-3, 1.0, 1e4):
    g = jnp.asarray(rs.randn(8, 5) * scale, jnp.float32).at[0].set(0.0)
    for fn in (lambda y_, g_: BOX.mirror_step(y_, g_, 0.3), logit_form):
      assert np.all(np.isfinite(fn(y, g)))
    np.testing.assert_allclose(BOX.mirror_step(y, g, 0.3), logit_form(y, g), atol=1e-6)
    for argnum in (0, 1):
      grad = lambda fn: jax.grad(lambda *a: jnp.sum(fn(*a) * weights), argnum)(y, g)
      np.testing.assert_allclose(
        grad(lambda y_, g_: BOX.mirror_step(y_, g_, 0.3)), grad(logit_form), rtol=1e-4, atol=1e-5
      )


def test_real_mirror_step_is_a_gradient_step():
  y, g = _unconstrained((3, 4), 1), _unconstrained((3, 4), 2)
  np.testing.assert_allclose(
    _call(REAL, "mirror_step", jnp.asarray(y), jnp.asarray(g), 0.3), y - 0.3 * g, rtol=1e-6
  )


@pytest.mark.parametrize("domain", ALL, ids=IDS)
def test_mirror_step_with_zero_gradient_is_identity(domain):
  y = _interior(domain, (3, 2, 4))
  np.testing.assert_allclose(
    _call(domain, "mirror_step", jnp.asarray(y), jnp.zeros_like(y), 0.5), y, rtol=1e-5, atol=1e-6
  )


@pytest.mark.parametrize("domain", ALL, ids=IDS)
def test_mirror_step_decreases_a_linear_objective(domain):
  y = jnp.asarray(_interior(domain, (4, 5)))
  c = jnp.asarray(_unconstrained((4, 5), 7))
  out = _call(domain, "mirror_step", y, c, 0.1)
  assert np.all(np.sum(out * c, -1) < np.sum(y * c, -1))


# --- entropy ------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
def test_box_entropy_matches_numpy(shape):
  y = _interior(BOX, shape).astype(np.float64)
  expected = -(y * np.log(y) + (1 - y) * np.log(1 - y)).reshape(shape[0], -1).sum(-1)
  h = _call(BOX, "entropy", jnp.asarray(y, jnp.float32))
  assert h.shape == (shape[0],)
  np.testing.assert_allclose(h, expected, rtol=1e-5)


@pytest.mark.parametrize("shape", SHAPES)
def test_simplex_entropy_matches_numpy(shape):
  y = _interior(SIMPLEX, shape).astype(np.float64)
  expected = -(y * np.log(y)).reshape(shape[0], -1).sum(-1)
  h = _call(SIMPLEX, "entropy", jnp.asarray(y, jnp.float32))
  assert h.shape == (shape[0],)
  np.testing.assert_allclose(h, expected, rtol=1e-5)


def test_entropy_of_uniform_init_is_maximal():
  np.testing.assert_allclose(
    _call(BOX, "entropy", BOX.uniform_init((2, 7))), 7 * np.log(2), rtol=1e-6
  )
  np.testing.assert_allclose(
    _call(SIMPLEX, "entropy", SIMPLEX.uniform_init((2, 3, 5))), 3 * np.log(5), rtol=1e-6
  )
  np.testing.assert_array_equal(_call(REAL, "entropy", jnp.ones((2, 3, 3))), np.zeros(2))


def test_box_entropy_gradient_is_minus_logit():
  y = jnp.asarray(_interior(BOX, (2, 5)))
  g = jax.grad(lambda v: jnp.sum(_call(BOX, "entropy", v)))(y)
  np.testing.assert_allclose(g, -np.log(y / (1 - y)), rtol=1e-4, atol=1e-5)


# --- decode / init ------------------------------------------------------------------------


def test_box_decode_thresholds_inclusively():
  y = jnp.asarray([[0.1, 0.5, 0.49, 0.9], [0.3, 0.31, 0.0, 1.0]])
  np.testing.assert_array_equal(_call(BOX, "decode", y), [[0, 1, 0, 1], [0, 0, 0, 1]])
  np.testing.assert_array_equal(
    _call(BOX, "decode", y, threshold=0.3), [[0, 1, 1, 1], [1, 1, 0, 1]]
  )
  assert _call(BOX, "decode", y).dtype == y.dtype


def test_simplex_decode_is_one_hot_argmax():
  y = _interior(SIMPLEX, (3, 4, 5), seed=4)
  out = np.asarray(_call(SIMPLEX, "decode", jnp.asarray(y)))
  np.testing.assert_array_equal(out, np.eye(5)[y.argmax(-1)])
  assert out.dtype == np.float32


def test_real_decode_is_identity():
  y = _unconstrained((2, 3))
  np.testing.assert_array_equal(_call(REAL, "decode", jnp.asarray(y)), y)


@pytest.mark.parametrize("domain,value", [(BOX, 0.5), (SIMPLEX, 0.25), (REAL, 0.0)], ids=IDS)
def test_uniform_init(domain, value):
  y = domain.uniform_init((3, 2, 4))
  assert y.shape == (3, 2, 4) and y.dtype == jnp.float32
  np.testing.assert_array_equal(y, value)
  assert _in_domain(domain, y)


# --- objects ------------------------------------------------------------------------------


def test_domains_hash_and_compare_by_class():
  # A NamedTuple would make Box() == Simplex() and let a jit cache reuse the wrong trace.
  assert BOX != SIMPLEX and SIMPLEX != REAL and BOX != REAL
  assert BOX == domains.Box() and hash(BOX) == hash(domains.Box())
  assert domains.Box(eps=1e-3) != BOX


def test_domains_work_as_static_and_as_ordinary_jit_arguments():
  y = jnp.asarray(_interior(SIMPLEX, (2, 3)))
  static = jax.jit(lambda d, v: d.entropy(v), static_argnums=0)
  dynamic = jax.jit(lambda d, v: d.entropy(v))
  assert jax.tree.leaves(SIMPLEX) == []
  for d in (BOX, SIMPLEX):
    np.testing.assert_allclose(static(d, y), d.entropy(y), rtol=1e-6)
    np.testing.assert_allclose(dynamic(d, y), d.entropy(y), rtol=1e-6)
