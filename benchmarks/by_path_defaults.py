r"""Where each multi-label config's by-path default stands against the tuned linear model.

  python -m benchmarks.by_path_defaults \
      --reports=results/verdict/verdict.json,results/verdict/stagewise.json \
      --out=results/verdict/by_path_defaults.md

A config's by-path default (`<config>.py:mulan --config.data.path=DIR`) is a tuned run
that the verdict's cells measure under another name (`BY_PATH_CELL`): a single-stage
config's own cell; a staged config searches stagewise, which for one whose first stage
is the MLP is the `<config>_on_<base>` cell (the base cell's search, then the later
stages' keys from its run) and for one whose first stage is SPEN's feature network the
`<config>_stagewise` cell. The goal is every default within a point of the tuned
scikit-learn LogisticRegression on every (dataset, size) pair. For each config the
report gives the pairs measured, the pooled paired difference against the linear model
and against the tuned MLP, the worst pair and the pairs a point or more below, then a
row per pair.
"""

from collections.abc import Sequence
from typing import Any

from absl import app
from absl import flags

from benchmarks import common
from benchmarks import verdict
from experiments import cli

# Config -> the verdict method whose cells are its by-path default.
# infnet, implicit and dvn differ from their `_on_mlp` cell in small ways: infnet and
# implicit tie their inference network's keys to the MLP's under other names, and dvn's
# first trial takes its config's L2 (0), not the MLP config's (1e-5). br's cell draws
# the verdict's budget (12 trials, 3 folds, early cuts) from its space where by path it
# evaluates its 12-setting grid whole on 5 folds.
BY_PATH_CELL: dict[str, str] = {
  "mlp": "mlp",
  "mlp_soft_f1": "mlp_soft_f1",
  "seal_dynamic": "seal_dynamic",
  "seal_f1": "seal_f1",
  "dmf": "dmf_on_mlp",
  "dmf_soft_f1": "dmf_soft_f1_on_mlp_soft_f1",
  "seal_static": "seal_static_on_mlp",
  "infnet": "infnet_on_mlp",
  "implicit": "implicit_on_mlp",
  "dvn": "dvn_on_mlp",
  "spen_ssvm": "spen_ssvm_stagewise",
  "spen_gbi": "spen_gbi_stagewise",
  "e2e": "e2e_stagewise",
  "br": "br",
  "seal_ranking": "seal_ranking_on_mlp",
}
# A pair more than this many points below the linear model (as the report rounds it, to
# hundredths) misses the goal.
GOAL = -1.0


def by_path_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
  """The records of `BY_PATH_CELL`'s cells renamed to their config, with the linear
  model's and the MLP's (kept under their own names)."""
  config_of = {cell: config for config, cell in BY_PATH_CELL.items()}
  kept = [r for r in records if r["method"] in (verdict.LINEAR, verdict.MLP)]
  return kept + [
    {**r, "method": config_of[r["method"]], "cell": r["method"]}
    for r in records
    if r["method"] in config_of and r["method"] != verdict.MLP
  ]


def summary_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
  """Per config of `BY_PATH_CELL`: its cell, the pairs measured against the linear model,
  the pooled difference against it and against the tuned MLP (over every size), the
  worst pair and the pairs below `GOAL`."""
  renamed = by_path_records(records)
  return _summary_rows(renamed, verdict.differences(renamed, verdict.LINEAR))


def _summary_rows(
  renamed: list[dict[str, Any]], vs_linear: list[dict[str, Any]]
) -> list[dict[str, Any]]:
  vs_mlp = verdict.differences(renamed, verdict.MLP)
  overall = lambda diffs: {p["method"]: p for p in verdict.pooled(diffs) if p["size"] is None}
  pooled_linear, pooled_mlp = overall(vs_linear), overall(vs_mlp)
  rows = []
  for config, cell in BY_PATH_CELL.items():
    mine = [d for d in vs_linear if d["method"] == config]
    rows.append(
      {
        "config": config,
        "cell": cell,
        "pairs": [(d["dataset"], d["size"]) for d in mine],
        "vs_linear": pooled_linear.get(config),
        "vs_mlp": pooled_mlp.get(config),
        "worst": min(mine, key=lambda d: d["mean"], default=None),
        "below_goal": [d for d in mine if round(100 * d["mean"], 2) < GOAL],
      }
    )
  return rows


def _pair(d: dict[str, Any]) -> str:
  return f"{d['dataset']} {d['size'] or 'all'}"


def report(records: list[dict[str, Any]]) -> str:
  """The markdown report: a row per config, then its difference against the linear model
  at each (dataset, size) pair."""
  lines = [
    "Each multi-label config's by-path default (the verdict cell it is, `cell`) against "
    "the tuned linear model (scikit-learn LogisticRegression), test example-F1 in "
    "points, paired by seed, ± the 95 % half-width (pooled: over the pairs, a dataset "
    "once per size). The goal: no pair more than a point below the linear model.",
    "",
    "| config | cell | pairs | − LR, pooled | worst pair | pairs below −1 | − MLP, pooled |",
    "|---|---|---|---|---|---|---|",
  ]
  renamed = by_path_records(records)
  diffs = verdict.differences(renamed, verdict.LINEAR)
  for row in _summary_rows(renamed, diffs):
    if not row["pairs"]:
      lines.append(f"| {row['config']} | {row['cell']} | 0 | not measured | | | |")
      continue
    worst = row["worst"]
    lines.append(
      f"| {row['config']} | {row['cell']} | {len(row['pairs'])} | "
      f"{verdict.points(row['vs_linear'])} | {_pair(worst)}: {verdict.points(worst)} | "
      f"{', '.join(_pair(d) for d in row['below_goal']) or 'none'} | "
      f"{verdict.points(row['vs_mlp']) if row['vs_mlp'] else '—'} |"
    )
  usual = verdict.most_common([d["n"] for d in diffs if d["n"] >= 2], 0)
  lines += [
    "",
    "Against the linear model, per (dataset, size) pair (the mean over the seeds both "
    f"finished, {usual} but where marked, ± the 95 % half-width; bold: the interval "
    "leaves out 0):",
    "",
    verdict.grid(renamed, diffs, verdict.marked_with_seeds(usual)),
  ]
  return "\n".join(lines)


def read_records(paths: Sequence[str]) -> list[dict[str, Any]]:
  """The records of verdict reports' .json files, a later file's cell replacing an
  earlier one's.

  Raises:
    app.UsageError: a file that is not a verdict report's .json, or reports run with
      different budgets.
  """
  records: list[dict[str, Any]] = []
  budget = None
  for path in paths:
    later = verdict.read_report(path)
    if budget is not None and later["budget"] != budget:
      raise app.UsageError(f"{path} was run with {later['budget']}, not {budget}")
    budget = later["budget"]
    records = verdict.merge(later["records"], records)
  return records


_FLAGS = {}


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  body = report(read_records(_FLAGS["reports"].value))
  print(body)
  if _FLAGS["out"].value:
    common.write_report(_FLAGS["out"].value, "benchmarks.by_path_defaults", body)


if __name__ == "__main__":
  _FLAGS = {
    "reports": flags.DEFINE_list(
      "reports",
      ["results/verdict/verdict.json", "results/verdict/stagewise.json"],
      "verdict reports' .json files (one search budget); a later file's cell replaces an "
      "earlier one's",
    ),
    "out": flags.DEFINE_string("out", "", "also write the report here"),
  }
  cli.run(main)
