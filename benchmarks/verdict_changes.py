r"""What moved between two verdict reports: the change of each cell's test example-F1.

  python -m benchmarks.verdict_changes --before=OLD.json --after=results/verdict/verdict.json \
      --out=results/verdict/changes.md

For the cells both `.json` files hold (same dataset, size, method and seed), the change
after − before in points, per (method, dataset, size) and per method: the mean, the
range and how many cells rose and fell. Cells only one side holds are counted, not
compared. `--only_refit` keeps the cells the later report refit from the earlier search
(`verdict --refit_from`), whose choice is the same on both sides (a record the later
report carried over whole is not one).
"""

from collections.abc import Sequence
import json
from typing import Any

from absl import app
from absl import flags
import numpy as np

from benchmarks import common
from benchmarks import verdict
from experiments import cli


def changes(
  before: Sequence[dict[str, Any]], after: Sequence[dict[str, Any]], only_refit: bool = False
) -> list[dict[str, Any]]:
  """One row per (method, dataset, size) of the cells both hold, then one per method
  over all its cells (`dataset` None): n, the mean change, its range, rises and falls.

  Args:
    before: the earlier report's records.
    after: the later report's records.
    only_refit: keep the cells the later report refit from the earlier search.

  Returns:
    The rows, in the report's method order.
  """
  earlier = {verdict.record_key(r): r for r in before}
  cells: dict[tuple, list[float]] = {}
  for r in after:
    old = earlier.get(verdict.record_key(r))
    # A record carried over whole from the earlier report was refit before it, not now.
    refit_now = r.get("refit_of_earlier_search") and r != old
    if old is None or (only_refit and not refit_now):
      continue
    change = 100 * (r[verdict.METRIC] - old[verdict.METRIC])
    cells.setdefault((r["method"], r["dataset"], r["size"]), []).append(change)
    cells.setdefault((r["method"], None, None), []).append(change)

  def row(key, values):
    method, dataset, size = key
    v = np.asarray(values)
    return {
      "method": method,
      "dataset": dataset,
      "size": size,
      "n": len(v),
      "mean": float(v.mean()),
      "min": float(v.min()),
      "max": float(v.max()),
      "rose": int((v > 0).sum()),
      "fell": int((v < 0).sum()),
    }

  order = lambda k: (verdict.report_order(k[0]), k[1] is None, k[1] or "", k[2] or 0)
  return [row(k, cells[k]) for k in sorted(cells, key=order)]


def report(rows: list[dict[str, Any]], compared: int, before_only: int, after_only: int) -> str:
  """The markdown table of `changes`' rows and the counts of cells compared and not."""
  lines = [
    f"Test example-F1 change (points, after − before) over {compared} cells both reports "
    f"hold ({before_only} only before, {after_only} only after).",
    "",
    "| method | dataset | size | cells | mean | min | max | rose | fell |",
    "|---|---|---|---|---|---|---|---|---|",
  ]
  for r in rows:
    where = (r["dataset"], r["size"] or "all") if r["dataset"] else ("**all**", "")
    lines.append(
      f"| {r['method']} | {where[0]} | {where[1]} | {r['n']} | {r['mean']:+.2f} | "
      f"{r['min']:+.2f} | {r['max']:+.2f} | {r['rose']} | {r['fell']} |"
    )
  return "\n".join(lines)


_FLAGS = {}


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  value = lambda name: _FLAGS[name].value
  records = []
  for name in ("before", "after"):
    with open(value(name)) as f:
      records.append(json.load(f)["records"])
  before, after = records
  rows = changes(before, after, value("only_refit"))
  keys = [{verdict.record_key(r) for r in side} for side in (before, after)]
  body = report(
    rows,
    sum(r["n"] for r in rows if r["dataset"] is None),
    len(keys[0] - keys[1]),
    len(keys[1] - keys[0]),
  )
  print(body)
  if value("out"):
    common.write_report(value("out"), "benchmarks.verdict_changes", body)


if __name__ == "__main__":
  _FLAGS = {
    "before": flags.DEFINE_string("before", None, "the earlier verdict .json", required=True),
    "after": flags.DEFINE_string("after", None, "the later verdict .json", required=True),
    "only_refit": flags.DEFINE_bool(
      "only_refit", False, "only the cells the later report refit from the earlier search"
    ),
    "out": flags.DEFINE_string("out", "", "markdown report"),
  }
  cli.run(main)
