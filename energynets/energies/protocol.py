"""The energy protocol every objective accepts: `Energy`, its adapters and its checks.

An `Energy` is a small value of pure functions (optax style): what the domain of y is and
its shape, how parameters are made, what of x is computed once (`encode`), the energy of
a batch of outputs given that encoding, named GBI start points, and how a previous
stage's parameters continue. Objectives call only these fields, so any energy that
provides them trains with any objective:

    energy = en.energy_from_function(my_energy, domain=en.Box(), y_shape=(16,),
                                     init=my_init)           # energy(params, x, y) -> [B]
    energy = en.energy_from_module(MyModule(), domain=en.Box(), y_shape=(16,))
    energy = en.as_energy(en.SPENEnergy(...))                # the library's own energies

`as_energy` turns a library energy module into its `Energy` through the module's own
`as_energy()` method, and passes an `Energy` through; `check` runs one `jax.eval_shape`
of the energy on a batch and raises a one-line `EnergyShapeError` naming the mismatch.
"""

from typing import Any, Callable, Mapping, NamedTuple, Optional, Sequence

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp

from energynets import domains

RANDOM = "random"
# A 'random' start at test time comes from this fixed key, so prediction is
# deterministic; training-time samples (DVN) pass their own keys.
RANDOM_START_SEED = 0
NON_SMOOTH = ("relu", "hardtanh")
BOX = domains.Box()

StartFn = Callable[[Any, jax.Array, Optional[jax.Array]], jax.Array]


class EnergyShapeError(ValueError):
  """An energy, its domain and a batch that do not fit together."""


def _shape(a) -> str:
  return "[" + ", ".join(str(d) for d in a) + "]"


class Energy(NamedTuple):
  """An energy `E(x, y) -> [B]` as the objectives see it.

  Attributes:
    domain: the relaxation y lives in (`Box`, `Simplex` per position, `Real`).
    y_shape: `x -> tuple`, the shape of one example's y given the batch `x` (e.g.
      `(L,)` labels, `(T, K)` tags, `(H, W)` masks).
    init: `(rng, x, y) -> params`, fresh parameters from example arrays.
    encode: `(params, x, train=False, rng=None) -> encoding`, what the energy
      conditions on, computed once per x and reused by every energy evaluation
      (differentiable; `rng` is the dropout key in training, None at test time).
    energy: `(params, encoding, y) -> [B]`.
    starts: name -> `(encoding, x, rng) -> y0`, the GBI start points; `rng` is None
      at test time.
    carry: `(prev_state, rng, x, y) -> params`, the parameters that continue a previous
      stage's state (staged training); None: a state `{"energy": ParamGroup}` of the
      same parameter shapes.
    groups: the top-level parameter names `trainable` may pick, read from the real
      parameter tree when None.
    local_logits: `(params, x, train=False, rng=None) -> logits` of a local classifier
      inside the energy (what `spen_pretrain` trains), None if it has none.
    candidate_energy: `(params, encoding, candidates [C, L]) -> [B, C]`, for exact
      inference by enumeration; None: `exhaustive.pairwise_table(energy)`.
    name: how errors name this energy.
  """
  domain: Any
  y_shape: Callable[[jax.Array], tuple]
  init: Callable[..., Any]
  encode: Callable[..., Any]
  energy: Callable[..., jax.Array]
  starts: Mapping[str, StartFn]
  carry: Optional[Callable[..., Any]] = None
  groups: Optional[tuple[str, ...]] = None
  local_logits: Optional[Callable[..., jax.Array]] = None
  candidate_energy: Optional[Callable[..., jax.Array]] = None
  name: str = "energy"

  @property
  def inits(self) -> tuple[str, ...]:
    """The deterministic start names (every start but `'random'`)."""
    return tuple(k for k in self.starts if k != RANDOM)

  def start(self, encoding, x: jax.Array, init: str,
            rng: Optional[jax.Array] = None) -> jax.Array:
    """GBI's `y0` from the start named `init`."""
    try:
      fn = self.starts[init]
    except KeyError:
      raise ValueError(f"unknown init {init!r} for {self.name}; expected one of "
                       f"{tuple(self.starts)}") from None
    return fn(encoding, x, rng)

  def init_params(self, rng, x, y):
    """`init` (the name `EnergyModel` used)."""
    return self.init(rng, x, y)

  def continue_from(self, prev_state, rng, x, y):
    """The parameters that continue `prev_state` (`carry`, or the same-shaped energy)."""
    if self.carry is not None:
      return self.carry(prev_state, rng, x, y)
    if "energy" not in prev_state:
      raise ValueError(f"cannot continue {self.name} from a state with keys "
                       f"{sorted(prev_state)}; expected 'energy'")
    reference = jax.eval_shape(lambda: self.init(rng, x, y))
    return carried(prev_state["energy"].params, reference,
                   f"the previous state into this {self.name}")


