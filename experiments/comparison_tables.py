"""The tables of `experiments.compare`: a markdown row per (dataset, method), the columns of
the task the results come from, and the files `--out` writes.

Multi-label runs get the F1 / Hamming columns (`COLUMNS`), denoising runs the PSNR
columns, sequence runs token accuracy (and span F1 for NER), segmentation runs the mean
and dataset IoU; rates are printed as percentages, PSNR in dB (`unscaled`). Several
folds of a row show their mean ± standard deviation.
"""

import json

from etils import epath
import numpy as np

__all__ = [
  "COLUMNS",
  "DENOISING_COLUMNS",
  "NER_COLUMNS",
  "SEGMENTATION_COLUMNS",
  "SEQUENCE_COLUMNS",
  "format_pivot",
  "format_table",
  "preamble",
  "unscaled",
  "write_outputs",
]

# (column title, results key, scale): rates are printed as percentages, PSNR in dB.
DENOISING_COLUMNS = (
  ("PSNR val", "validation/psnr", 1.0),
  ("PSNR test", "test/psnr", 1.0),
  ("PSNR natural", "natural/psnr", 1.0),
)
SEQUENCE_COLUMNS = (
  ("token acc val", "validation/token_acc", 100.0),
  ("token acc test", "test/token_acc", 100.0),
)
NER_COLUMNS = SEQUENCE_COLUMNS + (
  ("span F1 val", "validation/span_f1", 100.0),
  ("span F1 test", "test/span_f1", 100.0),
  ("span P test", "test/span_precision", 100.0),
  ("span R test", "test/span_recall", 100.0),
)
SEGMENTATION_COLUMNS = (
  ("mean IoU val", "validation/mean_iou", 100.0),
  ("mean IoU test", "test/mean_iou", 100.0),
  ("dataset IoU test", "test/dataset_iou", 100.0),
)
COLUMNS = (
  ("ex-F1 (tuned)", "test/example_f1", 100.0),
  ("ex-F1 @0.5", "test/example_f1@0.5", 100.0),
  ("micro-F1", "test/micro_f1", 100.0),
  ("macro-F1", "test/macro_f1", 100.0),
  ("Hamming", "test/hamming", 100.0),
  ("threshold", "threshold", 1.0),
)


def _lookup(results: dict, key: str) -> float:
  return float(results[key])


def unscaled(key: str) -> bool:
  """Keys printed as they are: the threshold and PSNR (dB); rates become percentages."""
  return key == "threshold" or key.endswith("psnr")


def format_table(rows: list[tuple[str, str, list[dict]]]) -> str:
  """rows: (dataset, method, results of each fold) -> markdown.

  Multi-label runs get the F1/Hamming columns, denoising runs (results with
  `test/psnr`) the PSNR columns, sequence runs the token-accuracy columns (and span
  F1 when every row has it: NER), segmentation runs the mean / dataset IoU columns.
  """
  columns: tuple[tuple[str, str, float], ...] = COLUMNS
  for key, candidate in (
    ("test/psnr", DENOISING_COLUMNS),
    ("test/token_acc", SEQUENCE_COLUMNS),
    ("test/span_f1", NER_COLUMNS),
    ("test/mean_iou", SEGMENTATION_COLUMNS),
  ):
    if rows and all(key in runs[0] for _, _, runs in rows):
      columns = candidate
  header = "| dataset | method | " + " | ".join(c[0] for c in columns) + " |"
  lines = [header, "|" + "---|" * (len(columns) + 2)]
  for dataset, method, runs in rows:
    cells = []
    for _, key, scale in columns:
      values = np.array([_lookup(r, key) * scale for r in runs])
      cell = f"{values.mean():.2f}"
      if len(values) > 1:
        cell += f" ± {values.std(ddof=1):.2f}"
      cells.append(cell)
    name = dataset if len(runs) == 1 else f"{dataset} ({len(runs)} folds)"
    lines.append(f"| {name} | {method} | " + " | ".join(cells) + " |")
  return "\n".join(lines)


def format_pivot(rows: list[tuple[str, str, list[dict]]], key: str) -> str:
  """One results key as a markdown table: a row per method, a column per dataset.

  A method not run on a dataset (or without that key there) shows "–"; several folds
  show their mean.
  """
  datasets = list(dict.fromkeys(d for d, _, _ in rows))
  methods = list(dict.fromkeys(m for _, m, _ in rows))
  cells = {
    (d, m): np.mean([_lookup(r, key) for r in runs])
    for d, m, runs in rows
    if all(key in r for r in runs)
  }  # e.g. span F1: NER rows only
  scale = 1.0 if unscaled(key) else 100.0
  lines = [f"| {key} | " + " | ".join(datasets) + " |", "|" + "---|" * (len(datasets) + 1)]
  for m in methods:
    values = [f"{cells[d, m] * scale:.2f}" if (d, m) in cells else "–" for d in datasets]
    lines.append(f"| {m} | " + " | ".join(values) + " |")
  return "\n".join(lines)


# What of each run's meta goes into the committed JSON (not the machine's paths).
_SUMMARY_META = (
  "dataset",
  "split",
  "split_seed",
  "fold",
  "seed",
  "selected_step",
  "final_step",
  "stop_reason",
  "train_seconds",
  "num_devices",
  "code_revision",
  "config",
)


def _summary(results: dict) -> dict:
  summary = {k: v for k, v in results.items() if k != "meta"}
  summary["meta"] = {k: results["meta"][k] for k in _SUMMARY_META if k in results["meta"]}
  return summary


def preamble(table: str) -> str:
  """What the numbers of a generated table are."""
  if "PSNR test" in table:
    return (
      "PSNR in dB, peak 1 on images in [0, 1]; `natural`: crops of scikit-image's natural images."
    )
  if "mean IoU" in table:
    return (
      "Rates are percentages: mean IoU is the mean over images of the foreground IoU "
      "of the mask thresholded at 0.5; dataset IoU pools every pixel of the split."
    )
  if "token acc" in table:
    return (
      "Rates are percentages: token accuracy over real tokens; span F1 / P / R over "
      "entities, exact span and type (conlleval)."
    )
  return (
    "All rates are percentages on the test split; thresholds are tuned on validation "
    "(grid 0.05..0.95)."
  )


def write_outputs(
  out: epath.Path, command: str, table: str, rows: list[tuple[str, str, list[dict]]]
) -> None:
  """Writes the table to `out` (markdown) and every run's summary next to it, as `.json`.

  Args:
    out: the markdown file (local or an object-store URL; its folder is created).
    command: the command line that generated the table.
    table: the markdown table(s).
    rows: `(dataset, method, results of each fold)`, as `format_table` takes them.
  """
  out.parent.mkdir(parents=True, exist_ok=True)
  revisions = sorted({r["meta"]["code_revision"] for _, _, runs in rows for r in runs})
  out.write_text(
    f"Generated by `{command}` (code revision {', '.join(revisions)}).\n\n"
    + preamble(table)
    + "\n\n"
    + table
    + "\n"
  )
  summary = [
    {"dataset": d, "method": m, "runs": [_summary(r) for r in runs]} for d, m, runs in rows
  ]
  out.with_suffix(".json").write_text(json.dumps(summary, indent=1, default=str))
