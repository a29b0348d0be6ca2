"""Feature networks and task/inference networks."""

from energynets.nets.cnn import PADDINGS, CNNDenoiser, ConvStack
from energynets.nets.mlp import ACTIVATIONS, MLP, activation_by_name
from energynets.nets.rnn import (BiLSTM, BiLSTMTagger, CharCNN, PackedTagger, TokenEmbedder,
                                 pretrained_embedding_init)

__all__ = ["ACTIVATIONS", "BiLSTM", "BiLSTMTagger", "CNNDenoiser", "CharCNN", "ConvStack",
           "MLP", "PADDINGS", "PackedTagger", "TokenEmbedder", "activation_by_name",
           "pretrained_embedding_init"]
