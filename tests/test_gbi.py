"""Tests of gradient-based inference (energynets/inference/gbi.py).

Oracles: exact box-QP minimizers by active-set enumeration, brute-force argmins over
{0,1}^L and over one-hot assignments, closed-form entropy-smoothed minimizers, the
scan trajectory (for the while loop), single-example runs (for batch independence)
and float64 central finite differences (for gradients through the unroll).
"""

import dataclasses
import itertools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from energynets import domains
from energynets import testing
from energynets.inference import gbi as gbi_lib
from energynets.inference.directions import SGD
from energynets.inference.directions import Adam
from energynets.inference.directions import Momentum
from energynets.inference.gbi import GBIConfig
from energynets.inference.parametrizations import Logit
from energynets.inference.parametrizations import Mirror
from energynets.inference.parametrizations import Projected

BOX, SIMPLEX, REAL = domains.Box(), domains.Simplex(), domains.Real()

# The cases name the choices; these are the values the names stand for.
PARAMETRIZATIONS = {"projected": Projected(), "mirror": Mirror(), "logit": Logit()}
METHODS = tuple(PARAMETRIZATIONS)
OPTIMIZERS = ("sgd", "momentum", "adam")


def direction(name, momentum=0.95, adam_eps=1e-8):
  """The direction value called `name`, with the constants the cases vary."""
  return {"sgd": SGD(), "momentum": Momentum(momentum), "adam": Adam(eps=adam_eps)}[name]


# One compilation per (energy, domain, config): energy, domain and config are static.
scan = jax.jit(gbi_lib.gbi_scan, static_argnums=(0, 4, 5))
loop = jax.jit(gbi_lib.gbi_while, static_argnums=(0, 4, 5))
# Config as an ordinary (pytree) argument: needed once it carries traced step_sizes.
scan_dyn = jax.jit(gbi_lib.gbi_scan, static_argnums=(0, 4))


# --- energies -----------------------------------------------------------------------------


def quadratic(p, x, y):
  """Box QP `½ yᵀAy + (b + x)ᵀy`; y, x `[B, L]`."""
  return 0.5 * jnp.einsum("bi,ij,bj->b", y, p["A"], y) + jnp.einsum("bi,bi->b", y, x + p["b"])


def linear(p, x, y):
  """`Σ ⟨x, y⟩ + (λ/2)‖y‖²` over all non-batch axes (separable); x like y."""
  v = x * y + 0.5 * p["lam"] * y * y
  return jnp.sum(v.reshape(v.shape[0], -1), axis=-1)


def mlp_energy(p, x, y):
  """A small SPEN-like non-convex energy; y `[B, L]`, x `[B, D]`."""
  h = jax.nn.softplus(y @ p["W"] + x @ p["V"])
  return h @ p["u"] + y @ p["b"] + 0.5 * jnp.sum(y * (y @ p["A"]), axis=-1)


def chain_energy(p, x, y):
  """Linear-chain tagging energy; y `[B, T, K]`, x `[B, T, K]` unaries, P `[K, K]`."""
  pair = jnp.einsum("btk,kl,btl->b", y[:, :-1], p["P"], y[:, 1:])
  return jnp.sum(x * y, axis=(1, 2)) + pair + 0.1 * jnp.sum(jnp.tanh(y), axis=(1, 2))


def offset_quadratic(p, x, y):
  """`1 + ½ κ_b ‖y − c_b‖²` with `x = (c [B, ...], κ [B])`: per-example difficulty."""
  c, kappa = x
  d = (y - c).reshape(y.shape[0], -1)
  return p["offset"] + 0.5 * kappa * jnp.sum(d * d, axis=-1)


def smooth_energy(p, x, y):
  """Unary ½‖y − x‖² plus smoothness along axis 1; y of any shape `[B, N, ...]`."""
  u = (y - x) ** 2
  s = (y[:, 1:] - y[:, :-1]) ** 2
  flat = lambda v: jnp.sum(v.reshape(v.shape[0], -1), axis=-1)
  return 0.5 * flat(u) + p["smooth"] * flat(s)


# --- oracles ------------------------------------------------------------------------------


def box_qp_minimizer(a, c):
  """Exact argmin of `½ yᵀAy + cᵀy` over [0,1]^L (A PD) by enumerating 3^L active sets."""
  best = None
  for state in itertools.product((0, 1, 2), repeat=len(c)):  # at 0, at 1, free
    y = np.array([float(s) if s < 2 else 0.0 for s in state])
    free = [i for i, s in enumerate(state) if s == 2]
    fixed = [i for i, s in enumerate(state) if s < 2]
    if free:
      rhs = -(c[free] + a[np.ix_(free, fixed)] @ y[fixed])
      y[free] = np.linalg.solve(a[np.ix_(free, free)], rhs)
      if y[free].min() < -1e-12 or y[free].max() > 1 + 1e-12:
        continue
    value = 0.5 * y @ a @ y + c @ y
    if best is None or value < best[0]:
      best = (value, y)
  return best


def binary_argmin(a, c):
  """Brute force over {0,1}^L."""
  cands = np.array(list(itertools.product((0.0, 1.0), repeat=len(c))))
  values = 0.5 * np.einsum("ni,ij,nj->n", cands, a, cands) + cands @ c
  return cands[np.argmin(values)]


def one_hot_argmin(energy_np, positions, classes):
  """Brute force over every assignment of one class per position."""
  best = None
  for labels in itertools.product(range(classes), repeat=positions):
    y = np.eye(classes)[list(labels)]
    value = energy_np(y)
    if best is None or value < best[0]:
      best = (value, y)
  return best[1]


def qp_problem(seed=0, length=5, batch=4):
  rs = np.random.RandomState(seed)
  m = rs.randn(length, length)
  a = m @ m.T / length + 0.5 * np.eye(length)
  return a, rs.randn(length), rs.randn(batch, length)


def f32(tree):
  return jax.tree.map(lambda v: jnp.asarray(v, jnp.float32), tree)


def mlp_params(seed=0, length=6, features=3, hidden=4, dtype=jnp.float32):
  rs = np.random.RandomState(seed)
  m = rs.randn(length, length)
  p = {
    "W": rs.randn(length, hidden) * 0.5,
    "V": rs.randn(features, hidden) * 0.5,
    "u": rs.randn(hidden),
    "b": rs.randn(length) * 0.5,
    "A": m @ m.T / length * 0.5,
  }
  return jax.tree.map(lambda v: jnp.asarray(v, dtype), p)


