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
from energynets.nets.mlp import activation_by_name
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

ConvImpl = cnn.ConvImpl
"""How a stride-1 convolution is computed: `auto_conv`, `lax_conv` or `patch_conv`, a
function `(features, kernel_size, *, padding, name, **kwargs) -> flax module`."""

ACTIVATIONS = mlp.ACTIVATIONS
"""Elementwise non-linearities by name (`'relu'`, `'softplus'`, `'tanh'`, `'sigmoid'`,
`'gelu'`, `'hardtanh'`, ...): what `activation` options of nets and energies accept."""

__all__ = [
  "ACTIVATIONS",
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
  "activation_by_name",
  "auto_conv",
  "flatten_pool",
  "lax_conv",
  "mean_pool",
  "patch_conv",
  "pretrained_embedding_init",
  "sum_pool",
]
