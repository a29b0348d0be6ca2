"""Energies from plain functions and Flax modules, and their GBI start points.

    energy = en.energy_from_function(my_energy, domain=en.Box(), y_shape=(16,),
                                     init=my_init)           # energy(params, x, y) -> [B]
    energy = en.energy_from_module(MyModule(), domain=en.Box(), y_shape=(16,))
    energy = en.as_energy(en.SPENEnergy(...))                # the library's own energies

`as_energy` turns a library energy module into its `Energy` through the module's own
`as_energy()` method (built by `encoded_module`), and passes an `Energy` through.
"""

from collections.abc import Callable
from collections.abc import Mapping
import inspect
from typing import Any

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp

from energynets import domains
from energynets.energies.energy import RANDOM
from energynets.energies.energy import RANDOM_START_SEED
from energynets.energies.energy import Energy
from energynets.energies.energy import StartFn

__all__ = [
  "as_energy",
  "default_starts",
  "encoded_module",
  "energy_from_function",
  "energy_from_module",
]


def _uniform(domain, y_shape):
  def start(encoding, x, rng=None):
    del encoding, rng
    return domain.uniform_init((jnp.shape(x)[0],) + tuple(y_shape(x)), jnp.float32)

  return start


def _random(y_shape):
  def start(encoding, x, rng=None):
    del encoding
    key = jax.random.PRNGKey(RANDOM_START_SEED) if rng is None else rng
    return jax.random.uniform(key, (jnp.shape(x)[0],) + tuple(y_shape(x)), jnp.float32)

  return start


def _zeros(y_shape):
  def start(encoding, x, rng=None):
    del encoding, rng
    return jnp.zeros((jnp.shape(x)[0],) + tuple(y_shape(x)), jnp.float32)

  return start


def _input(encoding, x, rng=None):
  del encoding, rng
  return jnp.asarray(x)


def default_starts(domain, y_shape, y_like_x: bool = False) -> dict[str, StartFn]:
  """`'uniform'` and `'zeros'` (plus `'input'`, y0 = x, when y is shaped like x, and
  `'random'`, U[0, 1], on the Box)."""
  starts = {"uniform": _uniform(domain, y_shape), "zeros": _zeros(y_shape)}
  if y_like_x:
    starts = {"input": _input, **starts}
  if isinstance(domain, domains.Box):
    starts[RANDOM] = _random(y_shape)
  return starts


def _as_shape_fn(y_shape) -> Callable[[jax.Array], tuple]:
  if y_shape is None:
    return lambda x: tuple(jnp.shape(x)[1:])
  if callable(y_shape):
    return y_shape
  fixed = tuple(int(d) for d in y_shape)
  return lambda x: fixed


def energy_from_function(
  energy_fn: Callable[[Any, Any, jax.Array], jax.Array],
  *,
  domain: Any,
  y_shape: Any,
  init: Any,
  starts: Mapping[str, StartFn] | None = None,
  name: str | None = None,
) -> Energy:
  """An `Energy` from a plain function `energy_fn(params, x, y) -> [B]`.

  Args:
    energy_fn: the energy; `encode` is the identity, so it sees x itself.
    domain: y's relaxation (`en.Box()`, `en.Simplex()`, `en.Real()`).
    y_shape: one example's y shape (a tuple), or `x -> tuple`; None: shaped like x.
    init: `(rng, x, y) -> params`, or a parameter pytree used as is.
    starts: extra or replacing start points, name -> `(encoding, x, rng) -> y0`.
    name: how errors name it (default: the function's name).

  Returns:
    The `Energy`, with starts `'uniform'`, `'zeros'` (`'input'` when y is shaped like
    x, `'random'` on the Box) and top-level parameter groups read from its params.
  """
  shape_fn = _as_shape_fn(y_shape)
  init_fn = init if callable(init) else (lambda rng, x, y: init)
  return Energy(
    domain=domain,
    y_shape=shape_fn,
    init=init_fn,
    encode=lambda params, x, train=False, rng=None: x,
    energy=energy_fn,
    starts={**default_starts(domain, shape_fn, y_like_x=y_shape is None), **(starts or {})},
    name=name or str(getattr(energy_fn, "__name__", "energy")),
  )


