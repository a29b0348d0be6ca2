"""What differs between task families in the experiment driver: data, selection, results.

`experiments/train.py` trains any objective on any task through one loop; a `Task` is
the rest: how a config's `data` becomes a dataset with `train`/`validation`/`test`
splits of `(x, y)` arrays, which validation metrics select checkpoints, and which
`"<split>/<metric>"` results a finished run reports (the results contract of docs/design.md).

- `multilabel`: the registry's MULAN/CLUS/synthetic datasets; example-F1 (tuned
  threshold and 0.5), micro/macro-F1, Hamming.
- `denoising`: generated depth-like scenes (`energynets.data.denoising`); PSNR on the
  depth test scenes and on crops of scikit-image's natural images (`natural/psnr`),
  the transfer test of a denoiser trained on depth.
- `sequence`: Twitter POS and CoNLL-2003 NER (`energynets.data.sequences`), x the packed
  token array `[N, T, 3 + C]` and y one-hot tags `[N, T, L]`; token accuracy, and for NER
  the conlleval span precision / recall / F1.
- `segmentation`: Weizmann horses (`energynets.data.segmentation`), x normalized images
  `[N, 32, 32, 3]` and y binary masks `[N, 32, 32]`; mean per-image foreground IoU
  (selection) and dataset IoU at 0.5; training batches augmented (random padded crop,
  horizontal flip).

`task_for(config)` picks the task from `config.data.name`.
"""

import dataclasses
from typing import Any, Callable, NamedTuple, Optional

import ml_collections
import numpy as np

from energynets import data as data_lib
from energynets import metrics
from energynets.data import batching
from energynets.data import denoising
from energynets.data import registry
from energynets.data import segmentation

# predictions(split) -> the model's outputs on every row of that split's x.
Predictions = Callable[[Any], np.ndarray]

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

DENOISING_METRICS = {
    "psnr": "mean over images of 10·log10(1 / MSE_i) in dB: values in [0, 1], peak 1 = the "
            "full depth range (the 8-bit convention with peak 255, divided through)",
    "natural/psnr": "the same on crops of scikit-image's grayscale natural images "
                    "(a denoiser trained on depth scenes, tested for transfer)",
}


