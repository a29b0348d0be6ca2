"""Test oracles shared by the test suite (and by users checking their own energies)."""

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np


def directional_derivatives(value_fn: Callable[[Any], jax.Array],
                            grad_fn: Callable[[Any], Any], params: Any, seed: int,
                            eps: float = 1e-6) -> tuple[float, float]:
  """`(⟨grad_fn(params), v⟩, central difference of value_fn along v)` for a random v.

  v is a standard-normal pytree shaped like `params` (drawn from
  `np.random.RandomState(seed)`); the numeric value is
  `(value_fn(params + eps·v) − value_fn(params − eps·v)) / (2·eps)`. Use float64
  parameters or x64 mode (`jax.enable_x64(True)`) for a 1e-6 relative agreement. `grad_fn`
  may differ from the gradient of `value_fn` on purpose (a `stop_gradient` under test).
  """
  rs = np.random.RandomState(seed)
  # Default dtype (float64 under x64): float32 parameters are then shifted in float64 too.
  direction = jax.tree.map(lambda a: jnp.asarray(rs.randn(*jnp.shape(a))), params)
  grads = grad_fn(params)
  analytic = sum(jnp.vdot(g, v) for g, v in zip(jax.tree.leaves(grads),
                                                 jax.tree.leaves(direction)))
  step = lambda s: jax.tree.map(lambda p, v: p + s * eps * v, params, direction)
  numeric = (value_fn(step(1.0)) - value_fn(step(-1.0))) / (2 * eps)
  return float(analytic), float(numeric)
