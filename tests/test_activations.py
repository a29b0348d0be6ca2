"""The activations: `softplus` is `jax.nn.softplus` with a sigmoid derivative; a config names
them (`experiments.choices.networks.ACTIVATIONS`); a net given a name instead says so."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from energynets import nets
from energynets.nets.mlp import softplus
from experiments.choices import networks as network_choices

POINTS = np.array([-100.0, -30.0, -5.0, -1.0, -1e-3, 0.0, 1e-3, 0.5, 3.0, 20.0, 100.0], np.float32)


def test_softplus_is_the_named_activation():
  assert nets.softplus is softplus
  assert network_choices.activation("softplus") is softplus


def test_every_config_name_is_an_elementwise_function():
  for name, function in network_choices.ACTIVATIONS.items():
    assert network_choices.activation(name) is function
    assert function(jnp.zeros(3)).shape == (3,)
  np.testing.assert_array_equal(nets.hardtanh(jnp.array([-2.0, 0.5, 3.0])), [-1.0, 0.5, 1.0])
  with pytest.raises(ValueError, match="unknown activation 'swish-ish'"):
    network_choices.activation("swish-ish")


@pytest.mark.parametrize(
  "module",
  [
    nets.MLP((3,), 2, activation="relu"),
    nets.FCN((4,), (1,), activation="relu"),
    nets.CNNDenoiser((4,), 3, activation="softplus"),
  ],
)
def test_a_name_where_a_function_belongs_is_a_type_error(module):
  x = jnp.zeros((1, 4, 4, 3)) if isinstance(module, nets.FCN) else jnp.zeros((1, 4, 4))
  if isinstance(module, nets.MLP):
    x = jnp.zeros((1, 5))
  name = type(module).__name__
  with pytest.raises(TypeError, match=rf"^{name}\.activation='\w+' is not a function"):
    module.init(jax.random.PRNGKey(0), x)


def test_softplus_value_equals_jax_nn_softplus():
  np.testing.assert_array_equal(softplus(POINTS), jax.nn.softplus(POINTS))


@pytest.mark.parametrize("order", [1, 2, 3])
def test_softplus_derivatives_equal_jax_nn_softplus(order):
  ours, reference = softplus, jax.nn.softplus
  for _ in range(order):
    ours, reference = jax.grad(ours), jax.grad(reference)
  got = jax.vmap(ours)(POINTS)
  expected = jax.vmap(reference)(POINTS)
  assert np.all(np.isfinite(got))
  np.testing.assert_allclose(got, expected, rtol=2e-6, atol=1e-7)


def test_softplus_derivative_against_finite_differences_in_float64():
  with jax.enable_x64(True):
    x = jnp.linspace(-8.0, 8.0, 33, dtype=jnp.float64)
    h = 1e-6
    fd = (softplus(x + h) - softplus(x - h)) / (2 * h)
    np.testing.assert_allclose(jax.vmap(jax.grad(softplus))(x), fd, rtol=1e-8, atol=1e-10)
    fd2 = (jax.vmap(jax.grad(softplus))(x + h) - jax.vmap(jax.grad(softplus))(x - h)) / (2 * h)
    np.testing.assert_allclose(jax.vmap(jax.grad(jax.grad(softplus)))(x), fd2, rtol=1e-6, atol=1e-9)


def test_softplus_jvp_and_vjp_agree_through_a_layer():
  w = jax.random.normal(jax.random.PRNGKey(0), (7, 5))
  x = jax.random.normal(jax.random.PRNGKey(1), (3, 7)) * 4
  f = lambda x: jnp.sum(softplus(x @ w) ** 2)
  g = lambda x: jnp.sum(jax.nn.softplus(x @ w) ** 2)
  np.testing.assert_allclose(jax.grad(f)(x), jax.grad(g)(x), rtol=1e-5, atol=1e-6)
  v = jnp.ones_like(x)
  hvp = lambda fn: jax.jvp(jax.grad(fn), (x,), (v,))[1]
  np.testing.assert_allclose(hvp(f), hvp(g), rtol=1e-4, atol=1e-5)
