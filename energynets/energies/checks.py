"""The checks of an `Energy` against a batch, its parameters and its training options.

`check` runs one `jax.eval_shape` of the energy on a batch and raises a one-line
`EnergyShapeError` naming the mismatch; `init_checked` initializes parameters with every
check; `trainable_groups` and `check_trainable` check the parameter groups an objective
trains; `check_smooth` refuses a non-smooth activation where training differentiates
through inference.
"""

from typing import Any

import jax
import jax.numpy as jnp

from energynets import domains
from energynets.energies.energy import Energy
from energynets.energies.energy import EnergyShapeError
from energynets.energies.energy import shape_text
from energynets.nets.mlp import hardtanh

__all__ = [
  "NON_SMOOTH",
  "check",
  "check_smooth",
  "check_trainable",
  "check_y",
  "init_checked",
  "trainable_groups",
]

# The piecewise-linear non-linearities `check_smooth` refuses (ReLU, HardTanh).
NON_SMOOTH = (jax.nn.relu, hardtanh)


def check_y(energy: Energy, x: Any, y: Any) -> None:
  """An `EnergyShapeError` unless y is `[B, *energy.y_shape(x)]` and fits the domain."""
  batch = jnp.shape(jax.tree.leaves(x)[0])[0]
  y_shape = tuple(jnp.shape(y))
  expected = (batch,) + tuple(energy.y_shape(x))
  if y_shape != expected:
    raise EnergyShapeError(
      f"y is {shape_text(y_shape)} but {energy.name} expects y {shape_text(expected)} for "
      f"this x; give the right y_shape (en.energy_from_module(module, domain=..., y_shape=...))"
    )
  if isinstance(energy.domain, domains.Simplex) and len(y_shape) < 3:
    raise EnergyShapeError(
      f"y is {shape_text(y_shape)} but the domain is per-token Simplex, which needs y "
      f"[B, T, K] (a distribution over K classes at each of T positions)"
    )


def check(energy: Energy, x: Any, y: Any, params: Any = None) -> None:
  """One `jax.eval_shape` of `energy` on a batch; an `EnergyShapeError` naming the mismatch.

  Checks that y is `[B, *y_shape(x)]`, that the domain fits y (a per-position Simplex
  needs y `[B, ..., K]` with at least one position axis), and that `energy` returns `[B]`.

  Args:
    energy: the `Energy`.
    x: a batch of inputs (arrays or shape structs).
    y: a batch of gold outputs.
    params: the parameters (or their shapes); None: `jax.eval_shape` of `init`.
  """
  check_y(energy, x, y)
  batch = jnp.shape(jax.tree.leaves(x)[0])[0]
  y_shape = tuple(jnp.shape(y))

  def run(params, x, y):
    if params is None:
      params = energy.init(jax.random.key(0), x, y)
    return energy.energy(params, energy.encode(params, x), y)

  try:
    out = jax.eval_shape(run, params, x, jax.ShapeDtypeStruct(y_shape, jnp.float32))
  except EnergyShapeError:
    raise
  except Exception as error:  # the user's own code: say where it failed, in one line
    text = str(error).strip()
    message = text.splitlines()[0] if text else ""
    raise EnergyShapeError(
      f"{energy.name} failed on x {shape_text(jnp.shape(jax.tree.leaves(x)[0]))} and y "
      f"{shape_text(y_shape)}: {type(error).__name__}: {message}"
    ) from error
  if not hasattr(out, "shape") or tuple(out.shape) != (batch,):
    got = shape_text(out.shape) if hasattr(out, "shape") else type(out).__name__
    raise EnergyShapeError(f"{energy.name} returned {got}; expected [B] = [{batch}]")


def check_trainable(trainable, params, what: str = "energy") -> None:
  """A ValueError unless every name in `trainable` is a top-level group of `params` that
  holds parameters (training only an empty group would train nothing, silently)."""
  if trainable is None:
    return
  names = tuple(params)
  unknown = sorted(set(trainable) - set(names))
  if unknown:
    raise ValueError(
      f"trainable names {unknown} are not parameter groups of the {what}; its groups are {names}"
    )
  empty = sorted(name for name in set(trainable) if not jax.tree_util.tree_leaves(params[name]))
  if empty:
    raise ValueError(
      f"trainable groups {empty} of the {what} hold no parameters, so "
      f"nothing would train; its groups with parameters are "
      f"{tuple(n for n in names if jax.tree_util.tree_leaves(params[n]))}"
    )


def trainable_groups(energy: Energy, trainable) -> frozenset | None:
  """`trainable` (group names, or None for all) checked against the declared groups.

  Energies that declare no groups are checked against their real parameter tree at
  `init` (`check_trainable`).
  """
  if trainable is None:
    return None
  if isinstance(trainable, str):
    raise TypeError(
      f"trainable must be a sequence of group names, not the string "
      f"{trainable!r}; write ({trainable!r},)"
    )
  trainable = tuple(trainable)
  if not trainable:
    raise ValueError("trainable must name at least one parameter group")
  if energy.groups is not None and set(trainable) - set(energy.groups):
    raise ValueError(f"trainable must name some of {energy.groups}; got {trainable}")
  return frozenset(trainable)


def check_smooth(module: Any) -> None:
  """ValueError if `module.activation` is one of `NON_SMOOTH` (ReLU, HardTanh).

  Training through GBI differentiates `∇_y E`: with a piecewise-linear activation the
  Hessian is zero almost everywhere, so the unroll passes no second-order signal.
  """
  activation = getattr(module, "activation", None)
  if activation is not None and any(activation is f for f in NON_SMOOTH):
    raise ValueError(
      f"{type(module).__name__}.activation={getattr(activation, '__name__', activation)} is "
      f"not smooth: energies trained end to end through inference need a "
      f"twice-differentiable non-linearity (E2E-SPEN §5 uses softplus); use "
      f"activation=energynets.nets.softplus"
    )


def init_checked(energy: Energy, rng, x, y, trainable=None):
  """`energy.init(rng, x, y)`, checked: y's shape and domain before, the energy's output
  shape (one `eval_shape`) and `trainable` against the real parameter tree after."""
  check_y(energy, x, y)
  params = energy.init(rng, x, y)
  check(energy, x, y, params)
  check_trainable(trainable, params, energy.name)
  return params