# ---------------------------------------------------------------------------------------
# Checks.


def check_y(energy: Energy, x: Any, y: Any) -> None:
  """An `EnergyShapeError` unless y is `[B, *energy.y_shape(x)]` and fits the domain."""
  batch = jnp.shape(jax.tree.leaves(x)[0])[0]
  y_shape = tuple(jnp.shape(y))
  expected = (batch,) + tuple(energy.y_shape(x))
  if y_shape != expected:
    raise EnergyShapeError(
        f"y is {_shape(y_shape)} but {energy.name} expects y {_shape(expected)} for this x; "
        f"give the right y_shape (en.energy_from_module(module, domain=..., y_shape=...))")
  if isinstance(energy.domain, domains.Simplex) and len(y_shape) < 3:
    raise EnergyShapeError(
        f"y is {_shape(y_shape)} but the domain is per-token Simplex, which needs y "
        f"[B, T, K] (a distribution over K classes at each of T positions)")


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
        f"{energy.name} failed on x {_shape(jnp.shape(jax.tree.leaves(x)[0]))} and y "
        f"{_shape(y_shape)}: {type(error).__name__}: {message}") from error
  if not hasattr(out, "shape") or tuple(out.shape) != (batch,):
    got = _shape(out.shape) if hasattr(out, "shape") else type(out).__name__
    raise EnergyShapeError(f"{energy.name} returned {got}; expected [B] = [{batch}]")


def check_trainable(trainable, params, what: str = "energy") -> None:
  """A ValueError unless every name in `trainable` is a top-level group of `params` that
  holds parameters (training only an empty group would train nothing, silently)."""
  if trainable is None:
    return
  names = tuple(params)
  unknown = sorted(set(trainable) - set(names))
  if unknown:
    raise ValueError(f"trainable names {unknown} are not parameter groups of the {what}; "
                     f"its groups are {names}")
  empty = sorted(name for name in set(trainable) if not jax.tree_util.tree_leaves(params[name]))
  if empty:
    raise ValueError(f"trainable groups {empty} of the {what} hold no parameters, so "
                     f"nothing would train; its groups with parameters are "
                     f"{tuple(n for n in names if jax.tree_util.tree_leaves(params[n]))}")


def trainable_groups(energy: Energy, trainable) -> Optional[frozenset]:
  """`trainable` (group names, or None for all) checked against the declared groups.

  Energies that declare no groups are checked against their real parameter tree at
  `init` (`check_trainable`).
  """
  if trainable is None:
    return None
  if isinstance(trainable, str):
    raise TypeError(f"trainable must be a sequence of group names, not the string "
                    f"{trainable!r}; write ({trainable!r},)")
  trainable = tuple(trainable)
  if not trainable:
    raise ValueError("trainable must name at least one parameter group")
  if energy.groups is not None and set(trainable) - set(energy.groups):
    raise ValueError(f"trainable must name some of {energy.groups}; got {trainable}")
  return frozenset(trainable)


