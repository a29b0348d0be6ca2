"""Deterministic batching: the batch of step `s` is a pure function of (seed, s).

That is what makes a resumed run identical to an uninterrupted one: nothing about
the input pipeline has to be checkpointed.

Per-process data: a split's N rows are cut into contiguous shards (`shard_bounds`), and
process p of P holds only rows `process_rows(N, p, P)`. A global random permutation
would need every row on every process, so sharded training draws each step's batch
shard by shard (`sharded_batch_indices`): B/S rows from each of the S shards, in shard
order, which is what per-host input pipelines (tfds / grain sharding) do. Process p then
draws exactly its part of the global batch from the rows it holds, and one process
holding every shard draws the same global batch. Length-bucketed sequence batches
(`length_bucketed_batch`) follow the same rule, each shard bucketing its own rows.
"""

from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Mapping

import numpy as np

__all__ = [
  "length_bucketed_batch",
  "padded_batches",
  "process_rows",
  "process_shards",
  "shard_bounds",
  "sharded_batch_indices",
  "train_batch_indices",
]


def train_batch_indices(
  num_examples: int, batch_size: int, seed: int, step: int, shard: int | None = None
) -> np.ndarray:
  """Row indices of training step `step` (0-based): epochs of seeded permutations.

  The last partial batch of an epoch is dropped, so every step sees a full batch.

  Args:
    num_examples: rows to draw from, `0..num_examples-1`.
    batch_size: rows per step.
    seed: seeds the permutation of every epoch.
    step: the training step.
    shard: a shard's index (`sharded_batch_indices`), folded into the seed so that
      shards are shuffled independently; None: the unsharded stream.

  Returns:
    int `[batch_size]` row indices.
  """
  if batch_size > num_examples:
    raise ValueError(f"batch size {batch_size} exceeds the {num_examples} training examples")
  steps_per_epoch = num_examples // batch_size
  epoch, position = divmod(step, steps_per_epoch)
  key = [seed, epoch] if shard is None else [seed, shard, epoch]
  perm = np.random.default_rng(key).permutation(num_examples)
  return perm[position * batch_size : (position + 1) * batch_size]


def shard_bounds(num_rows: int, num_shards: int, shard: int) -> tuple[int, int]:
  """Rows `[start, stop)` of shard `shard` of `num_shards` contiguous near-equal shards.

  Shard q is `[q*N//S, (q+1)*N//S)`, so the union of shards `p*k .. (p+1)*k - 1` is
  shard p of `S/k`: a process holding k consecutive shards holds its `process_rows`.

  Args:
    num_rows: N, the split's rows.
    num_shards: S >= 1.
    shard: q in `[0, S)`.

  Returns:
    `(start, stop)`.
  """
  if num_shards < 1 or not 0 <= shard < num_shards:
    raise ValueError(
      f"shard {shard} of {num_shards}: need num_shards >= 1 and 0 <= shard < num_shards"
    )
  return shard * num_rows // num_shards, (shard + 1) * num_rows // num_shards


def process_rows(num_rows: int, process_index: int, process_count: int) -> slice:
  """The contiguous rows of a split that process `process_index` of `process_count` holds
  (`shard_bounds` with one shard per process)."""
  return slice(*shard_bounds(num_rows, process_count, process_index))


def process_shards(num_shards: int, process_index: int, process_count: int) -> range:
  """The training shards process `process_index` of `process_count` holds: the
  `num_shards / process_count` consecutive ones, whose rows are its `process_rows`.

  Raises:
    ValueError: `num_shards` is not a multiple of `process_count`.
  """
  if num_shards < 1 or num_shards % process_count:
    raise ValueError(
      f"{num_shards} data shards cannot be split over {process_count} "
      f"processes: use a multiple of {process_count}"
    )
  per_process = num_shards // process_count
  return range(process_index * per_process, (process_index + 1) * per_process)


def sharded_batch_indices(
  num_rows: int,
  batch_size: int,
  seed: int,
  step: int,
  num_shards: int,
  shards: Iterable[int] | None = None,
) -> np.ndarray:
  """Row indices (of the whole split) of step `step`'s batch, drawn shard by shard.

  The global batch is the concatenation over shards q = 0..S-1 of `batch_size / S`
  rows of shard q (`train_batch_indices` over the shard's rows, its index folded into
  the seed). With S = 1 it is `train_batch_indices(num_rows, batch_size, seed, step)`.

  Args:
    num_rows: N, the training rows of all shards.
    batch_size: B, the global batch size; a multiple of S.
    seed: the run's seed.
    step: the training step.
    num_shards: S.
    shards: the shards to draw from, in order (a process's `process_shards`: its part
      of the global batch, which is its `step.process_slice`); None: all of them.

  Returns:
    int `[B / S * len(shards)]` row indices, each inside its shard's `shard_bounds`.
  """
  if num_shards == 1:
    if shards is not None and list(shards) != [0]:
      raise ValueError(f"shards {list(shards)} of 1: the only shard is 0")
    return train_batch_indices(num_rows, batch_size, seed, step)
  if batch_size % num_shards:
    raise ValueError(
      f"batch size {batch_size} is not divisible by the {num_shards} data "
      f"shards; use a multiple of {num_shards}"
    )
  per_shard = batch_size // num_shards
  parts = []
  for shard in range(num_shards) if shards is None else shards:
    start, stop = shard_bounds(num_rows, num_shards, shard)
    if per_shard > stop - start:
      raise ValueError(
        f"batch size {batch_size} over {num_shards} data shards takes "
        f"{per_shard} rows per step from each shard, but shard {shard} has "
        f"only {stop - start} of the {num_rows} training rows"
      )
    parts.append(start + train_batch_indices(stop - start, per_shard, seed, step, shard))
  return np.concatenate(parts)


