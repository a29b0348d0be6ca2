"""The `Energy` value every objective accepts, and how parameters carry into one.

An `Energy` is a small value of pure functions (optax style): what the domain of y is and
its shape, how parameters are made, what of x is computed once (`encode`), the energy of
a batch of outputs given that encoding, named GBI start points, and how a previous
stage's parameters continue (`carried`).
"""

from collections.abc import Callable
from collections.abc import Mapping
from typing import Any
from typing import NamedTuple

import flax
import jax
import jax.numpy as jnp

from energynets import domains

__all__ = [
  "BOX",
  "RANDOM",
  "RANDOM_START_SEED",
  "Energy",
  "EnergyShapeError",
  "StartFn",
  "carried",
  "same_shapes",
  "shape_text",
]

RANDOM = "random"
# A 'random' start at test time comes from this fixed key, so prediction is
# deterministic; training-time samples (DVN) pass their own keys.
RANDOM_START_SEED = 0
BOX = domains.Box()

StartFn = Callable[[Any, jax.Array, jax.Array | None], jax.Array]


class EnergyShapeError(ValueError):
  """An energy, its domain and a batch that do not fit together."""


def shape_text(a) -> str:
  """`[d0, d1, ...]`: a shape as the energy errors write it."""
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
  carry: Callable[..., Any] | None = None
  groups: tuple[str, ...] | None = None
  local_logits: Callable[..., jax.Array] | None = None
  candidate_energy: Callable[..., jax.Array] | None = None
  name: str = "energy"

  @property
  def inits(self) -> tuple[str, ...]:
    """The deterministic start names (every start but `'random'`)."""
    return tuple(k for k in self.starts if k != RANDOM)

  def start(self, encoding, x: jax.Array, init: str, rng: jax.Array | None = None) -> jax.Array:
    """GBI's `y0` from the start named `init`."""
    try:
      fn = self.starts[init]
    except KeyError:
      raise ValueError(
        f"unknown init {init!r} for {self.name}; expected one of {tuple(self.starts)}"
      ) from None
    return fn(encoding, x, rng)

  def init_params(self, rng, x, y):
    """`init` (the name `EnergyModel` used)."""
    return self.init(rng, x, y)

  def continue_from(self, prev_state, rng, x, y):
    """The parameters that continue `prev_state` (`carry`, or the same-shaped energy)."""
    if self.carry is not None:
      return self.carry(prev_state, rng, x, y)
    if "energy" not in prev_state:
      raise ValueError(
        f"cannot continue {self.name} from a state with keys "
        f"{sorted(prev_state)}; expected 'energy'"
      )
    reference = jax.eval_shape(lambda: self.init(rng, x, y))
    return carried(
      prev_state["energy"].params, reference, f"the previous state into this {self.name}"
    )


def same_shapes(params: Any, reference: Any) -> bool:
  """Whether two parameter pytrees have the same structure and leaf shapes."""
  shapes = lambda t: jax.tree.map(lambda a: tuple(jnp.shape(a)), t)
  # jaxlib ships no type stub for PyTreeDef, so mypy cannot see its __eq__.
  return (
    jax.tree.structure(params) == jax.tree.structure(reference)  # type: ignore[operator]
    and shapes(params) == shapes(reference)
  )


def carried(params: Any, reference: Any, what: str) -> Any:
  """`params` (unfrozen) to replace `reference`; a ValueError naming `what` if they differ
  in structure or shapes."""
  params = flax.core.unfreeze(params)
  if not same_shapes(params, reference):
    shapes = lambda t: jax.tree.map(lambda a: tuple(jnp.shape(a)), t)
    raise ValueError(
      f"cannot carry {what}: expected parameters {shapes(reference)}, got {shapes(params)}"
    )
  return params