class Task(NamedTuple):
  """The task-specific part of an experiment.

  Attributes:
    name: 'multilabel', 'denoising', 'sequence' or 'segmentation'.
    load: `config -> dataset` with `train`, `validation`, `test` splits (`.x`, `.y`),
      `name` and `meta`.
    validation_metrics: `(split, predictions) -> {"validation/<metric>": value}`,
      computed at every evaluation of the loop (checkpoint selection).
    results: `(dataset, predictions) -> {"<split>/<metric>": value}` of a finished run.
    metric_definitions: written into every results.json.
    train_batches: `(config, dataset, batch_size, seed, num_shards=None) -> (step ->
      batch)`, the loop's training batches when the task needs its own (sequences:
      similar lengths, cropped; segmentation: augmented); None: uniform random rows.
      With `num_shards`, the batches are drawn shard by shard and each is this
      process's part of the global batch, from the rows it holds (`keep_rows`).
    predict_split: `(config, predict_rows, x) -> predictions of x`, where `predict_rows`
      runs the model on any rows; for tasks whose model sees other inputs than the
      split's rows (segmentation's test-time crops); None: `predict_rows(x)`.
    model_rows: `(config, a) -> the rows the model sees of a split's x or y` at
      evaluation (segmentation's crops); None: `a` itself.
    keep_rows: `(dataset, process_index, process_count) -> dataset` holding only that
      process's rows of every split (`batching.process_rows`; the rest freed), with
      `meta["process_rows"]` recording them (`num_examples` reads the totals); the
      dataset itself with one process. The driver requires it.
    all_rows: `(split, gather) -> split` as the metrics read it in a run whose data is
      sharded: the labels of every process's rows, `gather(this process's array)`
      (`gathered_rows`).
    eval_splits: the splits a finished run predicts and scores.
    load_rows: `(config, process_index, process_count) -> dataset`: `keep_rows(load(config),
      ...)` without ever holding the other rows (multi-label: MULAN files read line by
      line); None: `keep_rows(load(config), ...)` (`load_process_rows`).
  """
  name: str
  load: Callable[[ml_collections.ConfigDict], Any]
  validation_metrics: Callable[[Any, np.ndarray], dict[str, float]]
  results: Callable[[Any, Predictions], dict[str, float]]
  metric_definitions: dict[str, str]
  train_batches: Optional[Callable[..., Callable[[int], dict]]] = None
  predict_split: Optional[Callable[..., np.ndarray]] = None
  model_rows: Optional[Callable[..., np.ndarray]] = None
  keep_rows: Optional[Callable[..., Any]] = None
  all_rows: Optional[Callable[..., Any]] = None
  eval_splits: tuple[str, ...] = ("validation", "test")
  load_rows: Optional[Callable[..., Any]] = None

  def load_process_rows(self, config: ml_collections.ConfigDict, process_index: int,
                        process_count: int) -> Any:
    """The dataset holding process `process_index`'s rows of every split (`keep_rows`)."""
    if self.load_rows is not None:
      return self.load_rows(config, process_index, process_count)
    return self.keep_rows(self.load(config), process_index, process_count)

  def predict(self, config: ml_collections.ConfigDict,
              predict_rows: Callable[[np.ndarray], np.ndarray], x: np.ndarray) -> np.ndarray:
    """The predictions of every row of `x` (validation and test go through here)."""
    if self.predict_split is None:
      return predict_rows(x)
    return self.predict_split(config, predict_rows, x)

  def rows_for_model(self, config: ml_collections.ConfigDict, a: np.ndarray) -> np.ndarray:
    """A split's inputs or targets as the model sees them at evaluation."""
    return a if self.model_rows is None else self.model_rows(config, a)


def num_examples(dataset, split: str = "train") -> int:
  """The rows of `dataset`'s `split` in all processes together (a sharded dataset holds
  only its process's, `Task.keep_rows`)."""
  held = getattr(dataset, "meta", {}).get("process_rows")
  return held[split]["of"] if held else len(getattr(dataset, split).x)


def held_rows_summary(dataset) -> str:
  """'rows a:b of train (n of N), ...' of what a dataset holds (`Task.keep_rows`)."""
  held = getattr(dataset, "meta", {}).get("process_rows")
  if not held:
    return "all rows"
  return ", ".join(f"rows {r['start']}:{r['stop']} of {s} ({r['stop'] - r['start']} of "
                   f"{r['of']})" for s, r in held.items() if isinstance(r, dict))


def held_shards(dataset, num_shards: int) -> tuple[range | None, int]:
  """The training shards this process draws from and the first training row it holds:
  `(batching.process_shards(...), start)` for a dataset holding one process's rows
  (`Task.keep_rows`), `(None, 0)` (every shard, from row 0) for a whole one."""
  held = getattr(dataset, "meta", {}).get("process_rows")
  if not held:
    return None, 0
  return (batching.process_shards(num_shards, held["process"], held["processes"]),
          held["train"]["start"])


def replaced(value, **changes):
  """A copy of a dataset or split (a dataclass or a NamedTuple) with `changes`."""
  if hasattr(value, "_replace"):
    return value._replace(**changes)
  return dataclasses.replace(value, **changes)


def _row_arrays(split) -> dict[str, np.ndarray]:
  """The per-row arrays of a split: its array fields with one entry per row of `x`."""
  fields = (split._asdict() if hasattr(split, "_asdict") else
            {f.name: getattr(split, f.name) for f in dataclasses.fields(split)})
  return {k: v for k, v in fields.items()
          if isinstance(v, np.ndarray) and v.ndim and len(v) == len(split.x)}


def _split_rows(split, rows: slice):
  """`split` holding copies of `rows` of its per-row arrays (copies, so that the whole
  arrays can be freed); its other fields kept."""
  return replaced(split, **{k: v[rows].copy() for k, v in _row_arrays(split).items()})