def length_bucketed_batch(
  arrays: Mapping[str, np.ndarray],
  lengths: np.ndarray,
  batch_size: int,
  seed: int,
  step: int,
  length_multiple: int = 32,
  num_shards: int = 1,
  shards: Iterable[int] | None = None,
  first_row: int = 0,
) -> dict[str, np.ndarray]:
  """The training batch of step `step` for variable-length sequences: similar lengths.

  Each epoch is `sequences.bucketed_batches` with `rng = [seed, epoch]` (full batches
  only, like `train_batch_indices`), so the batch is a pure function of (seed, step)
  and a resumed run sees the same batches. Every array whose axis 1 is the padded
  length T is cropped to the batch's longest sequence, rounded up to
  `length_multiple` (at most T / length_multiple shapes to compile): on CoNLL-2003
  this cuts the padded positions a step computes on from about 2/3 to a few percent.

  With S = `num_shards` > 1 the global batch is drawn shard by shard, as
  `sharded_batch_indices` draws it: each of the S contiguous shards (`shard_bounds`)
  buckets its own rows into batches of `batch_size / S` (`rng = [seed, shard, epoch]`),
  and the global batch is the concatenation of every shard's batch of the step. All
  its rows are cropped to one length, that of the longest sequence of the whole global
  batch, which every process finds from `lengths` alone, so the processes' parts of a
  batch fit together.

  Args:
    arrays: the rows held, `{name: [n, ...]}`: rows `first_row .. first_row + n - 1` of
      the split (all of them unless the data is spread over processes).
    lengths: int `[N]`, the lengths of all N rows of the split (every process's).
    batch_size: B, the global batch size; a multiple of S.
    seed: the run's seed.
    step: the training step.
    length_multiple: the cropped length is rounded up to a multiple of this.
    num_shards: S.
    shards: the shards to draw from, in order (a process's `process_shards`); None:
      all of them. Their rows must be among those `arrays` holds.
    first_row: the split's row that `arrays`' row 0 is.

  Returns:
    `{name: [B / S * len(shards), ...]}`, the arrays with a padded-length axis 1
    cropped.
  """
  lengths = np.asarray(lengths)
  if batch_size > lengths.size:
    raise ValueError(f"batch size {batch_size} exceeds the {lengths.size} training examples")
  if num_shards == 1:
    if shards is not None and list(shards) != [0]:
      raise ValueError(f"shards {list(shards)} of 1: the only shard is 0")
    parts = [_bucketed_indices(lengths, batch_size, [seed], step)]
  else:
    if batch_size % num_shards:
      raise ValueError(
        f"batch size {batch_size} is not divisible by the {num_shards} data "
        f"shards; use a multiple of {num_shards}"
      )
    per_shard = batch_size // num_shards
    parts = []
    # Every shard has at least floor(N / S) >= B / S rows, since B <= N.
    for shard in range(num_shards):
      start, stop = shard_bounds(lengths.size, num_shards, shard)
      parts.append(start + _bucketed_indices(lengths[start:stop], per_shard, [seed, shard], step))
  # One cropped length for the whole global batch, also where this process holds part.
  longest = max(int(lengths[idx].max()) for idx in parts)
  idx = np.concatenate([parts[q] for q in (range(len(parts)) if shards is None else shards)])
  idx = idx - first_row
  held = len(next(iter(arrays.values())))
  if idx.min() < 0 or idx.max() >= held:
    raise ValueError(
      f"the batch's rows are not among the {held} rows held from row "
      f"{first_row} on: hold the rows of the shards drawn from"
    )
  padded = max(v.shape[1] for v in arrays.values() if v.ndim >= 2)
  t = min(-(-longest // length_multiple) * length_multiple, padded)
  return {
    k: v[idx, :t] if v.ndim >= 2 and v.shape[1] == padded else v[idx] for k, v in arrays.items()
  }


def _bucketed_indices(
  lengths: np.ndarray, batch_size: int, key: list[int], step: int
) -> np.ndarray:
  """Row indices (of `lengths`) of step `step`: epoch `e`'s full `bucketed_batches`
  under `rng = key + [e]`, taken in order."""
  from energynets.data.sequences import bucketed_batches  # sequences imports this module's peers

  steps_per_epoch = lengths.size // batch_size
  epoch, position = divmod(step, steps_per_epoch)
  full = [
    b
    for b in bucketed_batches(lengths, batch_size, np.random.default_rng(key + [epoch]))
    if len(b) == batch_size
  ]
  return full[position % len(full)]


def padded_batches(
  arrays: Mapping[str, np.ndarray], batch_size: int
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
