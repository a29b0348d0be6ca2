"""The figures of the papers' pages (docs/papers/), and the learning curves behind them.

Learning curves are not in the committed results JSON (experiments.compare keeps each
run's summary, not its history), and the run directories stay on the machine that
trained them. `extract_curves` reads the validation records of a compare workdir's runs
(`<run>/[stages/<stage>/]metrics.jsonl`, energynets.train.MetricWriter's format) into a
small JSON that is committed, so the report can be regenerated anywhere.
"""

from collections.abc import Sequence
import json
import os
from typing import Any
from typing import cast

import matplotlib

matplotlib.use("Agg")  # headless
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
import numpy as np

from experiments.specs import run_name

# No "Software" entry: the same data gives the same bytes across matplotlib patch releases.
_PNG_METADATA = {"Software": None}


def is_unscaled(metric: str) -> bool:
  """experiments.compare's rule for what it prints as is (PSNR in dB, the threshold);
  every other metric is a rate, shown as a percentage. Not imported (that binary defines
  absl flags and pulls in jax); tests/test_reproduction_report.py checks the two agree."""
  return metric == "threshold" or metric.endswith("psnr")


def _axis_scale(metric: str) -> tuple[float, str]:
  """`(scale, y-axis label)` of a validation metric: rates in %, PSNR in dB."""
  if not is_unscaled(metric):
    return 100.0, f"{metric} (%)"
  return 1.0, f"{metric} (dB)" if metric.endswith("psnr") else metric


def run_dir(workdir: str, dataset: str, method: str, folds: int) -> str:
  """Where experiments.compare put a row's run; fold 0 of a cross-validated row."""
  return os.path.join(
    workdir, run_name(dataset) + ("-fold0" if folds > 1 else ""), run_name(method)
  )


def read_metrics_jsonl(path: str) -> list[dict[str, float]]:
  """The records of a MetricWriter `metrics.jsonl`; [] when the file is absent."""
  if not os.path.exists(path):
    return []
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]


def record_means(
  records: Sequence[dict[str, float]], keys: Sequence[str]
) -> dict[str, tuple[float, int]]:
  """`{key: (mean over the records that log it, how many do)}`; a key no record logs is an
  error naming the keys that are logged (benchmarks.train_records prints these)."""
  means = {}
  for key in keys:
    values = [r[key] for r in records if key in r]
    if not values:
      logged = sorted({k for r in records for k in r if k != "step"})
      raise ValueError(f"no record logs {key!r}; logged keys: {logged}")
    means[key] = (float(np.mean(values)), len(values))
  return means


def _validation_records(path: str) -> list[dict[str, float]]:
  return [r for r in read_metrics_jsonl(path) if any(k.startswith("validation/") for k in r)]


def run_curve(directory: str) -> dict[str, Any] | None:
  """The selection metric of one run against its training step, stage after stage.

  A stage starts from the previous stage's selected state, so its steps are offset by
  the selected steps before it (`stage_starts`). Returns None when the run is absent.
  """
  results_path = os.path.join(directory, "results.json")
  if not os.path.exists(results_path):
    return None
  with open(results_path) as f:
    meta = json.load(f)["meta"]
  metric = meta.get("config", {}).get("train", {}).get("select_metric")
  stages = meta.get("stages") or [{"stage": "", "selected_step": meta.get("selected_step")}]
  points, starts, offset = [], [], 0
  for stage in stages:
    stage_dir = os.path.join(directory, "stages", stage["stage"]) if stage["stage"] else directory
    records = _validation_records(os.path.join(stage_dir, "metrics.jsonl"))
    if metric is None and records:
      metric = sorted(k for k in records[0] if k.startswith("validation/"))[0]
    starts.append(offset)
    # A resumed run can repeat a step (sequences.md: a crashed duplicate); keep the last.
    by_step = {r["step"]: r[metric] for r in records if metric in r}
    points += [[offset + s, by_step[s]] for s in sorted(by_step)]
    offset += stage.get("selected_step") or 0
  return {"metric": metric, "stage_starts": starts, "points": points}