def _process_part(dataset, process_index: int, process_count: int,
                  splits: tuple[str, ...], **fields):
  """`dataset` (a dataclass or NamedTuple with `meta`) holding only process
  `process_index`'s `batching.process_rows` of each of `splits`, `meta["process_rows"]`
  recording them, and `fields` replaced; with one process, `dataset` itself."""
  if process_count == 1:
    return dataset
  parts, held = {}, {"process": process_index, "processes": process_count}
  for name in splits:
    split = getattr(dataset, name)
    rows = batching.process_rows(len(split.x), process_index, process_count)
    parts[name] = _split_rows(split, rows)
    held[name] = {"start": rows.start, "stop": rows.stop, "of": len(split.x)}
  return replaced(dataset, meta=dict(dataset.meta, process_rows=held), **parts, **fields)


def gathered_rows(split, gather: Callable[[np.ndarray], np.ndarray]):
  """`split` as the metrics read it in a run whose data is sharded: its per-row arrays
  but the inputs `gather`ed from every process (`Task.all_rows`); `x` a zero stand-in
  of the whole split's shape that takes no memory."""
  changes = {k: gather(v) for k, v in _row_arrays(split).items() if k != "x"}
  total = len(next(iter(changes.values())))
  changes["x"] = np.broadcast_to(np.zeros((), split.x.dtype), (total,) + split.x.shape[1:])
  return replaced(split, **changes)


# --------------------------------------------------------------------------- multi-label


def load_multilabel(config: ml_collections.ConfigDict,
                    process_rows: tuple[int, int] | None = None
                    ) -> data_lib.MultiLabelDataset:
  """The multi-label dataset of `config.data`; `process_rows=(p, P)`: process p of P's
  rows of every split only (`load_dataset`'s, which reads MULAN files line by line)."""
  cfg = config.data
  if cfg.name == "mulan":
    if not cfg.path:
      raise ValueError("the 'mulan' variant loads a MULAN dataset by path: pass "
                       "--config.data.path=DIR (DIR holding <name>-train.arff, "
                       "<name>-test.arff and <name>.xml)")
    source = cfg.path
  else:
    source = cfg.name
  extra = {"num_train": cfg.num_train} if cfg.num_train else {}
  return data_lib.load_dataset(source, data_dir=cfg.data_dir or None,
                               split_seed=cfg.split_seed, fold=cfg.fold, resplit=cfg.resplit,
                               root_label=cfg.root_label,
                               feature_scaling=cfg.get("feature_scaling", "auto"),
                               process_rows=process_rows, **extra)


def multilabel_validation_metrics(split, probs: np.ndarray) -> dict[str, float]:
  y = split.y
  threshold = metrics.tune_threshold(y, probs)
  return {"validation/example_f1": metrics.example_f1(y, probs >= threshold),
          "validation/example_f1@0.5": metrics.example_f1(y, probs >= 0.5)}


def multilabel_results(dataset, predictions: Predictions) -> dict[str, float]:
  results = metrics.evaluate_multilabel(
      val=(dataset.validation.y, predictions(dataset.validation)),
      test=(dataset.test.y, predictions(dataset.test)))
  return {k: float(v) for k, v in results.items()}


def multilabel_all_rows(split: data_lib.Split, gather: Callable[[np.ndarray], np.ndarray]
                        ) -> data_lib.Split:
  """The labels of every process's rows of `split` (the metrics read only `y`; `x` is
  a zero stand-in of the whole split's shape that takes no memory)."""
  y = gather(split.y)
  stand_in = np.broadcast_to(np.zeros((), split.x.dtype), (len(y),) + split.x.shape[1:])
  return data_lib.Split(stand_in, y)


def load_multilabel_rows(config: ml_collections.ConfigDict, process_index: int,
                         process_count: int) -> data_lib.MultiLabelDataset:
  """`registry.select_process_rows(load_multilabel(config), ...)`, with only the process's
  rows ever in memory (`Task.load_rows`)."""
  return load_multilabel(config, process_rows=(process_index, process_count))


