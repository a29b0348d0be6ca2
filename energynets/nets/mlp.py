"""Multi-layer perceptrons: the SPEN feature network and the local (BR / MLP) heads."""

from typing import Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "relu": nn.relu,
    "softplus": nn.softplus,
    "tanh": jnp.tanh,
    "sigmoid": nn.sigmoid,
    "gelu": nn.gelu,
    "hardtanh": lambda v: jnp.clip(v, -1.0, 1.0),
}


def activation_by_name(name: str) -> Callable[[jax.Array], jax.Array]:
  """The elementwise non-linearity `ACTIVATIONS[name]` (ValueError naming the choices)."""
  try:
    return ACTIVATIONS[name]
  except KeyError:
    raise ValueError(
        f"unknown activation {name!r}; expected one of {sorted(ACTIVATIONS)}") from None


class MLP(nn.Module):
  """`x [B, D] -> [B, num_outputs]`; with `hidden=()` it is a linear map (BR).

  Dropout is applied to the input of every dense layer after the first's input
  (i.e. to hidden activations) and, with `input_dropout`, to the input itself.

  With `return_features=True` the call returns `(outputs, features)`, where
  `features [B, hidden[-1]]` is exactly what the head sees (the last hidden layer
  after its dropout; the possibly dropped-out input when `hidden=()`). A SPEN energy
  needs both: the logits for its local term and the features for its conditional
  global term, from one pass and with the same parameter names as a plain MLP.
  """
  hidden: Sequence[int]
  num_outputs: int
  activation: str = "relu"
  dropout: float = 0.0
  input_dropout: float = 0.0

  @nn.compact
  def __call__(self, x: jax.Array, *, train: bool = False,
               return_features: bool = False) -> jax.Array | tuple[jax.Array, jax.Array]:
    act = activation_by_name(self.activation)
    if self.input_dropout:
      x = nn.Dropout(self.input_dropout, deterministic=not train)(x)
    for i, width in enumerate(self.hidden):
      x = act(nn.Dense(width, name=f"hidden_{i}")(x))
      if self.dropout:
        x = nn.Dropout(self.dropout, deterministic=not train)(x)
    outputs = nn.Dense(self.num_outputs, name="head")(x)
    return (outputs, x) if return_features else outputs