def in_domain(domain, y, atol=1e-5):
  y = np.asarray(y)
  if isinstance(domain, domains.Box):
    return bool(np.all((y >= 0) & (y <= 1)))
  if isinstance(domain, domains.Simplex):
    return bool(np.all(y >= 0) and np.allclose(y.sum(-1), 1.0, atol=atol))
  return bool(np.all(np.isfinite(y)))


# --- convergence to exact minimizers --------------------------------------------------------

# Learning rates per (method, optimizer) for the box QP (eigenvalues of A in [0.5, 3.6]).
QP_LR = {
  ("projected", "sgd"): 0.3,
  ("projected", "momentum"): 0.1,
  ("projected", "adam"): 0.05,
  ("mirror", "sgd"): 1.0,
  ("mirror", "momentum"): 0.1,
  ("mirror", "adam"): 0.05,
  ("logit", "sgd"): 4.0,
  ("logit", "momentum"): 0.3,
  ("logit", "adam"): 0.1,
}


@pytest.mark.parametrize("method,optimizer", list(QP_LR), ids=lambda v: str(v))
def test_box_qp_converges_to_exact_continuous_minimizer(method, optimizer):
  a, b, x = qp_problem()
  refs = [box_qp_minimizer(a, b + xi) for xi in x]
  y_ref = np.array([r[1] for r in refs])
  # The fixture must exercise both faces and the interior of the box.
  assert np.any(y_ref == 0) and np.any(y_ref == 1) and np.any((y_ref > 0.05) & (y_ref < 0.95))
  config = GBIConfig(
    parametrization=PARAMETRIZATIONS[method],
    direction=direction(optimizer),
    learning_rate=QP_LR[method, optimizer],
    max_steps=1500,
    rel_tol=0.0,
    abs_tol=1e-7,
  )
  res = loop(quadratic, f32({"A": a, "b": b}), f32(x), BOX.uniform_init(x.shape), BOX, config)
  # Logit-space iterates only approach the faces at O(1/t); the others reach them.
  atol = 5e-3 if method == "logit" else 1e-3
  np.testing.assert_allclose(res.y, y_ref, atol=atol)
  np.testing.assert_allclose(res.energy, [r[0] for r in refs], atol=3e-3)
  assert in_domain(BOX, res.y)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("kind", ["quadratic", "separable"])
def test_box_integral_minimizer_decodes_to_binary_brute_force(method, kind):
  rs = np.random.RandomState(1)
  length, batch = 5, 4
  if kind == "quadratic":
    a, _, _ = qp_problem(seed=2, length=length, batch=batch)
  else:
    a = np.zeros((length, length))
  # Linear terms whose KKT point is a chosen vertex t: the gradient points out of the box.
  targets = rs.randint(0, 2, size=(batch, length)).astype(float)
  margins = rs.uniform(0.3, 1.5, size=(batch, length))
  c = -targets @ a + np.where(targets == 1, -1.0, 1.0) * margins
  brute = np.array([binary_argmin(a, ci) for ci in c])
  if kind == "quadratic":
    relaxed = np.array([box_qp_minimizer(a, ci)[1] for ci in c])
    np.testing.assert_array_equal(relaxed, brute)  # the relaxation is tight here
  config = GBIConfig(
    parametrization=PARAMETRIZATIONS[method],
    learning_rate=0.1 if method != "logit" else 0.5,
    max_steps=300,
  )
  res = loop(
    quadratic, f32({"A": a, "b": np.zeros(length)}), f32(c), BOX.uniform_init(c.shape), BOX, config
  )
  np.testing.assert_array_equal(BOX.decode(res.y), brute)
  np.testing.assert_allclose(res.y, brute, atol=0.05)


@pytest.mark.parametrize("method", METHODS)
def test_simplex_separable_minimizer_matches_one_hot_brute_force(method):
  rs = np.random.RandomState(3)
  batch, positions, classes, lam = 3, 3, 4, 0.1
  # Spaced unary costs: each position's vertex optimum beats the next by > λ.
  c = np.stack(
    [
      np.stack([rs.permutation(np.linspace(-1, 1, classes)) for _ in range(positions)])
      for _ in range(batch)
    ]
  )
  c += 0.05 * rs.randn(*c.shape)
  brute = np.stack(
    [
      one_hot_argmin(
        lambda y, ci=ci: np.sum(ci * y) + 0.5 * lam * np.sum(y * y), positions, classes
      )
      for ci in c
    ]
  )
  config = GBIConfig(
    parametrization=PARAMETRIZATIONS[method],
    learning_rate=0.1 if method != "logit" else 0.5,
    max_steps=300,
  )
  res = loop(linear, f32({"lam": lam}), f32(c), SIMPLEX.uniform_init(c.shape), SIMPLEX, config)
  np.testing.assert_array_equal(SIMPLEX.decode(res.y), brute)
  np.testing.assert_allclose(res.y, brute, atol=0.05)
  assert in_domain(SIMPLEX, res.y)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("domain", [BOX, SIMPLEX], ids=["box", "simplex"])
def test_entropy_smoothing_reaches_closed_form_minimizer(domain, method):
  # argmin ⟨c, y⟩ − τH(y) is σ(−c/τ) on the box and softmax(−c/τ) on the simplex.
  tau = 0.5
  c = np.random.RandomState(4).randn(3, 2, 4)
  expected = jax.nn.sigmoid(-c / tau) if domain == BOX else jax.nn.softmax(-c / tau, axis=-1)
  # The entropy's gradient is unbounded at the faces, so projected steps that land there
  # bounce back; heavy momentum (0.95) turns that into a limit cycle. Hence plain SGD.
  optimizer = "sgd" if method == "projected" else "momentum"
  config = GBIConfig(
    parametrization=PARAMETRIZATIONS[method],
    direction=direction(optimizer),
    learning_rate=0.05,
    entropy_weight=tau,
    max_steps=1000,
    rel_tol=0.0,
    abs_tol=1e-7,
  )
  res = loop(linear, f32({"lam": 0.0}), f32(c), domain.uniform_init(c.shape), domain, config)
  np.testing.assert_allclose(res.y, expected, atol=2e-3)
  # The reported energy is the smoothed objective.
  np.testing.assert_allclose(
    res.energy,
    linear({"lam": 0.0}, f32(c), res.y) - tau * domain.entropy(res.y),
    rtol=1e-5,
    atol=1e-5,
  )


