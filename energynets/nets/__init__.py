"""Feature networks and task/inference networks."""

from energynets.nets import cnn
from energynets.nets import mlp
from energynets.nets.cnn import FCN
from energynets.nets.cnn import CNNDenoiser
from energynets.nets.cnn import ConvStack
from energynets.nets.mlp import MLP
from energynets.nets.mlp import activation_by_name
from energynets.nets.rnn import BiLSTM
from energynets.nets.rnn import BiLSTMTagger
from energynets.nets.rnn import CharCNN
from energynets.nets.rnn import PackedTagger
from energynets.nets.rnn import TokenEmbedder
from energynets.nets.rnn import pretrained_embedding_init

ACTIVATIONS = mlp.ACTIVATIONS
"""Elementwise non-linearities by name (`'relu'`, `'softplus'`, `'tanh'`, `'sigmoid'`,
`'gelu'`, `'hardtanh'`, ...): what `activation` options of nets and energies accept."""

PADDINGS: tuple[str, ...] = cnn.PADDINGS
"""The image paddings of the convolutional nets and energies: `'VALID'`, `'SAME'`,
`'REFLECT'`."""

__all__ = [
  "ACTIVATIONS",
  "BiLSTM",
  "BiLSTMTagger",
  "CNNDenoiser",
  "CharCNN",
  "ConvStack",
  "FCN",
  "MLP",
  "PADDINGS",
  "PackedTagger",
  "TokenEmbedder",
  "activation_by_name",
  "pretrained_embedding_init",
]