MULTILABEL = Task("multilabel", load_multilabel, multilabel_validation_metrics,
                  multilabel_results, MULTILABEL_METRICS,
                  keep_rows=registry.select_process_rows, all_rows=multilabel_all_rows,
                  load_rows=load_multilabel_rows)


# --------------------------------------------------------------------------- denoising


class DenoisingData(NamedTuple):
  """The depth-scene splits plus the natural-image test crops of one noise setting.

  `input_statistics`: set where the splits hold one process's rows (`keep_rows`): the
  mean and standard deviation of all training rows' noisy images, which the denoisers
  are standardized with (`builders.denoising_input_statistics`); None: computed from
  `train`.
  """
  name: str
  train: denoising.DenoisingSplit
  validation: denoising.DenoisingSplit
  test: denoising.DenoisingSplit
  natural: denoising.DenoisingSplit
  meta: dict
  input_statistics: Optional[dict] = None


def load_denoising(config: ml_collections.ConfigDict) -> DenoisingData:
  cfg = config.data
  options = dict(num_train=cfg.num_train, num_validation=cfg.num_validation,
                 height=cfg.height, width=cfg.width, noise_sigma=cfg.noise_sigma,
                 seed=cfg.split_seed)
  depth = denoising.load_denoising("depth_scenes", num_test=cfg.num_test, **options)
  # Same train/validation scenes (a pure function of the arguments); only test differs.
  natural = denoising.load_denoising("natural_images", num_train=0, num_validation=0,
                                     **{k: v for k, v in options.items()
                                        if not k.startswith("num_")})
  meta = dict(depth.meta, natural_test=natural.meta["test_source"],
              natural_count=natural.test.num_examples, split_rule="generated")
  return DenoisingData(cfg.name, depth.train, depth.validation, depth.test, natural.test,
                       meta)


def denoising_validation_metrics(split, estimate: np.ndarray) -> dict[str, float]:
  return {"validation/psnr": metrics.psnr(split.y, estimate)}


def denoising_results(dataset: DenoisingData, predictions: Predictions) -> dict[str, float]:
  return {f"{name}/psnr": metrics.psnr(split.y, predictions(split))
          for name, split in (("validation", dataset.validation), ("test", dataset.test),
                              ("natural", dataset.natural))}


def denoising_process_rows(dataset: DenoisingData, process_index: int, process_count: int
                           ) -> DenoisingData:
  """`dataset` holding only process `process_index`'s rows of every split (`_process_part`),
  with the input statistics of all training rows."""
  if process_count == 1:
    return dataset
  # The numbers builders.denoising_input_statistics computes from the whole train split.
  images = np.asarray(dataset.train.x, np.float64)
  statistics = dict(input_mean=float(images.mean()), input_std=float(images.std()))
  return _process_part(dataset, process_index, process_count,
                       ("train", "validation", "test", "natural"),
                       input_statistics=statistics)


DENOISING = Task("denoising", load_denoising, denoising_validation_metrics,
                 denoising_results, DENOISING_METRICS, keep_rows=denoising_process_rows,
                 all_rows=gathered_rows, eval_splits=("validation", "test", "natural"))

DENOISING_DATASETS = ("depth_scenes",)


# ------------------------------------------------------------------------------ sequence

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
  train_lengths: Optional[np.ndarray] = None


def load_sequence(config: ml_collections.ConfigDict) -> SequenceData:
  cfg = config.data
  ds = data_lib.load_sequence_dataset(cfg.name, data_dir=cfg.data_dir or None,
                                      scheme=cfg.scheme or None, lowercase=cfg.lowercase,
                                      min_count=cfg.min_count,
                                      max_word_length=cfg.max_word_length)

  def split(s):
    return SequenceSplit(data_lib.pack_tokens(s), data_lib.one_hot_tags(s, ds.num_tags),
                         s.mask, ds.tag_names, ds.scheme)

  meta = dict(ds.meta, split_rule=ds.meta.get("split_rule", "shipped files"))
  return SequenceData(cfg.name, split(ds.train), split(ds.validation), split(ds.test),
                      ds.num_tags, ds, meta)


