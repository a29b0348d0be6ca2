"""Timing shared by the benchmarks: compiled functions, median wall time per call."""

import statistics
import time
from typing import Any, Callable

import jax


def median_seconds(fns: dict[str, Callable[[], Any]], repeats: int) -> dict[str, float]:
  """Median wall seconds per call; the functions are called in turn, `repeats` rounds."""
  for fn in fns.values():
    jax.block_until_ready(fn())  # compile (and one warm-up call)
  times = {name: [] for name in fns}
  for _ in range(repeats):
    for name, fn in fns.items():
      started = time.perf_counter()
      jax.block_until_ready(fn())
      times[name].append(time.perf_counter() - started)
  return {name: statistics.median(ts) for name, ts in times.items()}