# --- the while loop ---------------------------------------------------------------------------


def difficulty_batch(kappas, length=3, seed=5):
  """Real-domain quadratics that differ only in curvature: GD with lr 0.5 contracts
  by |1 − κ/2| per step, so larger κ (< 2) converges in fewer steps."""
  c = np.random.RandomState(seed).randn(len(kappas), length)
  x = (jnp.asarray(c, jnp.float32), jnp.asarray(kappas, jnp.float32))
  return {"offset": jnp.float32(1.0)}, x, jnp.zeros((len(kappas), length))


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_step_counts_reflect_difficulty_and_converged_examples_freeze(optimizer):
  params, x, y0 = difficulty_batch([1.9, 1.0, 0.4, 0.1])
  lr = 0.5 if optimizer != "adam" else 0.05
  config = GBIConfig(
    parametrization=Mirror(),
    direction=direction(optimizer, momentum=0.5),
    learning_rate=lr,
    rel_tol=1e-7,
    abs_tol=1e-4,
    max_steps=400,
    num_steps=400,
  )
  res = loop(offset_quadratic, params, x, y0, REAL, config)
  steps = np.asarray(res.steps)
  assert np.all(res.converged), steps
  if optimizer == "sgd":  # heavy ball and Adam rates are not monotone in κ
    assert np.all(np.diff(steps) > 0), steps
  assert len(set(steps.tolist())) > 1, steps
  # Same step function, so example i's result is the scan's iterate at its own step count
  # and stays there while the others keep going.
  _, trace = scan(offset_quadratic, params, x, y0, REAL, config)
  for i, s in enumerate(steps):
    np.testing.assert_allclose(res.y[i], trace.ys[s - 1, i], atol=1e-6)
    np.testing.assert_allclose(res.energy[i], trace.energies[s - 1, i], rtol=1e-6)
  fastest = int(np.argmin(steps))
  assert np.max(np.abs(trace.ys[-1, fastest] - trace.ys[steps[fastest] - 1, fastest])) > 0
  if optimizer == "momentum":  # (one optimizer suffices; each run is a compilation)
    # More iterations never touch a converged example.
    longer = loop(offset_quadratic, params, x, y0, REAL, config._replace(max_steps=4000))
    np.testing.assert_array_equal(longer.y, res.y)
    np.testing.assert_array_equal(longer.steps, res.steps)


def test_stop_fraction_stops_early():
  kappas = [1.9, 1.7, 1.5, 1.2, 1.0, 0.5, 0.2, 0.05]
  params, x, y0 = difficulty_batch(kappas)
  config = GBIConfig(
    parametrization=Projected(),
    direction=SGD(),
    learning_rate=0.5,
    rel_tol=1e-7,
    abs_tol=1e-5,
    max_steps=1000,
  )
  full = loop(offset_quadratic, params, x, y0, REAL, config)
  half = loop(offset_quadratic, params, x, y0, REAL, config._replace(stop_fraction=0.5))
  assert np.all(full.converged)
  assert int(np.sum(half.converged)) >= 4
  assert not np.all(half.converged)
  assert np.max(half.steps) < np.max(full.steps)
  # Unconverged examples ran every iteration; converged ones match the full run exactly.
  np.testing.assert_array_equal(half.steps[~half.converged], np.max(half.steps))
  np.testing.assert_array_equal(half.y[half.converged], full.y[half.converged])


def test_max_steps_is_respected():
  params, x, y0 = difficulty_batch([1.9, 0.01])
  config = GBIConfig(
    parametrization=Logit(),
    direction=SGD(),
    learning_rate=0.5,
    rel_tol=1e-7,
    abs_tol=1e-5,
    max_steps=7,
    num_steps=7,
  )
  res = loop(offset_quadratic, params, x, y0, REAL, config)
  np.testing.assert_array_equal(res.steps, [res.steps[0], 7])
  assert res.steps[0] < 7 and bool(res.converged[0]) and not bool(res.converged[1])
  y_t, _ = scan(offset_quadratic, params, x, y0, REAL, config)
  np.testing.assert_allclose(res.y[1], y_t[1], atol=1e-6)


def test_while_with_zero_tolerance_equals_scan():
  # (The step-count test above compares the two drivers for every optimizer.)
  params = mlp_params()
  x = jnp.asarray(np.random.RandomState(6).randn(3, 3), jnp.float32)
  y0 = BOX.uniform_init((3, 6))
  config = GBIConfig(
    parametrization=Logit(), direction=Adam(), rel_tol=0.0, abs_tol=0.0, num_steps=12, max_steps=12
  )
  y_t, trace = scan(mlp_energy, params, x, y0, BOX, config)
  res = loop(mlp_energy, params, x, y0, BOX, config)
  np.testing.assert_allclose(res.y, y_t, atol=1e-6)
  np.testing.assert_allclose(res.energy, trace.energies[-1], rtol=1e-6)
  np.testing.assert_array_equal(res.steps, 12)
  assert not np.any(res.converged)


