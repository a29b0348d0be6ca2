"""Convolutional nets: the DeepPrior trunk, the CNN denoiser and the segmentation FCN.

Denoising images are `[B, H, W]` (one channel, values in the data's scale; the
denoising data use [0, 1], with PSNR reported at peak 1 ≙ 255). Segmentation images
are `[B, H, W, C]` (RGB, normalized) and their masks `[B, H, W]`.

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

from collections.abc import Callable
from collections.abc import Sequence
import math
from typing import Any
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from energynets.nets.mlp import Activation
from energynets.nets.mlp import checked_activation
from energynets.nets.mlp import float32_outputs
from energynets.nets.mlp import softplus


class Padding(NamedTuple):
  """How a k×k convolution treats the image border: `VALID`, `SAME` or `REFLECT`.

  Attributes:
    conv_padding: what the convolution itself is given, flax's `'VALID'` (filters only
      where they fit) or `'SAME'` (zeros around the image).
    reflect: mirror-pad the image by the kernel's half-widths first (`pad_image`), so
      that the 'VALID' convolution returns a map of the image's size.
  """

  conv_padding: str
  reflect: bool = False

  @property
  def keeps_size(self) -> bool:
    """Whether the convolution's output has the input's height and width."""
    return self.reflect or self.conv_padding == "SAME"


VALID = Padding("VALID")
SAME = Padding("SAME")
REFLECT = Padding("VALID", reflect=True)


def check_padding(padding: Any) -> Padding:
  """`padding`, if it is a `Padding` (`VALID`, `SAME`, `REFLECT`); else a one-line
  TypeError."""
  if not isinstance(padding, Padding):
    raise TypeError(
      f"padding must be a Padding (energynets.nets.VALID, SAME or REFLECT); got {padding!r}"
    )
  return padding


def pad_image(v: jax.Array, kernel_size: int, padding: Padding) -> tuple[jax.Array, str]:
  """`(v', conv_padding)`: `v [B, H, W, C]` prepared for a k×k convolution.

  `REFLECT` pads by mirror reflection (without repeating the edge pixel) so that the
  following 'VALID' convolution returns an `[H, W]` map; unlike zero padding (`SAME`) it
  invents no dark frame that filters would read as an edge. `VALID` and `SAME` are
  passed through to the convolution unchanged.
  """
  check_padding(padding)
  if not padding.reflect or kernel_size == 1:
    return v, padding.conv_padding
  lo, hi = (kernel_size - 1) // 2, kernel_size // 2
  if min(v.shape[1], v.shape[2]) <= max(lo, hi):
    raise ValueError(
      f"REFLECT padding of a {kernel_size}x{kernel_size} kernel needs "
      f"images larger than {max(lo, hi)} pixels; got {v.shape[1:3]}"
    )
  return jnp.pad(v, ((0, 0), (lo, hi), (lo, hi), (0, 0)), mode="reflect"), padding.conv_padding


def sum_pool(v: jax.Array) -> jax.Array:
  """`[B, H, W, ...] -> [B, ...]`: the sum over positions (axes 1 and 2)."""
  return jnp.sum(v, axis=(1, 2))


def mean_pool(v: jax.Array) -> jax.Array:
  """`[B, H, W, ...] -> [B, ...]`: the mean over positions (axes 1 and 2)."""
  return jnp.mean(v, axis=(1, 2))


def flatten_pool(v: jax.Array) -> jax.Array:
  """`[B, ...] -> [B, D]`: every position's features side by side (a fixed image size)."""
  return v.reshape(v.shape[0], -1)


