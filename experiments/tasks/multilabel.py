"""The multi-label task: the registry's MULAN / CLUS / synthetic datasets; example-F1
(tuned threshold and 0.5), micro/macro-F1, Hamming."""

from collections.abc import Callable

import ml_collections
import numpy as np

from energynets import data as data_lib
from energynets import metrics
from energynets.data import registry
from experiments.tasks.base import Predictions
from experiments.tasks.base import Task

__all__ = [
  "MULTILABEL",
  "MULTILABEL_METRICS",
  "load_multilabel",
  "load_multilabel_rows",
  "multilabel_all_rows",
  "multilabel_results",
  "multilabel_validation_metrics",
]

MULTILABEL_METRICS = {
  "example_f1": "mean over examples of 2|y∧ŷ|/(|y|+|ŷ|); empty gold and empty prediction "
  "scores 1; at the validation-tuned threshold",
  "example_f1@0.5": "example_f1 at threshold 0.5",
  "micro_f1": "F1 of all label bits pooled, at the tuned threshold",
  "macro_f1": "mean over labels of per-label F1, at the tuned threshold",
  "hamming": "fraction of wrong label bits, at the tuned threshold",
  "threshold": "grid 0.05..0.95 value maximizing validation example_f1 (ties: closest "
  "to 0.5); never tuned on test",
  "scale": "fractions in [0, 1]",
  "gbi_steps_mean": "SPEN/DVN only: mean test-time GBI steps per example (gbi_while)",
  "search_error": "SPEN/DVN only: fraction of test examples whose GBI output (relaxed) has "
  "higher energy than the gold labels (SPEN §7.4)",
}


def load_multilabel(
  config: ml_collections.ConfigDict, process_rows: tuple[int, int] | None = None
) -> data_lib.MultiLabelDataset:
  """The multi-label dataset of `config.data`; `process_rows=(p, P)`: process p of P's
  rows of every split only (`load_dataset`'s, which reads MULAN files line by line)."""
  cfg = config.data
  if cfg.name == "mulan":
    if not cfg.path:
      raise ValueError(
        "the 'mulan' variant loads a MULAN dataset by path: pass "
        "--config.data.path=DIR (DIR holding <name>-train.arff, "
        "<name>-test.arff and <name>.xml)"
      )
    source = cfg.path
  else:
    source = cfg.name
  extra = {"num_train": cfg.num_train} if cfg.num_train else {}
  return data_lib.load_dataset(
    source,
    data_dir=cfg.data_dir or None,
    split_seed=cfg.split_seed,
    fold=cfg.fold,
    resplit=cfg.resplit,
    root_label=cfg.root_label,
    feature_scaling=cfg.get("feature_scaling", "auto"),
    process_rows=process_rows,
    **extra,
  )


def multilabel_validation_metrics(split, probs: np.ndarray) -> dict[str, float]:
  y = split.y
  threshold = metrics.tune_threshold(y, probs)
  return {
    "validation/example_f1": metrics.example_f1(y, probs >= threshold),
    "validation/example_f1@0.5": metrics.example_f1(y, probs >= 0.5),
  }


def multilabel_results(dataset, predictions: Predictions) -> dict[str, float]:
  results = metrics.evaluate_multilabel(
    val=(dataset.validation.y, predictions(dataset.validation)),
    test=(dataset.test.y, predictions(dataset.test)),
  )
  return {k: float(v) for k, v in results.items()}


def multilabel_all_rows(
  split: data_lib.Split, gather: Callable[[np.ndarray], np.ndarray]
) -> data_lib.Split:
  """The labels of every process's rows of `split` (the metrics read only `y`; `x` is
  a zero stand-in of the whole split's shape that takes no memory)."""
  y = gather(split.y)
  stand_in = np.broadcast_to(np.zeros((), split.x.dtype), (len(y),) + split.x.shape[1:])
  return data_lib.Split(stand_in, y)


def load_multilabel_rows(
  config: ml_collections.ConfigDict, process_index: int, process_count: int
) -> data_lib.MultiLabelDataset:
  """`registry.select_process_rows(load_multilabel(config), ...)`, with only the process's
  rows ever in memory (`Task.load_rows`)."""
  return load_multilabel(config, process_rows=(process_index, process_count))


MULTILABEL = Task(
  "multilabel",
  load_multilabel,
  multilabel_validation_metrics,
  multilabel_results,
  MULTILABEL_METRICS,
  keep_rows=registry.select_process_rows,
  all_rows=multilabel_all_rows,
  load_rows=load_multilabel_rows,
)
