"""Multi-layer perceptrons: the SPEN feature network and the local (BR / MLP) heads."""

from collections.abc import Callable
from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp


@jax.custom_jvp
def softplus(x: jax.Array) -> jax.Array:
  """`log(1 + exp(x))`, the value of `jax.nn.softplus`, with the derivative `sigmoid(x)`.

  The same function and derivatives (first and higher, since the rule is itself
  differentiable), but XLA compiles `sigmoid` far better than the derivative it derives
  from `jax.nn.softplus`'s `logaddexp`: a gradient-based inference loop over a softplus
  energy runs about twice as fast on CPU (`benchmarks/suite.py`).
  """
  return jax.nn.softplus(x)


@softplus.defjvp
def _softplus_jvp(primals, tangents):
  (x,), (dx,) = primals, tangents
  return softplus(x), jax.nn.sigmoid(x) * dx


def hardtanh(x: jax.Array) -> jax.Array:
  """`x` clipped to `[-1, 1]`: the piecewise-linear HardTanh of the SPEN papers."""
  return jnp.clip(x, -1.0, 1.0)


# An elementwise non-linearity (`jax.nn.relu`, `softplus`, ...): what the `activation`
# attributes of nets and energies take.
Activation = Callable[[jax.Array], jax.Array]


def checked_activation(module: Any, attribute: str = "activation") -> Activation:
  """`module.<attribute>`, the activation function a net or energy applies.

  Raises:
    TypeError: one line naming the module's attribute, where its value is not callable
      (e.g. a name such as 'relu' where the function `jax.nn.relu` belongs).
  """
  function = getattr(module, attribute)
  if not callable(function):
    raise TypeError(
      f"{type(module).__name__}.{attribute}={function!r} is not a function; pass the "
      f"activation itself (e.g. jax.nn.relu or energynets.nets.softplus), not its name"
    )
  return function


DropoutRates = float | Sequence[float]


def float32_outputs(outputs: jax.Array, dtype: Any | None) -> jax.Array:
  """A net's outputs computed in the compute dtype `dtype`, returned in float32.

  Args:
    outputs: the last layer's values.
    dtype: the net's compute dtype; None (the inputs' dtype) returns `outputs` as they are.

  Returns:
    `outputs` as float32 when `dtype` is given: the losses, energies and GBI starts
    built on a net's logits then reduce and iterate in float32 whatever it computed in.
  """
  return outputs if dtype is None else outputs.astype(jnp.float32)


def hidden_dropout_rates(dropout: DropoutRates, num_hidden: int) -> tuple[float, ...]:
  """One dropout rate per hidden layer: a float applies to every layer; a sequence gives
  each layer its own (AllenNLP's `FeedForward` form, e.g. SEAL's public `(0.5, 0.0)`)."""
  if isinstance(dropout, (int, float)):
    rates = (float(dropout),) * num_hidden
  else:
    rates = tuple(float(r) for r in dropout)
    if len(rates) != num_hidden:
      raise ValueError(
        f"dropout {tuple(dropout)} gives {len(rates)} rates for "
        f"{num_hidden} hidden layers; give one per layer or a single float"
      )
  bad = [r for r in rates if not 0.0 <= r < 1.0]
  if bad:
    raise ValueError(f"dropout rates must lie in [0, 1); got {bad}")
  return rates


class MLP(nn.Module):
  """`x [B, D] -> [B, num_outputs]`; with `hidden=()` it is a linear map (BR).

  Dropout is applied after every hidden layer (to its activations) at the rate
  `dropout`, a float for all of them or one rate per layer, and, with
  `input_dropout`, to the input itself.

  With `return_features=True` the call returns `(outputs, features)`, where
  `features [B, hidden[-1]]` is exactly what the head sees (the last hidden layer
  after its dropout; the possibly dropped-out input when `hidden=()`). A SPEN energy
  needs both: the logits for its local term and the features for its conditional
  global term, from one pass and with the same parameter names as a plain MLP.

  With `dtype` set (e.g. `jnp.bfloat16`) the layers compute in that dtype (Flax's
  `dtype`; the parameters stay float32, `param_dtype`), the features come back in it,
  and the outputs come back float32, since losses and energies sum them over labels.
  `dtype=None` computes in the dtype of the inputs and parameters.
  """

  hidden: Sequence[int]
  num_outputs: int
  activation: Activation = nn.relu
  dropout: DropoutRates = 0.0
  input_dropout: float = 0.0
  dtype: Any | None = None

  @nn.compact
  def __call__(
    self, x: jax.Array, *, train: bool = False, return_features: bool = False
  ) -> jax.Array | tuple[jax.Array, jax.Array]:
    act = checked_activation(self)
    if self.input_dropout:
      x = nn.Dropout(self.input_dropout, deterministic=not train)(x)
    rates = hidden_dropout_rates(self.dropout, len(self.hidden))
    for i, (width, rate) in enumerate(zip(self.hidden, rates)):
      x = act(nn.Dense(width, dtype=self.dtype, name=f"hidden_{i}")(x))
      if rate:
        x = nn.Dropout(rate, deterministic=not train)(x)
    outputs = float32_outputs(
      nn.Dense(self.num_outputs, dtype=self.dtype, name="head")(x), self.dtype
    )
    return (outputs, x) if return_features else outputs