def _sequence_scores(split: SequenceSplit, outputs: np.ndarray, prefix: str
                     ) -> dict[str, float]:
  gold, pred = split.y.argmax(-1), np.asarray(outputs).argmax(-1)
  scores = {f"{prefix}/token_acc": metrics.token_accuracy(gold, pred, split.mask)}
  if split.scheme in ("iob2", "bioes"):
    span = metrics.span_f1(data_lib.decode_tags(gold, split.mask, split.tag_names),
                           data_lib.decode_tags(pred, split.mask, split.tag_names),
                           split.scheme)
    scores.update({f"{prefix}/span_f1": span.f1, f"{prefix}/span_precision": span.precision,
                   f"{prefix}/span_recall": span.recall})
  return scores


def sequence_validation_metrics(split: SequenceSplit, outputs: np.ndarray
                                ) -> dict[str, float]:
  return _sequence_scores(split, outputs, "validation")


def sequence_results(dataset: SequenceData, predictions: Predictions) -> dict[str, float]:
  results = {}
  for name in ("validation", "test"):
    split = getattr(dataset, name)
    results.update(_sequence_scores(split, predictions(split), name))
  return results


def sequence_train_batches(config, dataset: SequenceData, batch_size: int, seed: int,
                           num_shards: int | None = None) -> Callable[[int], dict]:
  """Length-bucketed training batches cropped to their longest sentence (rounded up to
  `config.data.length_multiple`), a pure function of (seed, step); with `num_shards`,
  bucketed shard by shard and this process's part of each (`batching.length_bucketed_batch`)."""
  arrays = {"x": dataset.train.x, "y": dataset.train.y}
  lengths = (dataset.train.mask.sum(-1) if dataset.train_lengths is None
             else dataset.train_lengths)
  shards, first_row = held_shards(dataset, num_shards) if num_shards else (None, 0)
  return lambda step: batching.length_bucketed_batch(
      arrays, lengths, batch_size, seed, step, config.data.length_multiple,
      num_shards=num_shards or 1, shards=shards, first_row=first_row)


def sequence_process_rows(dataset: SequenceData, process_index: int, process_count: int
                          ) -> SequenceData:
  """`dataset` holding only process `process_index`'s rows of every split (`_process_part`),
  with the lengths of all training sentences."""
  if process_count == 1:
    return dataset
  return _process_part(dataset, process_index, process_count, ("train", "validation", "test"),
                       train_lengths=dataset.train.mask.sum(-1))


SEQUENCE = Task("sequence", load_sequence, sequence_validation_metrics, sequence_results,
                SEQUENCE_METRICS, sequence_train_batches, keep_rows=sequence_process_rows,
                all_rows=gathered_rows)

SEQUENCE_DATASETS = ("twitter_pos", "conll2003")


# --------------------------------------------------------------------------- segmentation

SEGMENTATION_METRICS = {
    "mean_iou": "mean over images of the foreground IoU |ŷ ∧ y| / |ŷ ∨ y|, ŷ = prob >= 0.5 "
                "(an image with empty gold and empty prediction scores 1; the horse splits "
                "have none); the SEAL / DVN 'mean image IoU'",
    "dataset_iou": "total intersection / total union over all images of the split, at 0.5",
    "scale": "fractions in [0, 1]",
}


def load_segmentation(config: ml_collections.ConfigDict) -> segmentation.SegmentationDataset:
  cfg = config.data
  return segmentation.load_segmentation(cfg.name, data_dir=cfg.data_dir or None)


def _segmentation_scores(split, probs: np.ndarray, prefix: str) -> dict[str, float]:
  return {f"{prefix}/mean_iou": metrics.mean_iou(probs, split.y),
          f"{prefix}/dataset_iou": metrics.dataset_iou(probs, split.y)}


def segmentation_validation_metrics(split, probs: np.ndarray) -> dict[str, float]:
  return _segmentation_scores(split, probs, "validation")


