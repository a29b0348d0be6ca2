"""Feature networks and task/inference networks."""

from energynets.nets.cnn import FCN, CNNDenoiser, ConvStack
from energynets.nets.mlp import MLP, activation_by_name
from energynets.nets.rnn import (BiLSTM, BiLSTMTagger, CharCNN, PackedTagger, TokenEmbedder,
                                 pretrained_embedding_init)
from energynets.nets import cnn
from energynets.nets import mlp

ACTIVATIONS = mlp.ACTIVATIONS
"""Elementwise non-linearities by name (`'relu'`, `'softplus'`, `'tanh'`, `'sigmoid'`,
`'gelu'`, `'hardtanh'`, ...): what `activation` options of nets and energies accept."""

PADDINGS: tuple[str, ...] = cnn.PADDINGS
"""The image paddings of the convolutional nets and energies: `'VALID'`, `'SAME'`,
`'REFLECT'`."""

__all__ = ["ACTIVATIONS", "BiLSTM", "BiLSTMTagger", "CNNDenoiser", "CharCNN", "ConvStack",
           "FCN", "MLP", "PADDINGS", "PackedTagger", "TokenEmbedder", "activation_by_name",
           "pretrained_embedding_init"]
