"""The networks' names: a config's activations, image paddings, convolution
implementations, poolings and tag-language-model variants -> the values the library's
modules take.

The configs write them as strings (experiments/configs/task_bases.py, cnn_denoiser.py):
`activation` and `feature_activation` (`'relu'`, `'softplus'`, `'tanh'`, `'sigmoid'`,
`'gelu'`, `'hardtanh'`, `ACTIVATIONS`), `padding` (`'VALID'`, `'SAME'`, `'REFLECT'`,
`PADDINGS`), `conv_impl` (`'auto'`, `'lax'`, `'patches'`, `CONV_IMPLS`), the denoising
energy's `pooling` (`'sum'`, `'mean'`, `IMAGE_POOLINGS`), the segmentation energy's
`pooling` (`'flatten'`, `'mean'`, `SEGMENTATION_POOLINGS`) and `energy.tlm_variants` (names
of `TLM_VARIANTS` separated by commas or `+`).
"""

from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from energynets import energies
from energynets import nets
from experiments import configuration
from experiments.choices import lookup

# config.{model,energy,cnn}.activation and energy.feature_activation -> the elementwise
# non-linearity.
ACTIVATIONS: dict[str, nets.Activation] = {
  "relu": nn.relu,
  "softplus": nets.softplus,
  "tanh": jnp.tanh,
  "sigmoid": nn.sigmoid,
  "gelu": nn.gelu,
  "hardtanh": nets.hardtanh,
}

# config.{energy,cnn}.padding -> how the convolutions treat the image border.
PADDINGS: dict[str, nets.Padding] = {
  "VALID": nets.VALID,
  "SAME": nets.SAME,
  "REFLECT": nets.REFLECT,
}

# config.{energy,cnn}.conv_impl -> how a stride-1 convolution is computed.
CONV_IMPLS: dict[str, nets.ConvImpl] = {
  "auto": nets.auto_conv,
  "lax": nets.lax_conv,
  "patches": nets.patch_conv,
}

# config.energy.pooling of the denoising DeepPrior energy -> its pooling over pixels.
IMAGE_POOLINGS: dict[str, Callable[[jax.Array], jax.Array]] = {
  "sum": nets.sum_pool,
  "mean": nets.mean_pool,
}

# config.energy.pooling of the segmentation energy's global term -> its pooling.
SEGMENTATION_POOLINGS: dict[str, Callable[[jax.Array], jax.Array]] = {
  "flatten": nets.flatten_pool,
  "mean": nets.mean_pool,
}

# config.energy.tlm_variants names -> the tag language models of `SequenceEnergy`.
TLM_VARIANTS: dict[str, energies.TLMVariant] = {v.name: v for v in energies.TLM_VARIANTS}


def activation(name: str) -> nets.Activation:
  """The activation function a config's `activation` or `feature_activation` names
  (`ACTIVATIONS`)."""
  return lookup("activation", ACTIVATIONS, name)


def padding(name: str) -> nets.Padding:
  """The `Padding` a config's `padding` names (`PADDINGS`)."""
  return lookup("padding", PADDINGS, name)


def conv_impl(name: str) -> nets.ConvImpl:
  """The convolution function a config's `conv_impl` names (`CONV_IMPLS`)."""
  return lookup("conv_impl", CONV_IMPLS, name)


def image_pooling(name: str) -> Callable[[jax.Array], jax.Array]:
  """The pooling a denoising energy's `pooling` names (`IMAGE_POOLINGS`)."""
  return lookup("pooling", IMAGE_POOLINGS, name)


def segmentation_pooling(name: str) -> Callable[[jax.Array], jax.Array]:
  """The pooling a segmentation energy's `pooling` names (`SEGMENTATION_POOLINGS`)."""
  return lookup("pooling", SEGMENTATION_POOLINGS, name)


def tlm_variants(text: str) -> tuple[energies.TLMVariant, ...]:
  """The TLM variants a config's `energy.tlm_variants` names (names separated by commas
  or `+`; the empty string is none)."""
  names = configuration.name_list(text) or ()
  return tuple(lookup("TLM variant", TLM_VARIANTS, name) for name in names)


__all__ = [
  "ACTIVATIONS",
  "CONV_IMPLS",
  "IMAGE_POOLINGS",
  "PADDINGS",
  "SEGMENTATION_POOLINGS",
  "TLM_VARIANTS",
  "activation",
  "conv_impl",
  "image_pooling",
  "padding",
  "segmentation_pooling",
  "tlm_variants",
]
