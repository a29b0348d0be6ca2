"""Feature networks and task/inference networks."""

from energynets.nets.mlp import ACTIVATIONS, MLP, activation_by_name

__all__ = ["ACTIVATIONS", "MLP", "activation_by_name"]
