"""energynets: structured prediction with energy networks in JAX.

Subpackages are the public API (`energynets.data`, `.metrics`, `.domains`, `.inference`,
`.nets`, `.objectives`, `.train`); the TFDS builders (`energynets.data.tfds_builders`)
are imported on demand because they pull in tensorflow_datasets.
"""

from energynets import data
from energynets import domains
from energynets import inference
from energynets import metrics
from energynets import nets
from energynets import objectives
from energynets import train

__version__ = "0.1.0"

__all__ = ["data", "domains", "inference", "metrics", "nets", "objectives", "train"]
