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

`task_for(config)` picks the task from `config.data.name`. Each family is a module of its
own (`experiments.tasks.multilabel`, `.denoising`, `.sequence`, `.segmentation`), the
`Task` type and the helpers for sharded datasets are `experiments.tasks.base`; this
package re-exports their names.
"""

import ml_collections

from experiments.tasks.base import Predictions
from experiments.tasks.base import Task
from experiments.tasks.base import gathered_rows
from experiments.tasks.base import held_rows_summary
from experiments.tasks.base import held_shards
from experiments.tasks.base import num_examples
from experiments.tasks.base import process_part
from experiments.tasks.base import replaced
from experiments.tasks.denoising import DENOISING
from experiments.tasks.denoising import DENOISING_DATASETS
from experiments.tasks.denoising import DENOISING_METRICS
from experiments.tasks.denoising import DenoisingData
from experiments.tasks.denoising import denoising_process_rows
from experiments.tasks.denoising import denoising_results
from experiments.tasks.denoising import denoising_validation_metrics
from experiments.tasks.denoising import load_denoising
from experiments.tasks.multilabel import MULTILABEL
from experiments.tasks.multilabel import MULTILABEL_METRICS
from experiments.tasks.multilabel import load_multilabel
from experiments.tasks.multilabel import load_multilabel_rows
from experiments.tasks.multilabel import multilabel_all_rows
from experiments.tasks.multilabel import multilabel_results
from experiments.tasks.multilabel import multilabel_validation_metrics
from experiments.tasks.segmentation import SEGMENTATION
from experiments.tasks.segmentation import SEGMENTATION_DATASETS
from experiments.tasks.segmentation import SEGMENTATION_METRICS
from experiments.tasks.segmentation import load_segmentation
from experiments.tasks.segmentation import segmentation_model_rows
from experiments.tasks.segmentation import segmentation_predict_split
from experiments.tasks.segmentation import segmentation_process_rows
from experiments.tasks.segmentation import segmentation_results
from experiments.tasks.segmentation import segmentation_train_batches
from experiments.tasks.segmentation import segmentation_validation_metrics
from experiments.tasks.sequence import SEQUENCE
from experiments.tasks.sequence import SEQUENCE_DATASETS
from experiments.tasks.sequence import SEQUENCE_METRICS
from experiments.tasks.sequence import SequenceData
from experiments.tasks.sequence import SequenceSplit
from experiments.tasks.sequence import load_sequence
from experiments.tasks.sequence import sequence_process_rows
from experiments.tasks.sequence import sequence_results
from experiments.tasks.sequence import sequence_train_batches
from experiments.tasks.sequence import sequence_validation_metrics

__all__ = [
  "DENOISING",
  "DENOISING_DATASETS",
  "DENOISING_METRICS",
  "DenoisingData",
  "MULTILABEL",
  "MULTILABEL_METRICS",
  "Predictions",
  "SEGMENTATION",
  "SEGMENTATION_DATASETS",
  "SEGMENTATION_METRICS",
  "SEQUENCE",
  "SEQUENCE_DATASETS",
  "SEQUENCE_METRICS",
  "SequenceData",
  "SequenceSplit",
  "Task",
  "denoising_process_rows",
  "denoising_results",
  "denoising_validation_metrics",
  "gathered_rows",
  "held_rows_summary",
  "held_shards",
  "load_denoising",
  "load_multilabel",
  "load_multilabel_rows",
  "load_segmentation",
  "load_sequence",
  "multilabel_all_rows",
  "multilabel_results",
  "multilabel_validation_metrics",
  "num_examples",
  "process_part",
  "replaced",
  "segmentation_model_rows",
  "segmentation_predict_split",
  "segmentation_process_rows",
  "segmentation_results",
  "segmentation_train_batches",
  "segmentation_validation_metrics",
  "sequence_process_rows",
  "sequence_results",
  "sequence_train_batches",
  "sequence_validation_metrics",
  "task_for",
]


def task_for(config: ml_collections.ConfigDict) -> Task:
  """The task of `config.data.name` (multi-label unless a denoising, sequence or
  segmentation dataset names it)."""
  if config.data.name in DENOISING_DATASETS:
    return DENOISING
  if config.data.name in SEQUENCE_DATASETS:
    return SEQUENCE
  if config.data.name in SEGMENTATION_DATASETS:
    return SEGMENTATION
  return MULTILABEL
