"""Made-up verdict records (one finished cell each) for the report tests."""

from benchmarks import verdict


def record(dataset: str, size: int, method: str, seed: int, f1: float) -> dict:
  """A tuned cell's record: `method` on `dataset` cut to `size` rows (0: all, taken as
  400 rows) at `seed`, scoring `f1` test example-F1."""
  return {
    "dataset": dataset,
    "size": size,
    "method": method,
    "mode": "tuned",
    "seed": seed,
    verdict.METRIC: f1,
    "num_train": size or 400,
    "seconds": 10.0 + seed,
  }
