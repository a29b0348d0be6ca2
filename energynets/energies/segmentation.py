"""The binary-segmentation energy of DVN / SEAL (`SegmentationEnergy`, which documents it):
a local term from a segmentation `FCN` and a global `ConvScoreNet` on the image with the
mask as a fourth channel (DVN, Gygli et al. 2017; SEAL, Lee et al. 2022, §4.4)."""

from collections.abc import Callable
from collections.abc import Sequence
from typing import NamedTuple

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp

from energynets import domains
from energynets.energies import protocol
from energynets.nets.cnn import flatten_pool
from energynets.nets.mlp import Activation
from energynets.nets.mlp import checked_activation
from energynets.nets.mlp import softplus

__all__ = [
  "ConvScoreNet",
  "SegmentationEncoding",
  "SegmentationEnergy",
  "segmentation_energy",
  "segmentation_param_groups",
]


class SegmentationEncoding(NamedTuple):
  """What `SegmentationEnergy` needs from x, computed once per input (GBI reuses it).

  Attributes:
    image: `[B, H, W, C]`, x itself: the global term reads it beside the mask.
    logits: `[B, H, W]`, the local logits ℓ(x) of the local net; zeros without one
      (then the `'local'` GBI start σ(0) = 0.5 is the uniform one).
  """

  image: jax.Array
  logits: jax.Array


class ConvScoreNet(nn.Module):
  """`v [B, H, W, C] -> [B]`: strided convolutions, then dense layers, then a scalar.

  The value network of DVN / SEAL's horse loss-net read as a function of its input
  alone: convolutions of `features` channels with `strides` ('SAME' padding), the map
  flattened (`pooling=energynets.nets.flatten_pool`, the papers' fully connected
  layers: a fixed image size) or averaged over positions (`mean_pool`: any image
  size), `hidden` dense layers, and a dense readout to one number. The readout keeps
  its bias: GBI ignores a constant, but a value network's σ(−E) must be able to reach
  any score level.

  Attributes:
    features, strides, kernel_size: the convolutions (default: SEAL's 64, 128, 128
      channels of 5×5 at strides 1, 2, 2).
    hidden: widths of the dense layers (default: SEAL's 384, 192).
    activation: the elementwise non-linearity after every layer but the readout;
      `softplus` by default, so the energy is C^∞ in its input (GBI and the
      Hessian-vector products of unrolled or implicit training need second derivatives;
      SEAL's public code uses ReLU in its dense layers, which gives a piecewise-linear
      energy with zero curvature almost everywhere).
    pooling: `[B, H', W', C] -> [B, D]`, `flatten_pool` or `mean_pool` (see above).
  """

  features: Sequence[int] = (64, 128, 128)
  strides: Sequence[int] = (1, 2, 2)
  kernel_size: int = 5
  hidden: Sequence[int] = (384, 192)
  activation: Activation = softplus
  pooling: Callable[[jax.Array], jax.Array] = flatten_pool

  @nn.compact
  def __call__(self, v: jax.Array) -> jax.Array:
    if len(self.features) != len(self.strides):
      raise ValueError(
        f"ConvScoreNet needs one stride per convolution; got features "
        f"{tuple(self.features)} and strides {tuple(self.strides)}"
      )
    if not callable(self.pooling):
      raise TypeError(
        f"pooling must be a function like energynets.nets.flatten_pool; got {self.pooling!r}"
      )
    act = checked_activation(self)
    k = (self.kernel_size, self.kernel_size)
    for i, (width, stride) in enumerate(zip(self.features, self.strides)):
      v = act(nn.Conv(width, k, strides=(stride, stride), padding="SAME", name=f"conv_{i}")(v))
    # Per example only (no batch statistics): each example's energy is its own.
    v = self.pooling(v)
    for j, width in enumerate(self.hidden):
      v = act(nn.Dense(width, name=f"dense_{j}")(v))
    return nn.Dense(1, name="readout")(v)[..., 0]


