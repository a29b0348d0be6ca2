"""The sequence task: Twitter POS and CoNLL-2003 NER (`energynets.data.sequences`), x the
packed token array `[N, T, 3 + C]` and y one-hot tags `[N, T, L]`; token accuracy, and for
NER the conlleval span precision / recall / F1."""

from collections.abc import Callable
from typing import Any
from typing import NamedTuple

import ml_collections
import numpy as np

from energynets import data as data_lib
from energynets import metrics
from energynets.data import batching
from experiments.tasks.base import Predictions
from experiments.tasks.base import Task
from experiments.tasks.base import gathered_rows
from experiments.tasks.base import held_shards
from experiments.tasks.base import process_part

__all__ = [
  "SEQUENCE",
  "SEQUENCE_DATASETS",
  "SEQUENCE_METRICS",
  "SequenceData",
  "SequenceSplit",
  "load_sequence",
  "sequence_process_rows",
  "sequence_results",
  "sequence_train_batches",
  "sequence_validation_metrics",
]

SEQUENCE_METRICS = {
  "token_acc": "fraction of real tokens whose predicted tag (argmax of the per-token "
  "output; Viterbi for the CRF) equals the gold tag",
  "span_f1": "NER only: entity F1, micro over all spans, exact span and type, conlleval "
  "semantics (an I- tag after O or another type starts a chunk); also "
  "span_precision, span_recall",
  "scale": "fractions in [0, 1]",
}


class SequenceSplit(NamedTuple):
  """One split as the loop sees it (x, y), with what decoding its predictions needs."""

  x: np.ndarray
  y: np.ndarray
  mask: np.ndarray
  tag_names: tuple
  scheme: str


class SequenceData(NamedTuple):
  """The splits of a sequence task. `train_lengths`: set where the splits hold one
  process's rows (`keep_rows`): the lengths of all training sentences, which every
  process buckets the global batches by; None: those of `train`."""

  name: str
  train: SequenceSplit
  validation: SequenceSplit
  test: SequenceSplit
  num_tags: int
  source: Any  # the `energynets.data.SequenceDataset` (vocabularies)
  meta: dict
  train_lengths: np.ndarray | None = None


def load_sequence(config: ml_collections.ConfigDict) -> SequenceData:
  cfg = config.data
  ds = data_lib.load_sequence_dataset(
    cfg.name,
    data_dir=cfg.data_dir or None,
    scheme=cfg.scheme or None,
    lowercase=cfg.lowercase,
    min_count=cfg.min_count,
    max_word_length=cfg.max_word_length,
  )

  def split(s):
    return SequenceSplit(
      data_lib.pack_tokens(s),
      data_lib.one_hot_tags(s, ds.num_tags),
      s.mask,
      ds.tag_names,
      ds.scheme,
    )

  meta = dict(ds.meta, split_rule=ds.meta.get("split_rule", "shipped files"))
  return SequenceData(
    cfg.name, split(ds.train), split(ds.validation), split(ds.test), ds.num_tags, ds, meta
  )


def _sequence_scores(split: SequenceSplit, outputs: np.ndarray, prefix: str) -> dict[str, float]:
  gold, pred = split.y.argmax(-1), np.asarray(outputs).argmax(-1)
  scores = {f"{prefix}/token_acc": metrics.token_accuracy(gold, pred, split.mask)}
  if split.scheme in ("iob2", "bioes"):
    span = metrics.span_f1(
      data_lib.decode_tags(gold, split.mask, split.tag_names),
      data_lib.decode_tags(pred, split.mask, split.tag_names),
      split.scheme,
    )
    scores.update(
      {
        f"{prefix}/span_f1": span.f1,
        f"{prefix}/span_precision": span.precision,
        f"{prefix}/span_recall": span.recall,
      }
    )
  return scores


def sequence_validation_metrics(split: SequenceSplit, outputs: np.ndarray) -> dict[str, float]:
  return _sequence_scores(split, outputs, "validation")


def sequence_results(dataset: SequenceData, predictions: Predictions) -> dict[str, float]:
  results = {}
  for name in ("validation", "test"):
    split = getattr(dataset, name)
    results.update(_sequence_scores(split, predictions(split), name))
  return results


def sequence_train_batches(
  config, dataset: SequenceData, batch_size: int, seed: int, num_shards: int | None = None
) -> Callable[[int], dict]:
  """Length-bucketed training batches cropped to their longest sentence (rounded up to
  `config.data.length_multiple`), a pure function of (seed, step); with `num_shards`,
  bucketed shard by shard and this process's part of each (`batching.length_bucketed_batch`)."""
  arrays = {"x": dataset.train.x, "y": dataset.train.y}
  lengths = dataset.train.mask.sum(-1) if dataset.train_lengths is None else dataset.train_lengths
  shards, first_row = held_shards(dataset, num_shards) if num_shards else (None, 0)
  return lambda step: batching.length_bucketed_batch(
    arrays,
    lengths,
    batch_size,
    seed,
    step,
    config.data.length_multiple,
    num_shards=num_shards or 1,
    shards=shards,
    first_row=first_row,
  )


def sequence_process_rows(
  dataset: SequenceData, process_index: int, process_count: int
) -> SequenceData:
  """`dataset` holding only process `process_index`'s rows of every split (`process_part`),
  with the lengths of all training sentences."""
  if process_count == 1:
    return dataset
  return process_part(
    dataset,
    process_index,
    process_count,
    ("train", "validation", "test"),
    train_lengths=dataset.train.mask.sum(-1),
  )


SEQUENCE = Task(
  "sequence",
  load_sequence,
  sequence_validation_metrics,
  sequence_results,
  SEQUENCE_METRICS,
  sequence_train_batches,
  keep_rows=sequence_process_rows,
  all_rows=gathered_rows,
)

SEQUENCE_DATASETS = ("twitter_pos", "conll2003")