def extract_curves(workdir: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
  """`{"<dataset>/<method>": run_curve}` for the rows of a compare results JSON whose runs
  exist under `workdir`."""
  curves = {}
  for row in rows:
    curve = run_curve(run_dir(workdir, row["dataset"], row["method"], len(row["runs"])))
    if curve is not None and curve["points"]:
      curves[f"{row['dataset']}/{row['method']}"] = curve
  return curves


def plot_learning_curves(curves: dict[str, Any], path: str, title: str) -> None:
  """One panel per dataset, one line per method: the validation metric against step
  (rates in %, PSNR in dB)."""
  datasets = sorted({key.split("/", 1)[0] for key in curves})
  fig, axes = plt.subplots(len(datasets), 1, figsize=(10, 3.6 * len(datasets)), squeeze=False)
  palette = plt.get_cmap("tab20")
  assert isinstance(palette, matplotlib.colors.ListedColormap), "tab20 lists its colors"
  # Up to 20 methods per panel stay distinguishable.
  colors = cast(Sequence[Any], palette.colors)
  for ax, dataset in zip(axes[:, 0], datasets):
    keys = sorted(k for k in curves if k.split("/", 1)[0] == dataset)
    for i, key in enumerate(keys):
      curve = curves[key]
      scale, ylabel = _axis_scale(curve["metric"])
      steps, values = np.array(curve["points"], dtype=float).T
      ax.plot(
        steps,
        scale * values,
        marker=".",
        lw=1,
        color=colors[i % len(colors)],
        ls=("-", "--", ":")[i // len(colors) % 3],
        label=key.split("/", 1)[1],
      )
    ax.set(
      xlabel="training step (stages offset by the selected steps before them)",
      ylabel=ylabel,
      title=f"{title}: {dataset}",
    )
    ax.legend(fontsize=6, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.grid(alpha=0.3)
  fig.tight_layout()
  fig.savefig(path, dpi=90, metadata=_PNG_METADATA, bbox_inches="tight")  # keeps the legend
  plt.close(fig)


def plot_gbi_steps(rows: list[dict[str, Any]], path: str, title: str) -> None:
  """Speed/accuracy of GBI: test example-F1 against GBI steps and against milliseconds.

  `rows` are benchmarks/gbi_steps.py's (compare-format) rows; each run holds
  `gbi_steps` (0 for the feed-forward prediction), `seconds`, the F1 keys and
  `meta.kind` (feed_forward, gbi_scan or gbi_while).
  """
  runs = [(row["method"], row["runs"][0]) for row in rows]
  fixed = sorted(
    (r for _, r in runs if r["meta"]["kind"] == "gbi_scan"), key=lambda r: r["gbi_steps"]
  )
  fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
  for key, label, style in (
    ("test/example_f1", "tuned threshold", "o-"),
    ("test/example_f1@0.5", "threshold 0.5", "s--"),
  ):
    steps = [r["gbi_steps"] for r in fixed]
    left.plot(steps, [100 * r[key] for r in fixed], style, label=f"GBI, T steps, {label}")
    right.plot(
      [1e3 * r["seconds"] for r in fixed],
      [100 * r[key] for r in fixed],
      style,
      label=f"GBI, T steps, {label}",
    )
    for name, r in runs:
      if r["meta"]["kind"] == "gbi_scan":
        continue
      marker = "*" if r["meta"]["kind"] == "gbi_while" else "D"
      left.scatter(
        [max(r["gbi_steps"], 1)],
        [100 * r[key]],
        marker=marker,
        s=80,
        zorder=3,
        label=f"{name}, {label}",
      )
      right.scatter(
        [1e3 * r["seconds"]],
        [100 * r[key]],
        marker=marker,
        s=80,
        zorder=3,
        label=f"{name}, {label}",
      )
  left.set(
    xscale="log",
    xlabel="GBI steps T (feed-forward drawn at 1)",
    ylabel="test example-F1 (%)",
    title=title,
  )
  right.set(
    xlabel="ms to predict the test split", ylabel="test example-F1 (%)", title="speed / accuracy"
  )
  for ax in (left, right):
    ax.grid(alpha=0.3)
  right.legend(fontsize=6, loc="lower right")
  fig.tight_layout()
  fig.savefig(path, dpi=90, metadata=_PNG_METADATA)
  plt.close(fig)