class SegmentationEnergy(nn.Module):
  """The binary-segmentation energy `E(x, ȳ) -> [B]`, x an image and ȳ a soft mask.

      E(x, ȳ) = −Σ_p ȳ_p ℓ_p(x)            local term (optional): ℓ = local_net(x)
                + G([x; ȳ])                 global term: `ConvScoreNet` on the image
                                            with the mask as a 4th channel

  for x `[B, H, W, C]` and ȳ ∈ [0, 1]^{H×W} (`[B, H, W]`): the Box domain of GBI over
  pixels. The global term is DVN's value network (Gygli et al. 2017), which SEAL reuses
  as its horse loss-net ("the same convolutional layers in the FCN, followed by fully
  connected layers", SEAL §3): it sees image and mask together, so it can score the
  mask's shape against the image. The local term is SPEN's (`SPENEnergy`), with the
  same sign convention: `local_net` is a segmentation `FCN` whose logits lower the
  energy of ȳ_p = 1 where they are high, so an FCN trained alone with pixel BCE
  (`objectives.local_bce`) carries into the energy unchanged as `local_net` (staged
  training: pretrain, then SSVM / DVN on the whole energy), and `init='local'` starts
  GBI at that FCN's prediction. Without a local net (`local_net=None`), E is the value
  network alone, as in DVN and SEAL.

  E is smooth in ȳ: linear in the local term, C^∞ in the global term with the default
  softplus. Both terms sum (or pool) per example, so an example's energy never depends
  on its batch-mates. `encode` runs the local net once per x; GBI then calls
  `energy_from_encoding` at every step (as `SPENEnergy` and `SequenceEnergy` do);
  `as_energy()` gives the `Energy` every objective takes.

  Parameter groups (top level): `local_net` (if any) and `global`.

  Attributes:
    local_net: a module `local_net(x, train=...) -> [B, H, W]` logits (an `FCN`), or
      None for no local term.
    features, strides, kernel_size, hidden, activation, pooling: the global term's
      `ConvScoreNet`.
  """

  local_net: nn.Module | None = None
  features: Sequence[int] = (64, 128, 128)
  strides: Sequence[int] = (1, 2, 2)
  kernel_size: int = 5
  hidden: Sequence[int] = (384, 192)
  activation: Activation = softplus
  pooling: Callable[[jax.Array], jax.Array] = flatten_pool

  def setup(self):
    self.global_term = ConvScoreNet(
      tuple(self.features),
      tuple(self.strides),
      self.kernel_size,
      tuple(self.hidden),
      checked_activation(self),
      self.pooling,
      name="global",
    )

  def __call__(self, x: jax.Array, y: jax.Array, train: bool = False) -> jax.Array:
    """`x [B, H, W, C], y [B, H, W] -> [B]`."""
    return self.energy_from_encoding(self.encode(x, train=train), y)

  def encode(self, x: jax.Array, train: bool = False) -> SegmentationEncoding:
    """x and the local logits, from one pass of `local_net` (zeros without one)."""
    if x.ndim != 4:
      raise ValueError(f"SegmentationEnergy expects images x [B, H, W, C]; got {x.shape}")
    return SegmentationEncoding(x, self.local_logits(x, train=train))

  def local_logits(self, x: jax.Array, train: bool = False) -> jax.Array:
    """`[B, H, W]`: what an `FCN` trained with these `local_net` params outputs."""
    if self.local_net is None:
      return jnp.zeros(x.shape[:3], x.dtype)
    return self.local_net(x, train=train)

  def as_energy(self) -> protocol.Energy:
    """This energy as an `Energy` (`segmentation_energy`)."""
    return segmentation_energy(self)

  def energy_from_encoding(self, encoding: SegmentationEncoding, y: jax.Array) -> jax.Array:
    """`[B]`: the energy of masks `y [B, H, W]` given `encode(x)` (GBI's inner call)."""
    if y.shape != encoding.logits.shape:
      raise ValueError(
        f"y must be masks [B, H, W] = {encoding.logits.shape} to match the images; got {y.shape}"
      )
    image = encoding.image.astype(y.dtype)
    energy = self.global_term(jnp.concatenate([image, y[..., None]], axis=-1))
    if self.local_net is not None:
      energy = energy - jnp.sum(y * encoding.logits.astype(y.dtype), axis=(1, 2))
    return energy


def segmentation_param_groups(energy: SegmentationEnergy) -> tuple[str, ...]:
  """The top-level parameter names of `energy`: `local_net` (if any) and `global`."""
  return (("local_net",) if energy.local_net is not None else ()) + ("global",)


def segmentation_energy(energy: SegmentationEnergy) -> protocol.Energy:
  """`energy.as_energy()`: the Box over pixels (masks `[B, H, W]` for images
  `[B, H, W, C]`), the local FCN run once per x; starts `'uniform'` (0.5), `'local'`
  (σ of the FCN's logits) and `'random'`. `carry` continues a segmentation-energy state
  `{"energy": ...}` or a `local_bce` FCN `{"net": ...}` (it becomes `local_net`)."""

  def init(rng, x, y=None):
    del y
    return flax.core.unfreeze(
      energy.init({"params": rng}, x, jnp.zeros(x.shape[:3], jnp.float32))["params"]
    )

  def carry(prev_state, rng, x, y=None):
    reference = jax.eval_shape(lambda: init(rng, x))
    if "energy" in prev_state:
      return protocol.carried(
        prev_state["energy"].params, reference, "the previous state into this SegmentationEnergy"
      )
    if "net" in prev_state and energy.local_net is not None:
      local = protocol.carried(
        prev_state["net"].params,
        reference["local_net"],
        "the local_bce FCN into this SegmentationEnergy as local_net",
      )
      return dict(init(rng, x), local_net=local)
    raise ValueError(
      f"cannot continue from a state with keys {sorted(prev_state)}; expected "
      "'energy' (a segmentation-energy stage) or 'net' (a local_bce FCN, "
      "for an energy with a local_net)"
    )

  return protocol.encoded_module(
    energy,
    domain=domains.Box(),
    y_shape=lambda x: tuple(x.shape[1:3]),
    groups=segmentation_param_groups(energy),
    local_start=jax.nn.sigmoid,
    carry=carry,
    init=init,
  )
