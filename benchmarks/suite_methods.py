"""The suite's methods section: each method's training update and inference, their
speed and peak memory (`methods.csv`, `methods.png`; `benchmarks.suite`)."""

import os
import time

import numpy as np

from benchmarks import common
from benchmarks.suite_measure import Sizes
from benchmarks.suite_measure import device_peak
from benchmarks.suite_measure import method_config
from benchmarks.suite_measure import mib
from benchmarks.suite_measure import predict_row
from benchmarks.suite_measure import pyplot
from benchmarks.suite_measure import train_step_row


def methods_section(sizes: Sizes, specs) -> list[dict]:
  """One row per method spec: its training update and inference over the test rows."""
  rows = []
  shapes = common.MultilabelShapes(sizes.num_features, sizes.num_labels)
  for spec in specs:
    started = time.perf_counter()
    rs = np.random.RandomState(0)
    stage, stages = method_config(spec, sizes)
    batch = common.random_multilabel_batch(
      rs, stage.train.batch_size, sizes.num_features, sizes.num_labels
    )
    objective, state = common.build_state(stages, shapes, batch)
    test_x = common.random_multilabel_batch(
      rs, sizes.num_test, sizes.num_features, sizes.num_labels
    )["x"]
    t = train_step_row(objective, state, batch, sizes.repeats)
    p = predict_row(objective, state, test_x, stage.train.eval_batch_size, sizes.repeats)
    rows.append(
      dict(
        method=spec,
        stage_method=stage.method,
        train_batch=t["batch"],
        train_ms=t["ms"],
        train_examples_per_s=t["examples_per_s"],
        train_peak_bytes=t["peak_bytes"],
        inference_examples=sizes.num_test,
        inference_batch=p["batch"],
        inference_ms=p["ms"],
        inference_examples_per_s=p["examples_per_s"],
        inference_peak_bytes=p["peak_bytes"],
        device_peak_bytes=device_peak(),
      )
    )
    print(
      f"  {spec}: train {t['ms']:.1f} ms / {t['batch']}, inference {p['ms']:.1f} ms / "
      f"{sizes.num_test} ({time.perf_counter() - started:.0f} s with compilation)",
      flush=True,
    )
  return rows


def plot_methods(out_dir: str, rows: list[dict]) -> str:
  """Bars of train and inference examples/s per method (`methods.png`)."""
  plt = pyplot()
  fig, ax = plt.subplots(figsize=(11, 4.5))
  names = [r["method"] for r in rows]
  xs = np.arange(len(rows))
  ax.bar(xs - 0.2, [r["train_examples_per_s"] for r in rows], 0.4, label="train examples/s")
  ax.bar(xs + 0.2, [r["inference_examples_per_s"] for r in rows], 0.4, label="inference examples/s")
  ax.set_xticks(xs, names, rotation=30, ha="right")
  ax.set_yscale("log")
  ax.set_ylabel("examples / s")
  ax.legend()
  ax.grid(True, axis="y", which="both", alpha=0.3)
  fig.tight_layout()
  path = os.path.join(out_dir, "methods.png")
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return path


def methods_markdown(methods: list[dict]) -> list[str]:
  """The summary's methods table (and inference against the MLP's)."""
  lines = []
  if methods:
    by_method = {r["method"]: r for r in methods}
    if "mlp" in by_method:
      lines += [
        "",
        "Inference of each method against the MLP's feed-forward pass (methods "
        "table, eval batches):",
        "",
      ]
      base = by_method["mlp"]["inference_ms"]
      lines.append(
        ", ".join(f"{r['method']} {r['inference_ms'] / base:.2f}×" for r in methods) + "."
      )
    lines += [
      "",
      "## Every method (train step and inference)",
      "",
      "| method | stage objective | train batch | train ms | train examples/s | "
      "train peak MiB | inference ms (all test rows) | inference examples/s | "
      "inference peak MiB |",
      "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in methods:
      lines.append(
        f"| {r['method']} | {r['stage_method']} | {r['train_batch']} | "
        f"{r['train_ms']:.1f} | {r['train_examples_per_s']:.0f} | "
        f"{mib(r['train_peak_bytes'])} | {r['inference_ms']:.1f} | "
        f"{r['inference_examples_per_s']:.0f} | {mib(r['inference_peak_bytes'])} |"
      )
    lines += ["", "![methods](methods.png)"]
  return lines