def energy_from_module(
  module: nn.Module,
  *,
  domain: Any,
  y_shape: Any = None,
  starts: Mapping[str, StartFn] | None = None,
) -> Energy:
  """An `Energy` from any Flax module called as `module(x, y) -> [B]`.

  A module that accepts `train` gets it (and a `'dropout'` rng in training).

  Args:
    module: the Flax module.
    domain: y's relaxation (`Box()`, `Simplex()`, `Real()`): required, since it decides
      how GBI steps, projects and decodes y, and no default fits every energy.
    y_shape: one example's y shape (a tuple), or `x -> tuple`; None: shaped like x.
    starts: extra or replacing start points.

  Returns:
    The `Energy`; `encode` is the identity and the module runs on (x, y) at every
    evaluation.
  """
  shape_fn = _as_shape_fn(y_shape)
  takes_train = "train" in _call_parameters(module)

  def init(rng, x, y):
    return flax.core.unfreeze(module.init({"params": rng}, x, y)["params"])

  def encode(params, x, train=False, rng=None):
    del params
    return (x, train, rng) if takes_train else x

  def energy(params, encoding, y):
    if takes_train:
      x, train, rng = encoding
      rngs = {"dropout": rng} if (train and rng is not None) else None
      return module.apply({"params": params}, x, y, train=train, rngs=rngs)
    return module.apply({"params": params}, encoding, y)

  return Energy(
    domain=domain,
    y_shape=shape_fn,
    init=init,
    encode=encode,
    energy=energy,
    starts={**default_starts(domain, shape_fn, y_like_x=y_shape is None), **(starts or {})},
    name=type(module).__name__,
  )


def _call_parameters(module) -> tuple[str, ...]:
  try:
    return tuple(inspect.signature(type(module).__call__).parameters)
  except (TypeError, ValueError):
    return ()


def encoded_module(
  module: nn.Module,
  *,
  domain,
  y_shape,
  groups=None,
  local_start: Callable[[jax.Array], jax.Array] | None = None,
  carry: Callable | None = None,
  candidate_energy: bool = False,
  init: Callable | None = None,
) -> Energy:
  """An `Energy` from a module with methods `encode(x, train)` and
  `energy_from_encoding(encoding, y)` (and `local_logits(x, train)`): the library's
  SPEN, ICNN, sequence and segmentation energies.

  Args:
    module: the Flax module.
    domain: y's relaxation.
    y_shape: `x -> tuple`, one example's y shape.
    groups: the declared top-level parameter names.
    local_start: `logits -> y0` for the `'local'` start from `encoding.logits`.
    carry: `(prev_state, rng, x, y) -> params`; None: a same-shaped energy state.
    candidate_energy: whether the module has `candidate_energies(encoding, cands)`.
    init: `(rng, x, y) -> params`; None: the module's init on zeros shaped like y.

  Returns:
    The `Energy`.
  """

  def zeros_init(rng, x, y=None):
    y = jnp.zeros((jnp.shape(x)[0],) + tuple(y_shape(x)), jnp.float32)
    return flax.core.unfreeze(module.init({"params": rng}, x, y)["params"])

  def encode(params, x, train=False, rng=None):
    rngs = {"dropout": rng} if rng is not None else None
    return module.apply({"params": params}, x, train=train, rngs=rngs, method="encode")

  def energy(params, encoding, y):
    return module.apply({"params": params}, encoding, y, method="energy_from_encoding")

  def local_logits(params, x, train=False, rng=None):
    rngs = {"dropout": rng} if rng is not None else None
    return module.apply({"params": params}, x, train=train, rngs=rngs, method="local_logits")

  starts = {
    "uniform": lambda enc, x, rng=None: domain.uniform_init(enc.logits.shape, enc.logits.dtype)
  }
  if local_start is not None:
    starts["local"] = lambda enc, x, rng=None: local_start(enc.logits)
  if isinstance(domain, domains.Box):

    def random_start(enc, x, rng=None):
      key = jax.random.PRNGKey(RANDOM_START_SEED) if rng is None else rng
      return jax.random.uniform(key, enc.logits.shape, enc.logits.dtype)

    starts[RANDOM] = random_start

  candidates = None
  if candidate_energy:

    def candidates(params, encoding, cands):
      return module.apply({"params": params}, encoding, cands, method="candidate_energies")

  return Energy(
    domain=domain,
    y_shape=y_shape,
    init=init or zeros_init,
    encode=encode,
    energy=energy,
    starts=starts,
    carry=carry,
    groups=groups,
    local_logits=local_logits,
    candidate_energy=candidates,
    name=type(module).__name__,
  )


def as_energy(energy: Any) -> Energy:
  """An `Energy` as is; a module with an `as_energy()` method (the library's energies)
  through it. Anything else is a TypeError saying how to wrap it."""
  if isinstance(energy, Energy):
    return energy
  to_energy = getattr(energy, "as_energy", None)
  if callable(to_energy):
    result = to_energy()
    if isinstance(result, Energy):
      return result
  if isinstance(energy, nn.Module):
    raise TypeError(
      f"{type(energy).__name__} is a Flax module without a domain: wrap it with "
      f"en.energy_from_module(module, domain=en.Box() | en.Simplex() | en.Real(), "
      f"y_shape=...) so the objectives know y's domain and shape"
    )
  raise TypeError(
    f"expected an en.Energy (en.energy_from_function / "
    f"en.energy_from_module) or a library energy module; got "
    f"{type(energy).__name__}"
  )
