"""The SPEN energy for multi-label classification (Belanger & McCallum 2016, §3, A.2).

    E(x, ȳ) = −Σ_i ȳ_i · ℓ_i(x)                        local term, ℓ = b_iᵀF(x) + a_i
              + c2ᵀ g(C1 ȳ + c1)                         global (label) term, Eq. 5
              [+ d2ᵀ g(D1 [ȳ; F(x)] + d1)]               conditional term, Eq. 6 (optional)

for ȳ ∈ [0, 1]^L, one value per example and no batch statistics, so that every
example's energy (and GBI trajectory) is independent of its batch-mates.

Sign convention. The paper writes the local term as `+Σ ȳ_i b_iᵀF(x)` and predicts by
minimizing E; a sign on learned weights is only a reparametrization. We write it as
the *negative* of the local logits `ℓ` so that the feature network and local head are
literally a per-label logistic-regression MLP: trained alone with BCE (stage 1 of the
paper's staged training), a high logit means "label likely" and lowers the energy of
ȳ_i = 1, so the pretrained head is the right local energy with no sign flip. The
head's bias `a_i` (a label prior) is kept, as the MLP baseline has it.

Parameters, by top-level name (the groups that staged training clamps or trains):

- `local_net`: exactly `energynets.nets.MLP(feature_hidden, num_labels, ...)`, i.e.
  F(x) (its hidden layers) and the local head (`head`). The params of a `local_bce`
  state `{"net": ParamGroup}` built with the same MLP drop in unchanged.
  `feature_hidden=()` makes F(x) = x and the local term linear in x (Yeast, and the
  synthetic block-exclusivity task).
- `global`: `measurements` (C1, c1: affine — the paper calls the bias critical for
  modelling dissociativity between labels) and `weights` (c2; no bias, a constant
  shift changes neither argmin nor margins).
- `conditional` (only when `num_conditional > 0`): `measurements` (D1, d1) over
  `[ȳ; F(x)]` and `weights` (d2).

F(x) is computed once per input (`encode`) and reused by every GBI step
(`energy_from_encoding`), as the paper does ("we improve efficiency by precomputing
F(x)").
"""

from collections.abc import Sequence
from typing import Any
from typing import NamedTuple

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp

from energynets import domains
from energynets.energies import protocol
from energynets.nets import MLP
from energynets.nets.mlp import Activation
from energynets.nets.mlp import DropoutRates
from energynets.nets.mlp import checked_activation
from energynets.nets.mlp import softplus


class Encoding(NamedTuple):
  """What the energy needs from x, computed once per input.

  Attributes:
    features: `[B, f]`, F(x): the last hidden layer of `local_net` (after its dropout),
      or x itself when `feature_hidden=()`.
    logits: `[B, L]`, the local logits ℓ(x) = head(F(x)).
  """

  features: jax.Array
  logits: jax.Array


class _DenseParams(nn.Module):
  """The parameters of `nn.Dense(features, use_bias)`: same names, shapes, dtype and
  initializers (so the same values from the same key), returned instead of applied."""

  features: int
  use_bias: bool = True

  @nn.compact
  def __call__(self, in_features: int) -> tuple[jax.Array, jax.Array | None]:
    kernel = self.param(
      "kernel", nn.linear.default_kernel_init, (in_features, self.features), jnp.float32
    )
    bias = (
      self.param("bias", nn.initializers.zeros_init(), (self.features,), jnp.float32)
      if self.use_bias
      else None
    )
    return kernel, bias


