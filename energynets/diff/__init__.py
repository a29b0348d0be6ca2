"""Differentiation tools: Hessian-vector products (see DESIGN.md, "Differentiation strategies")."""

from energynets.diff.hvp import cross_hvp
from energynets.diff.hvp import finite_difference_hvp
from energynets.diff.hvp import hvp
from energynets.diff.hvp import hvp_and_cross_hvp
from energynets.diff.hvp import tree_vdot

__all__ = ["cross_hvp", "finite_difference_hvp", "hvp", "hvp_and_cross_hvp", "tree_vdot"]