@pytest.mark.parametrize(
  "method,optimizer,lr",
  [
    ("projected", "momentum", 0.05),
    ("projected", "sgd", 0.1),
    ("mirror", "adam", 0.05),
    ("logit", "momentum", 0.2),
  ],
)
def test_example_results_do_not_depend_on_batch_mates(method, optimizer, lr):
  params = mlp_params(seed=7)
  x = jnp.asarray(
    np.random.RandomState(8).randn(4, 3) * np.array([[0.1], [1], [3], [10]]), jnp.float32
  )
  y0 = BOX.uniform_init((4, 6))
  config = GBIConfig(
    parametrization=PARAMETRIZATIONS[method],
    direction=direction(optimizer),
    learning_rate=lr,
    max_steps=300,
    rel_tol=1e-5,
    abs_tol=1e-4,
    num_steps=40,
  )
  batch = loop(mlp_energy, params, x, y0, BOX, config)
  assert np.all(batch.converged)
  assert len(set(np.asarray(batch.steps).tolist())) > 1  # batch-mates stop at other steps
  perm = np.array([2, 0, 3, 1])
  permuted = loop(mlp_energy, params, x[perm], y0, BOX, config)
  np.testing.assert_allclose(permuted.y, batch.y[perm], atol=1e-6)
  np.testing.assert_array_equal(permuted.steps, batch.steps[perm])
  # "Alone": a batch of copies of example i, whose mates all stop when it does. The
  # shape stays [4, ...]: XLA may round a differently shaped batch differently in the
  # last bit, which 300 steps of logit momentum amplify; that is the compiler, not a
  # dependence on batch mates.
  for i in (0, 2):
    alone = loop(mlp_energy, params, x[np.full(4, i)], y0, BOX, config)
    np.testing.assert_allclose(alone.y[0], batch.y[i], atol=1e-6)
    assert int(alone.steps[0]) == int(batch.steps[i])
  if optimizer == "momentum" and method == "logit":
    # The whole trajectory, not just the end point, is the same.
    _, trace = scan(mlp_energy, params, x, y0, BOX, config)
    _, trace_alone = scan(mlp_energy, params, x[np.full(4, 2)], y0, BOX, config)
    np.testing.assert_allclose(trace_alone.ys[:, 0], trace.ys[:, 2], atol=1e-6)


# --- the scan: gradients, jit, vmap ------------------------------------------------------------


def _e2e_loss(energy, domain, config, target):
  """E2E-SPEN's per-iterate loss (1/T) Σ_t ‖y_t − y*‖² / (T − t + 1), plus the energies.

  The aux output is the range of the iterates (finite differences need no kinks).
  """

  def loss(params, x, y0, step_sizes):
    cfg = config._replace(step_sizes=step_sizes)
    y_t, trace = gbi_lib.gbi_scan(energy, params, x, y0, domain, cfg)
    steps = trace.ys.shape[0]
    w = 1.0 / (steps - jnp.arange(1, steps + 1) + 1.0)
    per_iter = jnp.sum((trace.ys - target) ** 2, axis=tuple(range(1, trace.ys.ndim)))
    value = (
      jnp.sum(w * per_iter) / steps + jnp.sum((y_t - target) ** 2) + 0.1 * jnp.sum(trace.energies)
    )
    return value, (jnp.min(trace.ys), jnp.max(trace.ys))

  return loss


FD_CASES = [
  ("box", "projected", "sgd"),
  ("box", "mirror", "momentum"),
  ("box", "logit", "adam"),
  ("simplex", "mirror", "sgd"),
  ("simplex", "logit", "momentum"),
  ("simplex", "projected", "momentum"),
]


@pytest.mark.parametrize("domain_name,method,optimizer", FD_CASES, ids=lambda v: str(v))
def test_scan_gradients_match_central_finite_differences(domain_name, method, optimizer):
  with jax.enable_x64(True):
    rs = np.random.RandomState(9)
    if domain_name == "box":
      domain, energy, params = BOX, mlp_energy, mlp_params(seed=9, dtype=jnp.float64)
      x = jnp.asarray(rs.randn(2, 3))
      y0 = jnp.asarray(rs.uniform(0.3, 0.7, size=(2, 6)))
    else:
      domain, energy = SIMPLEX, chain_energy
      params = {"P": jnp.asarray(rs.randn(3, 3) * 0.5)}
      x = jnp.asarray(rs.randn(2, 4, 3) * 0.5)
      y0 = jax.nn.softmax(jnp.asarray(rs.randn(2, 4, 3) * 0.3), axis=-1)
    target = domain.decode(jnp.asarray(rs.uniform(size=y0.shape)))
    config = GBIConfig(
      parametrization=PARAMETRIZATIONS[method],
      direction=direction(optimizer, momentum=0.5, adam_eps=1e-3),
      num_steps=5,
      entropy_weight=0.05,
    )
    scale = {"projected": 0.3, "mirror": 1.0, "logit": 5.0}[method]
    step_sizes = jnp.asarray(rs.uniform(0.05, 0.15, size=5) * scale)
    args = (params, x, y0, step_sizes)
    loss_fn = _e2e_loss(energy, domain, config, target)
    # One compilation serves the gradient and every finite-difference evaluation.
    value_and_grad = jax.jit(jax.value_and_grad(loss_fn, argnums=(0, 1, 2, 3), has_aux=True))
    (_, (lo, hi)), grads = value_and_grad(*args)
    assert float(lo) > 1e-3 and float(hi) < 1 - 1e-3  # iterates stay off the faces
    eps = 1e-6
    for argnum, arg in enumerate(args):  # one random direction per argument
      leaves, treedef = jax.tree.flatten(arg)
      d = jax.tree.unflatten(treedef, [jnp.asarray(rs.randn(*l.shape)) for l in leaves])
      shifted = lambda sign: tuple(
        jax.tree.map(lambda a, v: a + sign * eps * v, arg, d) if k == argnum else a
        for k, a in enumerate(args)
      )
      fd = (value_and_grad(*shifted(1.0))[0][0] - value_and_grad(*shifted(-1.0))[0][0]) / (2 * eps)
      analytic = sum(
        jnp.vdot(g, v) for g, v in zip(jax.tree.leaves(grads[argnum]), jax.tree.leaves(d))
      )
      assert abs(float(analytic)) > 1e-6, argnum  # a direction the loss actually feels
      np.testing.assert_allclose(
        float(analytic), float(fd), rtol=1e-5, atol=1e-8, err_msg=f"argument {argnum}"
      )