def segmentation_results(dataset, predictions: Predictions) -> dict[str, float]:
  results = {}
  for name in ("validation", "test"):
    split = getattr(dataset, name)
    results.update(_segmentation_scores(split, predictions(split), name))
  return results


def segmentation_train_batches(config, dataset, batch_size: int, seed: int,
                               num_shards: int | None = None) -> Callable[[int], dict]:
  """Training batches, a pure function of (seed, step): the loop's uniform random rows,
  augmented (`segmentation.augmented_batch`: a random `data.crop_size` window, 0 = the
  image's size, of the image padded by `data.augment_pad` pixels, flipped if
  `data.augment_flip`). With `data.augment` off: the rows as they are, or, with a
  `crop_size`, random crops without padding or flips (the model's input size). With
  `num_shards`, drawn shard by shard, and this process's part of each."""
  cfg = config.data
  # Augmentation off is the identity transform (no padding, no flip) of the same rows.
  pad, flip = (cfg.augment_pad, cfg.augment_flip) if cfg.augment else (0, False)
  shards, first_row = held_shards(dataset, num_shards) if num_shards else (None, 0)
  num_rows = num_examples(dataset, "train")
  return lambda step: segmentation.augmented_batch(
      dataset.train.x, dataset.train.y, batch_size, seed, step, pad=pad, flip=flip,
      pad_mode=cfg.augment_pad_mode, crop=cfg.crop_size, num_shards=num_shards or 1,
      shards=shards, first_row=first_row, num_rows=num_rows)


def segmentation_model_rows(config, a: np.ndarray) -> np.ndarray:
  """Images `[N, H, W, C]` or masks `[N, H, W]` as the model sees them at evaluation:
  whole, or with `data.crop_size` the crops at `data.eval_crop_offsets`
  (`segmentation.crop_grid`, SEAL's test protocol); with `data.eval_flip`, those rows
  followed by their left-right mirrors (`segmentation.with_mirrors`)."""
  cfg = config.data
  if cfg.crop_size:
    a = segmentation.crop_grid(a, cfg.crop_size, tuple(cfg.eval_crop_offsets))
  return segmentation.with_mirrors(a) if cfg.eval_flip else a


def segmentation_predict_split(config, predict_rows, x: np.ndarray) -> np.ndarray:
  """The model's soft masks of whole images; with `data.crop_size`, of the crops
  (`segmentation_model_rows`) averaged back per pixel; with `data.eval_flip`, each
  row's mask averaged with its mirror's, mirrored back (test-time flip averaging)."""
  probs = predict_rows(segmentation_model_rows(config, x))
  if config.data.eval_flip:
    probs = segmentation.average_mirrors(probs)
  if not config.data.crop_size:
    return probs
  return segmentation.average_crops(probs, x.shape[1], x.shape[2],
                                    tuple(config.data.eval_crop_offsets))


def segmentation_process_rows(dataset: segmentation.SegmentationDataset, process_index: int,
                              process_count: int) -> segmentation.SegmentationDataset:
  """`dataset` holding only process `process_index`'s rows of every split (`_process_part`;
  the images stay normalized by all training rows' statistics)."""
  return _process_part(dataset, process_index, process_count, ("train", "validation", "test"))


SEGMENTATION = Task("segmentation", load_segmentation, segmentation_validation_metrics,
                    segmentation_results, SEGMENTATION_METRICS, segmentation_train_batches,
                    segmentation_predict_split, segmentation_model_rows,
                    keep_rows=segmentation_process_rows, all_rows=gathered_rows)

SEGMENTATION_DATASETS = tuple(segmentation.SEGMENTATION_DATASETS)


def task_for(config: ml_collections.ConfigDict) -> Task:
  if config.data.name in DENOISING_DATASETS:
    return DENOISING
  if config.data.name in SEQUENCE_DATASETS:
    return SEQUENCE
  if config.data.name in SEGMENTATION_DATASETS:
    return SEGMENTATION
  return MULTILABEL
