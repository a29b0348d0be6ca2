"""Exact inference over {0, 1}^L by enumeration, for small label spaces.

GBI minimizes a relaxation and can stop at a worse vertex of a non-convex energy (on
SPEN's synthetic task, ~13% of test examples from the local start; spen.md). When L is
small, the discrete problem `argmin_{y ∈ {0,1}^L} objective(y)` can be solved exactly by
scoring all 2^L labelings, which gives

- exact prediction (the energy's own MAP, no search error), and
- exact loss-augmented inference for the SSVM (the classical SSVM of Tsochantaridis et
  al., whose sub-gradient is exact), so that the effect of the energy and of the search
  can be told apart.

The objective is given as a *table*: `table(params, inputs, candidates [C, L]) -> [B, C]`,
the objective of every (example, candidate) pair. A SPEN energy without a conditional
term is `−ℓ(x)·y + G(y)`, whose table is one matmul plus G over the candidates, with no
`[B, C, L]` intermediate (`SPENEnergy.candidate_energies`); `pairwise_table` builds the
table of any batched energy `energy(params, inputs, y [B, L]) -> [B]` by `vmap` over
candidates (the fallback, `[C, B, L]` memory per chunk).

Candidates are scored in chunks of `chunk_size` under `lax.scan`, so memory is
`O(B · chunk_size)` whatever L is. Ties go to the lowest labeling index (label 0 is the
most significant bit). Nothing is differentiated: the argmin is piecewise constant, so
the result is `stop_gradient`-ed (the SSVM differentiates the energy at a fixed ŷ).
"""

from collections.abc import Callable
from typing import Any
from typing import NamedTuple

import jax
import jax.numpy as jnp

PyTree = Any
TableFn = Callable[[PyTree, PyTree, jax.Array], jax.Array]

# 2^20 labelings: about a million objective values per example, the most that is
# still a few seconds per batch on a CPU.
MAX_LABELS = 20
DEFAULT_CHUNK_SIZE = 4096


class ExhaustiveResult(NamedTuple):
  """`y`: `[B, L]` the minimizing labeling (0/1 in `y_like`'s dtype); `objective`: `[B]`
  its objective value."""

  y: jax.Array
  objective: jax.Array


def _bits(index: jax.Array, num_labels: int, dtype) -> jax.Array:
  """`[N] int32 -> [N, num_labels]`: each labeling index as its bits, label 0 the most
  significant."""
  shifts = jnp.arange(num_labels - 1, -1, -1, dtype=jnp.int32)
  return ((index[:, None] >> shifts[None, :]) & 1).astype(dtype)


def labelings(start: jax.Array | int, count: int, num_labels: int, dtype=jnp.float32) -> jax.Array:
  """`[count, num_labels]`: the labelings with indices `start .. start + count − 1`, label
  0 the most significant bit (index 0 is all-zero, `2^L − 1` all-one)."""
  index = jnp.asarray(start, jnp.int32) + jnp.arange(count, dtype=jnp.int32)
  return _bits(index, num_labels, dtype)


def check_num_labels(num_labels: int) -> None:
  """ValueError unless 1 ≤ L ≤ `MAX_LABELS` (2^L labelings must be enumerable)."""
  if not 1 <= num_labels <= MAX_LABELS:
    raise ValueError(
      f"exhaustive inference enumerates 2^L labelings; L={num_labels} is outside "
      f"1..{MAX_LABELS} (use GBI for larger label spaces)"
    )


def pairwise_table(energy: Callable[[PyTree, PyTree, jax.Array], jax.Array]) -> TableFn:
  """The table of a batched energy `energy(params, inputs, y [B, L]) -> [B]`: each
  candidate broadcast to the batch, `vmap`-ed over candidates."""

  def table(params, inputs, candidates):
    batch = jax.tree_util.tree_leaves(inputs)[0].shape[0]

    def one(candidate):
      return energy(params, inputs, jnp.broadcast_to(candidate, (batch,) + candidate.shape))

    return jax.vmap(one)(candidates).T

  return table


def exhaustive_minimize(
  table: TableFn,
  params: PyTree,
  inputs: PyTree,
  y_like: jax.Array,
  *,
  chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> ExhaustiveResult:
  """`argmin_{y ∈ {0,1}^L} objective(y)` per example, by scoring every labeling.

  Args:
    table: `(params, inputs, candidates [C, L]) -> [B, C]`, the objective of every
      example and candidate (`pairwise_table(energy)` for any batched energy).
    params, inputs: passed to `table` unchanged.
    y_like: `[B, L]`, gives the batch size, L and the dtype of the result (e.g. GBI's
      start point); its values are not used.
    chunk_size: candidates scored at once, a power of two (capped at 2^L).

  Returns:
    `ExhaustiveResult(y [B, L], objective [B])`, both `stop_gradient`-ed. An example
    whose objective is NaN at any labeling gets a NaN objective (its y is the best
    labeling among the others).
  """
  if y_like.ndim != 2:
    raise ValueError(f"exhaustive inference needs y of shape [B, L]; got {y_like.shape}")
  batch, num_labels = y_like.shape
  check_num_labels(num_labels)
  if chunk_size < 1 or chunk_size & (chunk_size - 1):
    raise ValueError(f"chunk_size must be a power of two; got {chunk_size}")
  total = 2**num_labels
  chunk = min(chunk_size, total)
  params, inputs = jax.lax.stop_gradient((params, inputs))
  dtype = y_like.dtype

  def scan_chunk(carry, start):
    best_value, best_index, nan_seen = carry
    values = table(params, inputs, labelings(start, chunk, num_labels, dtype))
    if values.shape != (batch, chunk):
      raise ValueError(f"the objective table must be [B, C] = {(batch, chunk)}; got {values.shape}")
    nan_seen = nan_seen | jnp.any(jnp.isnan(values), axis=1)
    values = jnp.where(jnp.isnan(values), jnp.inf, values)
    local = jnp.argmin(values, axis=1)
    value = jnp.take_along_axis(values, local[:, None], axis=1)[:, 0]
    # Strictly lower only, so that ties keep the earlier (lower-index) labeling.
    better = value < best_value
    return (
      jnp.where(better, value, best_value),
      jnp.where(better, start + local.astype(jnp.int32), best_index),
      nan_seen,
    ), None

  starts = jnp.arange(0, total, chunk, dtype=jnp.int32)
  init = (
    jnp.full((batch,), jnp.inf, dtype),
    jnp.zeros((batch,), jnp.int32),
    jnp.zeros((batch,), bool),
  )
  (best_value, best_index, nan_seen), _ = jax.lax.scan(scan_chunk, init, starts)
  # A NaN objective is reported, not skipped: the example's value is NaN, which the
  # training loop's finiteness check names.
  best_value = jnp.where(nan_seen, jnp.nan, best_value)
  y = _bits(best_index, num_labels, dtype)
  return ExhaustiveResult(jax.lax.stop_gradient(y), jax.lax.stop_gradient(best_value))
