"""Feature networks and task/inference networks."""

from energynets.nets.cnn import PADDINGS, CNNDenoiser, ConvStack
from energynets.nets.mlp import ACTIVATIONS, MLP, activation_by_name

__all__ = ["ACTIVATIONS", "CNNDenoiser", "ConvStack", "MLP", "PADDINGS", "activation_by_name"]
