"""Task metrics and differentiable surrogates.

Four families live here, one module each:

* Multi-label reporting metrics (`multilabel`; numpy, exact, validated inputs):
  example-F1, micro-F1, macro-F1 and Hamming loss, threshold tuning on the validation
  split, and `evaluate_multilabel`, which builds the flat `"<split>/<metric>"` results
  map of the design's results contract. They follow the project's metric protocol
  (docs/datasets.md, "Metric protocol").
* Image metrics (`images`; numpy): `psnr`, the mean over images of per-image PSNR in
  dB, and for segmentation `mean_iou` (mean over images of foreground IoU),
  `dataset_iou` (total intersection / total union) and `per_image_iou`.
* Sequence labeling (`sequences`; numpy / Python): `token_accuracy` and conlleval's
  entity `span_f1`.
* Differentiable surrogates (`surrogates`; jax.numpy): `soft_f1` and `soft_iou`, per
  example, usable under `jit`, `vmap` and `grad` (SEAL/DVN scores, CD costs).

Conventions (every number in a table depends on these, so they are fixed here):

* Shapes: `y_true` and predictions are `[N, L]` (N examples, L labels).
* `binarize` predicts a label when `prob >= threshold`.
* Example-F1 of one example is `2|y ∧ ŷ| / (|y| + |ŷ|)`; an example with empty
  gold *and* empty prediction scores 1; empty gold with a non-empty prediction
  (or the reverse) scores 0. This equals scikit-learn's
  `f1_score(average='samples', zero_division=1.0)`.
* Micro-F1 is `2 TP / (2 TP + FP + FN)` over all label bits, and 1 when there
  is no gold and no predicted positive at all (`zero_division=1.0`).
* Macro-F1 is the unweighted mean over labels of the per-label F1; a label with
  no gold and no predicted positive scores `zero_division`, by default 1 (it
  was predicted perfectly, the same convention as the empty/empty example).
  Equals `f1_score(average='macro', zero_division=zero_division)`.
* Hamming loss is the fraction of wrong label bits (lower is better).
* All rates are fractions in [0, 1]; tables multiply by 100.
"""

from energynets.metrics import multilabel
from energynets.metrics import sequences
from energynets.metrics.images import dataset_iou
from energynets.metrics.images import mean_iou
from energynets.metrics.images import per_image_iou
from energynets.metrics.images import psnr
from energynets.metrics.multilabel import binarize
from energynets.metrics.multilabel import evaluate_multilabel
from energynets.metrics.multilabel import example_f1
from energynets.metrics.multilabel import hamming_loss
from energynets.metrics.multilabel import macro_f1
from energynets.metrics.multilabel import micro_f1
from energynets.metrics.multilabel import multilabel_report
from energynets.metrics.multilabel import tune_threshold
from energynets.metrics.sequences import SpanScores
from energynets.metrics.sequences import extract_spans
from energynets.metrics.sequences import span_f1
from energynets.metrics.sequences import token_accuracy
from energynets.metrics.surrogates import soft_f1
from energynets.metrics.surrogates import soft_iou

THRESHOLD_GRID: tuple[float, ...] = multilabel.THRESHOLD_GRID
"""The decision thresholds 0.05, 0.10, ..., 0.95 that `tune_threshold` searches."""

SPAN_SCHEMES: dict[str, frozenset[str]] = sequences.SPAN_SCHEMES
"""The tag prefixes each span scheme allows: `'iob2'` B/I, `'bioes'` B/I/E/S."""

__all__ = [
  "THRESHOLD_GRID",
  "binarize",
  "example_f1",
  "micro_f1",
  "macro_f1",
  "hamming_loss",
  "tune_threshold",
  "multilabel_report",
  "evaluate_multilabel",
  "psnr",
  "soft_f1",
  "soft_iou",
  "per_image_iou",
  "mean_iou",
  "dataset_iou",
  "SPAN_SCHEMES",
  "SpanScores",
  "token_accuracy",
  "extract_spans",
  "span_f1",
]
