"""Deterministic batching: the batch of step `s` is a pure function of (seed, s).

That is what makes a resumed run identical to an uninterrupted one: nothing about
the input pipeline has to be checkpointed.
"""

from typing import Iterator, Mapping

import numpy as np


def train_batch_indices(num_examples: int, batch_size: int, seed: int, step: int) -> np.ndarray:
  """Row indices of training step `step` (0-based): epochs of seeded permutations.

  The last partial batch of an epoch is dropped, so every step sees a full batch.
  """
  if batch_size > num_examples:
    raise ValueError(f"batch size {batch_size} exceeds the {num_examples} training examples")
  steps_per_epoch = num_examples // batch_size
  epoch, position = divmod(step, steps_per_epoch)
  perm = np.random.default_rng([seed, epoch]).permutation(num_examples)
  return perm[position * batch_size:(position + 1) * batch_size]


def length_bucketed_batch(arrays: Mapping[str, np.ndarray], lengths: np.ndarray,
                          batch_size: int, seed: int, step: int,
                          length_multiple: int = 32) -> dict[str, np.ndarray]:
  """The training batch of step `step` for variable-length sequences: similar lengths.

  Each epoch is `sequences.bucketed_batches` with `rng = [seed, epoch]` (full batches
  only, like `train_batch_indices`), so the batch is a pure function of (seed, step)
  and a resumed run sees the same batches. Every array whose axis 1 is the padded
  length T is cropped to the batch's longest sequence, rounded up to
  `length_multiple` (at most T / length_multiple shapes to compile): on CoNLL-2003
  this cuts the padded positions a step computes on from about 2/3 to a few percent.
  """
  from energynets.data.sequences import bucketed_batches  # sequences imports this module's peers
  lengths = np.asarray(lengths)
  if batch_size > lengths.size:
    raise ValueError(f"batch size {batch_size} exceeds the {lengths.size} training examples")
  steps_per_epoch = lengths.size // batch_size
  epoch, position = divmod(step, steps_per_epoch)
  full = [b for b in bucketed_batches(lengths, batch_size, np.random.default_rng([seed, epoch]))
          if len(b) == batch_size]
  idx = full[position % len(full)]
  padded = max(v.shape[1] for v in arrays.values() if v.ndim >= 2)
  t = min(-(-int(lengths[idx].max()) // length_multiple) * length_multiple, padded)
  return {k: v[idx, :t] if v.ndim >= 2 and v.shape[1] == padded else v[idx]
          for k, v in arrays.items()}


def padded_batches(arrays: Mapping[str, np.ndarray], batch_size: int
                   ) -> Iterator[tuple[dict[str, np.ndarray], int]]:
  """Fixed-shape evaluation batches (the last one zero-padded) and their valid-row count.

  A fixed shape means one compilation for the whole evaluation.
  """
  n = len(next(iter(arrays.values())))
  for start in range(0, n, batch_size):
    stop = min(start + batch_size, n)
    batch = {}
    for k, v in arrays.items():
      chunk = v[start:stop]
      if stop - start < batch_size:
        pad = np.zeros((batch_size - (stop - start),) + v.shape[1:], v.dtype)
        chunk = np.concatenate([chunk, pad])
      batch[k] = chunk
    yield batch, stop - start