class PatchConv(nn.Module):
  """A stride-1 k×k convolution as one matmul over the k² shifted copies of the input.

  The same function and parameters (`kernel [kh, kw, C_in, C_out]`, `bias [C_out]`, the
  same initializers) as `flax.linen.Conv` with stride 1, for 'VALID' and 'SAME'
  padding. Its derivatives are slices, pads and matmuls, which XLA's CPU backend runs
  much faster than the convolutions that differentiating a convolution produces; the
  price is a `[B, H', W', kh·kw·C_in]` patch tensor.
  """

  features: int
  kernel_size: Sequence[int]
  padding: str = "VALID"
  use_bias: bool = True
  kernel_init: Callable = nn.initializers.lecun_normal()
  bias_init: Callable = nn.initializers.zeros

  @nn.compact
  def __call__(self, v: jax.Array) -> jax.Array:
    kh, kw = self.kernel_size
    kernel = self.param("kernel", self.kernel_init, (kh, kw, v.shape[-1], self.features))
    if self.padding == "SAME":
      v = jnp.pad(v, ((0, 0), ((kh - 1) // 2, kh // 2), ((kw - 1) // 2, kw // 2), (0, 0)))
    elif self.padding != "VALID":
      raise ValueError(f"PatchConv supports 'VALID' and 'SAME' padding; got {self.padding!r}")
    height, width = v.shape[1] - kh + 1, v.shape[2] - kw + 1
    # (i, j, c) order, the row-major flattening of the kernel's first three axes.
    patches = jnp.concatenate(
      [v[:, i : i + height, j : j + width, :] for i in range(kh) for j in range(kw)], axis=-1
    )
    out = patches @ kernel.reshape(-1, self.features).astype(patches.dtype)
    if self.use_bias:
      out = out + self.param("bias", self.bias_init, (self.features,)).astype(out.dtype)
    return out


# How a stride-1 k×k convolution is computed (the `conv_impl` of the convolutional nets
# and energies): `lax_conv` is XLA's convolution; `patch_conv` gathers the k² shifted
# copies of the input and does one matmul (im2col). Both have the same parameters and
# agree to float32 rounding (tests/test_image_energies.py). `auto_conv` picks
# `patch_conv` on CPU, where XLA's convolution is slow inside loops of gradients: a
# DP-3 training step (3 unrolled GBI steps in a `lax.scan`, differentiated again) ran
# 8.1× faster with patches and a DP-SSVM step 5.6× on a 2-core CPU, while a plain
# feed-forward CNN step ran at 0.84× (results/e2e/conv_impl.md). On GPU/TPU it keeps
# XLA's convolution.
ConvImpl = Callable[..., nn.Module]


def lax_conv(
  features: int,
  kernel_size: Sequence[int],
  *,
  padding: str = "VALID",
  name: str | None = None,
  **kwargs,
) -> nn.Module:
  """A stride-1 `flax.linen.Conv` (XLA's convolution); `padding` is flax's."""
  return nn.Conv(features, tuple(kernel_size), padding=padding, name=name, **kwargs)


def patch_conv(
  features: int,
  kernel_size: Sequence[int],
  *,
  padding: str = "VALID",
  name: str | None = None,
  **kwargs,
) -> nn.Module:
  """A `PatchConv`: the same convolution and parameters as `lax_conv`, as one matmul."""
  return PatchConv(features, tuple(kernel_size), padding=padding, name=name, **kwargs)


def auto_conv(
  features: int,
  kernel_size: Sequence[int],
  *,
  padding: str = "VALID",
  name: str | None = None,
  **kwargs,
) -> nn.Module:
  """`patch_conv` on the CPU backend, else `lax_conv` (see the comment above)."""
  impl = patch_conv if jax.default_backend() == "cpu" else lax_conv
  return impl(features, kernel_size, padding=padding, name=name, **kwargs)


def conv2d(
  features: int,
  kernel_size: Sequence[int],
  *,
  padding: str = "VALID",
  conv_impl: ConvImpl = auto_conv,
  name: str | None = None,
  **kwargs,
) -> nn.Module:
  """A stride-1 convolution module made by `conv_impl` (`lax_conv`, `patch_conv`,
  `auto_conv`: the same parameters); `padding` is flax's 'VALID' or 'SAME'."""
  if not callable(conv_impl):
    raise TypeError(
      f"conv_impl must be a function like energynets.nets.auto_conv; got {conv_impl!r}"
    )
  return conv_impl(features, kernel_size, padding=padding, name=name, **kwargs)


def normalized_input(v: jax.Array, mean: float, std: float) -> jax.Array:
  """`(v − mean) / std`: image values standardized before a trunk's first convolution.

  Why the denoising nets take it: on [0, 1] images (train mean ≈ 0.62, std ≈ 0.22 for
  the generated depth scenes) the residual `CNNDenoiser` with its zero-initialized
  readout did not leave the identity in 400 Adam steps at learning rate 1e-3 or 3e-3
  (validation PSNR 23.12 throughout, the noisy input's), while with standardized input
  it reached 27.83 by step 400 (a one-off scratch comparison; the rerun
  rows are in results/e2e/e2e.md). The statistics are fixed numbers, set from the
  training split by the experiment builders, not parameters.
  """
  if not (math.isfinite(std) and std > 0) or not math.isfinite(mean):
    raise ValueError(
      f"input normalization needs a finite mean and a positive std; got mean={mean}, std={std}"
    )
  if mean == 0.0 and std == 1.0:
    return v
  return (v - mean) / std


class ConvStack(nn.Module):
  """`[B, H, W, C] -> [B, H', W', num_outputs]`: k×k convs + activation, then a 1×1 readout.

  With `VALID` padding `H' = H − len(features)·(k − 1)` (likewise W); with `SAME` or
  `REFLECT` the map keeps its size. Parameters: `conv_0 … conv_{n−1}` and `readout`.

  Attributes:
    features: channels of the hidden convolutions (paper: (32, 32)).
    kernel_size: k of the hidden convolutions (paper: 7).
    num_outputs: channels of the 1×1 readout.
    activation: the elementwise non-linearity (`softplus` by default); energies trained
      through unrolled inference need a twice-differentiable one (E2E-SPEN §5).
    padding: a `Padding`: `VALID`, `SAME` or `REFLECT` (see `pad_image`).
    readout_bias: whether the readout has a bias (an energy's constant offset has no
      gradient, so energies leave it out).
    zero_readout: initialize the readout to zero (a residual net then starts at the
      identity).
    conv_impl: how the convolutions are computed (`auto_conv`, `lax_conv`, `patch_conv`;
      the same function).
    input_mean, input_std: the first convolution sees `(v − input_mean) / input_std`
      (`normalized_input`). The defaults (0, 1) leave v as it is.
  """

  features: Sequence[int] = (32, 32)
  kernel_size: int = 7
  num_outputs: int = 1
  activation: Activation = softplus
  padding: Padding = VALID
  readout_bias: bool = True
  zero_readout: bool = False
  conv_impl: ConvImpl = auto_conv
  input_mean: float = 0.0
  input_std: float = 1.0

  @nn.compact
  def __call__(self, v: jax.Array) -> jax.Array:
    if v.ndim != 4:
      raise ValueError(f"ConvStack expects [B, H, W, C]; got {v.shape}")
    v = normalized_input(v, self.input_mean, self.input_std)
    act = checked_activation(self)
    k = self.kernel_size
    for i, width in enumerate(self.features):
      v, conv_padding = pad_image(v, k, self.padding)
      v = act(
        conv2d(width, (k, k), padding=conv_padding, conv_impl=self.conv_impl, name=f"conv_{i}")(v)
      )
    init = nn.initializers.zeros if self.zero_readout else nn.initializers.lecun_normal()
    return nn.Conv(
      self.num_outputs, (1, 1), use_bias=self.readout_bias, kernel_init=init, name="readout"
    )(v)


class CNNDenoiser(nn.Module):
  """`x [B, H, W] -> ŷ [B, H, W]`, `ŷ = x + ConvStack(x)`: the feed-forward baseline.

  The residual form makes the net predict the noise (a correction to x); with the
  readout initialized to zero it starts at the identity, i.e. at the noisy input's
  PSNR, rather than at a random image. All parameters live under `net`, with the
  kernel shapes of `DeepPriorEnergy`'s `prior` (see the module docstring).

  Attributes:
    features, kernel_size, activation: as `ConvStack` (paper-sized by default).
    padding: `REFLECT` (default) or `SAME` (zeros); the output must keep the input's
      size, so `VALID` is rejected.
    conv_impl: as `ConvStack`.
    input_mean, input_std: the trunk sees `(x − input_mean) / input_std` and its output
      is scaled back, `ŷ = x + input_std · ConvStack(·)`, so the readout predicts the
      noise in standardized units (`normalized_input`).
  """

  features: Sequence[int] = (32, 32)
  kernel_size: int = 7
  activation: Activation = softplus
  padding: Padding = REFLECT
  conv_impl: ConvImpl = auto_conv
  input_mean: float = 0.0
  input_std: float = 1.0

  @nn.compact
  def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
    del train  # no dropout or batch statistics; kept for the `net(x, train=...)` contract
    if x.ndim != 3:
      raise ValueError(f"CNNDenoiser expects x of shape [B, H, W]; got {x.shape}")
    if not check_padding(self.padding).keeps_size:
      raise ValueError(
        f"CNNDenoiser needs a size-preserving padding (SAME or REFLECT); got {self.padding!r}"
      )
    residual = ConvStack(
      tuple(self.features),
      self.kernel_size,
      1,
      checked_activation(self),
      self.padding,
      readout_bias=True,
      zero_readout=True,
      conv_impl=self.conv_impl,
      input_mean=self.input_mean,
      input_std=self.input_std,
      name="net",
    )(x[..., None])
    return x + self.input_std * residual[..., 0]


class FCN(nn.Module):
  """`x [B, H, W, C] -> logits [B, H, W]`: a small fully convolutional segmentation net.

  The feed-forward baseline and SEAL task-net of the Weizmann-horse experiments, which
  "follow Gygli et al. (2017) and use a Fully Convolutional Network (FCN)" (SEAL §4.4),
  and the local net of `energynets.energies.SegmentationEnergy`. The papers' text does
  not give the layers; the defaults have the widths of SEAL's public horse task-net
  (which is also their value network's trunk): 5×5 convolutions of 64 channels at
  stride 1, then 128 and 128 at stride 2 (32×32 -> 16×16 -> 8×8). The decoder is
  Long et al.'s FCN skip architecture (as in that task-net), cheap because it upsamples
  *scores*, not features:

  - a 1×1 convolution scores every encoder level (one logit per position);
  - from the coarsest level up, the running score map is upsampled by the next level's
    stride with a learned transposed convolution (kernel 2·stride, no bias: FCN's
    learnable bilinear-like upsampling) and the finer level's score is added
    (`skip_connections`; without them the coarsest score alone is upsampled, and the
    8×8 map cannot place a horse's legs to a pixel).

  'SAME' padding throughout, so H and W must be divisible by the product of the
  strides (4 by default; 32×32 images and SEAL's 24×24 crops both are); the first
  stride must be 1, so the finest score map has the image's resolution. No batch
  statistics (no batch norm): an example's logits never depend on its batch-mates, which
  the energies and GBI that reuse this net rely on.

  Parameters: `conv_i` (encoder), `score_i` (1×1 scores), `up_i` (upsampling).

  Attributes:
    features: channels of the encoder convolutions.
    strides: stride of each encoder convolution, as long as `features`; the first is 1.
    kernel_size: k of the k×k encoder convolutions.
    activation: the elementwise non-linearity (`jax.nn.relu` for a task net; as an
      energy's local net it reads only x, so the energy's smoothness in y does not
      depend on it).
    dropout: dropout rate on every encoder level's features before they are scored.
    skip_connections: add the finer levels' scores on the way up (FCN-8s style).
    dtype: the compute dtype of the convolutions (`MLP.dtype`: e.g. `jnp.bfloat16`,
      parameters float32, logits returned float32; None: the inputs' dtype).
  """

  features: Sequence[int] = (64, 128, 128)
  strides: Sequence[int] = (1, 2, 2)
  kernel_size: int = 5
  activation: Activation = nn.relu
  dropout: float = 0.0
  skip_connections: bool = True
  dtype: Any | None = None

  @nn.compact
  def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
    if x.ndim != 4:
      raise ValueError(f"FCN expects images [B, H, W, C]; got {x.shape}")
    strides = tuple(self.strides)
    if len(self.features) != len(strides) or not strides or strides[0] != 1:
      raise ValueError(
        f"FCN needs one stride per encoder layer, the first 1; got features "
        f"{tuple(self.features)} and strides {strides}"
      )
    factor = math.prod(strides)
    if x.shape[1] % factor or x.shape[2] % factor:
      raise ValueError(
        f"FCN with strides {strides} needs H and W divisible by {factor}; got {x.shape[1:3]}"
      )
    act = checked_activation(self)
    k = (self.kernel_size, self.kernel_size)
    h, levels = x, []
    for i, (width, stride) in enumerate(zip(self.features, strides)):
      h = act(
        nn.Conv(
          width, k, strides=(stride, stride), padding="SAME", dtype=self.dtype, name=f"conv_{i}"
        )(h)
      )
      levels.append(nn.Dropout(self.dropout, deterministic=not train)(h))

    def score(i):
      return nn.Conv(1, (1, 1), dtype=self.dtype, name=f"score_{i}")(levels[i])

    last = len(levels) - 1
    logits = score(last)
    for i in range(last - 1, -1, -1):
      s = strides[i + 1]
      if s > 1:
        logits = nn.ConvTranspose(
          1,
          (2 * s, 2 * s),
          strides=(s, s),
          padding="SAME",
          use_bias=False,
          dtype=self.dtype,
          name=f"up_{i}",
        )(logits)
      if self.skip_connections:
        logits = logits + score(i)
    return float32_outputs(logits[..., 0], self.dtype)
