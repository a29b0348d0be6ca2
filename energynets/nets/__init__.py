"""Feature networks and task/inference networks."""

from energynets.nets import cnn
from energynets.nets import mlp
from energynets.nets.cnn import FCN
from energynets.nets.cnn import CNNDenoiser
from energynets.nets.cnn import ConvStack
from energynets.nets.cnn import Padding
from energynets.nets.cnn import auto_conv
from energynets.nets.cnn import flatten_pool
from energynets.nets.cnn import lax_conv
from energynets.nets.cnn import mean_pool
from energynets.nets.cnn import patch_conv
from energynets.nets.cnn import sum_pool
from energynets.nets.mlp import MLP
from energynets.nets.mlp import hardtanh
from energynets.nets.rnn import BiLSTM
from energynets.nets.rnn import BiLSTMTagger
from energynets.nets.rnn import CharCNN
from energynets.nets.rnn import PackedTagger
from energynets.nets.rnn import TokenEmbedder
from energynets.nets.rnn import pretrained_embedding_init

VALID: Padding = cnn.VALID
"""Filters only where they fit inside the image: a k×k convolution shrinks the map by
k − 1 (flax's 'VALID')."""

SAME: Padding = cnn.SAME
"""Zeros around the image: the map keeps its size (flax's 'SAME')."""

REFLECT: Padding = cnn.REFLECT
"""Mirror padding, then 'VALID': the map keeps its size, with no invented dark frame."""

Activation = mlp.Activation
"""An elementwise non-linearity, a function `array -> array` (`jax.nn.relu`, `softplus`,
`hardtanh`, `jnp.tanh`, ...): what the `activation` attributes of nets and energies take."""

softplus = mlp.softplus
"""`log(1 + exp(x))`, the value of `jax.nn.softplus`, with the derivative `sigmoid(x)`
(a `jax.custom_jvp` that XLA compiles better): the energies' default activation."""

ConvImpl = cnn.ConvImpl
"""How a stride-1 convolution is computed: `auto_conv`, `lax_conv` or `patch_conv`, a
function `(features, kernel_size, *, padding, name, **kwargs) -> flax module`."""

__all__ = [
  "Activation",
  "BiLSTM",
  "BiLSTMTagger",
  "CNNDenoiser",
  "ConvImpl",
  "CharCNN",
  "ConvStack",
  "FCN",
  "MLP",
  "Padding",
  "REFLECT",
  "SAME",
  "VALID",
  "PackedTagger",
  "TokenEmbedder",
  "auto_conv",
  "flatten_pool",
  "hardtanh",
  "lax_conv",
  "mean_pool",
  "patch_conv",
  "pretrained_embedding_init",
  "softplus",
  "sum_pool",
]
