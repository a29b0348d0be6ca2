"""The suite's scaling curves: time and peak memory against batch size, label count, GBI
steps T and Neumann terms K (`scaling.csv`, `scaling_*.png`; `benchmarks.suite`)."""

import os

from benchmarks.suite_measure import Sizes
from benchmarks.suite_measure import feed_forward_point
from benchmarks.suite_measure import gbi_point
from benchmarks.suite_measure import mib
from benchmarks.suite_measure import pyplot
from benchmarks.suite_measure import train_point


def scaling_section(sizes: Sizes) -> list[dict]:
  """Rows `curve, value, row, batch, ms, examples_per_s, peak_bytes`."""
  repeats = sizes.repeats
  labels, test = sizes.num_labels, sizes.num_test
  train_batch = None  # the config's
  t_default = 20 if not sizes.quick else sizes.gbi_steps[-1]
  points = []

  def shape_points(curve, value, num_labels, rows, batch):
    """The four rows measured at each point of the batch-size and label-count curves."""
    return [
      (
        curve,
        value,
        "feed-forward predict",
        lambda: feed_forward_point(num_labels, rows, sizes, repeats),
      ),
      (
        curve,
        value,
        f"GBI predict (T={t_default})",
        lambda: gbi_point(num_labels, rows, t_default, sizes, repeats),
      ),
      (
        curve,
        value,
        "seal_dynamic train step",
        lambda: train_point("seal_dynamic", num_labels, batch, sizes, repeats),
      ),
      (
        curve,
        value,
        "e2e train step",
        lambda: train_point("e2e", num_labels, batch, sizes, repeats),
      ),
    ]

  for b in sizes.batch_sizes:
    points += shape_points("batch_size", b, labels, b, b)
  for n in sizes.label_counts:
    points += shape_points("labels", n, n, test, train_batch)
  for t in sizes.gbi_steps:
    points += [
      ("gbi_steps", t, "GBI predict", lambda t=t: gbi_point(labels, test, t, sizes, repeats)),
      (
        "gbi_steps",
        t,
        "e2e train step (backprop through T steps)",
        lambda t=t: train_point(
          "e2e", labels, train_batch, sizes, repeats, (f"gbi.num_steps={t}",)
        ),
      ),
    ]
  for k in sizes.neumann_terms:
    points.append(
      (
        "neumann_terms",
        k,
        "implicit train step",
        lambda k=k: train_point(
          "implicit", labels, train_batch, sizes, repeats, (f"implicit.inverse_hvp.num_terms={k}",)
        ),
      )
    )
  rows = []
  for curve, value, row, measure in points:
    result = measure()
    rows.append(dict(curve=curve, value=value, row=row, **result))
    print(
      f"  {curve}={value} {row}: {result['ms']:.1f} ms ({result['batch']} rows), "
      f"{result['peak_bytes'] / 2**20:.1f} MiB",
      flush=True,
    )
  return rows


CURVES = {
  "batch_size": ("batch size", "examples / s", "examples_per_s"),
  "labels": ("labels L", "ms per call", "ms"),
  "gbi_steps": ("GBI steps T", "ms per call", "ms"),
  "neumann_terms": ("Neumann terms K", "ms per call", "ms"),
}


def plot_scaling(out_dir: str, rows: list[dict]) -> list[str]:
  """One PNG per curve: time (or throughput) and peak memory against the variable."""
  plt = pyplot()
  written = []
  for curve, (xlabel, ylabel, key) in CURVES.items():
    points = [r for r in rows if r["curve"] == curve]
    if not points:
      continue
    fig, (ax_time, ax_mem) = plt.subplots(1, 2, figsize=(11, 4))
    for name in dict.fromkeys(r["row"] for r in points):
      series = [r for r in points if r["row"] == name]
      xs = [r["value"] for r in series]
      ax_time.plot(xs, [r[key] for r in series], "o-", label=name)
      ax_mem.plot(xs, [r["peak_bytes"] / 2**20 for r in series], "o-", label=name)
    for ax, label in ((ax_time, ylabel), (ax_mem, "peak memory (MiB)")):
      ax.set_xlabel(xlabel)
      ax.set_ylabel(label)
      if curve == "batch_size" or curve == "labels":
        ax.set_xscale("log")
      ax.set_yscale("log")
      ax.grid(True, which="both", alpha=0.3)
    ax_time.legend(fontsize=8)
    fig.suptitle(f"scaling with {xlabel}")
    fig.tight_layout()
    path = os.path.join(out_dir, f"scaling_{curve}.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    written.append(path)
  return written


def scaling_markdown(scaling: list[dict]) -> list[str]:
  """The summary's scaling tables, one per curve."""
  lines = []
  if scaling:
    lines += ["", "## Scaling", ""]
    for curve, (xlabel, _, _) in CURVES.items():
      points = [r for r in scaling if r["curve"] == curve]
      if not points:
        continue
      values = list(dict.fromkeys(r["value"] for r in points))
      lines += [
        f"### {xlabel}",
        "",
        "| row | " + " | ".join(str(v) for v in values) + " |",
        "|---|" + "---|" * len(values),
      ]
      for name in dict.fromkeys(r["row"] for r in points):
        cells = {r["value"]: r for r in points if r["row"] == name}
        lines.append(
          f"| {name} (ms / peak MiB) | "
          + " | ".join(
            f"{cells[v]['ms']:.1f} / {mib(cells[v]['peak_bytes'])}" if v in cells else ""
            for v in values
          )
          + " |"
        )
      lines += ["", f"![{curve}](scaling_{curve}.png)", ""]
  return lines
