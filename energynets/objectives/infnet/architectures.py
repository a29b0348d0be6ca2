"""InfNet's architectures of (F_Φ, A_Ψ) (§3.1, Fig. 1) as values: each builds the
cost-augmented network F_Φ beside the test-time network A_Ψ (`net`) and runs both.

The library's are `InfNetSeparated()`, `InfNetShared()` and `InfNetStacked()`; any value
with the three methods of `InfNetArchitecture` plugs into `InfNetOptions.architecture`
the same way.
"""

from collections.abc import Callable
import dataclasses
from typing import Any
from typing import Protocol
from typing import cast

import flax.linen as nn
import jax
import jax.numpy as jnp

Params = Any  # a network's parameter pytree
Link = Callable[[jax.Array], jax.Array]  # logits -> outputs (σ, or per-token softmax)


class CostHead(nn.Module):
  """`InfNetShared`'s F_Φ: `features [B, H] -> logits [B, L]` on A_Ψ's feature network."""

  num_labels: int

  @nn.compact
  def __call__(self, features: jax.Array) -> jax.Array:
    return nn.Dense(self.num_labels, name="head")(features)


class StackedCostNet(nn.Module):
  """`InfNetStacked`'s F_Φ: `(A_Ψ(x) [B, L] probabilities, y [B, L]) -> logits [B, L]`.

  `W[A_Ψ(x); y] + b`; the caller stops the gradient at A_Ψ(x).
  """

  num_labels: int

  @nn.compact
  def __call__(self, test_probs: jax.Array, y: jax.Array) -> jax.Array:
    inputs = jnp.concatenate([test_probs, y.astype(test_probs.dtype)], axis=-1)
    return nn.Dense(self.num_labels, name="head")(inputs)


def apply_net(
  net: nn.Module, params: Params, x: jax.Array, train: bool, rng: jax.Array | None, **kwargs: Any
) -> Any:
  """`net(x)` with `params`, in training mode (dropout from `rng`) or not."""
  rngs = None
  if train:
    assert rng is not None, "training mode needs a dropout rng"
    rngs = {"dropout": rng}
  return net.apply({"params": params}, x, train=train, rngs=rngs, **kwargs)


class InfNetArchitecture(Protocol):
  """How F_Φ is built beside A_Ψ: a value with three methods.

  `net` is the inference networks' architecture (`inference_network`'s `net`), A_Ψ's
  parameters are `net_params["test_net"]` and F_Φ's `net_params["cost_net"]`.
  """

  def init_cost_net(
    self, net: nn.Module, rng: jax.Array, x: jax.Array, y: jax.Array, test_params: Params
  ) -> Params:
    """F_Φ's fresh parameters, given A_Ψ's and one batch `(x, y)` for the shapes."""

  def logits(
    self,
    net: nn.Module,
    net_params: dict[str, Params],
    x: jax.Array,
    y: jax.Array,
    link: Link,
    train: bool,
    test_rng: jax.Array | None,
    cost_rng: jax.Array | None,
  ) -> tuple[jax.Array, jax.Array]:
    """`(A_Ψ's logits, F_Φ's logits)`; the dropout rngs are None unless `train`."""

  def cost_net_from_test_net(self, test_params: Params) -> tuple[str, Params] | None:
    """What a pretrained A_Ψ seeds F_Φ with when a stage carries no F_Φ: `(what it is,
    for the log, parameters)`, or None to start F_Φ fresh."""


@dataclasses.dataclass(frozen=True)
class InfNetSeparated:
  """F_Φ and A_Ψ are two independent copies of `net`; a pretrained A_Ψ seeds both."""

  def init_cost_net(
    self, net: nn.Module, rng: jax.Array, x: jax.Array, y: jax.Array, test_params: Params
  ) -> Params:
    """A fresh copy of `net`."""
    return net.init({"params": rng}, x)["params"]

  def logits(
    self,
    net: nn.Module,
    net_params: dict[str, Params],
    x: jax.Array,
    y: jax.Array,
    link: Link,
    train: bool,
    test_rng: jax.Array | None,
    cost_rng: jax.Array | None,
  ) -> tuple[jax.Array, jax.Array]:
    """Each net on x, with its own dropout mask."""
    test_logits = apply_net(net, net_params["test_net"], x, train, test_rng)
    cost_logits = apply_net(net, net_params["cost_net"], x, train, cost_rng)
    return test_logits, cost_logits

  def cost_net_from_test_net(self, test_params: Params) -> tuple[str, Params] | None:
    """A copy of A_Ψ."""
    return "(copy of test_net)", test_params


