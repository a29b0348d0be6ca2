"""energynets: structured prediction with energy networks in JAX."""

__version__ = "0.1.0"
