"""Convolutional nets on grayscale images: the DeepPrior trunk and the CNN denoiser.

Images are `[B, H, W]` (one channel, values in the data's scale; the denoising data use
[0, 1], with PSNR reported at peak 1 ≙ 255).

`ConvStack` is the shared trunk: `len(features)` k×k convolutions, each followed by the
activation, then a 1×1 readout. The E2E-SPEN paper (Belanger, Yang & McCallum 2017,
§6.1.1, Eq. 15) builds its DeepPrior energy from exactly this (7×7×32, SoftPlus,
7×7×32, SoftPlus, 1×1) followed by spatial pooling, and reports (§6.1.3) a feed-forward
convnet "with a similar architecture to our DeepPrior, but without spatial pooling" as a
baseline. `CNNDenoiser` is that baseline: the same trunk with 'same'-size padding and a
residual connection, so the two have the same convolution kernels (the denoiser's
readout adds a bias, 1 parameter) and a comparison between them isolates energy-based
inference from network capacity.
"""

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from energynets.nets.mlp import activation_by_name

PADDINGS = ("VALID", "SAME", "REFLECT")


def pad_image(v: jax.Array, kernel_size: int, padding: str) -> tuple[jax.Array, str]:
  """`(v', conv_padding)`: `v [B, H, W, C]` prepared for a k×k convolution.

  'REFLECT' pads by mirror reflection (without repeating the edge pixel) so that the
  following 'VALID' convolution returns an `[H, W]` map; unlike zero padding ('SAME') it
  invents no dark frame that filters would read as an edge. 'VALID' and 'SAME' are
  passed through to the convolution unchanged.
  """
  if padding not in PADDINGS:
    raise ValueError(f"unknown padding {padding!r}; expected one of {PADDINGS}")
  if padding != "REFLECT" or kernel_size == 1:
    return v, padding
  lo, hi = (kernel_size - 1) // 2, kernel_size // 2
  if min(v.shape[1], v.shape[2]) <= max(lo, hi):
    raise ValueError(f"REFLECT padding of a {kernel_size}x{kernel_size} kernel needs "
                     f"images larger than {max(lo, hi)} pixels; got {v.shape[1:3]}")
  return jnp.pad(v, ((0, 0), (lo, hi), (lo, hi), (0, 0)), mode="reflect"), "VALID"


class ConvStack(nn.Module):
  """`[B, H, W, C] -> [B, H', W', num_outputs]`: k×k convs + activation, then a 1×1 readout.

  With 'VALID' padding `H' = H − len(features)·(k − 1)` (likewise W); with 'SAME' or
  'REFLECT' the map keeps its size. Parameters: `conv_0 … conv_{n−1}` and `readout`.

  Attributes:
    features: channels of the hidden convolutions (paper: (32, 32)).
    kernel_size: k of the hidden convolutions (paper: 7).
    num_outputs: channels of the 1×1 readout.
    activation: a name of `energynets.nets.ACTIVATIONS`; energies trained through
      unrolled inference need a twice-differentiable one ('softplus', E2E-SPEN §5).
    padding: one of `PADDINGS` (see `pad_image`).
    readout_bias: whether the readout has a bias (an energy's constant offset has no
      gradient, so energies leave it out).
    zero_readout: initialize the readout to zero (a residual net then starts at the
      identity).
  """
  features: Sequence[int] = (32, 32)
  kernel_size: int = 7
  num_outputs: int = 1
  activation: str = "softplus"
  padding: str = "VALID"
  readout_bias: bool = True
  zero_readout: bool = False

  @nn.compact
  def __call__(self, v: jax.Array) -> jax.Array:
    if v.ndim != 4:
      raise ValueError(f"ConvStack expects [B, H, W, C]; got {v.shape}")
    act = activation_by_name(self.activation)
    k = self.kernel_size
    for i, width in enumerate(self.features):
      v, conv_padding = pad_image(v, k, self.padding)
      v = act(nn.Conv(width, (k, k), padding=conv_padding, name=f"conv_{i}")(v))
    init = nn.initializers.zeros if self.zero_readout else nn.initializers.lecun_normal()
    return nn.Conv(self.num_outputs, (1, 1), use_bias=self.readout_bias, kernel_init=init,
                   name="readout")(v)


class CNNDenoiser(nn.Module):
  """`x [B, H, W] -> ŷ [B, H, W]`, `ŷ = x + ConvStack(x)`: the feed-forward baseline.

  The residual form makes the net predict the noise (a correction to x); with the
  readout initialized to zero it starts at the identity, i.e. at the noisy input's
  PSNR, rather than at a random image. All parameters live under `net`, with the
  kernel shapes of `DeepPriorEnergy`'s `prior` (see the module docstring).

  Attributes:
    features, kernel_size, activation: as `ConvStack` (paper-sized by default).
    padding: 'REFLECT' (default) or 'SAME' (zeros); the output must keep the input's
      size, so 'VALID' is rejected.
  """
  features: Sequence[int] = (32, 32)
  kernel_size: int = 7
  activation: str = "softplus"
  padding: str = "REFLECT"

  @nn.compact
  def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
    del train  # no dropout or batch statistics; kept for the `net(x, train=...)` contract
    if x.ndim != 3:
      raise ValueError(f"CNNDenoiser expects x of shape [B, H, W]; got {x.shape}")
    if self.padding not in ("SAME", "REFLECT"):
      raise ValueError(f"CNNDenoiser needs a size-preserving padding ('SAME' or "
                       f"'REFLECT'); got {self.padding!r}")
    residual = ConvStack(tuple(self.features), self.kernel_size, 1, self.activation,
                         self.padding, readout_bias=True, zero_readout=True,
                         name="net")(x[..., None])
    return x + residual[..., 0]
