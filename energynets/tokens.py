"""The packed token format that sequence batches travel in.

The trainer, the evaluation and the sharded step all move `(x, y)` arrays with a leading
example axis. A sentence's token features are therefore packed into one int32 array
`x [N, T, 3 + C]` (word, POS and chunk ids, then the C character ids of the word; word id
0 marks padding) and the tags into `y [N, T, L]`, one-hot (all-zero rows at padding): the
output domain of the sequence energies is a simplex per token, and the one-hot gold is its
vertex. `unpack_tokens` gives back the batch dict of the taggers (`energynets.nets.rnn`);
`energynets.data.pack_tokens` builds `x` from a dataset split.

This module depends on nothing else in the package, so networks, energies and
objectives read the format without importing the data loaders.
"""

from typing import Any

PACKED_COLUMNS = ("words", "pos", "chunk")


def unpack_tokens(x: Any) -> dict[str, Any]:
  """The columns of packed tokens.

  Args:
    x: `[B, T, 3 + C]`, a numpy or jax integer array.

  Returns:
    `{"words", "pos", "chunk" [B, T], "chars" [B, T, C], "mask" [B, T] bool}`, arrays
    of x's kind.
  """
  if x.ndim != 3 or x.shape[-1] < len(PACKED_COLUMNS) + 1:
    raise ValueError(f"packed tokens need shape [B, T, 3 + C] with C >= 1; got {x.shape}")
  batch = {name: x[..., i] for i, name in enumerate(PACKED_COLUMNS)}
  batch["chars"] = x[..., len(PACKED_COLUMNS) :]
  batch["mask"] = x[..., 0] > 0
  return batch
