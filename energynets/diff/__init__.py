"""Differentiation tools: Hessian-vector products and implicit differentiation (see
docs/design.md, "Differentiation strategies")."""

from energynets.diff.hvp import cross_hvp
from energynets.diff.hvp import finite_difference_hvp
from energynets.diff.hvp import hvp
from energynets.diff.hvp import hvp_and_cross_hvp
from energynets.diff.hvp import tree_vdot
from energynets.diff.implicit import ConjugateGradient
from energynets.diff.implicit import ImplicitGradient
from energynets.diff.implicit import InverseHVPSolver
from energynets.diff.implicit import Neumann
from energynets.diff.implicit import cg_inverse_hvp
from energynets.diff.implicit import check_solver
from energynets.diff.implicit import implicit_gradient
from energynets.diff.implicit import implicit_solution
from energynets.diff.implicit import inverse_hvp
from energynets.diff.implicit import neumann_inverse_hvp

__all__ = [
  "ConjugateGradient",
  "ImplicitGradient",
  "InverseHVPSolver",
  "Neumann",
  "cg_inverse_hvp",
  "check_solver",
  "cross_hvp",
  "finite_difference_hvp",
  "hvp",
  "hvp_and_cross_hvp",
  "implicit_gradient",
  "implicit_solution",
  "inverse_hvp",
  "neumann_inverse_hvp",
  "tree_vdot",
]