class MeasurementEnergy(nn.Module):
  """`[..., D] -> [...]`: `wᵀ g(M v + m)` with M affine (bias m) and w without bias.

  The parameters are those of `nn.Dense(num_measurements, name="measurements")` and
  `nn.Dense(1, use_bias=False, name="weights")`. The measurements are computed
  transposed, `[num_measurements, ...]`, so that g and its derivative run along the
  batch: XLA:CPU vectorizes an elementwise op along the minor dimension, and with
  SPEN's 15 measurements minor, the softplus of this term took most of a GBI step
  (8x slower than transposed; benchmarks/suite.py's profile).
  """

  num_measurements: int
  activation: Activation = softplus

  @nn.compact
  def __call__(self, v: jax.Array) -> jax.Array:
    act = checked_activation(self)
    kernel, bias = _DenseParams(self.num_measurements, name="measurements")(v.shape[-1])
    weights, _ = _DenseParams(1, use_bias=False, name="weights")(self.num_measurements)
    dtype = jnp.result_type(v, kernel)
    v, kernel, bias, weights = (jnp.asarray(a, dtype) for a in (v, kernel, bias, weights))
    pre = jnp.einsum("dm,...d->m...", kernel, v) + bias.reshape((-1,) + (1,) * (v.ndim - 1))
    return jnp.einsum("m,m...->...", weights[:, 0], act(pre))


class LocalNetEnergy(nn.Module):
  """A multi-label energy built on a local network `self.local_net` (an `MLP` giving the
  features F(x) and the local logits), with its label term in `energy_from_encoding`.

  The shared part of `SPENEnergy` and `ICNNEnergy`: F(x) is computed once per x
  (`encode`) and reused by every GBI step, and `local_logits` is what a `local_bce` MLP
  with the same params outputs (staged training carries one into the other).
  """

  def __call__(self, x: jax.Array, y: jax.Array, train: bool = False) -> jax.Array:
    """`x [B, D], y [B, L] -> [B]`."""
    return self.energy_from_encoding(self.encode(x, train=train), y)

  def encode(self, x: jax.Array, train: bool = False) -> Encoding:
    """F(x) and the local logits, from one pass of `local_net`."""
    logits, features = self.local_net(x, train=train, return_features=True)
    return Encoding(features, logits)

  def local_logits(self, x: jax.Array, train: bool = False) -> jax.Array:
    """`[B, L]`: what a `local_bce` MLP with these params would output."""
    return self.local_net(x, train=train)

  def energy_from_encoding(self, encoding: Encoding, y: jax.Array) -> jax.Array:
    raise NotImplementedError

  def as_energy(self) -> protocol.Energy:
    """This energy as an `Energy` on the Box: `encode` runs F(x) and the local head
    once; starts `'uniform'` (0.5), `'local'` (σ of the local logits) and `'random'`;
    `carry` continues a state `{"energy": ...}` of this energy or a `local_bce` MLP
    `{"net": ...}` (its params become `local_net`)."""
    return local_net_energy(self)