@dataclasses.dataclass(frozen=True)
class InfNetShared:
  """One feature network (`net`'s hidden layers, read with `return_features=True`) and
  two heads: A_Ψ's is the net's own `head`, F_Φ's a second `Dense(L)` (`CostHead`).

  The shared features are trained by both nets' terms and belong to A_Ψ's parameters
  (they are needed at test time); `net` needs `return_features` and a final layer named
  `head`. A pretrained A_Ψ's head seeds F_Φ's.
  """

  def init_cost_net(
    self, net: nn.Module, rng: jax.Array, x: jax.Array, y: jax.Array, test_params: Params
  ) -> Params:
    """A fresh head on A_Ψ's features."""
    _, features = net.apply({"params": test_params}, x, return_features=True)
    return CostHead(y.shape[-1]).init({"params": rng}, features)["params"]

  def logits(
    self,
    net: nn.Module,
    net_params: dict[str, Params],
    x: jax.Array,
    y: jax.Array,
    link: Link,
    train: bool,
    test_rng: jax.Array | None,
    cost_rng: jax.Array | None,
  ) -> tuple[jax.Array, jax.Array]:
    """One pass of the feature network feeds both heads (one dropout mask)."""
    test_logits, features = apply_net(
      net, net_params["test_net"], x, train, test_rng, return_features=True
    )
    cost_logits = CostHead(test_logits.shape[-1]).apply(
      {"params": net_params["cost_net"]}, features
    )
    # Without `mutable`, `apply` returns the output alone, not `(output, state)`.
    return test_logits, cast(jax.Array, cost_logits)

  def cost_net_from_test_net(self, test_params: Params) -> tuple[str, Params] | None:
    """A copy of A_Ψ's head, when it has one called `head`."""
    if "head" not in test_params:
      return None
    return "head (copy of test_net's)", {"head": test_params["head"]}


@dataclasses.dataclass(frozen=True)
class InfNetStacked:
  """F_Φ(x, y) = link(W[A_Ψ(x); y] + b), W [2L → L] (`StackedCostNet`): the multi-label
  form of the paper's per-position `softmax(W_q[A_Ψ(x)_t; y_t] + b_q)`.

  A `stop_gradient` at A_Ψ(x) keeps F_Φ's terms from moving Ψ ("we block the gradient at
  A_Ψ when updating Φ"). F_Φ always starts fresh: W acts on [A_Ψ(x); y], which no local
  classifier has.
  """

  def init_cost_net(
    self, net: nn.Module, rng: jax.Array, x: jax.Array, y: jax.Array, test_params: Params
  ) -> Params:
    """A fresh W and b."""
    probs = jnp.zeros(y.shape, x.dtype)
    return StackedCostNet(y.shape[-1]).init({"params": rng}, probs, y)["params"]

  def logits(
    self,
    net: nn.Module,
    net_params: dict[str, Params],
    x: jax.Array,
    y: jax.Array,
    link: Link,
    train: bool,
    test_rng: jax.Array | None,
    cost_rng: jax.Array | None,
  ) -> tuple[jax.Array, jax.Array]:
    """A_Ψ on x; F_Φ on A_Ψ's outputs, without a gradient path to Ψ, and y."""
    test_logits = apply_net(net, net_params["test_net"], x, train, test_rng)
    test_probs = jax.lax.stop_gradient(link(test_logits))
    cost_logits = StackedCostNet(test_logits.shape[-1]).apply(
      {"params": net_params["cost_net"]}, test_probs, y
    )
    # Without `mutable`, `apply` returns the output alone, not `(output, state)`.
    return test_logits, cast(jax.Array, cost_logits)

  def cost_net_from_test_net(self, test_params: Params) -> tuple[str, Params] | None:
    """None: fresh."""
    return None


def check_architecture(architecture: Any) -> None:
  """Refuses an architecture that is not a value with `InfNetArchitecture`'s methods
  (e.g. a name).

  Raises:
    TypeError: one line naming what was given.
  """
  methods = ("init_cost_net", "logits", "cost_net_from_test_net")
  if not all(callable(getattr(architecture, m, None)) for m in methods):
    raise TypeError(
      f"an InfNet architecture is a value with {', '.join(methods)} such as "
      f"InfNetSeparated(), InfNetShared() or InfNetStacked(), not "
      f"{architecture!r}"
    )
