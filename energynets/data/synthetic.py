"""Synthetic block-exclusivity multi-label task (SPEN, Belanger & McCallum 2016, §7.3).

X ~ N(0, 1) with 64 features, A ~ N(0, 1) of shape 64 x 16, Z = XA; the 16 labels
form 4 consecutive blocks of 4 and y is the one-hot argmax of Z within each block.
The paper trains on 15k examples (and 1.5k, "10% of the data"); it does not give
validation or test sizes.
"""

import numpy as np

# Paper: 1.5k / 15k training examples; the held-out sizes are this project's choice.
DEFAULT_NUM_TRAIN = 15_000
DEFAULT_NUM_VALIDATION = 1_000
DEFAULT_NUM_TEST = 1_000


def block_exclusivity_weights(
  *, seed: int, num_features: int = 64, num_blocks: int = 4, block_size: int = 4
) -> np.ndarray:
  """The ground-truth map A, float64 [num_features, num_blocks * block_size].

  It is the first draw of `np.random.default_rng(seed)`, so it is the A that
  `block_exclusivity` uses with the same arguments.
  """
  rng = np.random.default_rng(seed)
  return rng.standard_normal((num_features, num_blocks * block_size))


def block_exclusivity(
  n: int, *, seed: int, num_features: int = 64, num_blocks: int = 4, block_size: int = 4
) -> tuple[np.ndarray, np.ndarray]:
  """n examples of the block-exclusivity task.

  A is fixed by `seed`; the rows of X are drawn after A from the same generator, so
  for one seed the first m rows do not depend on n (a smaller set is a prefix).

  Returns:
    x: float32 [n, num_features]; y: float32 [n, num_blocks * block_size] with
    exactly one 1 per block.
  """
  if n < 0 or num_features < 1 or num_blocks < 1 or block_size < 1:
    raise ValueError(
      f"bad block_exclusivity sizes: n={n}, num_features={num_features}, "
      f"num_blocks={num_blocks}, block_size={block_size}"
    )
  rng = np.random.default_rng(seed)
  a = rng.standard_normal((num_features, num_blocks * block_size))
  x = rng.standard_normal((n, num_features)).astype(np.float32)
  # Labels come from the float32 x that is returned, so they are exactly reproducible.
  z = x.astype(np.float64) @ a
  winners = z.reshape(n, num_blocks, block_size).argmax(axis=-1)
  y = np.eye(block_size, dtype=np.float32)[winners].reshape(n, num_blocks * block_size)
  return x, y