def test_scan_trace_is_consistent():
  params = mlp_params()
  x = jnp.asarray(np.random.RandomState(10).randn(3, 3), jnp.float32)
  y0 = BOX.uniform_init((3, 6))
  config = GBIConfig(parametrization=Logit(), num_steps=6, entropy_weight=0.1)
  y_t, trace = scan(mlp_energy, params, x, y0, BOX, config)
  assert trace.ys.shape == (6, 3, 6) and trace.energies.shape == (6, 3)
  np.testing.assert_allclose(trace.ys[-1], y_t)
  objective = gbi_lib.make_objective(mlp_energy, BOX, config)
  for t in (0, 3, 5):
    np.testing.assert_allclose(trace.energies[t], objective(params, x, trace.ys[t]), rtol=1e-5)
  np.testing.assert_allclose(trace.initial_energy, objective(params, x, y0), rtol=1e-5)
  # Learned step sizes all equal to the learning rate reproduce the fixed-rate run.
  same = config._replace(step_sizes=jnp.full((6,), config.learning_rate))
  y_same, _ = scan_dyn(mlp_energy, params, x, y0, BOX, same)
  np.testing.assert_allclose(y_same, y_t, atol=1e-6)
  faster = config._replace(step_sizes=jnp.full((6,), 2 * config.learning_rate))
  assert not np.allclose(scan_dyn(mlp_energy, params, x, y0, BOX, faster)[0], y_t)


def test_jit_with_static_or_traced_config_matches_eager():
  params = mlp_params()
  x = jnp.asarray(np.random.RandomState(11).randn(3, 3), jnp.float32)
  y0 = BOX.uniform_init((3, 6))
  config = GBIConfig(parametrization=Mirror(), num_steps=8)
  hash(config)  # static-able
  eager, _ = gbi_lib.gbi_scan(mlp_energy, params, x, y0, BOX, config)
  np.testing.assert_allclose(scan(mlp_energy, params, x, y0, BOX, config)[0], eager, atol=1e-6)
  # As an ordinary argument only step_sizes is a leaf, and it is traced.
  learned = config._replace(step_sizes=jnp.linspace(0.05, 0.2, 8))
  assert len(jax.tree.leaves(learned)) == 1 and jax.tree.leaves(config) == []
  np.testing.assert_allclose(
    scan_dyn(mlp_energy, params, x, y0, BOX, learned)[0],
    scan_dyn(
      mlp_energy, params, x, y0, BOX, learned._replace(step_sizes=np.linspace(0.05, 0.2, 8))
    )[0],
    atol=1e-6,
  )
  assert not np.allclose(scan_dyn(mlp_energy, params, x, y0, BOX, learned)[0], eager)
  res = jax.jit(lambda c, p, v: gbi_lib.gbi_while(mlp_energy, p, v, y0, BOX, c))(
    learned._replace(max_steps=30), params, x
  )
  assert res.y.shape == y0.shape and res.steps.shape == (3,)


def test_vmap_over_an_extra_axis_matches_a_python_loop():
  params = mlp_params()
  xs = jnp.asarray(np.random.RandomState(12).randn(3, 2, 3) * 2, jnp.float32)  # [N, B, D]
  y0s = jnp.asarray(np.random.RandomState(13).uniform(0.2, 0.8, size=(3, 2, 6)), jnp.float32)
  # SGD decreases the energy monotonically, and at these tolerances no example's stopping
  # test sits within float32 noise of them (vmap batches the energy's matmuls, which
  # reorders their sums; at 1e-4 one example stopped a step apart depending on the code
  # XLA generated), so every example stops at the same step either way, and the examples
  # stop at different steps.
  config = GBIConfig(
    parametrization=Mirror(),
    direction=SGD(),
    learning_rate=0.3,
    num_steps=6,
    max_steps=300,
    rel_tol=3e-4,
    abs_tol=3e-4,
  )
  run_while = lambda v, y: gbi_lib.gbi_while(mlp_energy, params, v, y, BOX, config)
  run_scan = lambda v, y: gbi_lib.gbi_scan(mlp_energy, params, v, y, BOX, config)[0]
  batched = jax.jit(jax.vmap(run_while))(xs, y0s)
  batched_scan = jax.jit(jax.vmap(run_scan))(xs, y0s)
  for n in range(3):
    single = loop(mlp_energy, params, xs[n], y0s[n], BOX, config)
    np.testing.assert_allclose(batched.y[n], single.y, atol=1e-6)
    np.testing.assert_array_equal(batched.steps[n], single.steps)
    np.testing.assert_allclose(
      batched_scan[n], scan(mlp_energy, params, xs[n], y0s[n], BOX, config)[0], atol=1e-6
    )
  steps = np.asarray(batched.steps)
  assert len(set(steps.ravel())) > 1 and steps.max() < config.max_steps  # freezing is used
  # vmap over parameters (e.g. an ensemble of energies).
  stacked = jax.tree.map(lambda *v: jnp.stack(v), mlp_params(1), mlp_params(2))
  per_params = jax.jit(
    jax.vmap(lambda p: gbi_lib.gbi_scan(mlp_energy, p, xs[0], y0s[0], BOX, config)[0])
  )(stacked)
  np.testing.assert_allclose(
    per_params[1], scan(mlp_energy, mlp_params(2), xs[0], y0s[0], BOX, config)[0], atol=1e-6
  )


def test_remat_changes_nothing():
  params = mlp_params()
  x = jnp.asarray(np.random.RandomState(14).randn(2, 3), jnp.float32)
  y0 = BOX.uniform_init((2, 6))

  def loss(p, remat):
    config = GBIConfig(parametrization=Logit(), num_steps=4, remat=remat)
    return jnp.sum(gbi_lib.gbi_scan(mlp_energy, p, x, y0, BOX, config)[0] ** 2)

  grad = jax.jit(jax.grad(loss), static_argnums=1)
  g0, g1 = grad(params, False), grad(params, True)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7), g0, g1)


# --- output shapes -----------------------------------------------------------------------------

SHAPE_CASES = [
  (BOX, (4, 6), "mirror"),  # multi-label [B, L]
  (SIMPLEX, (3, 5, 4), "logit"),  # tags [B, T, K]
  (BOX, (2, 6, 5), "projected"),  # binary pixels [B, H, W]
  (REAL, (2, 6, 5), "mirror"),  # denoising [B, H, W]
  (SIMPLEX, (2, 4, 3, 3), "projected"),  # multi-class pixels [B, H, W, K]
]