class SPENEnergy(LocalNetEnergy):
  """The multi-label SPEN energy `E(x, ȳ) -> [B]` (see the module docstring).

  Attributes:
    num_labels: L.
    feature_hidden: hidden sizes of the feature network F (paper: two layers;
      `()` gives F(x) = x, a linear local term).
    feature_activation: non-linearity of F (the MLP baseline uses ReLU).
    num_measurements: rows of C1 (paper: 15 for Bibtex and Bookmarks, 5 for Delicious).
    activation: g of the global and conditional terms, an elementwise function (the
      paper uses `softplus`, `jax.nn.relu` and `hardtanh` of `energynets.nets`).
    num_conditional: rows of D1; 0 (the default, as in the paper's experiments, which
      found the x-independent term overfits less) disables the conditional term.
    dropout: dropout on F's hidden layers, including F(x) itself (`MLP.dropout`: one
      rate, or one per layer).
    input_dropout: dropout on x (`MLP.input_dropout`).
    dtype: the compute dtype of F and the local head (`MLP.dtype`, e.g. `jnp.bfloat16`;
      None: float32). The label terms stay float32 whatever it is: they are evaluated
      at every GBI step on the float32 iterate ȳ, and their gradient in ȳ drives
      inference; the local logits come back float32, so the energy sums in float32.
  """

  num_labels: int
  feature_hidden: Sequence[int] = (150, 150)
  feature_activation: Activation = nn.relu
  num_measurements: int = 15
  activation: Activation = softplus
  num_conditional: int = 0
  dropout: DropoutRates = 0.0
  input_dropout: float = 0.0
  dtype: Any | None = None

  def setup(self):
    if self.num_labels < 1 or self.num_measurements < 1 or self.num_conditional < 0:
      raise ValueError(
        f"bad SPENEnergy sizes: num_labels={self.num_labels}, "
        f"num_measurements={self.num_measurements}, "
        f"num_conditional={self.num_conditional}"
      )
    activation = checked_activation(self)
    self.local_net = MLP(
      hidden=tuple(self.feature_hidden),
      num_outputs=self.num_labels,
      activation=checked_activation(self, "feature_activation"),
      dropout=self.dropout,
      input_dropout=self.input_dropout,
      dtype=self.dtype,
    )
    self.label_energy = MeasurementEnergy(self.num_measurements, activation, name="global")
    if self.num_conditional:
      self.conditional_energy = MeasurementEnergy(
        self.num_conditional, activation, name="conditional"
      )

  def energy_from_encoding(self, encoding: Encoding, y: jax.Array) -> jax.Array:
    """`[B]`: the energy of `y [B, L]` given a precomputed `encode(x)` (GBI's inner call)."""
    if y.shape[-1] != self.num_labels or y.ndim != 2:
      raise ValueError(f"y must be [B, {self.num_labels}]; got {y.shape}")
    energy = -jnp.sum(y * encoding.logits, axis=-1) + self.label_energy(y)
    if self.num_conditional:
      features = encoding.features.astype(y.dtype)
      energy = energy + self.conditional_energy(jnp.concatenate([y, features], axis=-1))
    return energy

  def candidate_energies(self, encoding: Encoding, candidates: jax.Array) -> jax.Array:
    """`[B, C]`: the energy of every example with every labeling `candidates [C, L]`
    (exact inference by enumeration, `energynets.inference.exhaustive`).

    The local term is one matmul and the global term is computed once per candidate, so
    no `[B, C, L]` array is formed unless the conditional term needs one.
    """
    if candidates.ndim != 2 or candidates.shape[-1] != self.num_labels:
      raise ValueError(f"candidates must be [C, {self.num_labels}]; got {candidates.shape}")
    logits = encoding.logits.astype(candidates.dtype)
    energy = -logits @ candidates.T + self.label_energy(candidates)[None, :]
    if self.num_conditional:
      features = encoding.features.astype(candidates.dtype)
      shape = (features.shape[0], candidates.shape[0])
      pairs = jnp.concatenate(
        [
          jnp.broadcast_to(candidates[None], shape + candidates.shape[1:]),
          jnp.broadcast_to(features[:, None], shape + features.shape[1:]),
        ],
        axis=-1,
      )
      energy = energy + self.conditional_energy(pairs)
    return energy


def param_groups(energy: LocalNetEnergy) -> tuple[str, ...]:
  """The top-level parameter names of `energy`, the units that can be clamped."""
  conditional = getattr(energy, "num_conditional", 0)  # ICNNEnergy has none
  return ("local_net", "global") + (("conditional",) if conditional else ())


def local_net_energy(energy: LocalNetEnergy) -> protocol.Energy:
  """`energy.as_energy()` (see `LocalNetEnergy.as_energy`)."""

  def init(rng, x, y=None):
    del y
    y = jnp.zeros(x.shape[:1] + (energy.num_labels,), x.dtype)
    return flax.core.unfreeze(energy.init({"params": rng}, x, y)["params"])

  def carry(prev_state, rng, x, y=None):
    reference = jax.eval_shape(lambda: init(rng, x))
    if "energy" in prev_state:
      return protocol.carried(
        prev_state["energy"].params,
        reference,
        f"the previous state into this {type(energy).__name__}",
      )
    if "net" in prev_state:
      local = protocol.carried(
        prev_state["net"].params,
        reference["local_net"],
        f"the local_bce network into this {type(energy).__name__} as local_net",
      )
      return dict(init(rng, x), local_net=local)
    raise ValueError(
      f"cannot continue from a state with keys {sorted(prev_state)}; expected "
      "'energy' (a SPEN stage) or 'net' (local_bce)"
    )

  return protocol.encoded_module(
    energy,
    domain=domains.Box(),
    y_shape=lambda x: (energy.num_labels,),
    groups=param_groups(energy),
    local_start=jax.nn.sigmoid,
    carry=carry,
    candidate_energy=hasattr(energy, "candidate_energies"),
    init=init,
  )
