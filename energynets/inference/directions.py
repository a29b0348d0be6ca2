"""GBI's search directions: the gradient turned into a step direction, per example.

`GBIConfig.optimizer` names the rule: `'sgd'` (the gradient), `'momentum'` (heavy ball
`m ← μ m + g`) or `'adam'` (with bias correction). State is elementwise plus a
per-example step count, so no example's trajectory depends on which other examples
share its batch, and an example frozen at convergence does not advance its count.
"""

from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp


class OptState(NamedTuple):
  """Per-example optimizer state; `mu`/`nu` have y's shape, `count` is `[B]` int32."""
  mu: Optional[jax.Array]
  nu: Optional[jax.Array]
  count: jax.Array


def init_opt_state(z: jax.Array, config: Any) -> OptState:
  """The state before the first step at iterate `z` [B, ...] for `config` (a `GBIConfig`)."""
  count = jnp.zeros(z.shape[:1], jnp.int32)
  if config.optimizer == "sgd":
    return OptState(None, None, count)
  if config.optimizer == "momentum":
    return OptState(jnp.zeros_like(z), None, count)
  return OptState(jnp.zeros_like(z), jnp.zeros_like(z), count)


def expand(v: jax.Array, like: jax.Array) -> jax.Array:
  """`[B] -> [B, 1, ..., 1]` broadcastable against `like`."""
  return v.reshape(v.shape + (1,) * (like.ndim - v.ndim))


def direction(g: jax.Array, opt: OptState, config: Any) -> tuple[jax.Array, OptState]:
  """The search direction for gradient `g` and the next state.

  Args:
    g: the gradient, like the iterate.
    opt: the state after the previous step (`init_opt_state` before the first).
    config: a `GBIConfig` (its `optimizer`, `momentum`, `b1`, `b2`, `adam_eps`,
      `adam_eps_root`).

  Returns:
    `(d, state)`: the direction, like `g`, and the updated state.
  """
  count = opt.count + 1
  if config.optimizer == "sgd":
    return g, OptState(None, None, count)
  if config.optimizer == "momentum":
    mu = config.momentum * opt.mu + g
    return mu, OptState(mu, None, count)
  mu = config.b1 * opt.mu + (1.0 - config.b1) * g
  nu = config.b2 * opt.nu + (1.0 - config.b2) * jnp.square(g)
  # Bias correction by each example's own count: frozen examples do not advance it.
  t = expand(count, g).astype(g.dtype)
  mu_hat = mu / (1.0 - config.b1 ** t)
  nu_hat = nu / (1.0 - config.b2 ** t)
  d = mu_hat / (jnp.sqrt(nu_hat + config.adam_eps_root) + config.adam_eps)
  return d, OptState(mu, nu, count)