@pytest.mark.parametrize("domain,shape,method", SHAPE_CASES, ids=lambda v: str(v))
def test_any_trailing_shape(domain, shape, method):
  rs = np.random.RandomState(15)
  x = jnp.asarray(domain.project(jnp.asarray(rs.uniform(size=shape), jnp.float32)))
  y0 = domain.uniform_init(shape)
  params = {"smooth": jnp.float32(0.5)}
  config = GBIConfig(
    parametrization=PARAMETRIZATIONS[method], num_steps=15, max_steps=200, learning_rate=0.05
  )
  y_t, trace = scan(smooth_energy, params, x, y0, domain, config)
  assert y_t.shape == shape and trace.ys.shape == (15,) + shape
  assert trace.energies.shape == (15, shape[0])
  res = loop(smooth_energy, params, x, y0, domain, config)
  assert res.y.shape == shape and res.energy.shape == res.steps.shape == (shape[0],)
  initial = smooth_energy(params, x, y0)
  for y in (y_t, res.y):
    assert in_domain(domain, y)
    assert np.all(np.asarray(smooth_energy(params, x, y)) < np.asarray(initial))


# --- entropy annealing ------------------------------------------------------------------------


def exclusive_blocks(p, x, y):
  """`−⟨x, y⟩ + w Σ_blocks Σ_{i<j} y_i y_j` over blocks of 4 labels: a non-convex energy
  (pairwise repulsion inside a block) whose discrete argmin has at most one label per
  block, and where descent from one start can stop at a worse vertex."""
  b = y.reshape(y.shape[0], -1, 4)
  s = b.sum(-1)
  return -jnp.sum(x * y, -1) + p["w"] * jnp.sum(0.5 * (s * s - jnp.sum(b * b, -1)), -1)


def test_annealing_schedule_is_a_geometric_decay_to_the_final_temperature():
  config = GBIConfig(entropy_weight=0.01, entropy_anneal_init=5.0, entropy_anneal_steps=8)
  taus = np.asarray(gbi_lib.entropy_weight_at(config, jnp.arange(12)))
  expected = [max(5.0 * 1e-3 ** (t / 8), 0.01) for t in range(8)] + [0.01] * 4
  np.testing.assert_allclose(taus, expected, rtol=1e-5)
  assert taus[0] == 5.0 and np.all(np.diff(taus) <= 0)
  # Without annealing τ is the fixed entropy_weight.
  assert gbi_lib.entropy_weight_at(GBIConfig(entropy_weight=0.3), 7) == 0.3


def test_annealed_scan_equals_a_hand_loop_of_gbi_steps_at_each_temperature():
  params = mlp_params(seed=3)
  x = jnp.asarray(np.random.RandomState(9).randn(3, 3), jnp.float32)
  y0 = BOX.uniform_init((3, 6))
  config = GBIConfig(
    parametrization=Mirror(),
    direction=Momentum(),
    learning_rate=0.05,
    entropy_anneal_init=2.0,
    entropy_anneal_steps=6,
    num_steps=9,
  )
  y_t, trace = scan(mlp_energy, params, x, y0, BOX, config)
  plain = config._replace(entropy_anneal_steps=0, entropy_anneal_init=0.0)
  tau = lambda t: 2.0 * 1e-3 ** (t / 6) if t < 6 else 0.0
  state = gbi_lib.init_state(mlp_energy, params, x, y0, BOX, plain._replace(entropy_weight=tau(0)))
  for t in range(1, 10):
    state = gbi_lib.gbi_step(mlp_energy, params, x, state, 0.05, BOX, plain, tau(t))
    np.testing.assert_allclose(trace.ys[t - 1], state.z, atol=1e-6)
    # The traced objective is E − τ_t·H at step t's own temperature.
    np.testing.assert_allclose(
      trace.energies[t - 1],
      mlp_energy(params, x, state.z) - tau(t) * BOX.entropy(state.z),
      rtol=1e-5,
      atol=1e-5,
    )
  np.testing.assert_allclose(y_t, state.z, atol=1e-6)
  # While annealing, the objective differs from the energy; plain GBI's trajectory differs.
  y_plain, _ = scan(mlp_energy, params, x, y0, BOX, plain)
  assert np.max(np.abs(np.asarray(y_plain) - np.asarray(y_t))) > 1e-3


def test_annealed_while_runs_the_whole_schedule_then_equals_scan():
  params = mlp_params(seed=3)
  x = jnp.asarray(np.random.RandomState(9).randn(3, 3), jnp.float32)
  y0 = BOX.uniform_init((3, 6))
  config = GBIConfig(
    parametrization=Mirror(),
    direction=Momentum(),
    learning_rate=0.05,
    entropy_anneal_init=2.0,
    entropy_anneal_steps=40,
    num_steps=60,
    max_steps=60,
    rel_tol=1e-2,
    abs_tol=1e-2,
  )
  res = loop(mlp_energy, params, x, y0, BOX, config)
  # Loose tolerances would stop plain GBI within a few steps; annealing holds every
  # example for the whole schedule.
  assert np.all(np.asarray(res.steps) >= 41), res.steps
  exact = loop(mlp_energy, params, x, y0, BOX, config._replace(rel_tol=0.0, abs_tol=0.0))
  y_t, _ = scan(mlp_energy, params, x, y0, BOX, config)
  np.testing.assert_allclose(exact.y, y_t, atol=1e-6)


def test_annealing_finds_the_brute_force_argmin_where_plain_gbi_stops_short():
  rs = np.random.RandomState(0)
  x = jnp.asarray(rs.randn(300, 8) * 2, jnp.float32)
  params = {"w": jnp.float32(4.0)}
  cands = jnp.asarray(list(itertools.product((0.0, 1.0), repeat=8)), jnp.float32)
  values = jax.vmap(lambda xi: exclusive_blocks(params, jnp.broadcast_to(xi, (256, 8)), cands))(x)
  brute = np.asarray(cands)[np.asarray(jnp.argmin(values, axis=1))]
  plain = GBIConfig(
    parametrization=Mirror(), direction=Momentum(0.9), learning_rate=0.02, max_steps=400
  )
  annealed = plain._replace(entropy_anneal_init=3.0, entropy_anneal_steps=300)
  hits = {}
  for name, config in (("plain", plain), ("annealed", annealed)):
    res = loop(exclusive_blocks, params, x, BOX.uniform_init(x.shape), BOX, config)
    hits[name] = np.mean(np.all((np.asarray(res.y) >= 0.5) == brute, axis=-1))
  assert hits["annealed"] == 1.0, hits
  assert hits["plain"] < 0.95, hits