def check_smooth(module: Any) -> None:
  """ValueError if `module.activation` names a non-smooth non-linearity (ReLU, HardTanh).

  Training through GBI differentiates `∇_y E`: with a piecewise-linear activation the
  Hessian is zero almost everywhere, so the unroll passes no second-order signal.
  """
  activation = getattr(module, "activation", None)
  if isinstance(activation, str) and activation in NON_SMOOTH:
    raise ValueError(
        f"{type(module).__name__}.activation={activation!r} is not smooth: energies trained "
        f"end to end through inference need a twice-differentiable non-linearity "
        f"(E2E-SPEN §5 uses softplus); use activation='softplus'")


def same_shapes(params: Any, reference: Any) -> bool:
  """Whether two parameter pytrees have the same structure and leaf shapes."""
  shapes = lambda t: jax.tree.map(lambda a: tuple(jnp.shape(a)), t)
  return (jax.tree.structure(params) == jax.tree.structure(reference)
          and shapes(params) == shapes(reference))


def carried(params: Any, reference: Any, what: str) -> Any:
  """`params` (unfrozen) to replace `reference`; a ValueError naming `what` if they differ
  in structure or shapes."""
  params = flax.core.unfreeze(params)
  if not same_shapes(params, reference):
    shapes = lambda t: jax.tree.map(lambda a: tuple(jnp.shape(a)), t)
    raise ValueError(f"cannot carry {what}: expected parameters {shapes(reference)}, got "
                     f"{shapes(params)}")
  return params


# ---------------------------------------------------------------------------------------
# Starts shared by the adapters.


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


# ---------------------------------------------------------------------------------------
# Adapters.


def energy_from_function(energy_fn: Callable[[Any, Any, jax.Array], jax.Array], *,
                         domain: Any, y_shape: Any, init: Any,
                         starts: Optional[Mapping[str, StartFn]] = None,
                         name: Optional[str] = None) -> Energy:
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
      starts={**default_starts(domain, shape_fn, y_like_x=y_shape is None),
              **(starts or {})},
      name=name or getattr(energy_fn, "__name__", "energy"))


def energy_from_module(module: nn.Module, *, domain: Any, y_shape: Any = None,
                       starts: Optional[Mapping[str, StartFn]] = None) -> Energy:
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
      domain=domain, y_shape=shape_fn, init=init, encode=encode, energy=energy,
      starts={**default_starts(domain, shape_fn, y_like_x=y_shape is None),
              **(starts or {})},
      name=type(module).__name__)


def _call_parameters(module) -> tuple[str, ...]:
  import inspect
  try:
    return tuple(inspect.signature(type(module).__call__).parameters)
  except (TypeError, ValueError):
    return ()


def encoded_module(module: nn.Module, *, domain, y_shape, groups=None,
                   local_start: Optional[Callable[[jax.Array], jax.Array]] = None,
                   carry: Optional[Callable] = None, candidate_energy: bool = False,
                   init: Optional[Callable] = None) -> Energy:
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
    return module.apply({"params": params}, x, train=train, rngs=rngs,
                        method="local_logits")

  starts = {"uniform": lambda enc, x, rng=None: domain.uniform_init(
      enc.logits.shape, enc.logits.dtype)}
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

  return Energy(domain=domain, y_shape=y_shape, init=init or zeros_init, encode=encode,
                energy=energy, starts=starts, carry=carry, groups=groups, local_logits=local_logits,
                candidate_energy=candidates, name=type(module).__name__)


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
        f"y_shape=...) so the objectives know y's domain and shape")
  raise TypeError(f"expected an en.Energy (en.energy_from_function / "
                  f"en.energy_from_module) or a library energy module; got "
                  f"{type(energy).__name__}")


def init_checked(energy: Energy, rng, x, y, trainable=None):
  """`energy.init(rng, x, y)`, checked: y's shape and domain before, the energy's output
  shape (one `eval_shape`) and `trainable` against the real parameter tree after."""
  check_y(energy, x, y)
  params = energy.init(rng, x, y)
  check(energy, x, y, params)
  check_trainable(trainable, params, energy.name)
  return params
