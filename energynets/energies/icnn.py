"""An input-convex multi-label energy (ICNN; Amos, Xu & Kolter 2017), convex in ȳ.

E2E-SPEN (Belanger, Yang & McCallum 2017, §2.3) points to ICNNs for energies whose
gradient-based minimization finds the global optimum: "one simply uses convex,
non-decreasing non-linearities and only non-negative parameters in any part of the
computation graph downstream from y". This module is that construction for the
multi-label SPEN, a drop-in alternative to `SPENEnergy` (same local term, same
`local_net` params, same `encode` / `local_logits` / `energy_from_encoding` hooks):

    E(x, ȳ) = −Σ_i ȳ_i ℓ_i(x)                              local term (linear in ȳ)
              + w₊ᵀ z_n                                     convex global term
    z_1     = softplus(A_1 ȳ + U_1 u + b_1)
    z_{j+1} = softplus(W₊_j z_j + A_{j+1} ȳ + U_{j+1} u + b_{j+1}),   j = 1 … n−1

with u = F(x) the features of `local_net` (as in `SPENEnergy`), W₊_j ≥ 0 and w₊ ≥ 0
elementwise, and A, U, b unconstrained. Convexity in ȳ for every x, by induction: z_1 is
a convex non-decreasing function of an affine map of ȳ; a non-negative combination of
convex functions plus an affine function is convex, and a convex non-decreasing
function of a convex function is convex; x enters only through terms that are constant
in ȳ. This is a partially input-convex network (PICNN, Amos et al. §3.2) in its
additive form: we leave out PICNN's multiplicative x-gates on z and ȳ, which keep
convexity but are not needed for the project's experiments. The energy is not convex
in the parameters, nor in x.

Non-negativity is a parameterization, not a projection: the stored `raw_kernel` is
mapped through softplus, so any optimizer update keeps the energy convex and no
clipping step is needed after it. Its initialization puts softplus(raw) ≈ 1/fan_in
(times a log-normal-ish spread), so z_{j+1} starts near the mean of z_j instead of
growing with depth as all-positive weights of ordinary scale would.

`enforce_convexity=False` keeps the architecture and parameter names but uses the raw
kernels directly (signed, LeCun-normal initialized): an ordinary SoftPlus MLP global
term, the negative control of the convexity tests. SoftPlus keeps E twice
differentiable in ȳ, as unrolled GBI training needs.
"""

from collections.abc import Sequence
import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from energynets.energies.mlc import Encoding
from energynets.energies.mlc import LocalNetEnergy
from energynets.nets import MLP
from energynets.nets.mlp import Activation
from energynets.nets.mlp import DropoutRates
from energynets.nets.mlp import checked_activation
from energynets.nets.mlp import softplus


def _nonneg_init(spread: float = 0.5):
  """`raw` such that softplus(raw) ≈ exp(spread · N(0, 1)) / fan_in."""

  def init(key, shape, dtype=jnp.float32):
    fan_in = shape[0]
    center = math.log(math.expm1(1.0 / fan_in))  # softplus⁻¹(1 / fan_in)
    return center + spread * jax.random.normal(key, shape, dtype)

  return init


class NonNegDense(nn.Module):
  """`z [..., n] -> [..., features]`: `z @ softplus(raw_kernel)`, no bias.

  With `enforce=False` the kernel is `raw_kernel` itself (signed).
  """

  features: int
  enforce: bool = True

  @nn.compact
  def __call__(self, z: jax.Array) -> jax.Array:
    shape = (z.shape[-1], self.features)
    if self.enforce:
      kernel = softplus(self.param("raw_kernel", _nonneg_init(), shape))
    else:
      kernel = self.param("raw_kernel", nn.initializers.lecun_normal(), shape)
    return z @ kernel.astype(z.dtype)


class InputConvexNet(nn.Module):
  """`(ȳ [B, L], u [B, f] | None) -> [B]`: `w₊ᵀ z_n`, convex in ȳ (module docstring).

  Parameters per layer j: `y_j` (A_j, b_j), `x_j` (U_j; absent without u), `z_j`
  (W₊_j, for j ≥ 1); then `output` (w₊).
  """

  hidden: Sequence[int]
  enforce_convexity: bool = True

  @nn.compact
  def __call__(self, y: jax.Array, features: jax.Array | None = None) -> jax.Array:
    z = None
    for j, width in enumerate(self.hidden):
      pre = nn.Dense(width, name=f"y_{j}")(y)
      if features is not None:
        pre = pre + nn.Dense(width, use_bias=False, name=f"x_{j}")(features.astype(y.dtype))
      if z is not None:
        pre = pre + NonNegDense(width, self.enforce_convexity, name=f"z_{j}")(z)
      z = softplus(pre)
    assert z is not None, "hidden has at least one layer"
    return NonNegDense(1, self.enforce_convexity, name="output")(z)[..., 0]


class ICNNEnergy(LocalNetEnergy):
  """An input-convex multi-label energy `E(x, ȳ) -> [B]` (module docstring).

  Parameter groups: `local_net` (exactly `SPENEnergy`'s: an `MLP(feature_hidden,
  num_labels)`, so pretrained local-BCE params drop in) and `global` (the
  `InputConvexNet`).

  Attributes:
    num_labels: L.
    feature_hidden, feature_activation, dropout, input_dropout: the feature network
      F and local head, as in `SPENEnergy` (x-side only, so any activation keeps
      convexity in ȳ).
    hidden: widths of the convex ȳ-path (at least one layer).
    conditional: feed u = F(x) into every layer of the global term (PICNN); False
      gives an x-independent global term, like `SPENEnergy`'s label energy.
    enforce_convexity: the non-negativity parameterization (True); False is the
      unconstrained negative control.
    dtype: the compute dtype of F and the local head (`SPENEnergy.dtype`); the convex
      ȳ-path stays float32.
  """

  num_labels: int
  feature_hidden: Sequence[int] = (150, 150)
  feature_activation: Activation = nn.relu
  hidden: Sequence[int] = (16, 16)
  conditional: bool = True
  enforce_convexity: bool = True
  dropout: DropoutRates = 0.0
  input_dropout: float = 0.0
  dtype: Any | None = None

  def setup(self):
    if self.num_labels < 1 or not self.hidden or min(self.hidden) < 1:
      raise ValueError(
        f"bad ICNNEnergy sizes: num_labels={self.num_labels}, hidden={tuple(self.hidden)}"
      )
    self.local_net = MLP(
      hidden=tuple(self.feature_hidden),
      num_outputs=self.num_labels,
      activation=checked_activation(self, "feature_activation"),
      dropout=self.dropout,
      input_dropout=self.input_dropout,
      dtype=self.dtype,
    )
    self.global_energy = InputConvexNet(tuple(self.hidden), self.enforce_convexity, name="global")

  def energy_from_encoding(self, encoding: Encoding, y: jax.Array) -> jax.Array:
    """`[B]`: the energy of `y [B, L]` given a precomputed `encode(x)`."""
    if y.ndim != 2 or y.shape[-1] != self.num_labels:
      raise ValueError(f"y must be [B, {self.num_labels}]; got {y.shape}")
    features = encoding.features if self.conditional else None
    local = -jnp.sum(y * encoding.logits.astype(y.dtype), axis=-1)
    return local + self.global_energy(y, features)