# --- validation --------------------------------------------------------------------------------


class _Unhashable:
  """A direction that cannot be static under jit (it has `__eq__` but no `__hash__`)."""

  __hash__ = None

  def __eq__(self, other):
    return self is other

  def init(self, z):
    return SGD().init(z)

  def update(self, g, state):
    return SGD().update(g, state)


def test_invalid_configs_and_energies_raise():
  params = mlp_params()
  x, y0 = jnp.zeros((2, 3)), BOX.uniform_init((2, 6))
  with pytest.raises(TypeError, match=r"parametrization must be a value .*got 'logit'"):
    gbi_lib.gbi_scan(mlp_energy, params, x, y0, BOX, GBIConfig(parametrization="logit"))
  with pytest.raises(TypeError, match="direction must be a value"):
    gbi_lib.gbi_while(mlp_energy, params, x, y0, BOX, GBIConfig(direction=Adam))  # a class
  with pytest.raises(TypeError, match="direction must be hashable"):
    gbi_lib.gbi_scan(mlp_energy, params, x, y0, BOX, GBIConfig(direction=_Unhashable()))
  with pytest.raises(ValueError, match="stop_fraction"):
    gbi_lib.gbi_while(mlp_energy, params, x, y0, BOX, GBIConfig(stop_fraction=1.5))
  with pytest.raises(ValueError, match="step_sizes"):
    gbi_lib.gbi_scan(mlp_energy, params, x, y0, BOX, GBIConfig(num_steps=4, step_sizes=jnp.ones(3)))
  with pytest.raises(ValueError, match="entropy_anneal_init"):
    gbi_lib.gbi_while(
      mlp_energy, params, x, y0, BOX, GBIConfig(entropy_anneal_steps=10, entropy_anneal_init=0.0)
    )
  with pytest.raises(ValueError, match="entropy_anneal_steps"):
    gbi_lib.gbi_scan(mlp_energy, params, x, y0, BOX, GBIConfig(entropy_anneal_steps=-1))
  with pytest.raises(ValueError, match="entropy_weight"):
    gbi_lib.gbi_scan(mlp_energy, params, x, y0, BOX, GBIConfig(entropy_weight=-0.1))
  with pytest.raises(ValueError, match="one value per example"):
    gbi_lib.gbi_scan(
      lambda p, v, y: jnp.sum(mlp_energy(p, v, y)), params, x, y0, BOX, GBIConfig(num_steps=2)
    )


# --- pick_best ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
  "method,optimizer,lr",
  [("projected", "adam", 0.3), ("mirror", "momentum", 0.5), ("logit", "adam", 2.0)],
)
def test_best_pick_returns_the_lowest_objective_iterate_of_the_trajectory(method, optimizer, lr):
  # Large steps on a non-convex energy: the objective is not monotone along the trajectory,
  # so the best iterate differs from the last one for some example (asserted below).
  params = mlp_params(seed=11)
  x = jnp.asarray(np.random.RandomState(12).randn(6, 3) * 3, jnp.float32)
  y0 = jnp.asarray(np.random.RandomState(13).rand(6, 6), jnp.float32)
  last = GBIConfig(
    parametrization=PARAMETRIZATIONS[method],
    direction=direction(optimizer),
    learning_rate=lr,
    num_steps=15,
    rel_tol=0.0,
    abs_tol=0.0,
    max_steps=15,
  )
  best = last._replace(pick_best=True)
  y_last, trace = scan(mlp_energy, params, x, y0, BOX, last)
  # The oracle: argmin over y_0 .. y_T of the recorded trajectory (y_0 as the optimizer
  # sees it: through logits in logit mode).
  t_best, expected, lowest = testing.trajectory_best(
    gbi_lib.to_y(gbi_lib.to_z(y0, BOX, last), BOX, last), trace
  )
  assert np.any(t_best != last.num_steps), "no example where the last iterate is not the best"
  y_best, trace_best = scan(mlp_energy, params, x, y0, BOX, best)
  np.testing.assert_allclose(y_best, expected, atol=1e-6)
  np.testing.assert_allclose(trace_best.ys, trace.ys, atol=1e-6)  # same trajectory
  res = loop(mlp_energy, params, x, y0, BOX, best)
  np.testing.assert_allclose(res.y, expected, atol=1e-6)
  np.testing.assert_allclose(res.energy, lowest, rtol=1e-5)
  np.testing.assert_allclose(loop(mlp_energy, params, x, y0, BOX, last).y, y_last, atol=1e-6)


def test_best_pick_of_a_converging_while_loop_ignores_frozen_examples():
  # Example 0 converges early and is frozen; on this convex quadratic each example's
  # objective falls monotonically (offset 0: every decrease is resolved in float32), so
  # the best point is the last one, and the frozen example's best stays where it froze.
  params = {"offset": jnp.asarray(0.0)}
  c = jnp.asarray([[0.5, -0.5], [2.0, 1.0]], jnp.float32)
  x = (c, jnp.asarray([10.0, 0.01], jnp.float32))
  y0 = jnp.zeros((2, 2), jnp.float32)
  config = GBIConfig(
    parametrization=Projected(),
    direction=SGD(),
    learning_rate=0.05,
    rel_tol=1e-7,
    abs_tol=1e-5,
    max_steps=50,
    pick_best=True,
  )
  res = loop(offset_quadratic, params, x, y0, REAL, config)
  plain = loop(offset_quadratic, params, x, y0, REAL, config._replace(pick_best=False))
  assert bool(res.converged[0]) and int(res.steps[0]) < int(res.steps[1]), res.steps
  np.testing.assert_allclose(res.y, plain.y, atol=1e-6)
  np.testing.assert_array_equal(res.steps, plain.steps)


def test_best_pick_with_annealing_raises():
  params = mlp_params()
  x, y0 = jnp.zeros((2, 3)), BOX.uniform_init((2, 6))
  with pytest.raises(ValueError, match="annealing"):
    gbi_lib.gbi_while(
      mlp_energy,
      params,
      x,
      y0,
      BOX,
      GBIConfig(pick_best=True, entropy_anneal_steps=5, entropy_anneal_init=1.0),
    )


