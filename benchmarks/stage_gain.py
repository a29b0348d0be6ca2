r"""What a staged method's energy adds to the network its first stage trained.

  python -m benchmarks.stage_gain --workdir=W --workdir=W2 --data_dir=DATA \
      --records=results/verdict/verdict.json --out=results/verdict/stage_gain.md

A staged verdict cell (dmf, spen_ssvm, e2e, infnet: a first stage training the feature
network as an MLP, then the energy's stages) reports the state its stages selected on
validation. Its difference against the tuned MLP of the same seed holds two things: what
the energy's stages add, and its search drawing another network setting than the MLP's
search did (equal budgets, not equal draws). Each finished multi-stage cell's first stage
(`stages/<first>/best`) and its reported state are restored and scored on test at their
validation-tuned thresholds, which splits the difference:

  method − MLP = (method − its first stage) + (first stage − MLP),

the energy's share with the network held fixed, and the search draw's. The report gives
each per (method, dataset, size), as paired means over seeds with 95 % t-intervals, and
pooled per method over the (dataset, size) pairs. The MLP's score is its cell's in the
same workdir or, with `--records` a verdict report's .json, the report's MLP (then every
cell must be the report's own: the same test score).
"""

import json
import os
from typing import Any

from absl import app
from absl import flags
import numpy as np

from benchmarks import common
from benchmarks import verdict
from energynets import metrics
from experiments import cli
from experiments import configuration

METRIC = verdict.METRIC
SHARES = (
  ("energy", "method − first stage"),
  ("draw", "first stage − MLP"),
  ("total", "method − MLP"),
)


def _tuned_scores(predictions: dict[str, np.ndarray]) -> tuple[float, float]:
  """(validation, test) example-F1 at the threshold tuned on validation."""
  threshold = metrics.tune_threshold(predictions["y_val"], predictions["p_val"])
  return (
    metrics.example_f1(predictions["y_val"], predictions["p_val"] >= threshold),
    metrics.example_f1(predictions["y_test"], predictions["p_test"] >= threshold),
  )


