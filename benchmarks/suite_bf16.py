"""The suite's bfloat16 section: rows measured with the configs' float32 and with
`train.compute_dtype=bfloat16` in the same run (`bf16.csv`; `benchmarks.suite`)."""

from benchmarks.suite_measure import Sizes
from benchmarks.suite_measure import feed_forward_point
from benchmarks.suite_measure import gbi_point
from benchmarks.suite_measure import mib
from benchmarks.suite_measure import train_point

BFLOAT16 = ("train.compute_dtype=bfloat16",)


def bf16_section(sizes: Sizes) -> list[dict]:
  """Rows `row, rows, float32_ms, bfloat16_ms, speedup, float32_peak_bytes,
  bfloat16_peak_bytes, memory_ratio`: four of the scaling rows at bibtex's shapes, each
  built and timed with the configs' float32 and then with `train.compute_dtype=bfloat16`
  (the networks in bfloat16, state, GBI iterates and losses float32)."""
  labels, test, repeats = sizes.num_labels, sizes.num_test, sizes.repeats
  t = 20 if not sizes.quick else sizes.gbi_steps[-1]
  points = [
    ("feed-forward predict", lambda extra: feed_forward_point(labels, test, sizes, repeats, extra)),
    (f"GBI predict (T={t})", lambda extra: gbi_point(labels, test, t, sizes, repeats, extra)),
    (
      "spen_ssvm train step",
      lambda extra: train_point("spen_ssvm", labels, None, sizes, repeats, extra),
    ),
    (
      "seal_dynamic train step",
      lambda extra: train_point("seal_dynamic", labels, None, sizes, repeats, extra),
    ),
  ]
  rows = []
  for name, measure in points:
    full, half = measure(()), measure(BFLOAT16)
    rows.append(
      dict(
        row=name,
        rows=full["batch"],
        float32_ms=full["ms"],
        bfloat16_ms=half["ms"],
        speedup=full["ms"] / half["ms"],
        float32_peak_bytes=full["peak_bytes"],
        bfloat16_peak_bytes=half["peak_bytes"],
        memory_ratio=half["peak_bytes"] / full["peak_bytes"],
      )
    )
    print(
      f"  {name}: float32 {full['ms']:.1f} ms, bfloat16 {half['ms']:.1f} ms "
      f"({rows[-1]['speedup']:.2f}x), peak {mib(full['peak_bytes'])} -> "
      f"{mib(half['peak_bytes'])} MiB",
      flush=True,
    )
  return rows


def bf16_markdown(bf16: list[dict]) -> list[str]:
  """The summary's bfloat16 table."""
  lines = []
  if bf16:
    lines += [
      "",
      "## bfloat16 compute against float32",
      "",
      "`train.compute_dtype=bfloat16`: the networks' matmuls and activations in "
      "bfloat16, parameters, optimizer state, GBI iterates and losses float32; "
      "each row measured in float32, then bfloat16, in this run. Speed-up = "
      "float32 time / bfloat16 time; memory = bfloat16 peak / float32 peak. "
      "XLA:CPU computes bfloat16 dots in float32 (with conversions), so on CPU "
      "this is no speed-up; it is meant for GPUs and TPUs.",
      "",
      "| row | rows | float32 ms | bfloat16 ms | speed-up | float32 peak MiB | "
      "bfloat16 peak MiB | memory |",
      "|---|---|---|---|---|---|---|---|",
    ]
    lines += [
      f"| {r['row']} | {r['rows']} | {r['float32_ms']:.1f} | {r['bfloat16_ms']:.1f} | "
      f"{r['speedup']:.2f}× | {mib(r['float32_peak_bytes'])} | "
      f"{mib(r['bfloat16_peak_bytes'])} | {r['memory_ratio']:.2f}× |"
      for r in bf16
    ]
    lines.append("")
  return lines