# --- user-written choices ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ClippedBox:
  """A user's parametrization: projected steps on the box, by `jnp.clip` itself."""

  def to_z(self, y, domain):
    return y

  def to_y(self, z, domain):
    return z

  def update(self, z, d, lr, domain):
    return jnp.clip(z - lr * d, 0.0, 1.0)


class ScaledGradient(NamedTuple):
  """A user's direction as a NamedTuple: `d = scale · g`, with a dict state holding a
  per-example step count (as the library's directions do)."""

  scale: float

  def init(self, z):
    return {"steps": jnp.zeros(z.shape[:1], jnp.int32)}

  def update(self, g, state):
    return self.scale * g, {"steps": state["steps"] + 1}


def test_user_written_parametrization_and_direction_give_the_library_iterates():
  params = mlp_params(seed=3)
  x = jnp.asarray(np.random.RandomState(14).randn(4, 3), jnp.float32)
  y0 = BOX.uniform_init((4, 6))
  library = GBIConfig(
    parametrization=Projected(),
    direction=SGD(),
    learning_rate=0.2,
    num_steps=8,
    max_steps=50,
    rel_tol=1e-5,
    abs_tol=1e-4,
  )
  users = library._replace(
    parametrization=ClippedBox(), direction=ScaledGradient(2.0), learning_rate=0.1
  )
  y_lib, trace_lib = scan(mlp_energy, params, x, y0, BOX, library)
  y_user, trace_user = scan(mlp_energy, params, x, y0, BOX, users)
  np.testing.assert_allclose(trace_user.ys, trace_lib.ys, atol=1e-6)
  np.testing.assert_allclose(y_user, y_lib, atol=1e-6)
  res_lib = loop(mlp_energy, params, x, y0, BOX, library)
  res_user = loop(mlp_energy, params, x, y0, BOX, users)  # frozen examples keep their state
  np.testing.assert_allclose(res_user.y, res_lib.y, atol=1e-6)
  np.testing.assert_array_equal(res_user.steps, res_lib.steps)


# --- the configs' names (experiments/choices/gbi.py) ---------------------------------------------


def _reference_iterates(block, params, x, y0, num_steps, lr):
  """`[T, B, L]` iterates by the update rules the configs' names stand for, written out
  here (not through the library's values): what each name means."""
  method, optimizer = block["method"], block["optimizer"]
  mu_, b1, b2 = block.get("momentum", 0.95), block.get("b1", 0.9), block.get("b2", 0.999)
  eps, eps_root = block.get("adam_eps", 1e-8), block.get("adam_eps_root", 1e-16)
  to_y = BOX.from_logits if method == "logit" else (lambda z: z)
  z = BOX.to_logits(y0) if method == "logit" else y0
  m, v = jnp.zeros_like(z), jnp.zeros_like(z)
  ys = []
  for t in range(1, num_steps + 1):
    g = jax.grad(lambda z_: jnp.sum(mlp_energy(params, x, to_y(z_))))(z)
    if optimizer == "sgd":
      d = g
    elif optimizer == "momentum":
      m = mu_ * m + g
      d = m
    else:
      m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
      d = (m / (1 - b1**t)) / (jnp.sqrt(v / (1 - b2**t) + eps_root) + eps)
    if method == "projected":
      z = jnp.clip(z - lr * d, 0.0, 1.0)
    elif method == "mirror":
      z = jax.nn.sigmoid(jnp.log(z) - jnp.log1p(-z) - lr * d)
    else:
      z = z - lr * d
    ys.append(to_y(z))
  return jnp.stack(ys)


@pytest.mark.parametrize("method", ["projected", "mirror", "logit"])
def test_config_names_stand_for_the_values_of_the_same_iterates(method):
  from experiments.choices import gbi as gbi_choices  # pylint: disable=g-import-not-at-top

  assert set(gbi_choices.PARAMETRIZATIONS) == {"projected", "mirror", "logit"}
  assert set(gbi_choices.DIRECTIONS) == {"sgd", "momentum", "adam"}
  params = mlp_params(seed=4)
  x = jnp.asarray(np.random.RandomState(16).randn(3, 3), jnp.float32)
  y0 = jnp.asarray(np.random.RandomState(17).uniform(0.2, 0.8, (3, 6)), jnp.float32)
  lr = {"projected": 0.05, "mirror": 0.2, "logit": 0.5}[method]
  blocks = [
    dict(method=method, optimizer="sgd"),
    dict(method=method, optimizer="momentum", momentum=0.7),
    dict(method=method, optimizer="adam", b1=0.8, b2=0.99, adam_eps=1e-6),
  ]
  for block in blocks:
    config = gbi_choices.gbi_config(dict(block, learning_rate=lr, num_steps=5))
    _, trace = scan(mlp_energy, params, x, y0, BOX, config)
    want = _reference_iterates(block, params, x, y0, 5, lr)
    np.testing.assert_allclose(trace.ys, want, rtol=2e-5, atol=2e-6, err_msg=str(block))
    assert gbi_choices.gbi_config(gbi_choices.gbi_block(config)) == config
  # The defaults of a block are the library's: mirror steps, momentum 0.95, the last iterate.
  assert gbi_choices.gbi_config({}) == GBIConfig()
  assert gbi_choices.gbi_config({"pick": "best"}) == GBIConfig(pick_best=True)


def test_config_names_and_keys_are_checked_in_one_line():
  from experiments.choices import gbi as gbi_choices  # pylint: disable=g-import-not-at-top

  with pytest.raises(ValueError, match=r"unknown GBI method 'newton'; known: \('projected'"):
    gbi_choices.gbi_config({"method": "newton"})
  with pytest.raises(ValueError, match=r"unknown GBI optimizer 'lbfgs'"):
    gbi_choices.gbi_config({"optimizer": "lbfgs"})
  with pytest.raises(ValueError, match=r"unknown GBI pick 'first'"):
    gbi_choices.gbi_config({"pick": "first"})
  with pytest.raises(ValueError, match=r"unknown GBI options \['momentom'\]"):
    gbi_choices.gbi_config({"momentom": 0.9})
  with pytest.raises(ValueError, match="no GBI optimizer name"):
    gbi_choices.gbi_block(GBIConfig(direction=ScaledGradient(1.0)))