def records(
  workdirs: list[str], data_dir: str = "", report: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
  """One record per finished multi-stage multi-label cell of `workdirs`.

  Args:
    workdirs: verdict workdirs.
    data_dir: where the datasets are, when not where the runs read them.
    report: the records of a verdict report (its .json's `records`): every cell must
      be one of them (the same method, dataset, size, seed and test score), and the
      MLP's score is the report's MLP cell's, not the workdir's.

  Returns:
    dicts with method, dataset, size, seed, `first_stage`, `selected_stage`,
    `selected_step`, the reported state's and the first stage's validation and test
    example-F1 (`validation`, `test`, `first_validation`, `first_test`) and `mlp_test`
    (the report's MLP cell's, or the workdir's `mlp_tuned` cell of the same seed; None
    where there is none).

  Raises:
    ValueError: a cell's restored state does not give the test score it reported, or
      `report` holds another score for it.
  """
  reported_scores = {
    (r["method"], r["dataset"], r["size"], r["seed"]): r[METRIC] for r in report or ()
  }
  out = []
  for workdir in workdirs:
    cells = common.verdict_cells(workdir)
    mlp = {(c.seed, c.dataset, c.size): c.directory for c in cells if c.method == verdict.MLP}
    for cell in cells:
      with open(os.path.join(cell.directory, "results.json")) as f:
        reported = json.load(f)
      if "threshold" not in reported:
        continue  # not a multi-label run
      config = common.finished_run_config(cell.directory, data_dir)
      stages = [name for name, _ in configuration.stage_configs(config)]
      if len(stages) < 2:
        continue
      key = (cell.method, cell.dataset, cell.size, cell.seed)
      if report is not None and reported_scores.get(key) != reported[METRIC]:
        raise ValueError(
          f"{cell.directory} scored {reported[METRIC]:.6f}; the report's record of "
          f"{key} is {reported_scores.get(key)}: not the report's cell"
        )
      (validation, test), (first_validation, first_test) = (
        _tuned_scores(p)
        for p in common.run_predictions(cell.directory, data_dir, stages=("", stages[0]))
      )
      if abs(test - reported[METRIC]) > 1e-6:
        raise ValueError(
          f"{cell.directory}: its restored state scores {test:.6f} at the tuned threshold, "
          f"not the {reported[METRIC]:.6f} it reported"
        )
      mlp_test = None
      if report is not None:
        mlp_test = reported_scores.get((verdict.MLP, *key[1:]))
      elif (cell.seed, cell.dataset, cell.size) in mlp:
        with open(os.path.join(mlp[cell.seed, cell.dataset, cell.size], "results.json")) as f:
          mlp_test = json.load(f)[METRIC]
      meta = reported.get("meta", {})
      out.append(
        {
          "method": cell.method,
          "dataset": cell.dataset,
          "size": cell.size,
          "seed": cell.seed,
          "first_stage": stages[0],
          "selected_stage": meta.get("selected_stage"),
          "selected_step": meta.get("selected_step"),
          "validation": validation,
          "test": test,
          "first_validation": first_validation,
          "first_test": first_test,
          "mlp_test": mlp_test,
        }
      )
  return out


def _share(record: dict[str, Any], share: str) -> float | None:
  """A record's difference `share` (see `SHARES`); None without the MLP's cell."""
  if share == "energy":
    return record["test"] - record["first_test"]
  if record["mlp_test"] is None:
    return None
  start = record["first_test"] if share == "draw" else record["test"]
  return start - record["mlp_test"]


def past_start(record: dict[str, Any]) -> bool:
  """Whether the reported state is a later stage's trained state (not the first stage's,
  nor a later stage's step 0, its starting state)."""
  return record["selected_stage"] != record["first_stage"] and bool(record["selected_step"])


def summary(recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
  """Per (method, dataset, size): its seeds, how many report a later stage's trained
  state, and each share of `SHARES` as a paired difference over the seeds that have it."""
  rows = []
  keys = sorted(
    {(r["method"], r["dataset"], r["size"]) for r in recs}, key=lambda k: verdict.report_order(*k)
  )
  for key in keys:
    mine = sorted(
      (r for r in recs if (r["method"], r["dataset"], r["size"]) == key), key=lambda r: r["seed"]
    )
    row: dict[str, Any] = dict(zip(("method", "dataset", "size"), key))
    row["seeds"] = [r["seed"] for r in mine]
    row["past_start"] = sum(past_start(r) for r in mine)
    for share, _ in SHARES:
      values = [v for v in (_share(r, share) for r in mine) if v is not None]
      row[share] = verdict.paired_difference(values, [0.0] * len(values)) if values else None
    rows.append(row)
  return rows


def pooled(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
  """Per method, each share's mean over its (dataset, size) pairs with a t-interval over
  those pairs' means."""
  out = []
  for method in sorted({r["method"] for r in rows}, key=verdict.report_order):
    entry: dict[str, Any] = {"method": method}
    for share, _ in SHARES:
      means = [r[share]["mean"] for r in rows if r["method"] == method and r[share]]
      entry[share] = verdict.paired_difference(means, [0.0] * len(means)) if means else None
    out.append(entry)
  return out


def _cell(d: dict[str, Any] | None) -> str:
  return "—" if d is None else verdict.points(d) + (f" (n={d['n']})" if d["n"] > 1 else "")


def report(recs: list[dict[str, Any]]) -> str:
  """Markdown: the table per (method, dataset, size), the pooled table, the records."""
  rows = summary(recs)
  head = ["method", "dataset", "train rows", "seeds", "a later stage selected"]
  lines = [
    "Test example-F1 differences in points, mean ± 95 % half-width over seeds (bold where "
    "the interval leaves out 0); 'a later stage selected': seeds whose reported state is "
    "an energy stage's trained state, not the first stage's or an energy stage's step 0.",
    "",
    "| " + " | ".join(head + [title for _, title in SHARES]) + " |",
    "|---" * (len(head) + len(SHARES)) + "|",
  ]
  for r in rows:
    seeds = ", ".join(map(str, r["seeds"]))
    lines.append(
      f"| {r['method']} | {r['dataset']} | {r['size'] or 'all'} | {seeds} | "
      f"{r['past_start']} of {len(r['seeds'])} | "
      + " | ".join(_cell(r[share]) for share, _ in SHARES)
      + " |"
    )
  lines += [
    "",
    "Pooled per method (mean over its (dataset, size) pairs, t-interval over pairs):",
    "",
    "| method | pairs | " + " | ".join(title for _, title in SHARES) + " |",
    "|---" * (2 + len(SHARES)) + "|",
  ]
  for p in pooled(rows):
    pairs = sum(r["method"] == p["method"] for r in rows)
    lines.append(
      f"| {p['method']} | {pairs} | " + " | ".join(_cell(p[share]) for share, _ in SHARES) + " |"
    )
  lines += [
    "",
    "Per cell (test example-F1, %; validation in brackets):",
    "",
    "| method | dataset | train rows | seed | selected | reported | first stage | MLP |",
    "|---|---|---|---|---|---|---|---|",
  ]
  pct = lambda v: "—" if v is None else f"{100 * v:.2f}"
  for r in sorted(
    recs, key=lambda r: (*verdict.report_order(r["method"], r["dataset"], r["size"]), r["seed"])
  ):
    lines.append(
      f"| {r['method']} | {r['dataset']} | {r['size'] or 'all'} | {r['seed']} | "
      f"{r['selected_stage']} step {r['selected_step']} | {pct(r['test'])} "
      f"({pct(r['validation'])}) | {pct(r['first_test'])} ({pct(r['first_validation'])}) | "
      f"{pct(r['mlp_test'])} |"
    )
  return "\n".join(lines)


_FLAGS: dict[str, Any] = {}


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  workdirs = _FLAGS["workdir"].value
  report_records = None
  if _FLAGS["records"].value:
    report_records = verdict.read_report(_FLAGS["records"].value)["records"]
  recs = records(workdirs, _FLAGS["data_dir"].value, report_records)
  if not recs:
    raise cli.UserError(
      f"--workdir={','.join(workdirs)} holds no finished multi-stage multi-label verdict "
      "cell (seed<s>/<dataset>/n<size>/<method>_<mode> with results.json, run.json and "
      "stages/)"
    )
  body = report(recs)
  print(body)
  if _FLAGS["out"].value:
    common.write_report(_FLAGS["out"].value, "benchmarks.stage_gain", body)


if __name__ == "__main__":
  _FLAGS = {
    "workdir": flags.DEFINE_multi_string("workdir", None, "a verdict workdir", required=True),
    "data_dir": flags.DEFINE_string("data_dir", "", "the datasets, where not where runs read them"),
    "records": flags.DEFINE_string(
      "records", "", "a verdict report's .json: the cells must be its, the MLP is its"
    ),
    "out": flags.DEFINE_string("out", "", "markdown report"),
  }
  cli.run(main)
